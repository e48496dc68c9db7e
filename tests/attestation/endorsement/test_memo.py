"""The per-process memos of the chain verifier: a warm call gives exactly a cold call's
outcome, only exact bytes hit, time is judged at every call, and the size is bounded."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from hypothesis import given, settings
from hypothesis import strategies as st

from attestation.abi.product import ProductLine, SignerKind
from attestation.endorsement import certificate as certificate_module
from attestation.endorsement import chain as chain_module
from attestation.endorsement.certificate import (
    endorsement_from_certificate,
    load_certificates,
)
from attestation.endorsement.chain import VerifiedChain, verify_chain
from attestation.endorsement.memo import MAX_REMEMBERED_INPUT_BYTES, BoundedMemo, forget_all
from attestation.endorsement.trust import TrustStore
from attestation.errors import AttestationError, UntrustedChainError
from attestation.simulated_amd import SimulatedAmd

AMD = TrustStore.amd()
#: The leaf's window: from two days after the session's simulated root (valid from a day
#: before it was made), 30 days long.
ISSUED = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(days=2)
NOT_AFTER = ISSUED + dt.timedelta(days=30)


@pytest.fixture(scope="module")
def chain_pem(simulated_amd: SimulatedAmd) -> bytes:
    """A Milan VCEK valid for 30 days from ISSUED, its ASK and the simulated ARK."""
    leaf = simulated_amd.issue_vcek(
        product_line=ProductLine.MILAN, not_before=ISSUED, not_after=NOT_AFTER
    )
    return b"".join(
        c.public_bytes(serialization.Encoding.PEM)
        for c in (leaf, simulated_amd.ask_certificate, simulated_amd.ark_certificate)
    )


@pytest.fixture(scope="module")
def pinned(simulated_amd: SimulatedAmd) -> TrustStore:
    return AMD.with_simulated_root(simulated_amd.ark_certificate)


Outcome = tuple[str, str] | tuple[bytes, bytes, bytes, bool]


def outcome(chain_pem: bytes, trust: TrustStore, now: dt.datetime) -> Outcome:
    """What ``verify_chain`` says for the certChain bytes at ``now``: the error class and
    message, or the DER of the path it verified."""
    try:
        certificates = load_certificates(chain_pem)
        chain = verify_chain(
            endorsement_from_certificate(certificates[0]),
            ProductLine.MILAN,
            trust=trust,
            now=now,
            intermediates=certificates[1:],
        )
    except AttestationError as exc:
        return type(exc).__name__, str(exc)
    return _ders(chain)


def _ders(chain: VerifiedChain) -> tuple[bytes, bytes, bytes, bool]:
    encode = serialization.Encoding.DER
    return (
        chain.ark.public_bytes(encode),
        chain.intermediate.public_bytes(encode),
        chain.leaf.public_bytes(encode),
        chain.simulated,
    )


def cold(chain_pem: bytes, trust: TrustStore, now: dt.datetime) -> Outcome:
    forget_all()
    return outcome(chain_pem, trust, now)


def warm(chain_pem: bytes, trust: TrustStore, now: dt.datetime) -> Outcome:
    forget_all()
    assert len(outcome(chain_pem, trust, ISSUED + dt.timedelta(days=1))) == 4  # verified
    assert len(chain_module._PATHS) == 1
    return outcome(chain_pem, trust, now)


@pytest.mark.parametrize(
    ("days", "verdict"),
    [
        (-1, f"UntrustedChainError: VCEK is not yet valid: notBefore {ISSUED.isoformat()}, "),
        (15, "verified"),
        (31, f"UntrustedChainError: VCEK expired: notAfter {NOT_AFTER.isoformat()}, "),
    ],
)
def test_time_is_judged_at_every_call_on_a_warm_memo(
    chain_pem: bytes, pinned: TrustStore, days: int, verdict: str
) -> None:
    now = ISSUED + dt.timedelta(days=days)
    cold_outcome = cold(chain_pem, pinned, now)
    warm_outcome = warm(chain_pem, pinned, now)
    assert warm_outcome == cold_outcome
    said = "verified" if len(warm_outcome) == 4 else f"{warm_outcome[0]}: {warm_outcome[1]}"
    assert said.startswith(verdict)


@settings(max_examples=25)
@given(offset=st.integers(min_value=-40 * 86400, max_value=40 * 86400))
def test_a_warm_call_gives_a_cold_calls_outcome_at_any_now(
    simulated_amd: SimulatedAmd, offset: int
) -> None:
    leaf = simulated_amd.issue_vcek(
        product_line=ProductLine.MILAN, not_before=ISSUED, not_after=NOT_AFTER
    )
    pem = b"".join(
        c.public_bytes(serialization.Encoding.PEM)
        for c in (leaf, simulated_amd.ask_certificate, simulated_amd.ark_certificate)
    )
    trust = AMD.with_simulated_root(simulated_amd.ark_certificate)
    now = ISSUED + dt.timedelta(seconds=offset)
    assert warm(pem, trust, now) == cold(pem, trust, now)


def test_a_memo_without_the_pinned_root_does_not_vouch_for_the_chain(
    chain_pem: bytes, pinned: TrustStore
) -> None:
    now = ISSUED + dt.timedelta(days=1)
    forget_all()
    assert len(outcome(chain_pem, pinned, now)) == 4
    # The same bytes under AMD's roots alone: another key, so the full check runs and refuses.
    refused = outcome(chain_pem, AMD, now)
    assert refused[0] == "UntrustedChainError"
    assert str(refused[1]).startswith("VCEK chains to a simulated root sha256:")
    assert refused == cold(chain_pem, AMD, now)


def test_a_certificate_that_differs_in_one_byte_is_not_a_hit(
    chain_pem: bytes, pinned: TrustStore
) -> None:
    now = ISSUED + dt.timedelta(days=1)
    forget_all()
    assert len(outcome(chain_pem, pinned, now)) == 4
    leaf, ask, ark = load_certificates(chain_pem)
    leaf_der = bytearray(leaf.public_bytes(serialization.Encoding.DER))
    leaf_der[-1] ^= 0x01  # the last byte of the leaf's signature
    changed = x509.load_der_x509_certificate(bytes(leaf_der))
    paths, signatures = len(chain_module._PATHS), len(chain_module._SIGNED)
    with pytest.raises(UntrustedChainError) as raised:
        verify_chain(
            endorsement_from_certificate(changed),
            ProductLine.MILAN,
            trust=pinned,
            now=now,
            intermediates=(ask, ark),
        )
    assert str(raised.value).startswith(
        "VCEK signature does not verify under the ASK 'SEV-Simulated'"
    )
    # A failure is remembered nowhere.
    assert (len(chain_module._PATHS), len(chain_module._SIGNED)) == (paths, signatures)


def test_the_load_memo_hits_only_the_exact_bytes(chain_pem: bytes) -> None:
    forget_all()
    first = load_certificates(chain_pem)
    assert load_certificates(bytes(chain_pem)) is first
    # A trailing newline is other bytes: parsed anew, to certificates equal to the first.
    other = load_certificates(chain_pem + b"\n")
    assert other is not first
    assert [c.public_bytes(serialization.Encoding.DER) for c in other] == [
        c.public_bytes(serialization.Encoding.DER) for c in first
    ]
    assert len(certificate_module._LOADED) == 2


def test_a_refused_input_is_not_remembered(chain_pem: bytes) -> None:
    forget_all()
    broken = chain_pem.replace(b"MII", b"MIJ", 1)
    for _ in range(2):
        with pytest.raises(AttestationError):
            load_certificates(broken)
    assert len(certificate_module._LOADED) == 0


def test_a_memo_is_bounded_and_drops_the_least_recently_used() -> None:
    memo: BoundedMemo[bytes, int] = BoundedMemo(3)
    for number in range(3):
        memo.put(bytes([number]), number, input_bytes=1)
    assert memo.get(b"\x00") == 0  # now the most recently used
    memo.put(b"\x03", 3, input_bytes=1)
    memo.put(b"\x04", 4, input_bytes=1)
    assert len(memo) == 3
    assert [memo.get(bytes([n])) for n in range(5)] == [0, None, None, 3, 4]


def test_an_entry_for_more_input_than_the_bound_is_not_remembered() -> None:
    memo: BoundedMemo[bytes, int] = BoundedMemo(3)
    memo.put(b"at the bound", 1, input_bytes=MAX_REMEMBERED_INPUT_BYTES)
    memo.put(b"over it", 2, input_bytes=MAX_REMEMBERED_INPUT_BYTES + 1)
    assert (memo.get(b"at the bound"), memo.get(b"over it"), len(memo)) == (1, None, 1)


def test_a_padded_certchain_is_parsed_every_time_and_never_held(
    chain_pem: bytes, pinned: TrustStore
) -> None:
    """A hostile operator's certChain padded to megabytes must not fill the tenant's memory."""
    forget_all()
    padded = chain_pem + b"\n" * MAX_REMEMBERED_INPUT_BYTES
    first = load_certificates(padded)
    assert load_certificates(padded) is not first
    assert len(certificate_module._LOADED) == 0
    assert len(outcome(padded, pinned, ISSUED + dt.timedelta(days=1))) == 4  # still verifies


def test_a_memo_of_no_entries_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^a memo holds at least one entry, not 0$"):
        BoundedMemo[bytes, int](0)


def test_the_memos_stay_bounded_and_paths_are_keyed_by_der(
    simulated_amd: SimulatedAmd, pinned: TrustStore
) -> None:
    forget_all()
    limit = certificate_module._LOADED.limit
    leaf = simulated_amd.issue_vcek(product_line=ProductLine.MILAN)
    endorsement = endorsement_from_certificate(leaf)
    now = dt.datetime.now(dt.UTC)
    # Distinct byte strings of the same chain: only exact bytes hit, so each is an entry.
    ask = simulated_amd.ask_certificate.public_bytes(serialization.Encoding.PEM)
    for extra in range(limit + 5):
        (candidate,) = load_certificates(ask + b"\n" * (extra + 1))
        verify_chain(
            endorsement, ProductLine.MILAN, trust=pinned, now=now, intermediates=(candidate,)
        )
    assert len(certificate_module._LOADED) == limit
    # Each input parsed to the same DER: one path, whichever object carried it.
    assert len(chain_module._PATHS) == 1


@pytest.fixture(scope="module")
def later_amd(simulated_amd: SimulatedAmd) -> SimulatedAmd:
    """The session's keys under other certificates: an ARK of the same name and key, valid only
    from nine days after ISSUED, so the session's ASK and ASVK verify under it too."""
    return SimulatedAmd.from_keys(
        ark_key=simulated_amd.ark_key,
        ask_key=simulated_amd.ask_key,
        asvk_key=simulated_amd.asvk_key,
        vek_seed=simulated_amd.vek_seed,
        now=ISSUED + dt.timedelta(days=10),
    )


