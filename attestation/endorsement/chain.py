"""Chain validation: VCEK/VLEK -> ASK/ASVK -> ARK, trusting only pinned roots.

Spike result (cryptography 50.0.2): ``cryptography.x509.verification.PolicyBuilder`` cannot
validate AMD chains. A CA ``ExtensionPolicy.permit_all()`` is refused outright ("A CA extension
policy must require the basicConstraints extension to be present"), and with basicConstraints
required the verifier rejects every AMD certificate with "Forbidden signature algorithm"
(RSASSA-PSS SHA-384 salt 48 is outside its Web PKI algorithm set). So each hop is checked here
explicitly: the issuer's key verifies the signature with the PSS parameters the certificate
declares (over the TBS bytes as received when the DER input is at hand), plus our checks of
the exact signature algorithm (RSASSA-PSS, SHA-384, MGF1-SHA-384, salt 48, trailer 1, parsed
from the DER), RSA-4096 issuer keys, CA basic constraints and key usage, no unknown critical
extension, and validity of every certificate at the caller's ``now``.

What does not depend on time is a pure function of the certificates' bytes and is remembered
per process (bounded, successes only; :mod:`attestation.endorsement.memo`): each RSA signature
that verified, by the (child DER, issuer DER) pair, and each path whose every time-independent
check passed, by the DER of every certificate it was judged from. Validity at ``now`` and the
CRL are checked at every verification, memo hit or not, so a warm call fails exactly as a cold
one does.

Path selection: the intermediate is chosen by signer kind (ASK for a VCEK, ASVK for a VLEK, by
the pinned certificate or, for supplied certificates, by CN ``SEV-<line>`` vs
``SEV-VLEK-<line>``), under the root of the given product line. Supplied intermediates are
tried only after the pinned one and only if they verify under a pinned root; a supplied root is
never used. A simulated root takes part only when the caller pinned it in the ``TrustStore``.

CRL (optional, DER): it must be signed by the path's ARK with the same PSS parameters, its
issuer must be the ARK, ``thisUpdate <= now <= nextUpdate`` (a CRL without nextUpdate is
refused), and the chain fails if the intermediate's serial is listed. AMD's CRL is issued by
the ARK, so its entries name certificates the ARK issued (ASK/ASVK). VCEK/VLEK serials are
all 0 on real certificates, so the leaf serial is looked up only when it is non-zero (a
simulated or future PKI); a serial-0 entry never revokes every VCEK.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeGuard, TypeVar, cast

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.x509.oid import NameOID

from attestation.abi.product import ProductLine, SignerKind
from attestation.endorsement import der
from attestation.endorsement.certificate import (
    PARSE_ERRORS,
    Endorsement,
    certificate_der,
    require_fully_parseable,
)
from attestation.endorsement.memo import BoundedMemo
from attestation.endorsement.trust import (
    SIMULATED_ORGANIZATION,
    TrustStore,
    fingerprint,
    intermediate_role,
)
from attestation.errors import MalformedError, UntrustedChainError, UsageError

OID_RSASSA_PSS = "1.2.840.113549.1.1.10"
OID_MGF1 = "1.2.840.113549.1.1.8"
OID_SHA384 = "2.16.840.1.101.3.4.2.2"
PSS_SALT_LENGTH = 48
#: The contents of the two DER AlgorithmIdentifiers AMD signs with (RSASSA-PSS, SHA-384,
#: MGF1-SHA-384, salt 48; the second also states the default trailerField 1), as found in
#: every certificate of attestation/endorsement/roots and tests/assets/real. Exactly these
#: bytes skip the parameter parser; anything else is parsed and judged field by field.
_AMD_PSS_IDENTIFIERS = frozenset(
    bytes.fromhex(
        "06092a864886f70d01010a30" + length + "a00f300d06096086480165030402020500"
        "a11c301a06092a864886f70d010108300d06096086480165030402020500a203020130" + trailer
    )
    for length, trailer in (("34", ""), ("39", "a303020101"))
)
AMD_RSA_KEY_BITS = 4096

_VLEK_INTERMEDIATE_PREFIX = "SEV-VLEK-"
_ARK_PREFIX = "ARK-"
_VERIFY_ERRORS: tuple[type[Exception], ...] = (InvalidSignature, *PARSE_ERRORS)
_HANDLED_CRITICAL = frozenset(
    {x509.BasicConstraints.oid.dotted_string, x509.KeyUsage.oid.dotted_string}
)
_HOW_TO_PIN = (
    "to accept simulated evidence, pin that root explicitly (raw reports: "
    "verify-attested-run --simulated-root ROOT.pem; envelopes: list the sha256 fingerprint of "
    "the root's DER in the expected values' simulatedRoots, and the root must be in the "
    "envelope's certChain; `attested-replay simulate root` prints it)"
)


@dataclass(frozen=True, slots=True)
class VerifiedChain:
    """The path that verified: which root, which intermediate, and whether it is simulated."""

    ark: x509.Certificate
    intermediate: x509.Certificate
    leaf: x509.Certificate
    simulated: bool


def verify_chain(
    endorsement: Endorsement,
    product_line: ProductLine,
    *,
    trust: TrustStore,
    now: dt.datetime,
    crl: bytes | x509.CertificateRevocationList | None = None,
    intermediates: Iterable[x509.Certificate] = (),
) -> VerifiedChain:
    """Check that the endorsement chains to a pinned root at ``now``; raise UntrustedChainError.

    ``intermediates`` are extra ASK/ASVK candidates from the input (e.g. an envelope's
    certChain); any root among them is ignored.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise UsageError("verification time `now` must be timezone-aware")
    supplied = tuple(intermediates)
    key = _path_key(endorsement, product_line, trust, supplied)
    path = _PATHS.get(key)
    if path is None:
        path = _sound_path(endorsement, product_line, trust, supplied, now)
        _PATHS.put(key, path, input_bytes=_key_bytes(key))
    else:
        # Everything but time held for exactly these bytes: only the validity windows are
        # judged again, in the order the full check meets them (root, intermediate, leaf).
        _require_validity(path.ark, path.ark_label, now)
        _require_validity(path.intermediate, path.intermediate_label, now)
        _require_validity(endorsement.certificate, path.leaf_label, now)
    if crl is not None:
        _check_crl(
            crl,
            ark=path.ark,
            ark_label=path.ark_label,
            intermediate=path.intermediate,
            intermediate_label=path.intermediate_label,
            endorsement=endorsement,
            now=now,
        )
    return VerifiedChain(path.ark, path.intermediate, endorsement.certificate, path.simulated)


