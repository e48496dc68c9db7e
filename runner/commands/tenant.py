"""``tenant fetch`` (and ``tenant reproduce``, from :mod:`runner.commands.reproduce`): what a
tenant runs against the publication service."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from attestation.contracts import (
    DEFAULT_MAX_CORPUS_EXPORT_BYTES,
)
from attestation.tenant.errors import TenantInputError, TenantUsageError
from attestation.tenant.fetch import DEFAULT_JOBS as DEFAULT_FETCH_JOBS
from attestation.tenant.fetch import MAX_JOBS as MAX_FETCH_JOBS
from attestation.tenant.http import read_token
from runner.commands import reproduce
from runner.commands.corpus import parse_size
from runner.commands.parsing import (
    add_actions,
    add_ca_bundle,
    add_command,
    input_file,
    output_dir,
)
from runner.errors import VerificationFailedError
from runner.exit_codes import Family

if TYPE_CHECKING:
    from attestation.tenant.fetch import FetchReport
    from runner.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    _register_tenant(subparsers)


def _register_tenant(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "tenant",
        summary="tenant-side commands",
        description="What a tenant runs against the publication service.",
        family=Family.PUBLICATION,
    )
    actions = add_actions(parser)
    fetch = add_command(
        actions,
        "fetch",
        summary="fetch new envelopes and verify the log",
        description="""\
Downloads the tenant's signed checkpoint and the new log entries, checks that they extend
the checkpoint kept in --out and are what the new checkpoint signs, downloads the new
envelopes (in bundles of up to 64, --jobs requests at a time; by --jobs worker processes from
3 bundles on) and keeps them under --out/envelopes.