@pytest.fixture(scope="module")
def chains(simulated_amd: SimulatedAmd) -> dict[str, bytes]:
    """certChain inputs of one session: a Milan VCEK and VLEK with their intermediate and root
    (PEM), the VCEK's DER alone, and a Genoa VCEK."""
    pem = serialization.Encoding.PEM

    def chain(leaf: x509.Certificate, intermediate: x509.Certificate) -> bytes:
        parts = (leaf, intermediate, simulated_amd.ark_certificate)
        return b"".join(part.public_bytes(pem) for part in parts)

    vcek, vlek, genoa = (
        simulated_amd.issue_endorsement(
            product_line=line, signer=signer, not_before=ISSUED, not_after=NOT_AFTER
        )
        for line, signer in (
            (ProductLine.MILAN, SignerKind.VCEK),
            (ProductLine.MILAN, SignerKind.VLEK),
            (ProductLine.GENOA, SignerKind.VCEK),
        )
    )
    return {
        "milan vcek": chain(vcek, simulated_amd.ask_certificate),
        "milan vlek": chain(vlek, simulated_amd.asvk_certificate),
        "milan vcek der": vcek.public_bytes(serialization.Encoding.DER),
        "genoa vcek": chain(genoa, simulated_amd.ask_certificate),
    }


