"""The publication service over HTTP on loopback, with SQLite and PostgreSQL storage."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import requests

from attestation.contracts import MAX_ENVELOPE_BYTES, MAX_ENVELOPE_JSON_DEPTH
from attestation.transparency.checkpoint import verify_signed_checkpoint
from attestation.transparency.entries import LogEntry
from attestation.transparency.merkle import leaf_hash, verify_consistency, verify_inclusion
from tests.publish.conftest import make_merged_envelope

EnvelopeFor = Callable[..., bytes]


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _put(
    service: Any,
    tenant: str,
    data: bytes,
    *,
    token: str | None,
    name: str | None = None,
    headers: dict[str, str] | None = None,
) -> requests.Response:
    content_digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
    sent = {"Content-Digest": f"sha-256=:{content_digest}:", "If-None-Match": "*"}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    sent.update(headers or {})
    return requests.put(
        f"{service.url}/v1/tenants/{tenant}/envelopes/{name or _digest(data)}",
        data=data,
        headers=sent,
        timeout=10,
    )


def _get(service: Any, path: str, token: str, **params: int) -> requests.Response:
    return requests.get(
        f"{service.url}{path}",
        params=params,
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )


def test_publish_returns_verifiable_receipt_and_is_idempotent(
    service: Any, envelope_for: EnvelopeFor
) -> None:
    operator = service.token("acme")
    first = envelope_for("acme", "run-1", 1)
    second = envelope_for("acme", "run-2", 2)
    created = _put(service, "acme", first, token=operator)
    assert created.status_code == 201
    body = created.json()
    assert (body["digest"], body["status"], body["logIndex"], body["treeSize"]) == (
        _digest(first),
        "created",
        0,
        1,
    )
    assert _put(service, "acme", second, token=operator).json()["logIndex"] == 1
    again = _put(service, "acme", first, token=operator)
    assert again.status_code == 412
    assert (again.json()["status"], again.json()["logIndex"], again.json()["treeSize"]) == (
        "already-present",
        0,
        2,
    )
    without_precondition = _put(
        service, "acme", first, token=operator, headers={"If-None-Match": ""}
    )
    assert without_precondition.status_code == 200
    checkpoint = verify_signed_checkpoint(
        again.json()["checkpoint"], service.verifier_key, origin="publish.test/t/acme"
    )
    assert checkpoint.size == 2
    entry = LogEntry(tenant="acme", run_id="run-1", envelope=_digest(first)).to_bytes()
    assert entry == (
        b'{"envelope":"' + _digest(first).encode() + b'","runId":"run-1","tenant":"acme","v":"1"}'
    )
    proof = [base64.b64decode(h) for h in again.json()["inclusionProof"]]
    assert verify_inclusion(leaf_hash(entry), 0, 2, proof, checkpoint.root)


def test_reads_by_digest_run_and_listing(service: Any, envelope_for: EnvelopeFor) -> None:
    operator, reader = service.token("acme"), service.token("acme", "tenant")
    data = envelope_for("acme", "run-7", 7)
    assert _put(service, "acme", data, token=operator).status_code == 201
    pointer = requests.put(  # set with the envelope already: confirmed
        f"{service.url}/v1/tenants/acme/runs/run-7",
        json={"envelope": _digest(data)},
        headers={"Authorization": f"Bearer {operator}"},
        timeout=10,
    )
    assert pointer.status_code == 200
    assert pointer.json()["status"] == "unchanged"
    by_digest = _get(service, f"/v1/tenants/acme/envelopes/{_digest(data)}", reader)
    assert by_digest.status_code == 200
    assert by_digest.content == data
    assert by_digest.headers["ETag"] == f'"{_digest(data)}"'
    by_run = _get(service, "/v1/tenants/acme/runs/run-7", reader)
    assert (by_run.status_code, by_run.content) == (200, data)
    listing = _get(service, "/v1/tenants/acme/envelopes", reader).json()
    published_at = listing["envelopes"][0].pop("publishedAt")
    assert re.fullmatch(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ", published_at)
    assert listing == {
        "envelopes": [{"logIndex": 0, "digest": _digest(data), "runId": "run-7"}],
        "next": None,
    }
    assert _get(service, "/v1/tenants/acme/runs/run-8", reader).status_code == 404


def test_a_second_envelope_for_a_run_is_refused_before_the_log(
    service: Any, envelope_for: EnvelopeFor
) -> None:
    operator = service.token("acme")
    first, retry = envelope_for("acme", "run-1", 1), envelope_for("acme", "run-1", 2)
    other_run = envelope_for("acme", "run-9", 3)
    assert _put(service, "acme", first, token=operator).status_code == 201
    before = _get(service, "/v1/tenants/acme/log/checkpoint", operator).text
    replacement = _put(service, "acme", retry, token=operator)
    assert replacement.status_code == 409
    assert replacement.json() == {
        "error": f"run 'run-1' already points to {_digest(first)}; this envelope was not logged",
        "reason": "run-conflict",
    }
    # Nothing of it was kept: the log, the envelopes and the checkpoint are as before.
    assert service.storage.log_size("acme") == 1
    assert service.storage.envelope("acme", _digest(retry)) is None
    assert _get(service, "/v1/tenants/acme/log/checkpoint", operator).text == before
    assert _put(service, "acme", retry, token=operator).status_code == 409  # every time
    assert _put(service, "acme", other_run, token=operator).status_code == 201

    def point(run_id: str, data: bytes) -> requests.Response:
        return requests.put(
            f"{service.url}/v1/tenants/acme/runs/{run_id}",
            json={"envelope": _digest(data)},
            headers={"Authorization": f"Bearer {operator}"},
            timeout=10,
        )

    assert point("run-1", first).status_code == 200
    unpublished = point("run-1", retry)
    assert (unpublished.status_code, unpublished.json()["reason"]) == (422, "not-published")
    assert point("run-1", other_run).json() == {
        "error": f"envelope {_digest(other_run)} is not for run 'run-1'",
        "reason": "wrong-run",
    }
    unknown = point("run-5", b"never published")
    assert unknown.status_code == 422
    assert "is not published for this tenant" in unknown.json()["error"]
    for bad in (".", "..", "a b"):
        refused = point(bad, first)
        assert refused.status_code in (400, 404, 405), bad  # "." and ".." never reach the route
    assert service.storage.log_size("acme") == 2


def test_cross_tenant_access_answers_404(service: Any, envelope_for: EnvelopeFor) -> None:
    acme_data = envelope_for("acme", "run-1", 1)
    assert _put(service, "acme", acme_data, token=service.token("acme")).status_code == 201
    for role in ("operator", "tenant"):
        globex = service.token("globex", role)
        for path in (
            f"/v1/tenants/acme/envelopes/{_digest(acme_data)}",
            "/v1/tenants/acme/envelopes",
            "/v1/tenants/acme/runs/run-1",
            "/v1/tenants/acme/log/checkpoint",
            "/v1/tenants/acme/log/entries?start=0&end=1",
            "/v1/tenants/acme/log/envelopes?start=0&end=1",
            "/v1/tenants/acme/log/proof/inclusion?index=0&size=1",
            "/v1/tenants/acme/log/proof/consistency?from=0&to=1",
        ):
            response = _get(service, path, globex)
            assert (path, response.status_code) == (path, 404)
            assert response.json() == {"error": "not found", "reason": "not-found"}
    # A globex operator cannot write into acme, even a valid acme envelope.
    intruder = _put(
        service, "acme", envelope_for("acme", "run-2", 2), token=service.token("globex")
    )
    assert intruder.status_code == 404
    hijack = requests.put(  # nor point an acme run at anything
        f"{service.url}/v1/tenants/acme/runs/run-1",
        json={"envelope": _digest(acme_data)},
        headers={"Authorization": f"Bearer {service.token('globex')}"},
        timeout=10,
    )
    assert (hijack.status_code, hijack.json()) == (
        404,
        {"error": "not found", "reason": "not-found"},
    )
    assert service.storage.run_digest("acme", "run-1") == _digest(acme_data)  # acme's own
    [listed] = _get(service, "/v1/tenants/acme/envelopes", service.token("acme", "tenant")).json()[
        "envelopes"
    ]
    assert (listed["logIndex"], listed["digest"], listed["runId"]) == (
        0,
        _digest(acme_data),
        "run-1",
    )


def test_authentication_and_roles(service: Any, envelope_for: EnvelopeFor) -> None:
    data = envelope_for("acme", "run-1", 1)
    missing = _put(service, "acme", data, token=None)
    assert missing.status_code == 401
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    assert _put(service, "acme", data, token="arp_not-a-token").status_code == 401
    reader = _put(service, "acme", data, token=service.token("acme", "tenant"))
    assert reader.status_code == 403
    assert _get(service, "/v1/tenants/acme/envelopes", service.token("acme")).status_code == 200


def test_bad_uploads_are_refused(service: Any, envelope_for: EnvelopeFor) -> None:
    operator = service.token("acme")
    data = envelope_for("acme", "run-1", 1)
    oversized = b"{" + b" " * MAX_ENVELOPE_BYTES + b"}"
    too_big = _put(service, "acme", oversized, token=operator)
    assert too_big.status_code == 413
    streamed = requests.put(  # chunked, no Content-Length: the cap applies while reading
        f"{service.url}/v1/tenants/acme/envelopes/{_digest(oversized)}",
        data=iter([oversized[:600_000], oversized[600_000:]]),
        headers={"Authorization": f"Bearer {operator}", "Content-Digest": "sha-256=:AAAA:"},
        timeout=10,
    )
    assert streamed.status_code == 413
    assert streamed.json() == {
        "error": f"body exceeds {MAX_ENVELOPE_BYTES} bytes",
        "reason": "too-large",
    }
    wrong_path = _put(service, "acme", data, token=operator, name=_digest(b"something else"))
    assert wrong_path.status_code == 422
    assert "does not match the path" in wrong_path.json()["error"]
    wrong_header = _put(
        service,
        "acme",
        data,
        token=operator,
        headers={"Content-Digest": "sha-256=:" + base64.b64encode(bytes(32)).decode() + ":"},
    )
    assert wrong_header.status_code == 422
    assert wrong_header.json() == {
        "error": "Content-Digest does not match the body",
        "reason": "digest-mismatch",
    }
    assert (
        _put(service, "acme", data, token=operator, headers={"Content-Digest": ""}).status_code
        == 400
    )
    assert (
        _put(
            service, "acme", data, token=operator, headers={"Content-Encoding": "gzip"}
        ).status_code
        == 415
    )
    not_envelope = json.dumps({"apiVersion": "attested-replay.dev/v1"}).encode()
    schema = _put(service, "acme", not_envelope, token=operator)
    assert schema.status_code == 422
    assert schema.json()["error"].startswith("not a valid envelope")
    other_tenant = envelope_for("globex", "run-1", 1)
    mismatch = _put(service, "acme", other_tenant, token=operator)
    assert mismatch.status_code == 422
    assert mismatch.json() == {
        "error": "envelope tenant 'globex' is not 'acme'",
        "reason": "invalid-envelope",
    }
    assert _put(service, "acme", data, token=operator, name="sha256:ABC").status_code == 400
    assert service.storage.log_size("acme") == 0


def test_consistency_and_inclusion_proofs_served(service: Any, envelope_for: EnvelopeFor) -> None:
    operator, reader = service.token("acme"), service.token("acme", "tenant")
    notes = [
        _put(service, "acme", envelope_for("acme", f"run-{seed}", seed), token=operator).json()[
            "checkpoint"
        ]
        for seed in range(7)
    ]
    key = service.verifier_key
    checkpoints = [verify_signed_checkpoint(n, key, origin="publish.test/t/acme") for n in notes]
    latest = _get(service, "/v1/tenants/acme/log/checkpoint", reader)
    assert latest.headers["content-type"].startswith("text/plain")
    assert latest.text == notes[-1]
    for old in checkpoints:
        proof = _get(
            service, "/v1/tenants/acme/log/proof/consistency", reader, **{"from": old.size, "to": 7}
        ).json()
        hashes = [base64.b64decode(h) for h in proof["hashes"]]
        assert verify_consistency(old.size, 7, hashes, old.root, checkpoints[-1].root)
    entries = _get(service, "/v1/tenants/acme/log/entries", reader, start=0, end=7).json()[
        "entries"
    ]
    for index, encoded in enumerate(entries):
        proof = _get(
            service, "/v1/tenants/acme/log/proof/inclusion", reader, index=index, size=7
        ).json()
        hashes = [base64.b64decode(h) for h in proof["hashes"]]
        assert verify_inclusion(
            leaf_hash(base64.b64decode(encoded)), index, 7, hashes, checkpoints[-1].root
        )
    assert (
        _get(service, "/v1/tenants/acme/log/proof/inclusion", reader, index=7, size=8).status_code
        == 400
    )


def test_shards_and_the_merged_envelope_of_a_run_publish_side_by_side(
    service: Any, envelope_for: EnvelopeFor
) -> None:
    operator, reader = service.token("acme"), service.token("acme", "tenant")
    shards = [envelope_for("acme", "run-s", n, shard=(n, 3)) for n in range(3)]
    merged = make_merged_envelope("acme", "run-s", shards)
    for position, data in enumerate([*shards, merged]):
        answer = _put(service, "acme", data, token=operator)
        assert answer.status_code == 201, answer.text
        assert answer.json()["logIndex"] == position
    assert [_put(service, "acme", data, token=operator).json().get("shard") for data in shards] == [
        0,
        1,
        2,
    ]
    again = envelope_for("acme", "run-s", 9, shard=(1, 3))  # a second shard 1: a replacement
    refused = _put(service, "acme", again, token=operator)
    assert refused.status_code == 409
    assert refused.json()["error"] == (
        f"shard 1 of run 'run-s' already points to {_digest(shards[1])}; this envelope was "
        "not logged"
    )
    other_merge = make_merged_envelope("acme", "run-s", [shards[0], shards[2], shards[1]])
    assert _put(service, "acme", other_merge, token=operator).status_code == 409
    assert service.storage.log_size("acme") == 4
    assert _get(service, "/v1/tenants/acme/runs/run-s", reader).content == merged
    assert _get(service, "/v1/tenants/acme/runs/run-s/shards/2", reader).content == shards[2]
    assert _get(service, "/v1/tenants/acme/runs/run-s/shards/3", reader).status_code == 404
    assert _get(service, "/v1/tenants/acme/runs/run-s/shards/x", reader).status_code == 404
    listed = _get(service, "/v1/tenants/acme/runs/run-s/shards", reader)
    assert (listed.status_code, listed.json()) == (200, {"shards": [0, 1, 2]})
    assert _get(service, "/v1/tenants/acme/runs/run-0/shards", operator).json() == {"shards": []}
    other = service.token("globex", "tenant")
    assert _get(service, "/v1/tenants/acme/runs/run-s/shards", other).json() == {
        "error": "not found",
        "reason": "not-found",
    }
    assert _get(service, "/v1/tenants/acme/runs/..%2F/shards", reader).status_code == 404


def test_out_of_range_query_integers_are_400(service: Any) -> None:
    reader = service.token("acme", "tenant")
    huge = str(2**63)
    for path, params in (
        ("/v1/tenants/acme/envelopes", {"start": huge}),
        ("/v1/tenants/acme/log/entries", {"start": "0", "end": huge}),
        ("/v1/tenants/acme/log/envelopes", {"start": huge, "end": "1"}),
        ("/v1/tenants/acme/log/proof/inclusion", {"index": huge, "size": "1"}),
        ("/v1/tenants/acme/log/proof/consistency", {"from": "0", "to": "99" * 40}),
        ("/v1/tenants/acme/envelopes", {"limit": "-1"}),
        ("/v1/tenants/acme/panel/runs", {"start": huge}),
    ):
        answer = requests.get(
            f"{service.url}{path}",
            params=params,
            headers={"Authorization": f"Bearer {reader}"},
            timeout=10,
        )
        if path.endswith("panel/runs"):
            assert answer.status_code == 404  # the panel is mounted by serve, not by this app
            continue
        assert answer.status_code == 400, (path, answer.text)
        assert answer.json()["reason"] == "bad-request"
        assert "must be an integer from" in answer.json()["error"]


def test_the_envelope_put_route_answers_like_every_route(
    service: Any, envelope_for: EnvelopeFor, monkeypatch: Any
) -> None:
    """PUT of an envelope bypasses Starlette's router (server.PublicationApp): paths beside
    it still reach the router, and its failures are answered by the same handler."""
    operator = service.token("acme")
    data = envelope_for("acme", "run-1", 1)
    deeper = _put(service, "acme", data, token=operator, name=f"{_digest(data)}/more")
    assert deeper.status_code == 404
    assert deeper.json() == {"error": "not found", "reason": "not-found"}
    unauthenticated = _put(service, "acme", data, token=None)
    assert unauthenticated.status_code == 401
    assert unauthenticated.json()["reason"] == "unauthenticated"
    assert unauthenticated.headers["WWW-Authenticate"] == "Bearer"

    def broken(*_args: object) -> bytes:
        raise RuntimeError("a bug")

    monkeypatch.setattr("runner.service.server.LogEntry.to_bytes", broken)
    internal = _put(service, "acme", data, token=operator)
    assert internal.status_code == 500
    assert internal.json() == {"error": "internal error", "reason": "internal"}
    monkeypatch.undo()
    created = _put(service, "acme", data, token=operator)
    assert created.status_code == 201
    assert created.json()["logIndex"] == 0


def test_the_envelope_put_reads_the_first_of_a_repeated_header_and_answers_json(
    service: Any, envelope_for: EnvelopeFor
) -> None:
    """The envelope PUT's own request reading (server.PutRequest) keeps Starlette's rules:
    the first of a repeated header counts; its answer carries the same headers."""
    operator = service.token("acme")
    data = envelope_for("acme", "run-1", 1)
    right = "sha-256=:" + base64.b64encode(hashlib.sha256(data).digest()).decode() + ":"
    wrong = "sha-256=:" + base64.b64encode(bytes(32)).decode() + ":"
    parts = urlsplit(service.url)

    def put(digests: list[str]) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
        try:
            connection.putrequest("PUT", f"/v1/tenants/acme/envelopes/{_digest(data)}")
            connection.putheader("Authorization", f"Bearer {operator}")
            for value in digests:
                connection.putheader("Content-Digest", value)
            connection.putheader("Content-Length", str(len(data)))
            connection.endheaders(data)
            answer = connection.getresponse()
            return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
        finally:
            connection.close()

    status, _headers, body = put([wrong, right])
    assert (status, json.loads(body)["reason"]) == (422, "digest-mismatch")
    status, headers, body = put([right, wrong])
    assert status == 201
    assert headers["content-type"] == "application/json"
    assert headers["etag"] == f'"{_digest(data)}"'
    assert headers["content-length"] == str(len(body))
    assert json.loads(body)["logIndex"] == 0


def test_an_envelope_nested_too_deeply_is_refused_before_the_log(
    service: Any, envelope_for: EnvelopeFor
) -> None:
    """A result nested 900 deep parses, but no verifier could canonicalize it: it is refused
    (422) before the log, so no tenant ever holds an envelope it cannot judge."""
    operator = service.token("acme")
    document = json.loads(envelope_for("acme", "run-deep", 1))
    document["result"] = "DEEP"
    deep = json.dumps(document).replace('"DEEP"', '{"a":' * 900 + "1" + "}" * 900).encode()
    refused = _put(service, "acme", deep, token=operator)
    assert refused.status_code == 422
    assert refused.json() == {
        "error": (
            f"not a valid envelope: envelope nests arrays and objects deeper than "
            f"{MAX_ENVELOPE_JSON_DEPTH} levels (refused before parsing)"
        ),
        "reason": "invalid-envelope",
    }
    assert service.storage.log_size("acme") == 0


def _refused_shard_set(answer: requests.Response, message: str) -> None:
    assert answer.status_code == 409, answer.text
    assert answer.json() == {
        "error": f"{message}; it was not logged",
        "reason": "shard-set-conflict",
    }


def test_a_shard_of_another_count_is_refused_before_the_log(
    service: Any, envelope_for: EnvelopeFor
) -> None:
    operator = service.token("acme")
    first = envelope_for("acme", "run-s", 0, shard=(0, 3))
    assert _put(service, "acme", first, token=operator).status_code == 201
    _refused_shard_set(
        _put(service, "acme", envelope_for("acme", "run-s", 1, shard=(1, 2)), token=operator),
        "run 'run-s' has shard 0 of 3 logged; this envelope is shard 1 of 2",
    )
    _refused_shard_set(
        _put(service, "acme", envelope_for("acme", "run-s", 5), token=operator),
        "run 'run-s' has shard envelopes (shards 0) logged; this envelope is an unsharded envelope",
    )
    other_count = [envelope_for("acme", "run-s", n, shard=(n, 2)) for n in range(2)]
    _refused_shard_set(
        _put(service, "acme", make_merged_envelope("acme", "run-s", other_count), token=operator),
        "run 'run-s' has shard 0 of 3 logged; this envelope is a merged envelope of 2 shards",
    )
    assert service.storage.log_size("acme") == 1
    # The same shard again is still idempotent, and the set's own shards are welcome.
    assert _put(service, "acme", first, token=operator).status_code == 412
    second = envelope_for("acme", "run-s", 1, shard=(1, 3))
    assert _put(service, "acme", second, token=operator).status_code == 201


def test_a_shard_beside_a_whole_run_envelope_is_refused(
    service: Any, envelope_for: EnvelopeFor
) -> None:
    operator = service.token("acme")
    unsharded = envelope_for("acme", "run-1", 1)
    assert _put(service, "acme", unsharded, token=operator).status_code == 201
    _refused_shard_set(
        _put(service, "acme", envelope_for("acme", "run-1", 2, shard=(0, 2)), token=operator),
        f"run 'run-1' has an unsharded envelope ({_digest(unsharded)}) logged; this envelope "
        "is shard 0 of 2",
    )
    shards = [envelope_for("acme", "run-m", n, shard=(n, 2)) for n in range(2)]
    merged = make_merged_envelope("acme", "run-m", shards)
    assert _put(service, "acme", merged, token=operator).status_code == 201  # merged first
    _refused_shard_set(
        _put(service, "acme", envelope_for("acme", "run-m", 7, shard=(2, 3)), token=operator),
        f"run 'run-m' has a merged envelope of 2 shards ({_digest(merged)}) logged; this "
        "envelope is shard 2 of 3",
    )
    for data in shards:  # its own shards, logged after it, are accepted
        assert _put(service, "acme", data, token=operator).status_code == 201
    assert service.storage.log_size("acme") == 4
