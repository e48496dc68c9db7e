"""The publication service's side of witnessing: every new checkpoint of every tenant log goes
to each configured witness (C2SP tlog-witness ``add-checkpoint``), and the latest checkpoint
that gathered cosignatures is kept with them, for ``GET .../log/checkpoint/cosigned``.

A thread of its own polls the logs' signed heads: a witness that is slow or down delays its
cosignatures and never a publication. A witness's cosigned size is learned from its 409
answer (the service starts from none, so a restart costs one extra request per witness).
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import structlog
import urllib3

from attestation.tenant.http import check_url
from attestation.transparency.checkpoint import (
    COSIGNATURE_V1_ALGORITHM,
    CheckpointError,
    VerifierKey,
)
from attestation.transparency.cosignature import CosignatureError, verify_cosignatures
from runner.errors import UsageError
from runner.service.log.heads import SignedHead

#: How long one add-checkpoint may take (connect, then the answer).
CONNECT_TIMEOUT_SECONDS: Final = 5.0
READ_TIMEOUT_SECONDS: Final = 10.0
#: A witness's answer is a few signature lines.
MAX_ANSWER_BYTES: Final = 16 * 1024
DEFAULT_INTERVAL_SECONDS: Final = 1.0

log = structlog.get_logger("runner.witness")


@dataclass(frozen=True, slots=True)
class WitnessEndpoint:
    """A witness the service submits to: its submission prefix and its cosigner key."""

    url: str
    key: VerifierKey

    @classmethod
    def parse(cls, text: str) -> WitnessEndpoint:
        """``"<submission prefix URL> <verifier key>"`` (serve's --witness)."""
        parts = text.split()
        if len(parts) != 2:
            raise UsageError(
                f"--witness {text[:60]!r}: expected '<URL> <witness verifier key>', two fields"
            )
        url, key_text = parts
        check_url(url, what="--witness URL")
        try:
            key = VerifierKey.parse(key_text, algorithm=COSIGNATURE_V1_ALGORITHM)
        except CheckpointError as exc:
            raise UsageError(f"--witness {url}: {exc}") from exc
        return cls(url.rstrip("/"), key)


class _Refused(Exception):  # noqa: N818 (an answer, not a fault)
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:200].decode('utf-8', 'replace').strip()}")
        self.status = status
        self.body = body