@pytest.fixture(scope="module")
def crls(simulated_amd: SimulatedAmd, chains: dict[str, bytes]) -> dict[str, bytes | None]:
    """No CRL, a fresh one, one revoking the Milan VCEK, and a stale one."""
    serial = load_certificates(chains["milan vcek"])[0].serial_number
    return {
        "none": None,
        "fresh": simulated_amd.crl(this_update=ISSUED, next_update=NOT_AFTER),
        "revoking": simulated_amd.crl(
            revoked_serials=[serial], this_update=ISSUED, next_update=NOT_AFTER
        ),
        "stale": simulated_amd.crl(this_update=ISSUED, next_update=ISSUED + dt.timedelta(days=5)),
    }


#: Days after ISSUED: before the leaf, in every window, after the stale CRL, before the later
#: root, after the leaf.
_DAYS = (-1, 3, 7, 12, 31)
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["amd", "session root", "later root", "both roots"]),
        st.sampled_from([ProductLine.MILAN, ProductLine.GENOA]),
        st.sampled_from(["milan vcek", "milan vlek", "milan vcek der", "genoa vcek"]),
        st.sampled_from(_DAYS),
        st.sampled_from(["none", "fresh", "revoking", "stale"]),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=30, deadline=None)
@given(steps=_STEPS)
def test_any_sequence_of_calls_gives_each_call_its_cold_outcome(
    simulated_amd: SimulatedAmd,
    later_amd: SimulatedAmd,
    chains: dict[str, bytes],
    crls: dict[str, bytes | None],
    steps: list[tuple[str, ProductLine, str, int, str]],
) -> None:
    """One process verifying under other pinned roots, product lines, times and CRLs in turn
    (``tenant fetch --expected`` with several expected files): whatever the memos hold from
    the calls before, each call says what it says in a fresh process. The later root has the
    session root's name and key, so a memo keyed by less than its DER would judge the
    session root's validity where the later one is pinned."""
    trusts = {
        "amd": AMD,
        "session root": AMD.with_simulated_root(simulated_amd.ark_certificate),
        "later root": AMD.with_simulated_root(later_amd.ark_certificate),
        "both roots": AMD.with_simulated_root(later_amd.ark_certificate).with_simulated_root(
            simulated_amd.ark_certificate
        ),
    }

    def verified(step: tuple[str, ProductLine, str, int, str]) -> Outcome:
        trust, line, chain, days, crl = step
        try:
            certificates = load_certificates(chains[chain])
            path = verify_chain(
                endorsement_from_certificate(certificates[0]),
                line,
                trust=trusts[trust],
                now=ISSUED + dt.timedelta(days=days),
                crl=crls[crl],
                intermediates=certificates[1:],
            )
        except AttestationError as exc:
            return type(exc).__name__, str(exc)
        return _ders(path)

    # Then each call again at every time: each meets what the whole sequence left.
    calls = [
        *steps,
        *(
            (trust, line, chain, days, crl)
            for trust, line, chain, _, crl in steps
            for days in _DAYS
        ),
    ]
    forget_all()
    warm_outcomes = [verified(call) for call in calls]
    cold_outcomes = []
    for call in calls:
        forget_all()
        cold_outcomes.append(verified(call))
    assert warm_outcomes == cold_outcomes