@dataclass(frozen=True, slots=True)
class _SoundPath:
    """A path whose every time-independent check passed, and the labels its messages use."""

    ark: x509.Certificate
    intermediate: x509.Certificate
    simulated: bool
    ark_label: str
    intermediate_label: str
    leaf_label: str


#: Sound paths by the exact DER of every certificate they were judged from (the leaf, the
#: supplied candidates, the pinned root and intermediate of the product line and signer kind,
#: the pinned simulated roots) and the product line: a pure function of those bytes. Validity
#: and the CRL depend on ``now`` and are checked at every call.
_PATHS: BoundedMemo[tuple[object, ...], _SoundPath] = BoundedMemo(256)


def _path_key(
    endorsement: Endorsement,
    product_line: ProductLine,
    trust: TrustStore,
    supplied: Sequence[x509.Certificate],
) -> tuple[object, ...]:
    return (
        endorsement.der,
        product_line,
        _pinned_der(trust.ark(product_line)),
        _pinned_der(trust.intermediate(product_line, endorsement.signer_kind)),
        tuple(map(_pinned_der, trust.simulated_roots)),
        tuple(map(certificate_der, supplied)),
    )


def _key_bytes(key: tuple[object, ...]) -> int:
    """The bytes of the certificates a path key stands for."""
    return sum(
        len(part) if isinstance(part, bytes) else sum(map(len, part))
        for part in key
        if isinstance(part, bytes | tuple)
    )


