"""``attested-replay demo``: the main job end to end on its embedded default.

1. a simulated attested replay of the bundled example corpus (``attested-replay run``),
2. the tenant's expected-values file (``attested-replay expected``),
3. offline verification of the envelope (``verify-attested-run``): exit 0,
4. a tampered copy of the envelope (one metric of the result changed): the verifier rejects it
   with the binding class (exit 7); and the genuine envelope without the simulated root pinned:
   rejected as an untrusted chain (exit 2).
"""

from __future__ import annotations

import argparse
import copy
import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from attestation import cli as verifier_cli
from attestation.errors import FailureClass
from attestation.exit_codes import EXIT_CODES
from runner.cli import ArgumentParser
from runner.commands.run import add_run_arguments, perform_run
from runner.errors import UsageError, VerificationFailedError
from runner.fsutil import atomic_write_text
from runner.simulated_state import load_or_create_simulated_amd
from runner.workload import current_workload

if TYPE_CHECKING:
    from runner.commands import Subparsers

DEMO_RUN_ID: Final = "demo-example-1"
DEMO_TENANT: Final = "demo"


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="simulated attested replay of the bundled example, verified, then tampered",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path("attested-replay-demo"),
        help="where the envelope, result and expected-values files go (default: %(default)s)",
    )
    parser.add_argument("--state-dir", type=Path, help="state directory of the simulated PKI")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    out_dir: Path = args.out_dir
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out-dir {out_dir}: cannot create the directory: {exc}") from exc
    with resources.as_file(resources.files("runner") / "examples" / "corpus") as corpus_dir:
        _say(f"1. replaying the bundled example corpus ({corpus_dir}) with simulated evidence")
        run_args = _run_arguments(corpus_dir, out_dir / "envelope.json", args.state_dir)
        output = perform_run(run_args)
    outcome = output.outcome
    _say(f"   {outcome.case_count} cases, corpus checksum {outcome.corpus_checksum}")
    _say(f"   result digest {outcome.result_digest}")
    _say(f"   envelope {output.envelope_path} ({output.envelope_digest})")

    root = load_or_create_simulated_amd(args.state_dir).root_fingerprint
    expected = {
        "runId": DEMO_RUN_ID,
        "tenant": DEMO_TENANT,
        "corpusChecksum": outcome.corpus_checksum,
        "workloadDigest": current_workload().digest,
        "simulatedRoots": [root],
    }
    expected_path = out_dir / "expected.json"
    atomic_write_text(expected_path, json.dumps(expected, indent=2) + "\n")
    _say(f"2. the tenant's expectations: {expected_path} (simulated root {root} pinned)")

    _say("3. verify-attested-run on the genuine envelope:")
    genuine = _verify(output.envelope_path, expected_path)

    envelope = json.loads(output.envelope_bytes)
    tampered = copy.deepcopy(envelope)
    _tamper_with_result(tampered["result"])
    tampered_path = out_dir / "tampered-envelope.json"
    atomic_write_text(tampered_path, json.dumps(tampered, indent=2) + "\n")
    _say(f"4. verify-attested-run on {tampered_path} (one number of the result changed):")
    tampered_code = _verify(tampered_path, expected_path)

    unpinned_path = out_dir / "expected-without-simulated-root.json"
    unpinned = {key: value for key, value in expected.items() if key != "simulatedRoots"}
    atomic_write_text(unpinned_path, json.dumps(unpinned, indent=2) + "\n")
    _say("5. verify-attested-run on the genuine envelope without pinning the simulated root:")
    unpinned_code = _verify(output.envelope_path, unpinned_path)

    wanted = (0, EXIT_CODES[FailureClass.BINDING], EXIT_CODES[FailureClass.UNTRUSTED_CHAIN])
    got = (genuine, tampered_code, unpinned_code)
    if got != wanted:
        raise VerificationFailedError(
            f"demo verdicts were exit codes {got}, expected {wanted}", verifier_exit_code=max(got)
        )
    _say(f"demo complete: genuine envelope verified (0), tampered copy rejected ({tampered_code}),")
    _say(f"unpinned simulated root rejected ({unpinned_code}). Files are in {out_dir}/.")
    return 0


def _run_arguments(corpus_dir: Path, envelope: Path, state_dir: Path | None) -> argparse.Namespace:
    """The demo's ``run`` arguments, parsed by ``run``'s own options so that every other
    option keeps its real default."""
    parser = ArgumentParser(prog="attested-replay run")
    add_run_arguments(parser)
    # "--option=value": a path that starts with "-" is still a value.
    argv = [
        f"--corpus={corpus_dir}",
        f"--run-id={DEMO_RUN_ID}",
        f"--tenant={DEMO_TENANT}",
        "--evidence=simulated",
        f"--out={envelope}",
    ]
    if state_dir is not None:
        argv.append(f"--state-dir={state_dir}")
    return parser.parse_args(argv)


def _verify(envelope: Path, expected: Path) -> int:
    _say(f"   $ verify-attested-run --envelope {envelope} --expected {expected}")
    code = verifier_cli.main(["--envelope", str(envelope), "--expected", str(expected)])
    _say(f"   exit code {code}")
    return code


def _tamper_with_result(result: dict[str, Any]) -> None:
    """Change the first numeric metric found in the result, as a dishonest operator might."""
    for arm in result.get("arms", []):
        for run in arm.get("runs", []):
            for metric in run.get("metrics", []):
                if isinstance(metric.get("value"), int | float):
                    metric["value"] = metric["value"] + 10
                    return
    result["tampered"] = True


def _say(line: str) -> None:
    print(line, flush=True)