def _pem(der_bytes: bytes) -> bytes:
    text = base64.encodebytes(der_bytes).replace(b"\n", b"")
    lines = b"\n".join(text[start : start + 64] for start in range(0, len(text), 64))
    return b"-----BEGIN CERTIFICATE-----\n" + lines + b"\n-----END CERTIFICATE-----\n"


@settings(max_examples=60, deadline=None)
@given(which=st.integers(0, 2), where=st.floats(0, 1, exclude_max=True), xor=st.integers(1, 255))
def test_a_changed_byte_of_a_remembered_chain_gives_the_cold_outcome(
    chain_pem: bytes, pinned: TrustStore, which: int, where: float, xor: int
) -> None:
    """One byte of the leaf, the ASK or the ARK of a chain the memos hold, changed: the warm
    outcome (error class and message, or the path) is the cold one."""
    ders = [c.public_bytes(serialization.Encoding.DER) for c in load_certificates(chain_pem)]
    changed = bytearray(ders[which])
    changed[int(where * len(changed))] ^= xor
    ders[which] = bytes(changed)
    mutated = b"".join(map(_pem, ders))
    now = ISSUED + dt.timedelta(days=1)
    expected = cold(mutated, pinned, now)
    forget_all()
    assert len(outcome(chain_pem, pinned, now)) == 4  # the memos hold the unchanged chain
    assert len(chain_module._PATHS) == 1
    assert outcome(mutated, pinned, now) == expected