def _pinned_der(certificate: x509.Certificate) -> bytes:
    """A pinned certificate's DER, encoded once per process (kept when the memos of input
    bytes are emptied)."""
    return _remembered("der", (certificate,), certificate_der)


def _sound_path(
    endorsement: Endorsement,
    product_line: ProductLine,
    trust: TrustStore,
    supplied: tuple[x509.Certificate, ...],
    now: dt.datetime,
) -> _SoundPath:
    """Find the path and run every check of it, validity at ``now`` included (in the order
    the messages are ranked); raise the first failure."""
    leaf_label = endorsement.signer_kind.value.upper()
    for index, certificate in enumerate(supplied, start=1):
        require_fully_parseable(certificate, f"supplied certificate {index}")
    ark, intermediate, simulated = _find_path(endorsement, product_line, trust, supplied)
    pinned_intermediate = not simulated and intermediate is trust.intermediate(
        product_line, endorsement.signer_kind
    )
    intermediate_label = (
        f"{_intermediate_kind(endorsement.signer_kind)} "
        f"{_pinned_cn(intermediate) if pinned_intermediate else _cn(intermediate)!r}"
    )
    ark_label = (
        f"{'simulated ARK' if simulated else f'{product_line.value} ARK'} {_pinned_cn(ark)!r}"
    )
    leaf = endorsement.certificate
    _require_sound(ark, ark_label, now, pinned=True)
    _require_sound(intermediate, intermediate_label, now, pinned=pinned_intermediate)
    # The leaf's signature fields and extensions as its Endorsement read them once.
    _require_leaf_format(endorsement, leaf_label)
    _require_validity(leaf, leaf_label, now)
    _require_known_critical(endorsement.critical_extensions, leaf_label)
    for certificate, label, pinned in (
        (ark, ark_label, True),
        (intermediate, intermediate_label, pinned_intermediate),
    ):
        if pinned:
            _remembered("authority", (certificate,), _require_signing_authority, label)
        else:
            _require_signing_authority(certificate, label)
    if endorsement.basic_constraints_ca:
        raise UntrustedChainError(f"{leaf_label} is marked as a CA (basicConstraints cA=true)")
    return _SoundPath(ark, intermediate, simulated, ark_label, intermediate_label, leaf_label)


def require_amd_signature_algorithm(signed_der: bytes, what: str) -> None:
    """Require RSASSA-PSS / SHA-384 / MGF1-SHA-384 / salt 48 on a Certificate or CertificateList.

    Both the outer signatureAlgorithm and the copy inside the signed TBS part are checked.
    """
    try:
        outer = der.read_single(signed_der, what=what, tag=der.TAG_SEQUENCE)
        parts = der.read_all(outer.content, what=what)
        tbs, algorithm, signature = parts
        if signature.tag != der.TAG_BIT_STRING:
            raise UntrustedChainError(
                f"{what}: the signature is not a BIT STRING with 0 unused bits"
            )
        # Certificate TBS: [0] version, serial, signature...; CRL TBS: version, signature...
        # The signature AlgorithmIdentifier is the TBS's first SEQUENCE.
        offset = 0
        while True:
            inner, offset = der.read_element(tbs.content, offset, what=what)
            if inner.tag == der.TAG_SEQUENCE:
                break
        if algorithm.tag != der.TAG_SEQUENCE:
            raise UntrustedChainError(
                f"{what}: signed and unsigned signature algorithm identifiers differ"
            )
    except (MalformedError, ValueError) as exc:
        raise UntrustedChainError(f"{what}: signature algorithm cannot be read: {exc}") from exc
    _require_amd_signature_parts(inner.content, algorithm.content, signature.content, what)


