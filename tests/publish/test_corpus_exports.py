"""Corpus exports through the publication service: upload, list, fetch and check, per tenant.

A real uvicorn server on loopback, SQLite and PostgreSQL storage; the CLI commands a operator
and a tenant run (`corpus upload`, `tenant fetch --corpus`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import requests

from runner.cli import main as runner_main
from runner.service.corpus_routes import corpus_routes
from runner.service.corpus_store import (
    CorpusStore,
    PostgresCorpusStore,
    SqliteCorpusStore,
    open_corpus_store,
)
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.storage import Storage
from runner.service.server import create_app
from tests.publish.conftest import LiveServer, Service, make_service

EXAMPLE_CORPUS = Path(str(resources.files("runner") / "examples" / "corpus"))
CHECKSUM = "sha256:fc3c6e0b6c2a2b393dd0f8d028b90e336179bcf77983748ecbf1fa2506a53262"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "corpus.tar.gz"
    assert runner_main(["corpus", "export", str(EXAMPLE_CORPUS), "--out", str(path)]) == 0
    return path


@contextmanager
def _corpus_store(storage: Storage, tmp_path: Path) -> Iterator[CorpusStore]:
    # The PostgreSQL storage fixture already lives in a schema of this test's own.
    dsn = getattr(storage, "dsn", None)
    yield open_corpus_store(str(tmp_path / "publish.sqlite3") if dsn is None else dsn)


@pytest.fixture
def served(
    storage: Storage, signer: CheckpointSigner, tmp_path: Path
) -> Iterator[tuple[Service, CorpusStore]]:
    with _corpus_store(storage, tmp_path) as store:
        service = make_service(storage, signer)
        routes = corpus_routes(service, store, max_bytes=1024 * 1024)
        server = LiveServer(create_app(service, extra_routes=routes))
        server.start()
        try:
            yield Service(storage, signer.verifier_key, server.url, {}), store
        finally:
            server.stop()


def _token_file(tmp_path: Path, service: Service, tenant: str, role: str) -> Path:
    path = tmp_path / f"{tenant}-{role}.token"
    path.write_text(service.token(tenant, role) + "\n")
    return path


def _upload(service: Service, tmp_path: Path, archive: Path, tenant: str = "acme") -> int:
    token = _token_file(tmp_path, service, tenant, "operator")
    return runner_main(
        [
            "corpus",
            "upload",
            str(archive),
            "--server",
            service.url,
            "--tenant",
            tenant,
            "--token-file",
            str(token),
        ]
    )


def _fetch(service: Service, tmp_path: Path, tenant: str, out: Path) -> int:
    token = _token_file(tmp_path, service, tenant, "tenant")
    return runner_main(
        [
            "tenant",
            "fetch",
            "--server",
            service.url,
            "--token-file",
            str(token),
            "--tenant",
            tenant,
            "--out",
            str(out),
            "--log-key",
            service.verifier_key.encode(),
            "--corpus",
        ]
    )


def _get(service: Service, path: str, token: str) -> requests.Response:
    return requests.get(
        service.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


def test_an_export_round_trips_to_its_tenant_only(
    served: tuple[Service, CorpusStore],
    archive: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service, _store = served
    data = archive.read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()

    assert _upload(service, tmp_path, archive) == 0
    assert capsys.readouterr().out == (
        f"{digest} created for tenant acme: 3000 cases, corpus checksum {CHECKSUM}\n"
    )
    assert _upload(service, tmp_path, archive) == 0
    assert f"{digest} already present" in capsys.readouterr().out

    out = tmp_path / "acme-store"
    assert _fetch(service, tmp_path, "acme", out) == 0
    printed = capsys.readouterr().out
    kept = out / "corpora" / f"sha256-{digest.removeprefix('sha256:')}.tar.gz"
    assert f"corpus export {digest}: 3000 cases, corpus checksum {CHECKSUM} (checked)" in printed
    assert "1 new corpus export(s)" in printed
    assert kept.read_bytes() == data
    index = json.loads((out / "corpora" / "index.json").read_bytes())
    assert index == {digest: {"caseCount": 3000, "corpusChecksum": CHECKSUM, "size": len(data)}}
    assert sorted(p.name for p in (out / "corpora").iterdir()) == ["index.json", kept.name]

    # Held exports are not downloaded again.
    assert _fetch(service, tmp_path, "acme", out) == 0
    assert "0 new corpus export(s)" in capsys.readouterr().out

    # Another tenant sees nothing of acme's: 404 on acme's paths, an empty list of its own.
    other = service.token("bravo", "tenant")
    assert _get(service, "/v1/tenants/acme/corpora", other).status_code == 404
    assert _get(service, f"/v1/tenants/acme/corpora/{digest}", other).status_code == 404
    assert _get(service, f"/v1/tenants/bravo/corpora/{digest}", other).status_code == 404
    assert _get(service, "/v1/tenants/bravo/corpora", other).json() == {"corpora": []}
    bravo_out = tmp_path / "bravo-store"
    assert _fetch(service, tmp_path, "bravo", bravo_out) == 0
    assert "0 new corpus export(s)" in capsys.readouterr().out
    assert not (bravo_out / "corpora").exists()


def test_the_listing_and_download_headers(
    served: tuple[Service, CorpusStore], archive: Path, tmp_path: Path
) -> None:
    service, _store = served
    assert _upload(service, tmp_path, archive) == 0
    data = archive.read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    token = service.token("acme", "tenant")

    listing = _get(service, "/v1/tenants/acme/corpora", token)
    [item] = listing.json()["corpora"]
    assert {k: v for k, v in item.items() if k != "uploadedAt"} == {
        "digest": digest,
        "corpusChecksum": CHECKSUM,
        "caseCount": 3000,
        "size": len(data),
    }
    answer = _get(service, f"/v1/tenants/acme/corpora/{digest}", token)
    assert answer.status_code == 200
    assert answer.content == data
    assert answer.headers["ETag"] == f'"{digest}"'
    assert answer.headers["Content-Type"].startswith(
        "application/vnd.attested-replay.corpus-export"
    )
    assert _get(service, "/v1/tenants/acme/corpora", "not-a-token").status_code == 401


def _put(service: Service, digest: str, body: bytes, token: str) -> requests.Response:
    return requests.put(
        f"{service.url}/v1/tenants/acme/corpora/{digest}",
        data=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_uploads_are_checked(
    served: tuple[Service, CorpusStore], archive: Path, tmp_path: Path
) -> None:
    service, _store = served
    operator = service.token("acme", "operator")
    data = archive.read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()

    wrong = _put(service, "sha256:" + "0" * 64, data, operator)
    assert (wrong.status_code, wrong.json()["error"]) == (
        422,
        f"body digest {digest} does not match the path",
    )
    junk = b"not an export"
    not_export = _put(service, "sha256:" + hashlib.sha256(junk).hexdigest(), junk, operator)
    assert not_export.status_code == 422
    assert not_export.json()["error"].startswith("not a corpus export: not a valid .tar.gz")
    big = bytes(1024 * 1024 + 1)
    assert (
        _put(service, "sha256:" + hashlib.sha256(big).hexdigest(), big, operator).status_code == 413
    )
    assert _put(service, "sha256:abc", data, operator).status_code == 400
    assert _put(service, digest, data, service.token("acme", "tenant")).status_code == 403
    assert _put(service, digest, data, service.token("bravo", "operator")).status_code == 404
    assert _put(service, digest, data, operator).status_code == 201


def test_a_tenant_refuses_an_export_the_service_altered(
    served: tuple[Service, CorpusStore],
    archive: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service, store = served
    assert _upload(service, tmp_path, archive) == 0
    digest = "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    assert len(archive.read_bytes()) < 1024 * 1024  # one chunk
    _alter_last_chunk(store, digest, archive.read_bytes())
    capsys.readouterr()

    out = tmp_path / "acme-store"
    assert _fetch(service, tmp_path, "acme", out) == 7
    assert f"corpus export {digest} arrived with other bytes" in capsys.readouterr().err
    assert list((out / "corpora").iterdir()) == []


def _alter_last_chunk(store: CorpusStore, digest: str, data: bytes) -> None:
    """Rewrite the stored bytes in place: same length, last byte flipped."""
    altered = data[:-1] + bytes([data[-1] ^ 1])
    statement = "UPDATE corpus_chunks SET data = {p} WHERE digest = {p} AND seq = 0"
    assert isinstance(store, SqliteCorpusStore | PostgresCorpusStore)
    with store._transaction() as db:
        db.execute(store._sql(statement.format(p="?")), (altered, digest))


def test_upload_needs_an_operator_token(
    served: tuple[Service, CorpusStore],
    archive: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service, _store = served
    token = _token_file(tmp_path, service, "acme", "tenant")
    args: list[Any] = ["corpus", "upload", str(archive), "--server", service.url]
    code = runner_main([*args, "--tenant", "acme", "--token-file", str(token)])
    assert code == 6
    assert "answered HTTP 403" in capsys.readouterr().err
