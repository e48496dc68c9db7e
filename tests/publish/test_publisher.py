"""The publisher: dir:// and HTTP delivery, retries, the spool and `publish --flush`."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from attestation.contracts import MAX_ENVELOPE_JSON_DEPTH
from attestation.envelope.merged import parse_any_envelope
from attestation.tenant import http as tenant_http
from attestation.tenant.http import RetryPolicy
from runner.cli import main
from runner.errors import InputError, PublishError, UsageError
from runner.exit_codes import exit_code_for
from runner.publish.client import flush_spool, publish_envelope
from runner.publish.spool import Spool, default_spool_dir

FAST = RetryPolicy(backoff_factor=0.01, backoff_max=0.05, connect_timeout=1, read_timeout=5)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Fault:
    status: int
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    after_app: bool = False  # let the app handle the request, then lose its answer


class FaultInjector:
    """ASGI middleware: answers planned faults to the next PUT requests, records every PUT."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.plan: list[Fault] = []
        self.seen: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "PUT":
            await self.app(scope, receive, send)
            return
        with self._lock:
            fault = self.plan.pop(0) if self.plan else None
        if fault is None:

            async def recording_send(message: Any) -> None:
                if message["type"] == "http.response.start":  # recorded before the client sees it
                    self.seen.append((scope["path"], message["status"]))
                await send(message)

            await self.app(scope, receive, recording_send)
            return
        if fault.after_app:

            async def discard(_message: Any) -> None:
                return

            await self.app(scope, receive, discard)
        self.seen.append((scope["path"], fault.status))
        await send(
            {"type": "http.response.start", "status": fault.status, "headers": fault.headers}
        )
        await send({"type": "http.response.body", "body": b"injected"})


@pytest.fixture
def faulty(storage: Any, signer: Any, serve: Any) -> Iterator[tuple[Any, FaultInjector]]:
    injectors: list[FaultInjector] = []

    def wrap(app: Any) -> FaultInjector:
        injectors.append(FaultInjector(app))
        return injectors[0]

    with serve(storage, signer, wrap=wrap) as service:
        yield service, injectors[0]


def test_dir_backend_layout_and_idempotence(
    tmp_path: Path, envelope_for: Callable[..., bytes]
) -> None:
    data = envelope_for("acme", "run-1", 1)
    target = f"dir://{tmp_path / 'published'}"
    spool = tmp_path / "spool"
    first = publish_envelope(
        target, data, tenant="acme", run_id="run-1", token=None, spool_dir=spool
    )
    assert (first.digest, first.status, first.log_index) == (_digest(data), "created", None)
    stored = tmp_path / "published" / "acme" / "envelopes" / f"sha256-{_digest(data)[7:]}.json"
    assert stored.read_bytes() == data
    assert (tmp_path / "published" / "acme" / "runs" / "run-1").read_text() == _digest(data) + "\n"
    again = publish_envelope(
        target, data, tenant="acme", run_id="run-1", token=None, spool_dir=spool
    )
    assert again.status == "already-present"
    assert Spool(spool).items() == []
    retried_run = envelope_for("acme", "run-1", 2)
    with pytest.raises(
        PublishError, match=r"run 'run-1' already points to sha256:.*kept in the spool"
    ) as caught:
        publish_envelope(
            target, retried_run, tenant="acme", run_id="run-1", token=None, spool_dir=spool
        )
    assert type(caught.value) is PublishError
    assert [item.digest for item in Spool(spool).items()] == [_digest(retried_run)]


def test_bad_arguments_fail_before_spooling(
    tmp_path: Path, envelope_for: Callable[..., bytes]
) -> None:
    data = envelope_for("acme", "run-1", 1)
    spool = tmp_path / "spool"
    with pytest.raises(UsageError, match="only for loopback hosts"):
        publish_envelope(
            "http://example.com", data, tenant="acme", run_id="run-1", token="t", spool_dir=spool
        )
    with pytest.raises(UsageError, match="must be dir://PATH or https://HOST"):
        publish_envelope("ftp://x", data, tenant="acme", run_id="run-1", token="t", spool_dir=spool)
    with pytest.raises(UsageError, match="needs a token"):
        publish_envelope(
            "https://example.com", data, tenant="acme", run_id="run-1", token=None, spool_dir=spool
        )
    with pytest.raises(
        InputError, match="envelope is for tenant 'acme' run 'run-1', not tenant 'globex'"
    ) as caught:
        publish_envelope(
            "dir://x", data, tenant="globex", run_id="run-1", token=None, spool_dir=spool
        )
    assert type(caught.value) is InputError
    with pytest.raises(InputError, match="not a valid attestation envelope") as caught:
        publish_envelope(
            "dir://x", b"{}", tenant="acme", run_id="run-1", token=None, spool_dir=spool
        )
    assert type(caught.value) is InputError
    assert not spool.exists()