def _require_amd_signature_parts(
    tbs_algorithm: bytes, algorithm: bytes, signature: bytes, what: str
) -> None:
    """:func:`require_amd_signature_algorithm` on the parts of a certificate already split
    (the contents of its two signature AlgorithmIdentifiers, both SEQUENCEs, and of its
    signature BIT STRING)."""
    if signature[:1] != b"\0":
        raise UntrustedChainError(f"{what}: the signature is not a BIT STRING with 0 unused bits")
    if tbs_algorithm != algorithm:
        raise UntrustedChainError(
            f"{what}: signed and unsigned signature algorithm identifiers differ"
        )
    if algorithm not in _AMD_PSS_IDENTIFIERS:
        try:
            _check_pss_parameters(algorithm, what)
        except (MalformedError, ValueError) as exc:
            raise UntrustedChainError(f"{what}: signature algorithm cannot be read: {exc}") from exc


def _check_pss_parameters(content: bytes, what: str) -> None:
    items = der.read_all(content, what=what)
    oid = der.decode_oid(items[0].content, what=what) if items else ""
    if oid != OID_RSASSA_PSS or len(items) != 2 or items[1].tag != der.TAG_SEQUENCE:
        raise UntrustedChainError(
            f"{what}: signature algorithm {oid or '?'} is not RSASSA-PSS "
            "(AMD signs with RSASSA-PSS SHA-384, salt 48)"
        )
    fields = {part.tag: part.content for part in der.read_all(items[1].content, what=what)}
    hash_oid = _algorithm_oid(fields.get(0xA0, b""), what)
    mgf = der.read_all(der.read_single(fields.get(0xA1, b""), what=what).content, what=what)
    mgf_oid = der.decode_oid(mgf[0].content, what=what) if mgf else ""
    mgf_hash = _algorithm_oid(mgf[1].content if len(mgf) == 2 else b"", what, wrapped=False)
    salt = der.decode_non_negative_integer(
        der.read_single(fields.get(0xA2, b"\x02\x01\x14"), what=what).content, what=what
    )
    trailer = der.decode_non_negative_integer(
        der.read_single(fields.get(0xA3, b"\x02\x01\x01"), what=what).content, what=what
    )
    if (hash_oid, mgf_oid, mgf_hash, salt, trailer) != (
        OID_SHA384,
        OID_MGF1,
        OID_SHA384,
        PSS_SALT_LENGTH,
        1,
    ) or set(fields) - {0xA0, 0xA1, 0xA2, 0xA3}:
        raise UntrustedChainError(
            f"{what}: RSASSA-PSS parameters (hash {hash_oid}, mask {mgf_oid}/{mgf_hash}, "
            f"salt {salt}) are not SHA-384 / MGF1-SHA-384 / salt 48"
        )


def _algorithm_oid(data: bytes, what: str, *, wrapped: bool = True) -> str:
    # [n] EXPLICIT AlgorithmIdentifier (wrapped) or the AlgorithmIdentifier SEQUENCE content.
    if not data:
        return "absent (defaults to SHA-1)"
    sequence = der.read_single(data, what=what).content if wrapped else data
    items = der.read_all(sequence, what=what)
    if not items or items[0].tag != der.TAG_OID:
        raise UntrustedChainError(f"{what}: malformed AlgorithmIdentifier")
    if len(items) > 2 or (len(items) == 2 and items[1] != der.DerElement(der.TAG_NULL, b"")):
        raise UntrustedChainError(f"{what}: unexpected hash parameters")
    return der.decode_oid(items[0].content, what=what)


