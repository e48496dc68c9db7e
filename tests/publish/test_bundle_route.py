"""``GET /v1/tenants/{t}/log/envelopes?start=&end=``: the envelopes of a run of log entries in
one answer, authorized and tenant-scoped like every read, bounded in count and bytes."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
import requests

from runner.service import bundles
from tests.publish.conftest import make_envelope
from tests.publish.test_tenant_fetch import _sql

ROUTE = "/v1/tenants/acme/log/envelopes"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _publish(service: Any, tenant: str, count: int, first: int = 0) -> list[bytes]:
    token = service.token(tenant)
    published = []
    for seed in range(first, first + count):
        data = make_envelope(tenant, f"run-{seed}", seed)
        content_digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
        answer = requests.put(
            f"{service.url}/v1/tenants/{tenant}/envelopes/{_digest(data)}",
            data=data,
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Digest": f"sha-256=:{content_digest}:",
            },
            timeout=10,
        )
        assert answer.status_code == 201, answer.text
        published.append(data)
    return published


def _get(service: Any, token: str | None, path: str = ROUTE, **params: Any) -> requests.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return requests.get(f"{service.url}{path}", params=params, headers=headers, timeout=10)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_the_envelopes_of_entries_in_log_order(service: Any) -> None:
    published = _publish(service, "acme", 5)
    for role in ("tenant", "operator"):
        answer = _get(service, service.token("acme", role), start=1, end=4)
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/json"
        assert answer.json() == {"start": 1, "envelopes": [_b64(d) for d in published[1:4]]}
    # past the signed head nothing is served (the entries route answers the same way)
    answer = _get(service, service.token("acme", "tenant"), start=3, end=1000)
    assert answer.json() == {"start": 3, "envelopes": [_b64(d) for d in published[3:]]}
    answer = _get(service, service.token("acme", "tenant"), start=5, end=6)
    assert answer.json() == {"start": 5, "envelopes": []}


def test_a_missing_envelope_is_null(service: Any) -> None:
    published = _publish(service, "acme", 3)
    # the operator removes the bytes behind the log's back
    _sql(service.storage, "DELETE FROM envelopes WHERE digest = ?", (_digest(published[1]),))
    answer = _get(service, service.token("acme", "tenant"), start=0, end=3)
    assert answer.json() == {
        "start": 0,
        "envelopes": [_b64(published[0]), None, _b64(published[2])],
    }


def test_only_the_tenants_own_tokens_read_it(service: Any) -> None:
    _publish(service, "acme", 2)
    _publish(service, "globex", 2)
    for token in (None, "arp_not-a-token"):
        answer = _get(service, token, start=0, end=2)
        assert (answer.status_code, answer.json()["reason"]) == (401, "unauthenticated")
    for role in ("tenant", "operator"):
        answer = _get(service, service.token("globex", role), start=0, end=2)
        assert (answer.status_code, answer.json()) == (
            404,
            {"error": "not found", "reason": "not-found"},
        )
    # globex's own log holds globex's envelopes only
    answer = _get(
        service,
        service.token("globex", "tenant"),
        "/v1/tenants/globex/log/envelopes",
        start=0,
        end=2,
    )
    envelopes = [base64.b64decode(e) for e in answer.json()["envelopes"]]
    assert envelopes == [make_envelope("globex", f"run-{n}", n) for n in range(2)]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"start": "0"}, "query parameter 'end' is required"),
        ({"end": "1"}, "query parameter 'start' is required"),
        ({"start": "2", "end": "2"}, "need start < end and at most 1000 entries per page"),
        ({"start": "0", "end": "1001"}, "need start < end and at most 1000 entries per page"),
        (
            {"start": "-1", "end": "2"},
            "query parameter 'start' must be an integer from 0 to 9223372036854775807",
        ),
        (
            {"start": "0", "end": "0"},
            "query parameter 'end' must be an integer from 1 to 9223372036854775807",
        ),
    ],
)
def test_the_count_is_bounded(service: Any, params: dict[str, str], message: str) -> None:
    answer = _get(service, service.token("acme", "tenant"), **params)
    assert (answer.status_code, answer.json()) == (400, {"error": message, "reason": "bad-request"})


def test_the_bytes_are_bounded_and_the_first_envelope_always_served(
    service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    published = _publish(service, "acme", 5)
    sizes = [len(d) for d in published]
    # room for the first two envelopes and not for the third
    monkeypatch.setattr(bundles, "MAX_BUNDLE_BYTES", sizes[0] + sizes[1])
    reader = service.token("acme", "tenant")
    assert _get(service, reader, start=0, end=5).json()["envelopes"] == [
        _b64(d) for d in published[:2]
    ]
    # a bound below one envelope still serves that one, alone
    monkeypatch.setattr(bundles, "MAX_BUNDLE_BYTES", 10)
    assert _get(service, reader, start=3, end=5).json() == {
        "start": 3,
        "envelopes": [_b64(published[3])],
    }
