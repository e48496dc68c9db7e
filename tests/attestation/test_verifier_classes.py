"""The verifier's failure classes on hostile inputs, through ``verify-attested-run``: every one
ends in its class (malformed 1, untrusted chain 2, usage 9), never a traceback or a hang, and a
verdict that rests on a simulated root says so."""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

from attestation import cli
from attestation.abi.product import ProductLine
from attestation.endorsement import der
from attestation.endorsement.certificate import endorsement_from_certificate, load_certificates
from attestation.endorsement.chain import verify_chain
from attestation.endorsement.trust import TrustStore
from attestation.errors import UntrustedChainError
from attestation.simulated_amd import SimulatedAmd
from attestation.simulated_amd.pki import issue_authority, utc_now
from tests.attestation.envelope.test_envelope_verify import (
    CORPUS,
    EVALUATION,
    RUN_ID,
    sim_envelope,
)

SIMULATED_VERDICT = "VERIFIED (SIMULATED \N{EM DASH} not AMD hardware)"
RSA_ENCRYPTION_OID = bytes.fromhex("06092a864886f70d010101")  # 1.2.840.113549.1.1.1


def _run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _pair(
    tmp_path: Path, envelope: dict[str, Any] | bytes, expected: dict[str, Any] | bytes
) -> tuple[Path, Path]:
    envelope_path, expected_path = tmp_path / "envelope.json", tmp_path / "expected.json"
    envelope_path.write_bytes(
        envelope if isinstance(envelope, bytes) else json.dumps(envelope).encode()
    )
    expected_path.write_bytes(
        expected if isinstance(expected, bytes) else json.dumps(expected).encode()
    )
    return envelope_path, expected_path


@pytest.fixture
def pinned(simulated_amd: SimulatedAmd) -> dict[str, Any]:
    return {
        "runId": RUN_ID,
        "corpusChecksum": CORPUS,
        "evaluationDigest": EVALUATION,
        "simulatedRoots": [simulated_amd.root_fingerprint],
    }


# -- malformed input is malformed (1), whatever its encoding or size ----------------------------


