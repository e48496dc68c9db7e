"""``attested-replay demo``: the main job end to end on its embedded default (see
:data:`DESCRIPTION`); the replay goes through the same library object as ``run``,
``runner.pipeline.run``."""

from __future__ import annotations

import argparse
import copy
import json
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from attestation.envelope.expected import ExpectedValues
from attestation.envelope.verification import verify_envelope
from attestation.errors import FailureClass
from attestation.exit_codes import EXIT_CODES
from attestation.tenant.fsutil import atomic_write_text
from runner.commands.parsing import add_command, add_state_dir_argument, output_dir
from runner.errors import UsageError, VerificationFailedError
from runner.evidence.simulated import load_or_create_simulated_amd
from runner.exit_codes import Family
from runner.pipeline import RunRequest, run
from runner.pipeline.replay import CorpusDigests, corpus_digests
from runner.workload import current_workload

if TYPE_CHECKING:
    from runner.commands import Subparsers

DEMO_RUN_ID: Final = "demo-example-1"
DEMO_TENANT: Final = "demo"
DESCRIPTION: Final = """\
1. a simulated attested replay of the bundled example corpus (what `run` does),
2. the tenant's expected-values file (what `expected` writes),
3. offline verification of the envelope (what verify-attested-run does): exit 0,
4. a tampered copy of the envelope (one metric of the result changed): rejected with the
   binding class (exit 7),
5. the genuine envelope without the simulated root pinned: rejected as an untrusted chain
   (exit 2).
The demo exits 0 only when the three verdicts are exactly these."""


def register(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "demo",
        summary="simulated attested replay of the bundled example, verified, then tampered",
        description=DESCRIPTION,
        family=Family.REPLAY,
    )
    parser.add_argument(
        "--out-dir",
        type=output_dir("--out-dir", create=True),
        default=Path("attested-replay-demo"),
        metavar="DIR",
        help="where the envelope, result and expected-values files go (created if absent)",
    )
    add_state_dir_argument(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    out_dir: Path = args.out_dir
    try:
        out_dir.mkdir(exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out-dir {out_dir}: cannot create the directory: {exc}") from exc
    with resources.as_file(resources.files("runner") / "examples" / "corpus") as corpus_dir:
        _say(f"1. replaying the bundled example corpus ({corpus_dir}) with simulated evidence")
        result = run(
            RunRequest(
                corpus=str(corpus_dir),
                run_id=DEMO_RUN_ID,
                tenant=DEMO_TENANT,
                evidence="simulated",
                out=out_dir / "envelope.json",
                state_dir=args.state_dir,
            )
        )
        # What `expected --corpus` pins: computed from the corpus, not read from the run.
        pins = corpus_digests(corpus_dir)
    outcome = result.outcome
    _say(f"   {outcome.case_count} cases, corpus checksum {outcome.corpus_checksum}")
    _say(f"   result digest {outcome.result_digest}")
    _say(f"   envelope {result.envelope_path} ({result.envelope_digest})")

    root = load_or_create_simulated_amd(args.state_dir).root_fingerprint
    expected = _expected(pins, simulated_roots=(root,))
    expected_path = out_dir / "expected.json"
    _write_json(expected_path, expected.to_json_dict())
    _say(f"2. the tenant's expectations: {expected_path} (simulated root {root} pinned)")

    _say("3. verify-attested-run on the genuine envelope:")
    genuine = _verify(result.envelope_path, result.envelope_bytes, expected, expected_path)

    tampered = copy.deepcopy(json.loads(result.envelope_bytes))
    _tamper_with_result(tampered["result"])
    tampered_path = out_dir / "tampered-envelope.json"
    tampered_bytes = _write_json(tampered_path, tampered)
    _say(f"4. verify-attested-run on {tampered_path} (one number of the result changed):")
    tampered_code = _verify(tampered_path, tampered_bytes, expected, expected_path)

    unpinned_path = out_dir / "expected-without-simulated-root.json"
    unpinned = _expected(pins, simulated_roots=())
    _write_json(unpinned_path, unpinned.to_json_dict())
    _say("5. verify-attested-run on the genuine envelope without pinning the simulated root:")
    unpinned_code = _verify(result.envelope_path, result.envelope_bytes, unpinned, unpinned_path)

    wanted = (0, EXIT_CODES[FailureClass.BINDING], EXIT_CODES[FailureClass.UNTRUSTED_CHAIN])
    got = (genuine, tampered_code, unpinned_code)
    if got != wanted:
        raise VerificationFailedError(
            f"demo verdicts were exit codes {got}, expected {wanted}", verifier_exit_code=max(got)
        )
    _say(f"demo complete: genuine envelope verified (0), tampered copy rejected ({tampered_code}),")
    _say(f"unpinned simulated root rejected ({unpinned_code}). Files are in {out_dir}/.")
    return 0


def _expected(pins: CorpusDigests, *, simulated_roots: tuple[str, ...]) -> ExpectedValues:
    """What the demo's tenant expects: its run, corpus (cases, plan, marks and run records)
    and workload (this installation)."""
    return ExpectedValues(
        run_id=DEMO_RUN_ID,
        tenant=DEMO_TENANT,
        corpus_checksum=pins.corpus_checksum,
        evaluation_digest=pins.evaluation_digest,
        workload_digest=current_workload().digest,
        simulated_roots=simulated_roots,
    )


def _write_json(path: Path, document: dict[str, Any]) -> bytes:
    text = json.dumps(document, indent=2) + "\n"
    atomic_write_text(path, text)
    return text.encode("utf-8")


def _verify(
    envelope_path: Path, envelope: bytes, expected: ExpectedValues, expected_path: Path
) -> int:
    """The verifier's verdict on ``envelope``, shown as the equivalent command would show it."""
    _say(f"   $ verify-attested-run --envelope {envelope_path} --expected {expected_path}")
    result = verify_envelope(envelope, expected, now=datetime.now(UTC))
    for line in result.summary().splitlines():
        _say(f"   {line}")
    _say(f"   exit code {result.exit_code}")
    return result.exit_code


def _tamper_with_result(result: dict[str, Any]) -> None:
    """Change the first numeric metric found in the result, as a dishonest operator might."""
    for arm in result.get("arms", []):
        for arm_run in arm.get("runs", []):
            for metric in arm_run.get("metrics", []):
                if isinstance(metric.get("value"), int | float):
                    metric["value"] = metric["value"] + 10
                    return
    result["tampered"] = True


def _say(line: str) -> None:
    print(line, flush=True)
