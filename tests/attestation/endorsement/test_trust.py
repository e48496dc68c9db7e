"""The pinned AMD trust store."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from attestation.abi.product import ProductLine, SignerKind
from attestation.endorsement import trust
from attestation.endorsement.trust import AmdRole, TrustStore, fingerprint
from attestation.errors import MalformedError, UntrustedChainError, UsageError
from attestation.simulated_amd import SimulatedAmd

ROOTS = Path(__file__).parents[3] / "attestation" / "endorsement" / "roots"

# The table in the vectors README, typed in again here so a change to one copy is caught.
README_FINGERPRINTS = {
    ("milan", "ark"): "69d063b45344d26a2e94e1f4210de49ef555308287d4c174445c95639a540bcd",
    ("milan", "ask"): "67d303bd3905fd38db8b20e0793699870e7fa612eaad5dec358293fd8c0bac1b",
    ("milan", "asvk"): "c5e081f59b7efab1fe2f8b505e159704e72f29cab7ef7cf628a05a42439082f5",
    ("genoa", "ark"): "4c6598d19c18719c5dfd4a7d335f674e5bfe1d8f800cea2cf270c10d103db2f1",
    ("genoa", "ask"): "5464738c1546aed5f2cecf1dc98c5c960a92e8913238a61711bc90ec6e828521",
    ("genoa", "asvk"): "197e610743a917d6b9bb982a5a9226ccc0a15b611be0619e626aca9151457372",
    ("turin", "ark"): "1f084161a44bb6d93778a904877d4819cafa5d05ef4193b2ded9dd9c73dd3f6a",
    ("turin", "ask"): "5b77ef5fe7a7a004fd9032668fba9d0fda22f88c4442069a479636a6ae3b3185",
    ("turin", "asvk"): "104e10a8bd060a3c20a434261a57d0588fd65a88915b4f65b08bdecaf8df1a3c",
}


@pytest.mark.parametrize(("line", "role"), sorted(README_FINGERPRINTS))
def test_shipped_roots_match_the_pinned_fingerprints(line: str, role: str) -> None:
    pem = (ROOTS / line / f"{role}.pem").read_bytes()
    der = x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)
    expected = README_FINGERPRINTS[line, role]
    assert hashlib.sha256(der).hexdigest() == expected
    assert trust.PINNED_FINGERPRINTS[ProductLine(line.capitalize()), AmdRole(role)] == (
        f"sha256:{expected}"
    )


def test_store_exposes_the_right_certificate_per_line_and_signer() -> None:
    store = TrustStore.amd()
    for line in ProductLine:
        assert store.ark(line).subject.rfc4514_string().startswith(f"CN=ARK-{line.value},")
        vcek = store.intermediate(line, SignerKind.VCEK)
        vlek = store.intermediate(line, SignerKind.VLEK)
        assert vcek.subject.rfc4514_string().startswith(f"CN=SEV-{line.value},")
        assert vlek.subject.rfc4514_string().startswith(f"CN=SEV-VLEK-{line.value},")
        assert fingerprint(vcek) == trust.PINNED_FINGERPRINTS[line, AmdRole.ASK]
        assert fingerprint(vlek) == trust.PINNED_FINGERPRINTS[line, AmdRole.ASVK]
    assert store.simulated_roots == ()
    assert not store.has_simulated_root


def test_a_modified_root_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    other = trust.PINNED_FINGERPRINTS[ProductLine.GENOA, AmdRole.ARK]
    patched = dict(trust.PINNED_FINGERPRINTS)
    patched[ProductLine.MILAN, AmdRole.ARK] = other
    monkeypatch.setattr(trust, "PINNED_FINGERPRINTS", patched)
    with pytest.raises(
        UntrustedChainError, match=r"roots/milan/ark.pem has fingerprint sha256:69d0"
    ):
        trust.load_pinned_certificate(ProductLine.MILAN, AmdRole.ARK)


def test_with_simulated_root_returns_a_new_store(simulated_amd: SimulatedAmd) -> None:
    base = TrustStore.amd()
    pinned = base.with_simulated_root(simulated_amd.ark_pem.encode())
    assert base.simulated_roots == ()
    assert [fingerprint(root) for root in pinned.simulated_roots] == [
        simulated_amd.root_fingerprint
    ]
    assert pinned.is_simulated(simulated_amd.ark_certificate)
    assert not pinned.is_simulated(base.ark(ProductLine.MILAN))
    assert not base.is_simulated(simulated_amd.ark_certificate)
    # Pinning the same root again changes nothing; another root is added, not swapped in.
    assert pinned.with_simulated_root(simulated_amd.ark_certificate) is pinned
    with pytest.raises(
        dataclasses.FrozenInstanceError, match="cannot assign to field 'simulated_roots'"
    ):
        pinned.simulated_roots = ()  # type: ignore[misc]


def test_an_amd_certificate_cannot_be_pinned_as_simulated() -> None:
    store = TrustStore.amd()
    with pytest.raises(UsageError, match="is an AMD certificate"):
        store.with_simulated_root(store.ark(ProductLine.TURIN))


def test_a_simulated_root_must_be_one_certificate(simulated_amd: SimulatedAmd) -> None:
    two = (simulated_amd.ark_pem * 2).encode()
    with pytest.raises(MalformedError, match="exactly one certificate, found 2"):
        TrustStore.amd().with_simulated_root(two)
    with pytest.raises(MalformedError, match="cannot be parsed"):
        TrustStore.amd().with_simulated_root(b"not a certificate")