With --expected X, each new envelope is then verified as `verify-attested-run --envelope E
--expected X` would, except that the run ID is the one of the envelope's log entry: one file
pins what every run shares (corpus checksum, workload, image, policy, simulated roots), and
a runId in it is ignored. One verdict line per envelope; exit 4 when any did not verify
(the envelopes are kept either way: the log holds them).""",
        family=Family.PUBLICATION,
    )
    fetch.add_argument("--server", required=True, metavar="URL", help="https://HOST of the service")
    fetch.add_argument(
        "--token-file",
        required=True,
        type=input_file("--token-file"),
        metavar="FILE",
        help="file holding the tenant token",
    )
    fetch.add_argument("--tenant", required=True, help="tenant identifier (a DNS label)")
    fetch.add_argument(
        "--out",
        required=True,
        type=output_dir("--out", create=True),
        metavar="DIR",
        help="local store directory (created if absent; its parent must exist)",
    )
    fetch.add_argument(
        "--log-key", metavar="KEY|FILE", help="pinned log verifier key (the text, or a file)"
    )
    fetch.add_argument(
        "--witness-key",
        dest="witness_keys",
        action="append",
        default=[],
        metavar="KEY|FILE",
        help="a witness's verifier key (docs/witness.md); repeat for several. The new "
        "checkpoint is then the latest the service has cosigned, and needs cosignatures by "
        "--witness-threshold of them (exit 7 otherwise). Pinned in --out once given",
    )
    fetch.add_argument(
        "--witness-threshold",
        type=int,
        metavar="T",
        help="how many of the --witness-key witnesses must have cosigned (default: all)",
    )
    fetch.add_argument(
        "--checkpoint",
        type=input_file("--checkpoint"),
        metavar="FILE",
        help="a checkpoint to check consistency against (default: the one kept in --out), "
        "e.g. a publish receipt's; with pinned witnesses, their cosignature lines on it must "
        "verify",
    )
    fetch.add_argument(
        "--expected",
        type=input_file("--expected"),
        metavar="FILE",
        help="verify every new envelope against this expected-values file, with the run ID "
        "of its log entry (exit 4 when one does not verify)",
    )
    fetch.add_argument(
        "--corpus",
        action="store_true",
        help="also download the tenant's corpus exports into OUT/corpora and check each one",
    )
    fetch.add_argument(
        "--max-corpus-bytes",
        type=parse_size,
        default=DEFAULT_MAX_CORPUS_EXPORT_BYTES,
        metavar="SIZE",
        help="largest corpus export downloaded, e.g. 256M or 2G (default: 256M)",
    )
    fetch.add_argument(
        "--jobs",
        type=_fetch_jobs,
        default=DEFAULT_FETCH_JOBS,
        metavar="N",
        help=f"requests at once, 1 to {MAX_FETCH_JOBS} (default: {DEFAULT_FETCH_JOBS}), each for a "
        "bundle of up to 64 envelopes; from 3 bundles on, this many worker processes make them",
    )
    fetch.add_argument(
        "--verify-workers",
        type=_verify_workers,
        metavar="N",
        help="processes verifying with --expected, 1 to 64 (default: one per CPU; 1 verifies "
        "in this process); the verdicts and exit code do not depend on it",
    )
    add_ca_bundle(fetch)
    fetch.set_defaults(handler=_tenant_fetch)

    reproduce.register_action(actions)


def _fetch_jobs(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_FETCH_JOBS:
        raise argparse.ArgumentTypeError(f"not a whole number from 1 to {MAX_FETCH_JOBS}: {text!r}")
    return int(text)


def _verify_workers(text: str) -> int:
    from attestation.tenant.verify_fetched import MAX_WORKERS

    if not text.isdigit() or not 1 <= int(text) <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"not a whole number from 1 to {MAX_WORKERS}: {text!r}")
    return int(text)


def _tenant_fetch(args: argparse.Namespace) -> int:
    from attestation.tenant.fetch import fetch_tenant, load_verifier_key
    from attestation.tenant.log_state import WitnessPolicy
    from attestation.tenant.unjudged import load_unjudged
    from attestation.tenant.verify_fetched import load_expectations
    from attestation.transparency.checkpoint import COSIGNATURE_V1_ALGORITHM

    # Checked before anything is fetched: a bad file is found without the network.
    expectations = None if args.expected is None else load_expectations(args.expected)
    witnesses = None
    if args.witness_keys:
        keys = tuple(
            load_verifier_key(value, algorithm=COSIGNATURE_V1_ALGORITHM, what="witness key")
            for value in args.witness_keys
        )
        threshold = len(keys) if args.witness_threshold is None else args.witness_threshold
        witnesses = WitnessPolicy(keys, threshold)
    elif args.witness_threshold is not None:
        raise TenantUsageError("--witness-threshold needs --witness-key")
    report = fetch_tenant(
        server=args.server,
        token=read_token(args.token_file),
        tenant=args.tenant,
        out_dir=args.out,
        log_key=load_verifier_key(args.log_key) if args.log_key else None,
        last_checkpoint=None if args.checkpoint is None else str(args.checkpoint),
        ca_bundle=args.ca_bundle,
        jobs=args.jobs,
        witnesses=witnesses,
        to_judge=expectations is not None,
    )
    print(
        f"verified log of {report.size} entries (was {report.previous_size}); "
        f"{len(report.new_envelopes)} new envelope(s) in {report.out_dir / 'envelopes'}"
    )
    if expectations is None:
        failed, verified, unjudged = 0, 0, load_unjudged(args.out)
    else:
        failed, verified, unjudged = _verify_new(args, report, expectations)
    if args.corpus:
        from attestation.tenant.corpus_fetch import fetch_corpus_exports
        from runner.corpus.checksum import compute_checksum

        exports = fetch_corpus_exports(
            server=args.server,
            token=read_token(args.token_file),
            tenant=args.tenant,
            out_dir=args.out,
            max_bytes=args.max_corpus_bytes,
            corpus_checksum=compute_checksum,
            ca_bundle=args.ca_bundle,
        )
        for export in exports:
            print(
                f"corpus export {export.digest}: {export.manifest.case_count} cases, corpus "
                f"checksum {export.manifest.corpus_checksum} (checked) -> {export.path}"
            )
        print(f"{len(exports)} new corpus export(s) in {args.out / 'corpora'}")
    if unjudged:
        raise VerificationFailedError(
            f"{len(unjudged)} fetched envelope(s) have no verdict yet (log index "
            f"{', '.join(map(str, unjudged))}): every `tenant fetch --expected` verifies them "
            "again and fails until each has one",
            verifier_exit_code=9,
        )
    if failed:
        raise VerificationFailedError(
            f"{failed} of {verified} new envelope(s) did not verify against "
            f"--expected {args.expected}",
            verifier_exit_code=4,
        )
    return 0


def _verify_new(
    args: argparse.Namespace, report: FetchReport, expectations: Mapping[str, object]
) -> tuple[int, int, list[int]]:
    """Verify the envelopes without a verdict (this fetch's, and any an earlier fetch left
    unjudged: :mod:`attestation.tenant.unjudged`) in log order; print a verdict line for each;
    return how many did not verify, how many were verified, and the positions still without a
    verdict (kept listed)."""
    from attestation.tenant.fetch import load_index
    from attestation.tenant.unjudged import UNJUDGED_FILE, load_unjudged, record_unjudged
    from attestation.tenant.verify_fetched import default_workers, verify_fetched

    index = load_index(report.out_dir / "index.json")
    pending = load_unjudged(report.out_dir)
    unknown = [position for position in pending if str(position) not in index]
    if unknown:
        raise TenantInputError(
            f"{report.out_dir / UNJUDGED_FILE} lists log index "
            f"{', '.join(map(str, unknown))}, which {report.out_dir / 'index.json'} does not hold"
        )
    earlier = [position for position in pending if position < report.previous_size]
    if earlier:
        print(
            f"{len(earlier)} envelope(s) fetched earlier have no verdict yet "
            f"(log index {', '.join(map(str, earlier))}): verifying them again"
        )
    entries = [
        (position, index[str(position)]["digest"], index[str(position)]["runId"])
        for position in pending
    ]
    verdicts = verify_fetched(
        report.out_dir / "envelopes",
        entries,
        expectations,
        now=datetime.now(UTC),
        workers=args.verify_workers or default_workers(),
    )
    unjudged = [verdict.position for verdict in verdicts if not verdict.judged]
    record_unjudged(report.out_dir, unjudged)
    for verdict in verdicts:
        lines = verdict.summary.rstrip("\n").split("\n")
        print(f"{verdict.label()}: {lines[0]}")
        for line in lines[1:]:
            print(f"  {line}")
    failed = sum(not verdict.ok for verdict in verdicts)
    what = "envelope(s)" if earlier else "new envelope(s)"
    print(
        f"{len(verdicts) - failed} of {len(verdicts)} {what} verified against "
        f"--expected {args.expected}"
        + (f" ({len(unjudged)} without a verdict)" if unjudged else "")
    )
    return failed, len(verdicts), unjudged
