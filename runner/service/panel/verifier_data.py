"""What the panel's in-browser verifier (``static/verify.js``) needs to know, from the Python
verifier's own definitions: the report layout, the pinned AMD certificates, AMD's certificate
extensions, the signature parameters and the failure classes.

The page reads it from ``GET /panel/verifier-data.json``. Nothing here is restated: each value
is read from the module that defines it, so the browser and ``verify-attested-run`` check the
same offsets against the same roots.
"""

from __future__ import annotations

import functools
from typing import Any

from cryptography.hazmat.primitives import serialization

from attestation.abi import report as abi
from attestation.abi.product import ProductLine
from attestation.abi.tcb import TcbVersion, tcb_layout
from attestation.endorsement import certificate as amd_extensions
from attestation.endorsement import chain, trust
from attestation.errors import FailureClass
from attestation.exit_codes import EXIT_CODES
from attestation.transparency.checkpoint import COSIGNATURE_V1_ALGORITHM
from attestation.verify import verifier
from attestation.verify.policy import Policy


def _report() -> dict[str, Any]:
    cpuid = [
        [family, low, high, product.value]
        for family, ranges, product in abi._CPUID_PRODUCTS  # noqa: SLF001 - the one table
        for low, high in ranges
    ]
    return {
        "size": abi.REPORT_SIZE,
        "signedEnd": abi.SIGNED_REGION_END,
        "signatureComponentSize": abi.SIGNATURE_COMPONENT_SIZE,
        # The signature is over P-384: R and S are 48 bytes, the rest of each field zero.
        "supportedVersions": list(abi.SUPPORTED_VERSIONS),
        "signatureAlgo": abi.SIGNATURE_ALGO_ECDSA_P384_SHA384,
        "signingKeys": {
            "vcek": abi.SIGNING_KEY_VCEK,
            "vlek": abi.SIGNING_KEY_VLEK,
            "none": abi.SIGNING_KEY_NONE,
        },
        "fields": [
            {"name": spec.name, "offset": spec.offset, "size": spec.size, "reserved": spec.reserved}
            for spec in abi.LAYOUT
        ],
        "cpuidProducts": cpuid,
        "policyReservedOneBit": abi.GuestPolicy._RESERVED_ONE.bit_length() - 1,  # noqa: SLF001
        "policyKnownBits": abi.GuestPolicy._KNOWN_MASK.bit_length(),  # noqa: SLF001
    }


def _endorsement() -> dict[str, Any]:
    return {
        "amdArc": amd_extensions.AMD_KDS_ARC,
        "knownOids": sorted(amd_extensions._KNOWN_AMD_OIDS),  # noqa: SLF001
        "oids": {
            "structVersion": amd_extensions.OID_STRUCT_VERSION,
            "productName": amd_extensions.OID_PRODUCT_NAME,
            "hwid": amd_extensions.OID_HWID,
            "cspId": amd_extensions.OID_CSP_ID,
        },
        "splOids": dict(amd_extensions.SPL_OIDS),
        "hwidLengths": sorted(amd_extensions.HWID_LENGTHS),
        "signers": {cn: kind.value for cn, kind in amd_extensions._SIGNER_BY_CN.items()},  # noqa: SLF001
        "products": [line.value for line in ProductLine],
        "turinLayoutProduct": next(p.value for p in ProductLine if p.uses_turin_tcb_layout),
        "requiredSpls": list(verifier._REQUIRED_SPLS),  # noqa: SLF001
        "turinStructVersion": verifier._TURIN_STRUCT_VERSION,  # noqa: SLF001
        "milanGenoaStructVersion": verifier._MILAN_GENOA_STRUCT_VERSION,  # noqa: SLF001
        "turinHwidLength": verifier._TURIN_HWID_LENGTH,  # noqa: SLF001
    }


def _chain() -> dict[str, Any]:
    return {
        "pssIdentifiers": sorted(i.hex() for i in chain._AMD_PSS_IDENTIFIERS),  # noqa: SLF001
        "pssSaltLength": chain.PSS_SALT_LENGTH,
        "rsaBits": chain.AMD_RSA_KEY_BITS,
        "arkPrefix": chain._ARK_PREFIX,  # noqa: SLF001
        "vlekIntermediatePrefix": chain._VLEK_INTERMEDIATE_PREFIX,  # noqa: SLF001
        "simulatedOrganization": trust.SIMULATED_ORGANIZATION,
        "handledCritical": sorted(chain._HANDLED_CRITICAL),  # noqa: SLF001
    }


def _roots() -> list[dict[str, str]]:
    store = trust.TrustStore.amd()
    return [
        {
            "productLine": line.value,
            "role": role.value,
            "pem": certificate.public_bytes(serialization.Encoding.PEM).decode("ascii"),
            "fingerprint": trust.PINNED_FINGERPRINTS[line, role],
        }
        for (line, role), certificate in store.amd_certificates().items()
    ]


def _policy() -> dict[str, Any]:
    security = {
        name for line in ProductLine for name in TcbVersion.decode(0, line).security_components()
    }
    return {
        # What `verify-attested-run` applies when the tenant's file sets no policy key.
        "defaults": Policy().model_dump(by_alias=True, mode="json"),
        "guestBits": dict(abi.GuestPolicy._BITS),  # noqa: SLF001
        "platformInfoKnownMask": abi.PlatformInfo._KNOWN_MASK,  # noqa: SLF001
        "securityComponents": sorted(security),
        "products": [line.value for line in ProductLine],
    }


@functools.cache
def verifier_data() -> dict[str, Any]:
    """The JSON document ``static/verify.js`` reads (computed once per process)."""
    return {
        "report": _report(),
        "tcbLayouts": {line.value: dict(tcb_layout(line)) for line in ProductLine},
        "endorsement": _endorsement(),
        "chain": _chain(),
        "roots": _roots(),
        "policy": _policy(),
        "failureClasses": {cls.value: EXIT_CODES[cls] for cls in FailureClass},
        "cosignatureType": COSIGNATURE_V1_ALGORITHM,
    }