def _find_path(
    endorsement: Endorsement,
    product_line: ProductLine,
    trust: TrustStore,
    supplied: Sequence[x509.Certificate],
) -> tuple[x509.Certificate, x509.Certificate, bool]:
    kind = endorsement.signer_kind
    label = kind.value.upper()
    pinned = trust.intermediate(product_line, kind)
    matching_role = [c for c in supplied if _is_intermediate_for(c, kind)]
    anchors: list[tuple[x509.Certificate, list[x509.Certificate], bool]] = [
        (trust.ark(product_line), [pinned, *matching_role], False)
    ]
    # Every pinned simulated root is tried, under exactly the rules of AMD's chains.
    anchors.extend((root, matching_role, True) for root in trust.simulated_roots)
    failures: list[str] = []
    for ark, candidates, simulated in anchors:
        root_label = "simulated ARK" if simulated else f"{product_line.value} ARK"
        ark_name = _pinned_cn(ark)
        if not ark_name.startswith(_ARK_PREFIX):
            # AMD's roots are "ARK-<line>": a root named like an intermediate is not one.
            failures.append(f"{root_label} {ark_name!r} is not named like an ARK ('ARK-...')")
            continue
        # Roots are pinned (by the trust store or the tenant's fingerprint): their
        # self-signature is the same check every time (and kept when the memos are emptied).
        if not _remembered("self-signed", (ark,), _self_signed):
            failures.append(f"{root_label} {ark_name!r} is not validly self-signed")
            continue
        for candidate in candidates:
            pinned_pair = candidate is pinned and not simulated
            # An intermediate is issued by the root (by name and by signature) and is not
            # itself a root: a certificate that is both cannot stand for two links.
            if candidate.subject != endorsement.issuer or not (
                _remembered("issued", (candidate, ark), _issued_by_name)
                if pinned_pair
                else _issued_by_name(candidate, ark)
            ):
                continue
            # A pinned intermediate's RSA key is decoded once per process.
            key = (
                _remembered("key", (candidate,), x509.Certificate.public_key)
                if pinned_pair
                else None
            )
            if not _signed_by(endorsement.certificate, candidate, key):
                failures.append(
                    f"{label} signature does not verify under the "
                    f"{_intermediate_kind(kind)} {_cn(candidate)!r} "
                    f"({fingerprint(candidate)}): the certificate is not issued by it"
                )
                continue
            if not (
                _remembered("signed", (candidate, ark), _signed_by)
                if pinned_pair
                else _signed_by(candidate, ark)
            ):
                failures.append(
                    f"supplied {_intermediate_kind(kind)} {_cn(candidate)!r} does not verify "
                    f"under the pinned {root_label}"
                )
                continue
            return ark, candidate, simulated
    if not trust.simulated_roots and (
        _looks_simulated(endorsement.issuer) or any(_looks_simulated(c.subject) for c in supplied)
    ):
        roots = _supplied_simulated_roots(supplied)
        which = f" {', '.join(roots)}" if roots else ""
        raise UntrustedChainError(
            f"{label} chains to a simulated root{which} (O={SIMULATED_ORGANIZATION}), and no "
            f"simulated root is pinned; {_HOW_TO_PIN}"
        )
    if failures:
        raise UntrustedChainError("; ".join(dict.fromkeys(failures)))
    raise UntrustedChainError(_no_issuer_message(endorsement, product_line, trust, supplied))


