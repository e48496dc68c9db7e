"""KDS VCEK fetching against a loopback server that mimics the KDS paths (real AMD vectors)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from pytest_httpserver import HTTPServer

from attestation.abi.product import ProductLine
from attestation.abi.report import parse_report
from attestation.tenant.http import parse_retry_after
from runner.cli import main
from runner.errors import UsageError
from runner.evidence import load_endorsement_bundle
from runner.evidence.kds import (
    KdsClient,
    KdsError,
    KdsVerificationError,
    fetch_vcek,
    report_product,
    vcek_request,
)
from tests.fifo_guard import fifo

REAL = Path(__file__).parent.parent / "assets" / "real"
ROOTS = Path(__file__).parent.parent.parent / "attestation" / "endorsement" / "roots"
NOW = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
MILAN_REPORT = REAL / "virtee-milan-v2-report.bin"
MILAN_VCEK = REAL / "virtee-milan-v2-vcek.der"
MILAN_QUERY = "blSPL=3&teeSPL=0&snpSPL=8&ucodeSPL=115"


def _chain_pem(product: str) -> bytes:
    return (ROOTS / product / "ask.pem").read_bytes() + (ROOTS / product / "ark.pem").read_bytes()


class _Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _client(server: HTTPServer, sleeps: _Sleeps | None = None) -> KdsClient:
    return KdsClient(
        server.url_for("").rstrip("/"), timeout=5, sleep=sleeps if sleeps is not None else _Sleeps()
    )


def _serve_milan(server: HTTPServer) -> None:
    vcek_path = f"/vcek/v1/Milan/{parse_report(MILAN_REPORT.read_bytes()).chip_id.hex()}"
    server.expect_request(vcek_path, query_string=MILAN_QUERY).respond_with_data(
        MILAN_VCEK.read_bytes(), content_type="application/x-x509-ca-cert"
    )
    server.expect_request("/vcek/v1/Milan/cert_chain").respond_with_data(_chain_pem("milan"))


def test_milan_url_uses_full_chip_id_and_reported_tcb() -> None:
    report = parse_report(MILAN_REPORT.read_bytes())
    request = vcek_request(report, report_product(report, ProductLine.MILAN))
    hwid = report.chip_id.hex()
    assert len(hwid) == 128
    assert hwid.startswith("d49554ec717f4e5b")
    assert request.path() == f"/vcek/v1/Milan/{hwid}?{MILAN_QUERY}"


def test_turin_url_uses_short_hwid_and_fmc() -> None:
    report = parse_report((REAL / "oak-turin-v5-report.bin").read_bytes())
    request = vcek_request(report, report_product(report, None))
    # the URL Oak used to obtain oak-turin-v5-vcek.der (same values, our parameter order)
    assert request.path() == (
        "/vcek/v1/Turin/3b42092f69c656d3?blSPL=1&teeSPL=0&snpSPL=2&ucodeSPL=71&fmcSPL=0"
    )


def test_v2_report_needs_product_and_cpuid_wins() -> None:
    v2 = parse_report(MILAN_REPORT.read_bytes())
    with pytest.raises(UsageError, match="pass --product"):
        report_product(v2, None)
    genoa = parse_report((REAL / "oak-genoa-v5-report.bin").read_bytes())
    with pytest.raises(UsageError, match="contradicts the report's CPUID"):
        report_product(genoa, ProductLine.MILAN)


def test_vlek_report_cannot_be_fetched() -> None:
    report = parse_report((REAL / "aws-milan-v3-vlek-vmpl1-report.bin").read_bytes())
    with pytest.raises(UsageError, match="signed by a VLEK"):
        vcek_request(report, ProductLine.MILAN)


def test_fetch_verifies_and_caches(httpserver: HTTPServer, tmp_path: Path) -> None:
    _serve_milan(httpserver)
    client = _client(httpserver)
    cache = tmp_path / "cache"
    fetched = fetch_vcek(
        MILAN_REPORT.read_bytes(),
        product=ProductLine.MILAN,
        client=client,
        cache_dir=cache,
        now=NOW,
    )
    assert fetched.vcek_der == MILAN_VCEK.read_bytes()
    assert not fetched.from_cache
    cached = cache / "vcek" / "Milan" / parse_report(MILAN_REPORT.read_bytes()).chip_id.hex()
    assert (cached / "bl3-tee0-snp8-ucode115.der").read_bytes() == MILAN_VCEK.read_bytes()
    requests_before = len(httpserver.log)
    again = fetch_vcek(
        MILAN_REPORT.read_bytes(),
        product=ProductLine.MILAN,
        client=client,
        cache_dir=cache,
        now=NOW,
    )
    assert again.from_cache
    assert again.vcek_der == fetched.vcek_der
    assert len(httpserver.log) == requests_before  # no network for a cache hit


def test_corrupt_cache_entry_is_refetched(httpserver: HTTPServer, tmp_path: Path) -> None:
    _serve_milan(httpserver)
    report = parse_report(MILAN_REPORT.read_bytes())
    entry = tmp_path / vcek_request(report, ProductLine.MILAN).cache_name()
    entry.parent.mkdir(parents=True)
    entry.write_bytes((REAL / "azure-milan-v3-vcek.der").read_bytes())  # another chip's VCEK
    fetched = fetch_vcek(
        MILAN_REPORT.read_bytes(),
        product=ProductLine.MILAN,
        client=_client(httpserver),
        cache_dir=tmp_path,
        now=NOW,
    )
    assert not fetched.from_cache
    assert entry.read_bytes() == MILAN_VCEK.read_bytes()


def test_unreadable_cache_entry_is_refetched(httpserver: HTTPServer, tmp_path: Path) -> None:
    _serve_milan(httpserver)
    report = parse_report(MILAN_REPORT.read_bytes())
    entry = tmp_path / vcek_request(report, ProductLine.MILAN).cache_name()
    entry.parent.mkdir(parents=True)
    # A cache entry that cannot be read (here a FIFO: a plain open would even block on it).
    with fifo(entry):
        fetched = fetch_vcek(
            MILAN_REPORT.read_bytes(),
            product=ProductLine.MILAN,
            client=_client(httpserver),
            cache_dir=tmp_path,
            now=NOW,
        )
    assert not fetched.from_cache
    assert fetched.vcek_der == MILAN_VCEK.read_bytes()


def test_429_retry_after_is_honoured(httpserver: HTTPServer) -> None:
    report = parse_report(MILAN_REPORT.read_bytes())
    path = f"/vcek/v1/Milan/{report.chip_id.hex()}"
    httpserver.expect_oneshot_request(path).respond_with_data(
        "Too Many Requests", status=429, headers={"Retry-After": "7"}
    )
    _serve_milan(httpserver)
    sleeps = _Sleeps()
    fetched = fetch_vcek(
        MILAN_REPORT.read_bytes(),
        product=ProductLine.MILAN,
        client=_client(httpserver, sleeps),
        now=NOW,
    )
    assert fetched.vcek_der == MILAN_VCEK.read_bytes()
    assert sleeps == [7.0]


def test_429_beyond_the_bound_gives_up(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/vcek/v1/Milan/cert_chain").respond_with_data(
        "", status=429, headers={"Retry-After": "3600"}
    )
    client = _client(httpserver)
    with pytest.raises(KdsError, match="asked to wait 3600 s"):
        client.get("/vcek/v1/Milan/cert_chain")


def test_429_forever_is_bounded(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/vcek/v1/Milan/cert_chain").respond_with_data("", status=429)
    sleeps = _Sleeps()
    client = _client(httpserver, sleeps)
    with pytest.raises(KdsError, match="after 4 attempts"):
        client.get("/vcek/v1/Milan/cert_chain")
    assert sleeps == [10.0, 10.0, 10.0]  # no Retry-After: the default back-off


def test_404_is_explained(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/vcek/v1/Turin/x").respond_with_data("Not Found", status=404)
    with pytest.raises(KdsError, match=r"no certificate at .* \(404\)"):
        _client(httpserver).get("/vcek/v1/Turin/x")


def test_wrong_vcek_is_refused(httpserver: HTTPServer) -> None:
    report = parse_report(MILAN_REPORT.read_bytes())
    httpserver.expect_request(f"/vcek/v1/Milan/{report.chip_id.hex()}").respond_with_data(
        (REAL / "azure-milan-v3-vcek.der").read_bytes()
    )
    with pytest.raises(KdsVerificationError, match="does not describe this report"):
        fetch_vcek(
            MILAN_REPORT.read_bytes(),
            product=ProductLine.MILAN,
            client=_client(httpserver),
            now=NOW,
        )


def test_forged_vcek_is_refused(httpserver: HTTPServer) -> None:
    report = parse_report((REAL / "trustee-milan-v2-idblock-provisional-report.bin").read_bytes())
    httpserver.expect_request(f"/vcek/v1/Milan/{report.chip_id.hex()}").respond_with_data(
        (REAL / "NEG-trustee-fake-vcek-der-hwid.der").read_bytes()
    )
    with pytest.raises(KdsVerificationError, match="does not verify"):
        fetch_vcek(
            (REAL / "trustee-milan-v2-idblock-provisional-report.bin").read_bytes(),
            product=ProductLine.MILAN,
            client=_client(httpserver),
            now=NOW,
        )


def test_cert_chain_must_be_the_pinned_one(httpserver: HTTPServer) -> None:
    report = parse_report(MILAN_REPORT.read_bytes())
    httpserver.expect_request(f"/vcek/v1/Milan/{report.chip_id.hex()}").respond_with_data(
        MILAN_VCEK.read_bytes()
    )
    httpserver.expect_request("/vcek/v1/Milan/cert_chain").respond_with_data(_chain_pem("genoa"))
    with pytest.raises(KdsVerificationError, match="not the pinned ASK and ARK"):
        fetch_vcek(
            MILAN_REPORT.read_bytes(),
            product=ProductLine.MILAN,
            client=_client(httpserver),
            now=NOW,
        )


def test_turin_fetch(httpserver: HTTPServer) -> None:
    report_bytes = (REAL / "oak-turin-v5-report.bin").read_bytes()
    httpserver.expect_request(
        "/vcek/v1/Turin/3b42092f69c656d3",
        query_string="blSPL=1&teeSPL=0&snpSPL=2&ucodeSPL=71&fmcSPL=0",
    ).respond_with_data((REAL / "oak-turin-v5-vcek.der").read_bytes())
    httpserver.expect_request("/vcek/v1/Turin/cert_chain").respond_with_data(_chain_pem("turin"))
    fetched = fetch_vcek(report_bytes, client=_client(httpserver), now=NOW)
    assert fetched.vcek_der == (REAL / "oak-turin-v5-vcek.der").read_bytes()
    assert fetched.ask_der == _pem_file_der(ROOTS / "turin" / "ask.pem")
    assert fetched.ark_der == _pem_file_der(ROOTS / "turin" / "ark.pem")


def test_retry_after_forms() -> None:
    assert parse_retry_after("12", now=NOW) == 12.0
    assert parse_retry_after("Sun, 29 Nov 2026 00:00:30 GMT", now=NOW) == 30.0
    assert parse_retry_after("soon", now=NOW) is None
    assert parse_retry_after(None, now=NOW) is None


def test_cli_writes_a_bundle_run_can_use(
    httpserver: HTTPServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _serve_milan(httpserver)
    out = tmp_path / "bundle.pem"
    code = main(
        [
            "vcek",
            "fetch",
            "--report",
            str(MILAN_REPORT),
            "--product",
            "Milan",
            "--kds-url",
            httpserver.url_for("").rstrip("/"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert f"bundle written to {out}" in capsys.readouterr().out
    vcek, ask, ark = load_endorsement_bundle(out)
    assert vcek == MILAN_VCEK.read_bytes()
    assert (ask, ark) == (
        _pem_file_der(ROOTS / "milan" / "ask.pem"),
        _pem_file_der(ROOTS / "milan" / "ark.pem"),
    )


def _pem_file_der(path: Path) -> bytes:
    return x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(Encoding.DER)


def test_cli_v2_without_product_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["vcek", "fetch", "--report", str(MILAN_REPORT), "--kds-url", "http://127.0.0.1:1"])
    assert code == 9
    assert "pass --product" in capsys.readouterr().err