class WitnessSubmitter:
    """Submits each tenant's new checkpoints to the witnesses and keeps the latest cosigned.

    ``tenants()`` lists the tenants with a log, ``signed_head(tenant)`` and
    ``consistency_proof(tenant, old, new)`` are the log's own reads.
    """

    def __init__(
        self,
        witnesses: Sequence[WitnessEndpoint],
        *,
        tenants: Callable[[], list[str]],
        signed_head: Callable[[str], SignedHead],
        consistency_proof: Callable[[str, int, int], list[bytes]],
        interval: float = DEFAULT_INTERVAL_SECONDS,
    ) -> None:
        self._witnesses = tuple(witnesses)
        self._tenants = tenants
        self._signed_head = signed_head
        self._consistency_proof = consistency_proof
        self._interval = interval
        self._http = urllib3.PoolManager(
            retries=False,
            timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_SECONDS, read=READ_TIMEOUT_SECONDS),
        )
        #: (witness URL, tenant) -> the size that witness last cosigned.
        self._witnessed: dict[tuple[str, str], int] = {}
        #: tenant -> (size, root) of the head last submitted to every witness.
        self._submitted: dict[str, tuple[int, bytes]] = {}
        #: tenant -> (size, note with its cosignatures) of the latest cosigned checkpoint.
        self._cosigned: dict[str, tuple[int, str]] = {}
        #: Witnesses unreachable (or timed out) in this round: not asked again before the
        #: next one, so a witness that hangs costs a round one timeout, not one per tenant.
        self._down: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="witness-submitter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._http.clear()

    def cosigned(self, tenant: str) -> str | None:
        """The latest checkpoint of ``tenant``'s log that a witness cosigned, with every
        cosignature gathered for it, or None."""
        cosigned = self.cosigned_head(tenant)
        return None if cosigned is None else cosigned[1]

    def cosigned_head(self, tenant: str) -> tuple[int, str] | None:
        """:meth:`cosigned` with the size of its tree."""
        with self._lock:
            return self._cosigned.get(tenant)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.submit_all()
            self._stop.wait(self._interval)

    def submit_all(self) -> None:
        """One round: every tenant whose head changed goes to every witness."""
        try:
            tenants = self._tenants()
        except Exception as exc:  # noqa: BLE001 (a storage fault must not end the thread)
            log.warning("witness_round_failed", error=str(exc))
            return
        self._down.clear()
        for tenant in tenants:
            try:
                self._submit(tenant)
            except Exception as exc:  # noqa: BLE001 (the next round tries again)
                log.warning("witness_round_failed", tenant=tenant, error=str(exc))

    def _submit(self, tenant: str) -> None:
        head = self._signed_head(tenant)
        state = (head.size, head.checkpoint.root)
        if self._submitted.get(tenant) == state:
            return
        lines = ""
        for witness in self._witnesses:
            line = self._cosignature(witness, tenant, head)
            if line is not None:
                lines += line
                # Served at once: a witness that answers slowly after this one delays only
                # its own cosignature.
                with self._lock:
                    self._cosigned[tenant] = (head.size, head.note + lines)
        if len(lines.splitlines()) == len(self._witnesses):
            self._submitted[tenant] = state

    def _cosignature(self, witness: WitnessEndpoint, tenant: str, head: SignedHead) -> str | None:
        """The witness's cosignature line on ``head``, or None (logged) if it gave none."""
        key = (witness.url, tenant)
        if witness.url in self._down:
            return None
        for _attempt in range(2):  # a 409 teaches the size the witness cosigned: once more
            old = self._witnessed.get(key, 0)
            if old > head.size:
                log.warning("witness_ahead", witness=witness.url, tenant=tenant, size=old)
                return None
            try:
                answer = self._add_checkpoint(witness, tenant, old, head)
            except _Refused as refused:
                if refused.status == 409 and refused.body.strip().isdigit():
                    self._witnessed[key] = int(refused.body.strip())
                    continue
                log.warning("witness_refused", witness=witness.url, tenant=tenant, why=str(refused))
                return None
            except urllib3.exceptions.HTTPError as exc:
                log.warning("witness_unreachable", witness=witness.url, error=str(exc))
                self._down.add(witness.url)
                return None
            try:
                valid = verify_cosignatures(head.note + answer, [witness.key])
            except (CosignatureError, CheckpointError) as exc:
                log.warning("witness_answer_invalid", witness=witness.url, error=str(exc))
                return None
            if not valid:
                log.warning("witness_answer_invalid", witness=witness.url, error="no cosignature")
                return None
            self._witnessed[key] = head.size
            return "".join(
                line + "\n"
                for line in answer.splitlines()
                if line.startswith(f"\u2014 {witness.key.name} ")
            )
        return None

    def _add_checkpoint(
        self, witness: WitnessEndpoint, tenant: str, old: int, head: SignedHead
    ) -> str:
        proof = self._consistency_proof(tenant, old, head.size) if 0 < old < head.size else []
        body = (
            "".join(
                [f"old {old}\n", *(base64.b64encode(node).decode() + "\n" for node in proof), "\n"]
            )
            + head.note
        )
        response = self._http.request(
            "POST",
            f"{witness.url}/add-checkpoint",
            body=body.encode(),
            headers={"Content-Type": "text/plain; charset=utf-8"},
            preload_content=False,
            redirect=False,
        )
        try:
            data = response.read(MAX_ANSWER_BYTES + 1)
        finally:
            response.release_conn()
        if len(data) > MAX_ANSWER_BYTES:
            raise _Refused(response.status, b"answer larger than 16 KiB")
        if response.status != 200:
            raise _Refused(response.status, data)
        return data.decode("utf-8", "replace")
