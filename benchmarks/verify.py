"""Verifications per second of a real report vs the bare ECDSA P-384 verify of the same bytes.

Usage: ``python benchmarks/verify.py [--seconds S] [--batch N] [--report R --endorsement C]``

The pipeline is :class:`attestation.verify.Verifier` under the secure default policy: parse,
chain, signature, endorsement consistency and every policy check, measured twice: **warm**
(one Verifier, so the chain of the same chip is validated once; goal >= 0.9) and **cold** (a
fresh Verifier per verification and the process memos of certificate bytes emptied, as for a
new chip each time; goal >= 0.6). The baseline is
``cryptography``'s ``EllipticCurvePublicKey.verify`` of the same signature over the same
0x000-0x29F bytes, measured in the same run, batches of the two alternating.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from attestation.abi.report import SIGNED_REGION_END, parse_report
from attestation.abi.signature import signature_der
from attestation.endorsement.certificate import load_endorsement
from attestation.endorsement.memo import forget_all
from attestation.endorsement.trust import TrustStore
from attestation.verify.policy import Policy
from attestation.verify.verifier import Verifier

ASSETS = Path(__file__).resolve().parents[1] / "tests" / "assets" / "real"


def timed(fn: Callable[[], object], calls: int) -> float:
    """Seconds for ``calls`` calls of ``fn``."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return time.perf_counter() - start


def compare(
    baseline: Callable[[], object], pipeline: Callable[[], object], seconds: float, batch: int
) -> tuple[float, float, float]:
    """Median baseline rate, median pipeline rate and median per-pair ratio.

    Short batches of the two alternate, so load from other processes hits both sides alike;
    each adjacent pair gives one ratio and the median of those is the reported ratio.
    """
    for _ in range(3):
        timed(baseline, batch)
        timed(pipeline, batch)
    base_rates: list[float] = []
    pipe_rates: list[float] = []
    ratios: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(ratios) < 5:
        base = timed(baseline, batch)
        pipe = timed(pipeline, batch)
        base_rates.append(batch / base)
        pipe_rates.append(batch / pipe)
        ratios.append(base / pipe)
    return statistics.median(base_rates), statistics.median(pipe_rates), statistics.median(ratios)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=ASSETS / "azure-milan-v3-report.bin")
    parser.add_argument("--endorsement", type=Path, default=ASSETS / "azure-milan-v3-vcek.der")
    parser.add_argument("--now", default="2026-11-29T00:00:00+00:00")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=100, help="calls per timed batch")
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

    def warm() -> None:
        verifier.verify(report_bytes, cert_bytes, now=now)

    trust = TrustStore.amd()
    policy = Policy()

    def cold() -> None:
        # A new chip each time: a fresh Verifier and emptied memos remember nothing about the
        # endorsement (its parse, its signature, its path). Only the pinned AMD certificates'
        # own checks (a pinned root's self-signature, a pinned intermediate under its root)
        # are done once per process.
        forget_all()
        Verifier(trust, policy=policy).verify(report_bytes, cert_bytes, now=now)

    print(f"report:   {args.report.name} with {args.endorsement.name}")
    for name, pipeline, goal, what in (
        ("warm", warm, 0.9, "same chip: chain validated once (the Verifier's memo)"),
        ("cold", cold, 0.6, "new chip each time: memos emptied, chain validated each time"),
    ):
        best_base, best_pipe, ratio = compare(baseline, pipeline, args.seconds, args.batch)
        print(f"{name}:")
        print(f"  baseline: {best_base:9.1f} ECDSA P-384 verifies/s (cryptography, same bytes)")
        print(f"  pipeline: {best_pipe:9.1f} full verifications/s ({what})")
        print(f"  ratio:    {ratio:.3f} (median of paired batches; goal >= {goal})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
