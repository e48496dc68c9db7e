"""An exact one-pass reading of a VCEK/VLEK's DER: its names' bytes and AMD's extensions.

A new chip's verification used to turn the certificate's names and each extension into
``cryptography``'s Python objects (a ``Name`` of six attributes costs ~20 us, eleven
``Extension`` objects ~11 us more) only to read a CN and eleven small values, and to split
its DER again for the signed bytes and the signature algorithm. This reader walks the DER the
certificate was loaded from once and hands back the raw bytes:

    Certificate  ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signature BIT STRING }
    TBSCertificate ::= SEQUENCE { [0] EXPLICIT version, serialNumber INTEGER,
        signature AlgorithmIdentifier, issuer Name, validity SEQUENCE, subject Name,
        subjectPublicKeyInfo SEQUENCE, [3] EXPLICIT Extensions }
    Extension ::= SEQUENCE { extnID OBJECT IDENTIFIER, extnValue OCTET STRING }

It accepts exactly that shape, in which every extension is one of AMD's KDS extensions
(the caller's ``known`` OIDs), none marked critical (DER omits the default FALSE) and none
twice, which is the shape of every VCEK and VLEK AMD issues. Anything else (unique IDs, a
critical flag, any other extension, a duplicate, a length that does not add up) returns None,
and the caller decodes the certificate completely through ``cryptography`` instead. It reads
only DER that ``cryptography`` has loaded from the same bytes; there it can only decline, never
read a part otherwise than ``cryptography`` does (tests/attestation/endorsement/test_leaf_der.py
compares the two on real, mutated and generated certificates).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple

from attestation.endorsement import der

TAG_CONTEXT_0: Final = 0xA0  # [0] EXPLICIT version
TAG_CONTEXT_3: Final = 0xA3  # [3] EXPLICIT extensions
_LONG_LENGTH: Final = 0x80
_MAX_LENGTH_OCTETS: Final = 4


class SignedParts(NamedTuple):
    """What a certificate's signature covers and says: the TBSCertificate TLV (the signed
    bytes), the contents of the signatureAlgorithm outside it and of the signature
    AlgorithmIdentifier inside it, and the signature BIT STRING's content (its first octet is
    the count of unused bits)."""

    tbs: bytes
    algorithm: bytes
    tbs_algorithm: bytes
    signature: bytes


class LeafParts(NamedTuple):
    """What the reader found: the issuer's and subject's Name TLVs, each AMD extension's
    extnValue content by dotted OID, and the signed parts."""

    issuer: bytes
    subject: bytes
    extensions: dict[str, bytes]
    signed: SignedParts


class _DeclinedError(Exception):
    """The DER is not in the one shape the reader handles."""


def _element(data: bytes, offset: int, end: int, tag: int) -> tuple[int, int]:
    """The content's (start, end) of the TLV of ``tag`` at ``offset``, which must end by ``end``."""
    if offset + 2 > end or data[offset] != tag:
        raise _DeclinedError
    first = data[offset + 1]
    if first < _LONG_LENGTH:
        start = offset + 2
        length = first
    else:
        count = first - _LONG_LENGTH
        start = offset + 2 + count
        if not 0 < count <= _MAX_LENGTH_OCTETS or start > end or data[offset + 2] == 0:
            raise _DeclinedError
        length = int.from_bytes(data[offset + 2 : start], "big")
        if length < _LONG_LENGTH:  # DER's minimal length
            raise _DeclinedError
    stop = start + length
    if stop > end:
        raise _DeclinedError
    return start, stop


def read_leaf(certificate_der: bytes, known: Mapping[bytes, str]) -> LeafParts | None:
    """The names and extensions of a VCEK/VLEK's DER, or None if it is not exactly in the shape
    above (then decode it through ``cryptography``). ``known`` maps the OBJECT IDENTIFIER TLV
    (:func:`attestation.endorsement.der.encode_oid`) of each accepted extension to its dotted
    form."""
    try:
        return _read(certificate_der, known)
    except _DeclinedError:
        return None


def _read(data: bytes, known: Mapping[bytes, str]) -> LeafParts:
    cert_start, cert_end = _element(data, 0, len(data), der.TAG_SEQUENCE)
    if cert_end != len(data):
        raise _DeclinedError
    tbs_start, tbs_end = _element(data, cert_start, cert_end, der.TAG_SEQUENCE)
    # After the TBS: signatureAlgorithm and signature, and nothing more.
    alg_start, alg_end = _element(data, tbs_end, cert_end, der.TAG_SEQUENCE)
    sig_start, sig_end = _element(data, alg_end, cert_end, der.TAG_BIT_STRING)
    if sig_end != cert_end:
        raise _DeclinedError
    _version_start, offset = _element(data, tbs_start, tbs_end, TAG_CONTEXT_0)
    _serial_start, offset = _element(data, offset, tbs_end, der.TAG_INTEGER)
    tbs_alg_start, offset = _element(data, offset, tbs_end, der.TAG_SEQUENCE)
    signed = SignedParts(
        tbs=data[cert_start:tbs_end],
        algorithm=data[alg_start:alg_end],
        tbs_algorithm=data[tbs_alg_start:offset],
        signature=data[sig_start:sig_end],
    )
    issuer_at = offset
    _issuer_start, offset = _element(data, offset, tbs_end, der.TAG_SEQUENCE)
    issuer = data[issuer_at:offset]
    _validity_start, offset = _element(data, offset, tbs_end, der.TAG_SEQUENCE)
    subject_at = offset
    _subject_start, offset = _element(data, offset, tbs_end, der.TAG_SEQUENCE)
    subject = data[subject_at:offset]
    _spki_start, offset = _element(data, offset, tbs_end, der.TAG_SEQUENCE)
    # No issuerUniqueID [1] / subjectUniqueID [2]: [3] extensions end the TBS.
    wrapper_start, wrapper_end = _element(data, offset, tbs_end, TAG_CONTEXT_3)
    if wrapper_end != tbs_end:
        raise _DeclinedError
    offset, list_end = _element(data, wrapper_start, wrapper_end, der.TAG_SEQUENCE)
    if list_end != wrapper_end or offset == list_end:  # Extensions is SIZE (1..MAX)
        raise _DeclinedError
    extensions: dict[str, bytes] = {}
    while offset < list_end:
        start, end = _element(data, offset, list_end, der.TAG_SEQUENCE)
        _oid_start, oid_end = _element(data, start, end, der.TAG_OID)
        oid = known.get(data[start:oid_end])
        # The value follows the OID directly: a critical BOOLEAN there declines.
        value_start, value_end = _element(data, oid_end, end, der.TAG_OCTET_STRING)
        if oid is None or oid in extensions or value_end != end:
            raise _DeclinedError
        extensions[oid] = data[value_start:value_end]
        offset = end
    return LeafParts(issuer, subject, extensions, signed)