@pytest.mark.parametrize("where", ["expected", "envelope", "policy"])
def test_a_huge_integer_anywhere_is_malformed(
    where: str,
    simulated_amd: SimulatedAmd,
    pinned: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    huge = "9" * 5000  # beyond Python's 4300-digit conversion limit, which used to escape
    if where == "policy":
        policy = tmp_path / "policy.json"
        policy.write_text('{"minimumTcb": {"snp": ' + huge + "}}")
        sim = simulated_amd.sign_report(report_data=b"\0" * 64, product_line=ProductLine.MILAN)
        (tmp_path / "r.bin").write_bytes(sim)
        (tmp_path / "c.pem").write_text(simulated_amd.endorsement_pem(sim))
        argv: list[str | Path] = [
            "--report", tmp_path / "r.bin", "--endorsement", tmp_path / "c.pem",
            "--policy", policy,
        ]  # fmt: skip
    else:
        envelope = json.dumps(sim_envelope(simulated_amd)).encode()
        expected = json.dumps(pinned).encode()
        if where == "envelope":
            envelope = envelope[:-1] + b', "extra": ' + huge.encode() + b"}"
        else:
            expected = expected[:-1] + b', "tenant": ' + huge.encode() + b"}"
        envelope_path, expected_path = _pair(tmp_path, envelope, expected)
        argv = ["--envelope", envelope_path, "--expected", expected_path]
    code, out, err = _run(capsys, *argv)
    assert code == 1
    assert "an integer of 5000 digits is out of range" in out + err
    assert "Traceback" not in err


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig"])
def test_an_expected_values_file_must_be_utf8(
    encoding: str,
    simulated_amd: SimulatedAmd,
    pinned: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    envelope = sim_envelope(simulated_amd)
    envelope_path, expected_path = _pair(tmp_path, envelope, json.dumps(pinned).encode(encoding))
    code, _, err = _run(capsys, "--envelope", envelope_path, "--expected", expected_path)
    assert code == 1
    reason = "starts with a byte order mark" if encoding == "utf-8-sig" else "is not UTF-8"
    assert f"verify-attested-run: malformed: expected-values file {reason}" in err
    # The same values in UTF-8 verify.
    expected_path.write_text(json.dumps(pinned), encoding="utf-8")
    assert _run(capsys, "--envelope", envelope_path, "--expected", expected_path)[0] == 0


def test_an_unparseable_pinned_simulated_root_is_malformed(
    simulated_amd: SimulatedAmd, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = simulated_amd.ark_certificate.public_bytes(serialization.Encoding.DER)
    assert root.count(RSA_ENCRYPTION_OID) == 1
    unknown = root.replace(RSA_ENCRYPTION_OID, RSA_ENCRYPTION_OID[:-1] + b"\x63")  # ...1.1.99
    (tmp_path / "root.der").write_bytes(unknown)
    report = simulated_amd.sign_report(report_data=b"\0" * 64, product_line=ProductLine.MILAN)
    (tmp_path / "r.bin").write_bytes(report)
    (tmp_path / "c.pem").write_text(simulated_amd.endorsement_pem(report))
    code, _, err = _run(
        capsys,
        *("--report", tmp_path / "r.bin", "--endorsement", tmp_path / "c.pem"),
        *("--simulated-root", tmp_path / "root.der"),
    )
    assert code == 1
    assert "verify-attested-run: malformed: simulated root sha256:" in err
    assert "its public key cannot be read" in err


# -- usage and IO (9): bounded, never a traceback ------------------------------------------------


def test_a_fifo_without_a_writer_gives_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "envelope.fifo"
    os.mkfifo(fifo)
    (tmp_path / "x.json").write_text("{}")
    code, out, err = _run(
        capsys, "--envelope", fifo, "--expected", tmp_path / "x.json", "--input-timeout", "0.3"
    )
    assert (code, out) == (9, "")
    assert err == (
        f"verify-attested-run: usage: cannot read envelope {str(fifo)!r}: did not end within "
        "0.3 s (a FIFO without a writer?)\n"
    )


def test_a_fifo_with_a_writer_is_read(
    simulated_amd: SimulatedAmd,
    pinned: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Like ``--envelope <(curl ...)``: the writer comes a little later and takes its time."""
    data = json.dumps(sim_envelope(simulated_amd)).encode()
    fifo = tmp_path / "envelope.fifo"
    os.mkfifo(fifo)
    expected = tmp_path / "x.json"
    expected.write_text(json.dumps(pinned))

    def write() -> None:
        with fifo.open("wb") as handle:
            for start in range(0, len(data), 1000):
                handle.write(data[start : start + 1000])
                handle.flush()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        code, out, _ = _run(capsys, "--envelope", fifo, "--expected", expected)
    finally:
        writer.join(timeout=10)
    assert code == 0
    assert out.startswith(SIMULATED_VERDICT)


def test_now_out_of_range_in_utc_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "e.json").write_text("{}")
    (tmp_path / "x.json").write_text("{}")
    code, _, err = _run(
        capsys,
        *("--envelope", tmp_path / "e.json", "--expected", tmp_path / "x.json"),
        *("--now", "0001-01-01T00:00:00+14:00"),
    )
    assert code == 9
    assert err == (
        "verify-attested-run: usage: --now '0001-01-01T00:00:00+14:00' is out of range in UTC\n"
    )


# -- a simulated verdict says so ---------------------------------------------------------------


def test_a_verdict_on_a_simulated_root_says_so(
    simulated_amd: SimulatedAmd,
    pinned: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    envelope_path, expected_path = _pair(tmp_path, sim_envelope(simulated_amd), pinned)
    code, out, _ = _run(capsys, "--envelope", envelope_path, "--expected", expected_path)
    assert code == 0
    assert out == (
        f"{SIMULATED_VERDICT} (report version 5, Genoa, vcek); "
        "MEASUREMENT and HOST_DATA not checked (not pinned)\n"
    )
    code, out, _ = _run(capsys, "--envelope", envelope_path, "--expected", expected_path, "--json")
    assert code == 0
    document = json.loads(out)
    assert (document["verified"], document["simulated"]) == (True, True)


def test_the_untrusted_message_names_the_roots(
    simulated_amd: SimulatedAmd,
    pinned: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    envelope = sim_envelope(simulated_amd)
    root = simulated_amd.root_fingerprint
    unpinned = {key: value for key, value in pinned.items() if key != "simulatedRoots"}
    envelope_path, expected_path = _pair(tmp_path, envelope, unpinned)
    code, out, _ = _run(capsys, "--envelope", envelope_path, "--expected", expected_path)
    assert code == 2
    assert (
        f"VCEK chains to a simulated root {root} (O=SIMULATED - not AMD), and no simulated "
        "root is pinned" in out
    )
    other = "sha256:" + "ab" * 32
    expected_path.write_text(json.dumps({**unpinned, "simulatedRoots": [other]}))
    code, out, _ = _run(capsys, "--envelope", envelope_path, "--expected", expected_path)
    assert code == 2
    # The listed root is not in the chain, so nothing is pinned: the message shows the
    # chain's root, the one to compare with the listing.
    assert f"VCEK chains to a simulated root {root}" in out


# -- a simulated chain obeys exactly the rules of an AMD chain ------------------------------------


def _tlv(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        return bytes([tag, size]) + content
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content


def test_a_root_named_like_an_intermediate_is_not_its_own_intermediate(
    simulated_amd: SimulatedAmd,
) -> None:
    """A self-signed 'SEV-...' root that signs the VCEK directly: a two-level chain."""
    now = utc_now()
    fake_root = issue_authority(
        "SEV-Simulated", simulated_amd.ask_key, None, simulated_amd.ask_key, now
    )
    two_level = SimulatedAmd(
        ark_key=simulated_amd.ask_key,
        ark_certificate=fake_root,
        ask_key=simulated_amd.ask_key,
        ask_certificate=fake_root,
        asvk_key=simulated_amd.asvk_key,
        asvk_certificate=simulated_amd.asvk_certificate,
        vek_seed=simulated_amd.vek_seed,
    )
    leaf = endorsement_from_certificate(two_level.issue_vcek(product_line=ProductLine.MILAN))
    trust = TrustStore.amd().with_simulated_root(fake_root)
    with pytest.raises(UntrustedChainError, match="is not named like an ARK"):
        verify_chain(
            leaf,
            ProductLine.MILAN,
            trust=trust,
            now=dt.datetime.now(dt.UTC),
            intermediates=[fake_root],
        )


def test_a_version_1_leaf_with_extensions_is_refused(simulated_amd: SimulatedAmd) -> None:
    leaf = simulated_amd.issue_vcek(product_line=ProductLine.MILAN)
    outer = der.read_single(
        leaf.public_bytes(serialization.Encoding.DER), what="leaf", tag=der.TAG_SEQUENCE
    )
    tbs, algorithm, _ = der.read_all(outer.content, what="leaf")
    assert tbs.content.startswith(bytes.fromhex("a003020102"))  # [0] version v3
    tbs_v1 = _tlv(der.TAG_SEQUENCE, tbs.content[5:])  # no version: v1, extensions kept
    signature = simulated_amd.ask_key.sign(
        tbs_v1,
        padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48),
        hashes.SHA384(),
    )
    v1 = x509.load_der_x509_certificate(
        _tlv(
            der.TAG_SEQUENCE,
            tbs_v1 + _tlv(algorithm.tag, algorithm.content) + _tlv(0x03, b"\0" + signature),
        )
    )
    assert v1.version is x509.Version.v1
    assert len(v1.extensions) > 0
    chain = load_certificates(simulated_amd.cert_chain_pem(ProductLine.MILAN).encode())
    with pytest.raises(
        UntrustedChainError, match=r"VCEK is an X\.509 v1 certificate; AMD's are v3"
    ):
        verify_chain(
            endorsement_from_certificate(v1),
            ProductLine.MILAN,
            trust=TrustStore.amd().with_simulated_root(simulated_amd.ark_certificate),
            now=dt.datetime.now(dt.UTC),
            intermediates=chain[1:],
        )


def test_every_pinned_root_is_tried(
    simulated_amd: SimulatedAmd,
    pinned: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two pinned simulated roots, the other one first in certChain: the envelope's own root
    is tried too (it used to be only the first pinned root found)."""
    stranger = SimulatedAmd.from_keys(
        ark_key=simulated_amd.asvk_key,
        ask_key=simulated_amd.ark_key,
        asvk_key=simulated_amd.ask_key,
    )
    envelope = sim_envelope(simulated_amd)
    chain = envelope["evidence"]["certChain"]
    leaf_end = chain.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----\n")
    envelope["evidence"]["certChain"] = chain[:leaf_end] + stranger.ark_pem + chain[leaf_end:]
    expected = {**pinned, "simulatedRoots": [stranger.root_fingerprint, *pinned["simulatedRoots"]]}
    envelope_path, expected_path = _pair(tmp_path, envelope, expected)
    code, out, _ = _run(capsys, "--envelope", envelope_path, "--expected", expected_path)
    assert code == 0, out
    assert out.startswith(SIMULATED_VERDICT)