def _no_issuer_message(
    endorsement: Endorsement,
    product_line: ProductLine,
    trust: TrustStore,
    supplied: Sequence[x509.Certificate],
) -> str:
    leaf_issuer = endorsement.issuer
    kind = endorsement.signer_kind
    label = kind.value.upper()
    issuer = leaf_issuer.rfc4514_string()
    other_kind = SignerKind.VLEK if kind is SignerKind.VCEK else SignerKind.VCEK
    wanted = _intermediate_kind(kind)
    for line in ProductLine:
        for signer in SignerKind:
            if trust.intermediate(line, signer).subject != leaf_issuer:
                continue
            if signer is other_kind:
                return (
                    f"{label} is issued by {issuer}, AMD's {_intermediate_kind(signer)} "
                    f"for {signer.value.upper()}s; a {label} must chain through the {wanted}"
                )
            return (
                f"{label} is issued by AMD's {line.value} {wanted} ({issuer}), "
                f"but the chain is checked against the {product_line.value} roots"
            )
    for certificate in supplied:
        if certificate.subject == leaf_issuer and _is_intermediate_for(certificate, other_kind):
            return (
                f"{label} is issued by {issuer}, the {_intermediate_kind(other_kind)} for "
                f"{other_kind.value.upper()}s; a {label} must chain through the {wanted}"
            )
    if _looks_simulated(leaf_issuer) or any(_looks_simulated(c.subject) for c in supplied):
        pinned = ", ".join(fingerprint(root) for root in trust.simulated_roots)
        roots = _supplied_simulated_roots(supplied)
        carried = f"the chain carries root {', '.join(roots)}" if roots else "it carries no root"
        return (
            f"{label} is issued by {issuer}, a simulated certificate that does not chain to a "
            f"pinned simulated root ({carried}; pinned: {pinned})"
        )
    return (
        f"{label} issuer {issuer} is neither the pinned {product_line.value} {wanted} nor a "
        "supplied intermediate that chains to a pinned root"
    )


def _check_crl(
    crl_input: bytes | x509.CertificateRevocationList,
    *,
    ark: x509.Certificate,
    ark_label: str,
    intermediate: x509.Certificate,
    intermediate_label: str,
    endorsement: Endorsement,
    now: dt.datetime,
) -> None:
    if isinstance(crl_input, bytes):
        try:
            crl = x509.load_der_x509_crl(crl_input)
        except ValueError as exc:
            raise MalformedError(f"CRL is not a DER X.509 CRL: {exc}") from exc
    else:
        crl = crl_input
    require_amd_signature_algorithm(crl.public_bytes(serialization.Encoding.DER), "CRL")
    if crl.issuer != ark.subject:
        raise UntrustedChainError(
            f"CRL is issued by {crl.issuer.rfc4514_string()}, not by the {ark_label}"
        )
    public_key = ark.public_key()
    if not isinstance(public_key, rsa.RSAPublicKey) or not crl.is_signature_valid(public_key):
        raise UntrustedChainError(f"CRL signature does not verify under the {ark_label}")
    if now < crl.last_update_utc:
        raise UntrustedChainError(
            f"CRL is not yet valid: thisUpdate {crl.last_update_utc.isoformat()}, "
            f"now {now.isoformat()}"
        )
    next_update = crl.next_update_utc
    if next_update is None:
        raise UntrustedChainError("CRL has no nextUpdate; its freshness cannot be judged")
    if now > next_update:
        raise UntrustedChainError(
            f"CRL is stale: nextUpdate {next_update.isoformat()}, now {now.isoformat()}"
        )
    entry = crl.get_revoked_certificate_by_serial_number(intermediate.serial_number)
    if entry is not None:
        raise UntrustedChainError(
            f"{intermediate_label} (serial {intermediate.serial_number}) is revoked by the CRL "
            f"since {entry.revocation_date_utc.isoformat()}"
        )
    leaf_serial = endorsement.certificate.serial_number
    if leaf_serial != 0:
        entry = crl.get_revoked_certificate_by_serial_number(leaf_serial)
        if entry is not None:
            raise UntrustedChainError(
                f"{endorsement.signer_kind.value.upper()} (serial {leaf_serial}) is revoked by "
                f"the CRL since {entry.revocation_date_utc.isoformat()}"
            )


def _is_amd_rsa_key(key: PublicKeyTypes) -> TypeGuard[rsa.RSAPublicKey]:
    return isinstance(key, rsa.RSAPublicKey) and key.key_size == AMD_RSA_KEY_BITS