def test_a_given_envelope_is_checked_in_place_of_the_bytes(
    tmp_path: Path, envelope_for: Callable[..., bytes]
) -> None:
    """``run`` hands over the envelope it built the bytes from: its tenant and run are
    checked (without parsing the bytes again), and the bytes are what is delivered."""
    data = envelope_for("acme", "run-1", 1)
    built = parse_any_envelope(data)
    spool = tmp_path / "spool"
    with pytest.raises(
        InputError, match="envelope is for tenant 'acme' run 'run-1', not tenant 'acme' run 'run-2'"
    ) as caught:
        publish_envelope(
            "dir://x", data, tenant="acme", run_id="run-2", token=None, spool_dir=spool,
            envelope=built,
        )  # fmt: skip
    assert type(caught.value) is InputError
    assert not spool.exists()
    outcome = publish_envelope(
        f"dir://{tmp_path / 'out'}", data, tenant="acme", run_id="run-1", token=None,
        spool_dir=spool, envelope=built,
    )  # fmt: skip
    assert outcome.status == "created"
    assert outcome.digest == _digest(data)
    stored = tmp_path / "out" / "acme" / "envelopes" / f"sha256-{_digest(data)[7:]}.json"
    assert stored.read_bytes() == data


def test_default_spool_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ATTESTED_REPLAY_STATE_DIR", str(tmp_path / "state"))
    assert default_spool_dir() == tmp_path / "state" / "spool"
    monkeypatch.delenv("ATTESTED_REPLAY_STATE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_spool_dir() == tmp_path / "cache" / "attested-replay" / "spool"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_spool_dir() == tmp_path / "home" / ".cache" / "attested-replay" / "spool"


def test_retries_through_503_and_lost_answers(
    faulty: Any, envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    service, faults = faulty
    token = service.token("acme")
    data = envelope_for("acme", "run-1", 1)
    # Two plain 503s, then a 503 that replaces the answer to a request the app did store.
    faults.plan = [Fault(503), Fault(503), Fault(503, after_app=True)]
    outcome = publish_envelope(
        service.url,
        data,
        tenant="acme",
        run_id="run-1",
        token=token,
        spool_dir=tmp_path,
        retry=FAST,
    )
    assert (outcome.status, outcome.log_index, outcome.tree_size) == ("already-present", 0, 1)
    envelope_path = f"/v1/tenants/acme/envelopes/{_digest(data)}"
    assert faults.seen == [
        (envelope_path, 503),
        (envelope_path, 503),
        (envelope_path, 503),
        (envelope_path, 412),
    ]  # one request per envelope: the run pointer is set with it
    assert service.storage.log_size("acme") == 1
    assert Spool(tmp_path).items() == []


class RecordedSleeps(list[float]):
    """Stands in for ``attestation.tenant.http``'s ``time`` module: records each sleep instead of
    taking it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        self.append(seconds)


def test_429_retry_after_is_honoured(
    faulty: Any,
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, faults = faulty
    sleeps = RecordedSleeps()
    monkeypatch.setattr(tenant_http, "time", sleeps)
    faults.plan = [Fault(429, [(b"retry-after", b"1")])]
    data = envelope_for("acme", "run-1", 1)
    outcome = publish_envelope(
        service.url,
        data,
        tenant="acme",
        run_id="run-1",
        token=service.token("acme"),
        spool_dir=tmp_path,
        retry=FAST,
    )
    assert outcome.status == "created"
    envelope_path = f"/v1/tenants/acme/envelopes/{_digest(data)}"
    assert faults.seen == [
        (envelope_path, 429),
        (envelope_path, 201),
    ]
    assert sleeps == [1]  # Retry-After: 1 was waited for, instead of the 10 ms backoff


def test_persistent_failure_spools_then_flush_delivers(
    faulty: Any, envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    service, faults = faulty
    token = service.token("acme")
    data = envelope_for("acme", "run-1", 1)
    faults.plan = [Fault(503)] * 10
    with pytest.raises(PublishError) as raised:
        publish_envelope(
            service.url,
            data,
            tenant="acme",
            run_id="run-1",
            token=token,
            spool_dir=tmp_path,
            retry=FAST,
        )
    assert type(raised.value) is PublishError
    message = str(raised.value)
    assert "HTTP 503" in message
    assert f"kept in the spool {tmp_path}" in message
    assert "attested-replay publish --flush" in message
    assert [item.digest for item in Spool(tmp_path).items()] == [_digest(data)]
    assert service.storage.log_size("acme") == 0
    faults.plan = []
    report = flush_spool(spool_dir=tmp_path, token=token, retry=FAST)
    assert [o.digest for o in report.delivered] == [_digest(data)]
    assert report.failed == ()
    assert Spool(tmp_path).items() == []
    assert service.storage.log_size("acme") == 1
    again = flush_spool(spool_dir=tmp_path, token=token, retry=FAST)
    assert (again.delivered, again.failed) == ((), ())


def test_permanent_refusal_stays_spooled(
    service: Any, envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    token = service.token("acme")
    first, conflicting = envelope_for("acme", "run-1", 1), envelope_for("acme", "run-1", 2)
    publish_envelope(
        service.url,
        first,
        tenant="acme",
        run_id="run-1",
        token=token,
        spool_dir=tmp_path,
        retry=FAST,
    )
    with pytest.raises(
        PublishError,
        match=r"envelope upload answered HTTP 409: run 'run-1' already points to sha256:[0-9a-f]{64}"
        r"; this envelope was not logged",
    ) as caught:
        publish_envelope(
            service.url,
            conflicting,
            tenant="acme",
            run_id="run-1",
            token=token,
            spool_dir=tmp_path,
            retry=FAST,
        )
    assert type(caught.value) is PublishError
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    assert (
        main(["publish", "--flush", "--spool-dir", str(tmp_path), "--token-file", str(token_file)])
        == 6
    )
    assert [item.digest for item in Spool(tmp_path).items()] == [_digest(conflicting)]


def test_server_restart_loses_nothing(
    storage: Any,
    signer: Any,
    serve: Any,
    *,
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spool = tmp_path / "spool"
    envelopes = [envelope_for("acme", f"run-{i}", i) for i in range(6)]
    with serve(storage, signer) as service:
        port, token = int(service.url.rsplit(":", 1)[1]), service.token("acme")
        url = service.url
        for i in range(3):
            publish_envelope(
                url,
                envelopes[i],
                tenant="acme",
                run_id=f"run-{i}",
                token=token,
                spool_dir=spool,
                retry=FAST,
            )
    for i in range(3, 6):  # the service is down: connection refused after retries
        with pytest.raises(PublishError, match="kept in the spool") as caught:
            publish_envelope(
                url,
                envelopes[i],
                tenant="acme",
                run_id=f"run-{i}",
                token=token,
                spool_dir=spool,
                retry=FAST,
            )
        assert type(caught.value) is PublishError
    assert len(Spool(spool).items()) == 3
    token_file = tmp_path / "operator.token"
    token_file.write_text(token)
    with serve(storage, signer, port=port):
        capsys.readouterr()
        assert (
            main(["publish", "--flush", "--spool-dir", str(spool), "--token-file", str(token_file)])
            == 0
        )
        flushed = capsys.readouterr().out.splitlines()
        assert sorted(flushed) == sorted(
            f"delivered {_digest(e)} (created) to {url}" for e in envelopes[3:]
        )
        assert (
            main(["publish", "--flush", "--spool-dir", str(spool), "--token-file", str(token_file)])
            == 0
        )
    assert Spool(spool).items() == []
    stored = sorted(storage.envelope("acme", _digest(e))[1] for e in envelopes)
    assert stored == [0, 1, 2, 3, 4, 5]
    assert storage.log_size("acme") == 6


def test_cli_publish_prints_receipt(
    service: Any,
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    envelope_file = tmp_path / "envelope.json"
    data = envelope_for("acme", "run-1", 1)
    envelope_file.write_bytes(data)
    token_file = tmp_path / "token"
    token_file.write_text(service.token("acme"))
    argv = [
        "publish",
        str(envelope_file),
        "--target",
        service.url,
        "--tenant",
        "acme",
        "--token-file",
        str(token_file),
        "--spool-dir",
        str(tmp_path / "spool"),
    ]
    assert main(argv) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert (receipt["digest"], receipt["status"], receipt["logIndex"], receipt["treeSize"]) == (
        _digest(data),
        "created",
        0,
        1,
    )
    assert receipt["checkpoint"].startswith("publish.test/t/acme\n1\n")
    assert receipt["inclusionProof"] == []  # the first entry's proof is empty, still a list
    assert (
        main([*argv[:-2], "--spool-dir", str(tmp_path / "spool"), "--tenant", "globex"]) == 1
    )  # InputError
    assert main(["publish", "--target", service.url]) == 9


def test_an_envelope_nested_too_deeply_is_refused_before_spooling(
    tmp_path: Path, envelope_for: Callable[..., bytes]
) -> None:
    """The publisher applies the envelope bounds every verifier applies: a result nested
    900 deep is invalid input (exit 1), never spooled or sent."""
    document = json.loads(envelope_for("acme", "run-1", 1))
    document["result"] = "DEEP"
    deep = json.dumps(document).replace('"DEEP"', '{"a":' * 900 + "1" + "}" * 900).encode()
    spool = tmp_path / "spool"
    with pytest.raises(InputError) as caught:
        publish_envelope(
            "dir://x", deep, tenant="acme", run_id="run-1", token=None, spool_dir=spool
        )
    assert str(caught.value) == (
        "not a valid attestation envelope: envelope nests arrays and objects deeper than "
        f"{MAX_ENVELOPE_JSON_DEPTH} levels (refused before parsing)"
    )
    assert exit_code_for(caught.value) == 1
    assert not spool.exists()
