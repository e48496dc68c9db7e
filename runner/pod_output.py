"""The replay pod's output, as the operator's ``collect`` reads it: the framed log line and the
termination message. The tenant never reads either (it verifies the envelope itself), so this
format lives on the operator's side, defined once here.

With ``--frame-envelope`` the pod prints its envelope as one line ``FRAME_PREFIX +
base64(envelope)`` (:func:`frame_envelope`, :func:`unframe_envelope`), and it always writes a
:class:`TerminationMessage` (digests only) to its termination log.

================================ =========== ================================================
limit                            value       applies to
================================ =========== ================================================
:data:`MAX_TERMINATION_MESSAGE_BYTES` 4096   the pod's termination message (kubelet)
:data:`MAX_FRAME_BYTES`          ~21.4 MiB   one framed envelope line (base64 of the largest
                                             envelope)
:data:`MAX_POD_LOG_BYTES`        frame+4 MiB what ``collect`` reads of a pod's log (its last
                                             :data:`POD_LOG_TAIL_LINES` lines)
================================ =========== ================================================
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Final, Literal

from pydantic import ValidationError

from attestation.contracts import MAX_ENVELOPE_BYTES, Sha256Digest, WireModel
from attestation.errors import MalformedError

#: What the kubelet keeps of a termination message.
MAX_TERMINATION_MESSAGE_BYTES: Final = 4096
#: With ``--frame-envelope`` the pod prints its envelope as one ``<prefix><base64>`` log line.
FRAME_PREFIX: Final = "ATTESTED-ENVELOPE "
#: One framed line of the largest envelope (base64 grows 4/3, plus the prefix and newline).
MAX_FRAME_BYTES: Final = len(FRAME_PREFIX) + 4 * -(-MAX_ENVELOPE_BYTES // 3) + 1
#: What ``collect`` reads of a pod's log: the frame plus room for the pod's other log lines.
MAX_POD_LOG_BYTES: Final = MAX_FRAME_BYTES + 4 * 1024 * 1024
#: The log lines ``collect`` reads from the end (``tailLines``, applied by the kubelet before
#: ``limitBytes``). containerd splits a long line into 16 KiB log entries
#: (``max_container_log_line_size``) and the kubelet counts entries, so the largest frame takes
#: ~1,400 of them; the rest is room for the lines the pod prints after it.
POD_LOG_TAIL_LINES: Final = 4096


def frame_envelope(envelope: bytes) -> str:
    """The log line that carries ``envelope`` (without the newline)."""
    return FRAME_PREFIX + base64.b64encode(envelope).decode("ascii")


#: With ``--frame-envelope`` a shard also prints its tails file (``runner.shard_tails``)
#: as one ``<prefix><base64>`` line after its envelope's, for ``collect``'s merge.
TAILS_FRAME_PREFIX: Final = "ATTESTED-TAILS "


def frame_tails(tails: bytes) -> str:
    """The log line that carries a shard's tails file (without the newline)."""
    return TAILS_FRAME_PREFIX + base64.b64encode(tails).decode("ascii")


def framed_payloads(log_text: str) -> set[str]:
    """The base64 payloads of every framed line in a log (normally exactly one)."""
    return {
        line[len(FRAME_PREFIX) :].strip()
        for line in log_text.splitlines()
        if line.startswith(FRAME_PREFIX)
    }


def unframe_envelope(payload: str) -> bytes:
    """The envelope bytes of one framed payload (from :func:`framed_payloads`).

    Raises:
        MalformedError: the payload is not base64 or decodes to more than
            :data:`MAX_ENVELOPE_BYTES`.
    """
    try:
        envelope = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedError(f"framed envelope is not base64: {exc}") from exc
    if len(envelope) > MAX_ENVELOPE_BYTES:
        raise MalformedError(
            f"framed envelope is {len(envelope)} bytes, over the {MAX_ENVELOPE_BYTES}-byte limit"
        )
    return envelope


class TerminationMessage(WireModel):
    """The pod's termination message, version 1: the digests the run produced.

    The JSON is ``{"corpusChecksum", "envelope", "result", "runId", "v": 1}`` with sorted keys
    (the kubelet keeps at most :data:`MAX_TERMINATION_MESSAGE_BYTES`).
    """

    v: Literal[1] = 1
    #: Any string: ``collect`` compares it with the Job's run-ID annotation.
    run_id: str
    envelope: Sha256Digest
    result: Sha256Digest
    corpus_checksum: Sha256Digest

    def to_json(self) -> str:
        """The message as written to the termination log."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> TerminationMessage:
        """Read a termination message.

        Raises:
            MalformedError: ``termination message ...`` naming what is wrong (not JSON, not
                version 1, a missing or malformed field).
        """
        if len(text.encode("utf-8", "surrogatepass")) > MAX_TERMINATION_MESSAGE_BYTES:
            raise MalformedError(
                f"termination message is over {MAX_TERMINATION_MESSAGE_BYTES} bytes"
            )
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise MalformedError(f"termination message is not JSON: {exc}") from exc
        if not isinstance(data, dict) or data.get("v") != 1:
            raise MalformedError(f"termination message is not version 1: {data!r}")
        keys = {info.alias or name for name, info in cls.model_fields.items()}
        unknown = sorted(str(key) for key in data if key not in keys)
        if unknown:
            raise MalformedError(f"termination message has unknown keys {unknown}")
        try:
            return cls.model_validate(data, by_alias=True, by_name=False, strict=True)
        except ValidationError as exc:
            key = str(exc.errors(include_url=False)[0]["loc"][0])
            raise MalformedError(
                f"termination message field {key!r} is missing or malformed"
            ) from None
