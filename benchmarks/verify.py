"""Verifications per second of a real report vs the bare ECDSA P-384 verify of the same bytes.

Usage: ``python benchmarks/verify.py [--seconds S] [--report R.bin --endorsement CERT --now T]``

The pipeline run is :class:`attestation.verify.Verifier` with the chain validated once per
distinct endorsement (its memo), under the secure default policy: parse, chain (memoized),
signature, endorsement consistency and every policy check. The baseline is
``cryptography``'s ``EllipticCurvePublicKey.verify`` of the same signature over the same
0x000-0x29F bytes, measured in the same run. The ratio pipeline/baseline is printed (goal >= 0.7).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from attestation.endorsement import load_endorsement
from attestation.policy import Policy
from attestation.report import SIGNED_REGION_END, parse_report
from attestation.signature import signature_der
from attestation.trust import TrustStore
from attestation.verify import Verifier

ASSETS = Path(__file__).resolve().parents[1] / "tests" / "assets" / "real"


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second of ``fn`` over about ``seconds`` (after a short warm-up)."""
    for _ in range(20):
        fn()
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(50):
            fn()
        count += 50
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=ASSETS / "azure-milan-v3-report.bin")
    parser.add_argument("--endorsement", type=Path, default=ASSETS / "azure-milan-v3-vcek.der")
    parser.add_argument("--now", default="2026-11-29T00:00:00+00:00")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    # AMD VCEKs have serial number 0; cryptography warns on every parse and keeps going.
    warnings.filterwarnings("ignore", message="Parsed a serial number which wasn't positive")

    report_bytes = args.report.read_bytes()
    cert_bytes = args.endorsement.read_bytes()
    now = dt.datetime.fromisoformat(args.now)
    key = load_endorsement(cert_bytes).public_key
    der = signature_der(parse_report(report_bytes))
    signed = report_bytes[:SIGNED_REGION_END]
    algorithm = ec.ECDSA(hashes.SHA384())
    verifier = Verifier(TrustStore.amd(), policy=Policy())
    if not verifier.verify(report_bytes, cert_bytes, now=now).ok:
        raise SystemExit("the benchmark report does not verify; pick a verifying pair and --now")

    def baseline() -> None:
        key.verify(der, signed, algorithm)

    def pipeline() -> None:
        verifier.verify(report_bytes, cert_bytes, now=now)

    # Interleave rounds so machine noise hits both sides alike; report the best of each.
    base_rates, pipe_rates = [], []
    for _ in range(args.rounds):
        base_rates.append(rate(baseline, args.seconds))
        pipe_rates.append(rate(pipeline, args.seconds))
    best_base, best_pipe = max(base_rates), max(pipe_rates)
    print(f"report:   {args.report.name} with {args.endorsement.name}")
    print(f"baseline: {best_base:9.1f} ECDSA P-384 verifies/s (cryptography, same bytes)")
    print(f"pipeline: {best_pipe:9.1f} full verifications/s (chain validated once)")
    print(f"ratio:    {best_pipe / best_base:.3f} (goal >= 0.7)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