def _signed_by(
    child: x509.Certificate, issuer: x509.Certificate, issuer_key: PublicKeyTypes | None = None
) -> bool:
    """Whether ``issuer`` (an RSA-4096 key) signed ``child``, whose issuer name the caller
    matched to ``issuer``'s subject (:func:`_signed_with`); ``issuer_key`` is ``issuer``'s
    public key when the caller has it decoded already.

    A pure function of the two certificates' DER: a signature that verified is remembered by
    that pair (one chip's VCEK under its ASK, the ASK under its ARK, the ARK under itself: three
    RSA-4096 verifications an envelope would otherwise repeat). A failure is not remembered.
    """
    key = (certificate_der(child), certificate_der(issuer))
    if _SIGNED.get(key):
        return True
    verified = _signed_with(child, issuer.public_key() if issuer_key is None else issuer_key)
    if verified:
        _SIGNED.put(key, value=True, input_bytes=len(key[0]) + len(key[1]))
    return verified


#: (child DER, issuer DER) pairs whose signature verified.
_SIGNED: BoundedMemo[tuple[bytes, bytes], bool] = BoundedMemo(512)


def _signed_with(child: x509.Certificate, public_key: PublicKeyTypes) -> bool:
    """Whether ``child``'s signature verifies with ``public_key`` (its issuer's, which must be
    RSA-4096) under the parameters ``child`` declares (:func:`require_amd_signature_algorithm`
    then requires AMD's). One RSA verification, without ``verify_directly_issued_by``'s extra
    work, over the TBS bytes ``cryptography`` parsed the certificate from.
    """
    if not _is_amd_rsa_key(public_key):
        return False
    try:
        parameters = child.signature_algorithm_parameters
        algorithm = child.signature_hash_algorithm
        # Whatever RSA padding is declared: a verifying non-AMD algorithm is refused with
        # its own message by require_amd_signature_algorithm, after the path is found.
        if not isinstance(parameters, padding.PSS | padding.PKCS1v15) or algorithm is None:
            return False
        public_key.verify(child.signature, child.tbs_certificate_bytes, parameters, algorithm)
    except _VERIFY_ERRORS:
        return False
    return True


def _self_signed(root: x509.Certificate) -> bool:
    return root.subject == root.issuer and _signed_by(root, root)


def _issued_by_name(candidate: x509.Certificate, ark: x509.Certificate) -> bool:
    """An intermediate names the root as its issuer and is not itself a root."""
    return candidate.issuer == ark.subject and candidate.subject != candidate.issuer


# Pinned certificates (AMD's, checked against their fingerprints when loaded, and a simulated
# root the tenant pinned by fingerprint) are the same objects at every verification, so what
# is computed from them alone is computed once per process. Entries are keyed by the
# certificates' identity (hashing a certificate re-encodes its DER) and hold the certificates,
# so an id cannot be reused while its entry exists. Only successes are kept: a failure is
# recomputed, and its message rebuilt, every time. Never used for a certificate from the input.
_REMEMBERED: BoundedMemo[tuple[object, ...], tuple[tuple[x509.Certificate, ...], object]] = (
    BoundedMemo(512, forget_with_all=False)
)
_T = TypeVar("_T")


def _remembered(
    what: str,
    certificates: tuple[x509.Certificate, ...],
    compute: Callable[..., _T],
    *args: object,
) -> _T:
    """``compute(*certificates, *args)`` for pinned certificates, computed once."""
    key = (what, *map(id, certificates))
    entry = _REMEMBERED.get(key)
    if entry is not None and all(map(operator.is_, entry[0], certificates)):
        return cast("_T", entry[1])
    value = compute(*certificates, *args)
    if value is not False:
        _REMEMBERED.put(key, (certificates, value), input_bytes=0)  # pinned: no input bytes
    return value


def _pinned_cn(certificate: x509.Certificate) -> str:
    return _remembered("cn", (certificate,), _cn)


