"""Chain validation against the pinned AMD roots, the simulated root and CRLs."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding
from hypothesis import given
from hypothesis import strategies as st

from attestation.abi.product import ProductLine, SignerKind
from attestation.endorsement.certificate import (
    Endorsement,
    endorsement_from_certificate,
    load_certificates,
    load_endorsement,
)
from attestation.endorsement.chain import VerifiedChain, verify_chain
from attestation.endorsement.trust import TrustStore
from attestation.errors import MalformedError, UntrustedChainError, UsageError
from attestation.simulated_amd import SimulatedAmd

ASSETS = Path(__file__).parents[2] / "assets"
REAL = ASSETS / "real"
AMD = TrustStore.amd()
CASE_NOW = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
PSS48 = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)
CASES = json.loads((ASSETS / "cases.json").read_text())["cases"]


def real(name: str) -> Endorsement:
    return load_endorsement((REAL / name).read_bytes())


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def line_of(endorsement: Endorsement) -> ProductLine:
    assert endorsement.product_line is not None
    return endorsement.product_line


@pytest.fixture(scope="module")
def pinned(simulated_amd: SimulatedAmd) -> TrustStore:
    return AMD.with_simulated_root(simulated_amd.ark_certificate)


def sim_chain(
    simulated_amd: SimulatedAmd, line: ProductLine, signer: SignerKind = SignerKind.VCEK
) -> tuple[Endorsement, tuple[x509.Certificate, ...]]:
    certificates = load_certificates(simulated_amd.cert_chain_pem(line, signer).encode())
    return endorsement_from_certificate(certificates[0]), certificates[1:]


# -- real certificates ----------------------------------------------------------------------


# The verifier's message for each untrusted-chain case, keyed by the case's "why".
UNTRUSTED_CHAIN_MESSAGES = {
    "certificate not signed by the AMD ASK": (
        r"^VCEK signature does not verify under the ASK 'SEV-Milan' \(sha256:[0-9a-f]{64}\): "
        r"the certificate is not issued by it$"
    ),
    "the VLEK expired on 2025-12-10": (
        r"^VLEK expired: notAfter 2025-12-10T22:14:21\+00:00, now 2026-11-29T00:00:00\+00:00$"
    ),
}


@pytest.mark.parametrize("case", CASES, ids=[f"{c['cert']}@{c['now'][:10]}" for c in CASES])
def test_every_case_reaches_its_chain_verdict(case: dict[str, str]) -> None:
    endorsement = real(case["cert"])
    when = dt.datetime.fromisoformat(case["now"])
    if case["crypto"] == "fail:untrusted_chain":
        with pytest.raises(UntrustedChainError, match=UNTRUSTED_CHAIN_MESSAGES[case["why"]]):
            verify_chain(endorsement, line_of(endorsement), trust=AMD, now=when)
        return
    chain = verify_chain(endorsement, line_of(endorsement), trust=AMD, now=when)
    assert chain.simulated is False
    assert chain.leaf is endorsement.certificate
    assert chain.intermediate is AMD.intermediate(line_of(endorsement), endorsement.signer_kind)
    assert chain.ark is AMD.ark(line_of(endorsement))


def test_the_virtee_turin_vcek_alone_chains_to_the_turin_root() -> None:
    endorsement = real("virtee-turin-vcek-noreport.der")
    assert verify_chain(endorsement, ProductLine.TURIN, trust=AMD, now=CASE_NOW).ark is AMD.ark(
        ProductLine.TURIN
    )


@pytest.mark.parametrize(
    "name", ["NEG-trustee-fake-vcek-raw-hwid.der", "NEG-trustee-fake-vcek-der-hwid.der"]
)
def test_non_amd_certificates_fail_at_the_ask_link(name: str) -> None:
    with pytest.raises(
        UntrustedChainError,
        match=r"^VCEK signature does not verify under the ASK 'SEV-Milan' \(sha256:67d303bd",
    ):
        verify_chain(real(name), ProductLine.MILAN, trust=AMD, now=CASE_NOW)


def test_a_der_vcek_verifies_and_a_changed_signature_byte_does_not() -> None:
    """One parser: the certificate cryptography loaded, its TBS bytes and declared parameters."""
    data = (REAL / "azure-milan-v3-vcek.der").read_bytes()
    endorsement = load_endorsement(data)
    assert endorsement.der == data
    assert verify_chain(endorsement, ProductLine.MILAN, trust=AMD, now=CASE_NOW).leaf is (
        endorsement.certificate
    )
    tampered = load_endorsement(data[:-1] + bytes([data[-1] ^ 1]))  # the signature's last byte
    with pytest.raises(
        UntrustedChainError,
        match=r"^VCEK signature does not verify under the ASK 'SEV-Milan' \(sha256:",
    ):
        verify_chain(tampered, ProductLine.MILAN, trust=AMD, now=CASE_NOW)


def test_the_aws_vlek_is_expired_in_2026_and_valid_in_2025() -> None:
    vlek = real("aws-milan-v3-vlek-vmpl1-vlek.der")
    with pytest.raises(
        UntrustedChainError,
        match=r"^VLEK expired: notAfter 2025-12-10T22:14:21\+00:00, now 2026-11-29T00:00:00\+00:00$",
    ):
        verify_chain(vlek, ProductLine.MILAN, trust=AMD, now=CASE_NOW)
    chain = verify_chain(
        vlek, ProductLine.MILAN, trust=AMD, now=dt.datetime(2025, 6, 1, tzinfo=dt.UTC)
    )
    assert chain.intermediate is AMD.intermediate(ProductLine.MILAN, SignerKind.VLEK)


def test_a_vcek_before_its_not_before_is_not_yet_valid() -> None:
    with pytest.raises(UntrustedChainError, match=r"^VCEK is not yet valid: notBefore 2025-01-28T"):
        verify_chain(
            real("azure-milan-v3-vcek.der"),
            ProductLine.MILAN,
            trust=AMD,
            now=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
        )


@pytest.mark.parametrize(
    ("name", "line", "issuer_line"),
    [
        ("oak-genoa-v5-vcek.der", ProductLine.MILAN, "Genoa"),
        ("azure-milan-v3-vcek.der", ProductLine.TURIN, "Milan"),
        ("oak-turin-v5-vcek.der", ProductLine.GENOA, "Turin"),
    ],
)
def test_another_product_lines_roots_do_not_verify(
    name: str, line: ProductLine, issuer_line: str
) -> None:
    with pytest.raises(
        UntrustedChainError,
        match=rf"issued by AMD's {issuer_line} ASK .* checked against the {line.value} roots",
    ):
        verify_chain(real(name), line, trust=AMD, now=CASE_NOW)


def _flip(der: bytes, offset: int) -> bytes:
    return der[:offset] + bytes([der[offset] ^ 0x01]) + der[offset + 1 :]


@pytest.mark.parametrize("where", ["hwid", "spl", "signature"])
def test_a_tampered_certificate_byte_breaks_the_chain(where: str) -> None:
    original = (REAL / "azure-milan-v3-vcek.der").read_bytes()
    endorsement = load_endorsement(original)
    assert endorsement.hwid is not None
    offsets = {
        "hwid": original.index(endorsement.hwid) + 10,
        "spl": original.index(bytes.fromhex("020200db")) + 3,  # ucodeSPL 219 -> 218
        "signature": len(original) - 5,
    }
    tampered = load_endorsement(_flip(original, offsets[where]))
    with pytest.raises(UntrustedChainError, match=r"^VCEK signature does not verify under"):
        verify_chain(tampered, ProductLine.MILAN, trust=AMD, now=CASE_NOW)


@pytest.mark.parametrize(
    ("name", "line", "when"),
    [
        ("azure-milan-v3-vcek.der", ProductLine.MILAN, CASE_NOW),
        (
            "aws-milan-v3-vlek-vmpl1-vlek.der",
            ProductLine.MILAN,
            dt.datetime(2025, 6, 1, tzinfo=dt.UTC),
        ),
        ("oak-turin-v5-vcek.der", ProductLine.TURIN, CASE_NOW),
    ],
)
@pytest.mark.filterwarnings("ignore:Attribute's length must be:UserWarning")  # a flipped C=US
def test_every_single_bit_flip_of_a_real_certificate_is_rejected(
    name: str, line: ProductLine, when: dt.datetime
) -> None:
    original = (REAL / name).read_bytes()
    verify_chain(load_endorsement(original), line, trust=AMD, now=when)
    outcomes = {"malformed": 0, "untrusted": 0}
    for offset in range(len(original)):
        for mask in (0x01, 0x80):
            tampered = bytearray(original)
            tampered[offset] ^= mask
            try:
                verify_chain(load_endorsement(bytes(tampered)), line, trust=AMD, now=when)
            except MalformedError:
                outcomes["malformed"] += 1
            except UntrustedChainError:
                outcomes["untrusted"] += 1
            else:
                pytest.fail(f"flipping bit mask {mask:#x} of byte {offset} still verifies")
    assert sum(outcomes.values()) == 2 * len(original)
    assert min(outcomes.values()) > 0


@pytest.mark.filterwarnings("ignore:Attribute's length must be:UserWarning")
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_are_malformed_or_an_endorsement(data: bytes) -> None:
    with contextlib.suppress(MalformedError):
        load_endorsement(data)


def test_a_tampered_public_key_is_malformed() -> None:
    original = (REAL / "azure-milan-v3-vcek.der").read_bytes()
    point = load_endorsement(original).public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    with pytest.raises(MalformedError, match=r"^certificate 1 of 1: public key cannot be decoded"):
        load_endorsement(_flip(original, original.index(point) + 40))


def test_supplied_amd_intermediates_and_roots_are_harmless() -> None:
    endorsement = real("oak-genoa-v5-vcek.der")
    supplied = (AMD.intermediate(ProductLine.GENOA, SignerKind.VCEK), AMD.ark(ProductLine.GENOA))
    chain = verify_chain(
        endorsement, ProductLine.GENOA, trust=AMD, now=CASE_NOW, intermediates=supplied
    )
    assert chain.ark is AMD.ark(ProductLine.GENOA)


def test_a_forged_intermediate_with_amds_name_is_not_trusted(simulated_amd: SimulatedAmd) -> None:
    ask = AMD.intermediate(ProductLine.MILAN, SignerKind.VCEK)
    forged_key = simulated_amd.asvk_key  # any RSA-4096 key that is not AMD's
    start = CASE_NOW - dt.timedelta(days=10)
    forged_ask = (
        x509.CertificateBuilder()
        .subject_name(ask.subject)
        .issuer_name(ask.issuer)
        .public_key(forged_key.public_key())
        .serial_number(7)
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=100))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(forged_key, hashes.SHA384(), rsa_padding=PSS48)
    )
    genuine = real("azure-milan-v3-vcek.der").certificate
    leaf_builder = (
        x509.CertificateBuilder()
        .subject_name(genuine.subject)
        .issuer_name(ask.subject)
        .public_key(ec.generate_private_key(ec.SECP384R1()).public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=100))
    )
    for extension in genuine.extensions:
        leaf_builder = leaf_builder.add_extension(extension.value, critical=extension.critical)
    leaf = endorsement_from_certificate(
        leaf_builder.sign(forged_key, hashes.SHA384(), rsa_padding=PSS48)
    )
    with pytest.raises(UntrustedChainError) as raised:
        verify_chain(leaf, ProductLine.MILAN, trust=AMD, now=CASE_NOW, intermediates=(forged_ask,))
    assert str(raised.value) == (
        "VCEK signature does not verify under the ASK 'SEV-Milan' (sha256:67d303bd3905fd38db8b"
        "20e0793699870e7fa612eaad5dec358293fd8c0bac1b): the certificate is not issued by it; "
        "supplied ASK 'SEV-Milan' does not verify under the pinned Milan ARK"
    )


def test_now_must_be_timezone_aware() -> None:
    with pytest.raises(UsageError, match="timezone-aware"):
        verify_chain(
            real("oak-genoa-v5-vcek.der"),
            ProductLine.GENOA,
            trust=AMD,
            now=dt.datetime(2026, 1, 1),  # noqa: DTZ001 - the point of the test
        )


# -- simulated PKI ---------------------------------------------------------------------------


@pytest.mark.parametrize("line", list(ProductLine))
@pytest.mark.parametrize("signer", list(SignerKind))
def test_simulated_chains_need_the_pinned_simulated_root(
    simulated_amd: SimulatedAmd, pinned: TrustStore, line: ProductLine, signer: SignerKind
) -> None:
    endorsement, supplied = sim_chain(simulated_amd, line, signer)
    with pytest.raises(UntrustedChainError) as raised:
        verify_chain(endorsement, line, trust=AMD, now=now(), intermediates=supplied)
    message = str(raised.value)
    assert message.startswith(
        f"{signer.value.upper()} chains to a simulated root {simulated_amd.root_fingerprint} "
        "(O=SIMULATED - not AMD), and no simulated root is pinned; to accept simulated "
        "evidence, pin that root explicitly"
    )
    assert "--simulated-root" in message
    chain = verify_chain(endorsement, line, trust=pinned, now=now(), intermediates=supplied)
    assert chain.simulated is True
    assert pinned.is_simulated(chain.ark)
    assert chain.intermediate is supplied[0]


def test_pinning_a_simulated_root_keeps_amd_chains_amd(pinned: TrustStore) -> None:
    chain = verify_chain(
        real("oak-turin-v5-vcek.der"), ProductLine.TURIN, trust=pinned, now=CASE_NOW
    )
    assert chain.simulated is False


def test_a_simulated_leaf_without_its_intermediate_does_not_verify(
    simulated_amd: SimulatedAmd, pinned: TrustStore
) -> None:
    endorsement, _ = sim_chain(simulated_amd, ProductLine.MILAN)
    with pytest.raises(
        UntrustedChainError,
        match=(
            r"does not chain to a pinned simulated root \(it carries no root; pinned: "
            + simulated_amd.root_fingerprint
            + r"\)$"
        ),
    ):
        verify_chain(endorsement, ProductLine.MILAN, trust=pinned, now=now())


def test_another_simulated_pki_is_not_trusted(
    simulated_amd: SimulatedAmd, pinned: TrustStore
) -> None:
    # Same key material in other roles: a different root, so a different PKI.
    stranger = SimulatedAmd.from_keys(
        ark_key=simulated_amd.asvk_key,
        ask_key=simulated_amd.ark_key,
        asvk_key=simulated_amd.ask_key,
    )
    endorsement, supplied = sim_chain(stranger, ProductLine.GENOA)
    with pytest.raises(
        UntrustedChainError,
        match=r"^supplied ASK 'SEV-Simulated' does not verify under the pinned simulated ARK$",
    ):
        verify_chain(
            endorsement, ProductLine.GENOA, trust=pinned, now=now(), intermediates=supplied
        )


@pytest.mark.parametrize(
    ("signer", "issued_by", "message"),
    [
        (
            SignerKind.VLEK,
            SignerKind.VCEK,
            (
                r"^VLEK is issued by CN=SEV-Simulated,.*, the ASK for VCEKs; a VLEK must chain "
                r"through the ASVK$"
            ),
        ),
        (
            SignerKind.VCEK,
            SignerKind.VLEK,
            (
                r"^VCEK is issued by CN=SEV-VLEK-Simulated,.*, the ASVK for VLEKs; a VCEK must "
                r"chain through the ASK$"
            ),
        ),
    ],
)
def test_the_intermediate_must_match_the_signer_kind(
    simulated_amd: SimulatedAmd,
    pinned: TrustStore,
    signer: SignerKind,
    issued_by: SignerKind,
    message: str,
) -> None:
    leaf = simulated_amd.issue_endorsement(
        product_line=ProductLine.MILAN, signer=signer, issued_by=issued_by
    )
    supplied = (simulated_amd.ask_certificate, simulated_amd.asvk_certificate)
    with pytest.raises(UntrustedChainError, match=message):
        verify_chain(
            endorsement_from_certificate(leaf),
            ProductLine.MILAN,
            trust=pinned,
            now=now(),
            intermediates=supplied,
        )


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (-400, -1, r"^VCEK expired: notAfter "),
        (2, 400, r"^VCEK is not yet valid: notBefore "),
    ],
)
def test_simulated_validity_windows(
    simulated_amd: SimulatedAmd, pinned: TrustStore, start: int, end: int, message: str
) -> None:
    when = now()
    leaf = simulated_amd.issue_vcek(
        product_line=ProductLine.MILAN,
        not_before=when + dt.timedelta(days=start),
        not_after=when + dt.timedelta(days=end),
    )
    with pytest.raises(UntrustedChainError, match=message):
        verify_chain(
            endorsement_from_certificate(leaf),
            ProductLine.MILAN,
            trust=pinned,
            now=when,
            intermediates=(simulated_amd.ask_certificate,),
        )


def _leaf_signed_with(
    simulated_amd: SimulatedAmd, sign: Callable[[x509.CertificateBuilder], x509.Certificate]
) -> Endorsement:
    template = simulated_amd.issue_vcek(product_line=ProductLine.MILAN)
    builder = (
        x509.CertificateBuilder()
        .subject_name(template.subject)
        .issuer_name(template.issuer)
        .public_key(ec.generate_private_key(ec.SECP384R1()).public_key())
        .serial_number(1)
        .not_valid_before(template.not_valid_before_utc)
        .not_valid_after(template.not_valid_after_utc)
    )
    for extension in template.extensions:
        builder = builder.add_extension(extension.value, critical=extension.critical)
    return endorsement_from_certificate(sign(builder))


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ("pkcs1", r"signature algorithm 1\.2\.840\.113549\.1\.1\.12 is not RSASSA-PSS"),
        ("salt32", r"RSASSA-PSS parameters .*salt 32\) are not SHA-384 / MGF1-SHA-384 / salt 48"),
        ("sha256", r"hash 2\.16\.840\.1\.101\.3\.4\.2\.1, .* are not SHA-384"),
    ],
)
def test_other_signature_algorithms_are_rejected(
    simulated_amd: SimulatedAmd, pinned: TrustStore, variant: str, message: str
) -> None:
    key = simulated_amd.ask_key
    signers: dict[str, Callable[[x509.CertificateBuilder], x509.Certificate]] = {
        "pkcs1": lambda b: b.sign(key, hashes.SHA384(), rsa_padding=padding.PKCS1v15()),
        "salt32": lambda b: b.sign(
            key,
            hashes.SHA384(),
            rsa_padding=padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=32),
        ),
        "sha256": lambda b: b.sign(
            key,
            hashes.SHA256(),
            rsa_padding=padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=48),
        ),
    }
    endorsement = _leaf_signed_with(simulated_amd, signers[variant])
    with pytest.raises(UntrustedChainError, match=message):
        verify_chain(
            endorsement,
            ProductLine.MILAN,
            trust=pinned,
            now=now(),
            intermediates=(simulated_amd.ask_certificate,),
        )


# -- CRL -------------------------------------------------------------------------------------


def _verify_with_crl(
    simulated_amd: SimulatedAmd,
    pinned: TrustStore,
    crl: bytes,
    signer: SignerKind = SignerKind.VCEK,
) -> VerifiedChain:
    endorsement, supplied = sim_chain(simulated_amd, ProductLine.GENOA, signer)
    return verify_chain(
        endorsement, ProductLine.GENOA, trust=pinned, now=now(), crl=crl, intermediates=supplied
    )


def test_a_crl_that_lists_nothing_of_ours_passes(
    simulated_amd: SimulatedAmd, pinned: TrustStore
) -> None:
    crl = simulated_amd.crl(revoked_serials=[12345, simulated_amd.asvk_certificate.serial_number])
    chain = _verify_with_crl(simulated_amd, pinned, crl, SignerKind.VCEK)
    assert chain.simulated is True
    assert chain.ark == simulated_amd.ark_certificate
    assert chain.intermediate == simulated_amd.ask_certificate


@pytest.mark.parametrize("signer", list(SignerKind))
def test_a_revoked_intermediate_fails(
    simulated_amd: SimulatedAmd, pinned: TrustStore, signer: SignerKind
) -> None:
    intermediate = simulated_amd.intermediate(signer)
    crl = simulated_amd.crl(revoked_serials=[intermediate.serial_number])
    name = "ASK 'SEV-Simulated'" if signer is SignerKind.VCEK else "ASVK 'SEV-VLEK-Simulated'"
    with pytest.raises(
        UntrustedChainError,
        match=rf"^{name} \(serial {intermediate.serial_number}\) is revoked by the CRL since ",
    ):
        _verify_with_crl(simulated_amd, pinned, crl, signer)


def test_a_revoked_non_zero_leaf_serial_fails(
    simulated_amd: SimulatedAmd, pinned: TrustStore
) -> None:
    leaf = simulated_amd.issue_vcek(product_line=ProductLine.MILAN)
    crl = simulated_amd.crl(revoked_serials=[leaf.serial_number])
    with pytest.raises(
        UntrustedChainError, match=rf"^VCEK \(serial {leaf.serial_number}\) is revoked"
    ):
        verify_chain(
            endorsement_from_certificate(leaf),
            ProductLine.MILAN,
            trust=pinned,
            now=now(),
            crl=crl,
            intermediates=(simulated_amd.ask_certificate,),
        )


def test_a_crl_with_a_bad_signature_fails(simulated_amd: SimulatedAmd, pinned: TrustStore) -> None:
    forged = simulated_amd.crl(signing_key=simulated_amd.ask_key)  # right issuer name, wrong key
    with pytest.raises(
        UntrustedChainError, match=r"^CRL signature does not verify under the simulated ARK"
    ):
        _verify_with_crl(simulated_amd, pinned, forged)


def test_a_crl_of_another_root_fails(simulated_amd: SimulatedAmd) -> None:
    crl = simulated_amd.crl()
    with pytest.raises(
        UntrustedChainError,
        match=r"^CRL is issued by CN=ARK-Simulated \(NOT AMD\),.*, not by the Milan ARK 'ARK-Milan'$",
    ):
        verify_chain(
            real("azure-milan-v3-vcek.der"), ProductLine.MILAN, trust=AMD, now=CASE_NOW, crl=crl
        )


@pytest.mark.parametrize(
    ("this_update", "next_update", "message"),
    [(-40, -1, r"^CRL is stale: nextUpdate "), (1, 30, r"^CRL is not yet valid: thisUpdate ")],
)
def test_crl_validity_is_checked_at_now(
    simulated_amd: SimulatedAmd,
    pinned: TrustStore,
    this_update: int,
    next_update: int,
    message: str,
) -> None:
    when = now()
    crl = simulated_amd.crl(
        this_update=when + dt.timedelta(days=this_update),
        next_update=when + dt.timedelta(days=next_update),
    )
    with pytest.raises(UntrustedChainError, match=message):
        _verify_with_crl(simulated_amd, pinned, crl)


def test_a_crl_that_is_not_der_is_malformed(
    simulated_amd: SimulatedAmd, pinned: TrustStore
) -> None:
    with pytest.raises(MalformedError, match=r"CRL is not a DER X\.509 CRL"):
        _verify_with_crl(simulated_amd, pinned, b"\x30\x03garbage")


def test_a_pinned_simulated_root_must_be_an_ark(simulated_amd: SimulatedAmd) -> None:
    not_a_root = AMD.with_simulated_root(simulated_amd.ask_certificate)
    endorsement, supplied = sim_chain(simulated_amd, ProductLine.MILAN)
    with pytest.raises(
        UntrustedChainError,
        match=r"simulated ARK 'SEV-Simulated' is not named like an ARK \('ARK-\.\.\.'\)",
    ):
        verify_chain(
            endorsement, ProductLine.MILAN, trust=not_a_root, now=now(), intermediates=supplied
        )


@pytest.mark.parametrize(
    ("when", "message"),
    [
        (dt.datetime(2000, 1, 1, tzinfo=dt.UTC), r"^Milan ARK 'ARK-Milan' is not yet valid: "),
        (dt.datetime(2100, 1, 1, tzinfo=dt.UTC), r"^Milan ARK 'ARK-Milan' expired: "),
    ],
)
def test_pinned_certificates_are_judged_at_every_now(when: dt.datetime, message: str) -> None:
    # What depends only on a pinned certificate is checked once per process; its validity
    # depends on `now` and is checked at every verification, after a success too.
    vcek = real("azure-milan-v3-vcek.der")
    assert verify_chain(vcek, ProductLine.MILAN, trust=AMD, now=CASE_NOW).leaf == vcek.certificate
    for _ in range(2):
        with pytest.raises(UntrustedChainError, match=message):
            verify_chain(vcek, ProductLine.MILAN, trust=AMD, now=when)