def _require_sound(
    certificate: x509.Certificate, label: str, now: dt.datetime, *, pinned: bool
) -> None:
    """Signature algorithm, X.509 version, validity at ``now`` and critical extensions of one
    CA certificate of the path. Only validity depends on ``now``: for a pinned certificate the
    rest is checked once per process."""
    if pinned:
        _remembered("own", (certificate,), _require_own_format, label)
    else:
        _require_own_format(certificate, label)
    _require_validity(certificate, label, now)
    if pinned:
        _remembered("critical", (certificate,), _require_no_unknown_critical_extensions, label)
    else:
        _require_no_unknown_critical_extensions(certificate, label)


def _require_own_format(
    certificate: x509.Certificate, label: str, certificate_der: bytes | None = None
) -> None:
    require_amd_signature_algorithm(certificate_der or _der(certificate), label)
    _require_version_3(certificate, label)


def _require_leaf_format(endorsement: Endorsement, label: str) -> None:
    _require_own_format(endorsement.certificate, label, endorsement.der)


def _require_version_3(certificate: x509.Certificate, label: str) -> None:
    # Every AMD certificate is X.509 v3; an older version cannot carry the extensions the chain
    # rules read (RFC 5280 4.1.2.9), so one that does is malformed, not "v1 with extensions".
    if certificate.version is not x509.Version.v3:
        raise UntrustedChainError(
            f"{label} is an X.509 {certificate.version.name} certificate; AMD's are v3"
        )


def _require_validity(certificate: x509.Certificate, label: str, now: dt.datetime) -> None:
    not_before = certificate.not_valid_before_utc
    not_after = certificate.not_valid_after_utc
    if now < not_before:
        raise UntrustedChainError(
            f"{label} is not yet valid: notBefore {not_before.isoformat()}, now {now.isoformat()}"
        )
    if now > not_after:
        raise UntrustedChainError(
            f"{label} expired: notAfter {not_after.isoformat()}, now {now.isoformat()}"
        )


def _require_no_unknown_critical_extensions(certificate: x509.Certificate, label: str) -> None:
    try:
        extensions = list(certificate.extensions)
    except PARSE_ERRORS as exc:
        raise UntrustedChainError(f"{label} extensions cannot be parsed: {exc}") from exc
    _require_known_critical((e.oid.dotted_string for e in extensions if e.critical), label)


def _require_known_critical(critical: Iterable[str], label: str) -> None:
    unknown = [oid for oid in critical if oid not in _HANDLED_CRITICAL]
    if unknown:
        raise UntrustedChainError(f"{label} has unknown critical extensions {unknown}")


def _require_signing_authority(certificate: x509.Certificate, label: str) -> None:
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    except x509.ExtensionNotFound:
        raise UntrustedChainError(f"{label} has no basicConstraints; it is not a CA") from None
    if not constraints.value.ca:
        raise UntrustedChainError(f"{label} has basicConstraints cA=false; it is not a CA")
    try:
        usage = certificate.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return
    if not usage.key_cert_sign:
        raise UntrustedChainError(f"{label} key usage does not allow certificate signing")


def _supplied_simulated_roots(supplied: Sequence[x509.Certificate]) -> list[str]:
    """The fingerprints of the simulated roots the input carries: what a tenant would pin (or
    sees it pinned something else)."""
    return [
        fingerprint(certificate)
        for certificate in supplied
        if certificate.subject == certificate.issuer and _looks_simulated(certificate.subject)
    ]


def _is_intermediate_for(certificate: x509.Certificate, kind: SignerKind) -> bool:
    name = _cn(certificate)
    if not name.startswith("SEV-") or name in {"SEV-VCEK", "SEV-VLEK"}:
        return False
    return name.startswith(_VLEK_INTERMEDIATE_PREFIX) == (kind is SignerKind.VLEK)


def _intermediate_kind(kind: SignerKind) -> str:
    return intermediate_role(kind).name


def _looks_simulated(name: x509.Name) -> bool:
    return any(
        attribute.value == SIMULATED_ORGANIZATION
        for attribute in name.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    )


def _cn(certificate: x509.Certificate) -> str:
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = names[0].value if names else ""
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _der(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.DER)
