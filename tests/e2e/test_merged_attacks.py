"""An operator's attempts to have a merged (or shard) envelope accepted for what was not attested.

The shards here are signed by the simulated AMD, which the tenant pins, so every shard is
"genuine hardware" and the attacks are the operator's: mixing genuine shards of different runs,
tenants, corpora, evaluations, workloads, nonces, images, shard counts or launch
configurations; presenting a shard as a run; changing what the operator assembles (the merged
header and result, the order and set of shards); and partials that a faulty workload could sign.
Shard results are the example corpus's, computed by the replay code a shard runs.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

from attestation.abi.product import ProductLine
from attestation.abi.report import parse_report
from attestation.abi.tcb import TcbVersion
from attestation.envelope.binding import report_data_for, result_digest
from attestation.envelope.expected import ExpectedValues, load_expected
from attestation.envelope.merged import merge_envelopes
from attestation.envelope.model import (
    API_VERSION,
    ENVELOPE_KIND,
    Binding,
    Envelope,
    Evidence,
    ShardPosition,
    Workload,
)
from attestation.envelope.verification import verify_envelope
from attestation.scoring.partial import shard_range
from attestation.scoring.shards import ShardMergeError
from attestation.simulated_amd import SimulatedAmd
from attestation.simulated_amd.amd import DEFAULT_MEASUREMENT
from attestation.verify.checks import VerificationResult
from runner.pipeline.replay import ReplayOutcome, replay_corpus
from runner.shard_tails import merge_with_tails
from tests.e2e.conftest import EXAMPLE_CORPUS

RUN_ID = "run-merged-1"
TENANT = "acme"
WORKLOAD = Workload(name="attested-replay", version="0.1.0", code_digest="sha256:" + "c" * 64)
OTHER_WORKLOAD = Workload(name="attested-replay", version="0.1.1", code_digest="sha256:" + "d" * 64)
IMAGE = "sha256:" + "e" * 64
Document = dict[str, Any]


@cache
def outcome(index: int | None, count: int) -> ReplayOutcome:
    """The example corpus's replay: whole (index None) or shard ``index`` of ``count``."""
    shard = None if index is None else ShardPosition(index=index, count=count)
    return replay_corpus(EXAMPLE_CORPUS, shard=shard)


def result_of(index: int | None, count: int) -> Document:
    """A copy of that replay's result, to change."""
    result: Document = copy.deepcopy(outcome(index, count).result)
    return result


@dataclass(frozen=True)
class Launch:
    """What the hardware reports about a shard's VM besides REPORT_DATA."""

    measurement: bytes = DEFAULT_MEASUREMENT
    host_data: bytes = bytes(32)
    policy: int = 0x30000
    chip_id: bytes | None = None
    reported_tcb: TcbVersion | None = None


def signed(
    sim: SimulatedAmd,
    result: Document,
    *,
    shard: ShardPosition | None,
    launch: Launch = Launch(),
    **binding_changes: Any,
) -> Document:
    """An envelope the simulated hardware signed for ``result`` (its binding names it)."""
    reference = outcome(None, 1)
    fields: dict[str, Any] = {
        "run_id": RUN_ID,
        "tenant": TENANT,
        "corpus_checksum": reference.corpus_checksum,
        "evaluation_digest": reference.evaluation_digest,
        "workload": WORKLOAD,
        "result_digest": result_digest(result),
        "image_digest": IMAGE,
        "shard": shard,
    }
    fields.update(binding_changes)
    binding = Binding(**fields)
    report = sim.sign_report(
        report_data=report_data_for(binding),
        product_line=ProductLine.GENOA,
        measurement=launch.measurement,
        host_data=launch.host_data,
        policy=launch.policy,
        chip_id=launch.chip_id,
        reported_tcb=launch.reported_tcb,
    )
    parsed = parse_report(report)
    envelope = Envelope(
        api_version=API_VERSION,
        kind=ENVELOPE_KIND,
        run_id=binding.run_id,
        tenant=binding.tenant,
        binding=binding,
        report_data=parsed.report_data.hex(),
        measurement=parsed.measurement.hex(),
        host_data=parsed.host_data.hex(),
        platform="simulated",
        evidence=Evidence(
            report=base64.b64encode(report).decode(),
            provider="simulated",
            cert_chain=sim.endorsement_pem(report),
        ),
        result=result,
    )
    return envelope.to_json_dict()


def shard_envelope(
    sim: SimulatedAmd, index: int, count: int, *, launch: Launch = Launch(), **changes: Any
) -> Document:
    """Shard ``index`` of ``count`` as the replay computes it, signed with ``changes`` (a
    shard of another corpus or evaluation names it in its result too, as a genuine one does)."""
    result = result_of(index, count)
    result["set_checksum"] = changes.get("corpus_checksum", result["set_checksum"])
    result["evaluation_digest"] = changes.get("evaluation_digest", result["evaluation_digest"])
    return signed(
        sim, result, shard=ShardPosition(index=index, count=count), launch=launch, **changes
    )


def tails_of(envelope: Envelope) -> bytes:
    """The tails file the replay wrote for the shard ``envelope`` stands for."""
    position = envelope.binding.shard
    assert position is not None
    tails = outcome(position.index, position.count).tails
    assert tails is not None
    return tails


def _given(data: bytes, _limit: int) -> bytes:
    return data


def merged_of(shards: list[Document]) -> Document:
    """The merged envelope ``attested-replay merge`` builds from genuine-looking shards, each
    with the tails file its replay wrote."""
    parsed = [Envelope.model_validate(shard) for shard in shards]
    with_tails = [
        (envelope, functools.partial(_given, tails_of(envelope)), f"shards[{position}]")
        for position, envelope in enumerate(parsed)
    ]
    return merge_with_tails(with_tails).to_json_dict()


def assembled(header_from: Document, shards: list[Document]) -> Document:
    """``header_from`` (a merged envelope) with its shards replaced by ``shards`` verbatim:
    what an operator who skips ``merge``'s checks can publish."""
    document = copy.deepcopy(header_from)
    document["shards"] = shards
    return document


def expected(sim: SimulatedAmd, **document: Any) -> ExpectedValues:
    base: Document = {
        "runId": RUN_ID,
        "corpusChecksum": outcome(None, 1).corpus_checksum,
        # What `expected --corpus` pins besides the checksum.
        "evaluationDigest": outcome(None, 1).evaluation_digest,
        "simulatedRoots": [sim.root_fingerprint],
    }
    base.update(document)
    return load_expected(json.dumps(base).encode())


def verify(document: Document | bytes, values: ExpectedValues) -> VerificationResult:
    data = document if isinstance(document, bytes) else json.dumps(document).encode()
    return verify_envelope(data, values, now=dt.datetime.now(dt.UTC))


def first_failure(result: VerificationResult) -> tuple[str, str]:
    failed = result.failed_checks[0]
    return failed.name, failed.detail


@pytest.fixture(scope="module")
def sim(simulated_amd: SimulatedAmd) -> SimulatedAmd:
    return simulated_amd


@pytest.fixture(scope="module")
def genuine(sim: SimulatedAmd) -> Document:
    return merged_of([shard_envelope(sim, index, 3) for index in range(3)])


# -- the baseline: a genuine merged envelope verifies, and is the unsharded run ---------------


def test_a_genuine_merged_envelope_is_the_unsharded_run(
    sim: SimulatedAmd, genuine: Document
) -> None:
    whole = outcome(None, 1)
    assert genuine["resultDigest"] == whole.result_digest
    pinned = expected(
        sim,
        tenant=TENANT,
        resultDigest=whole.result_digest,
        evaluationDigest=whole.evaluation_digest,
        workloadDigest=WORKLOAD.digest,
        imageDigest=IMAGE,
        shardCount=3,
    )
    assert verify(genuine, pinned).exit_code == 0


# -- a shard presented as a whole run ---------------------------------------------------------


@pytest.mark.parametrize("pinned_count", [None, 1, 3])
def test_a_shard_envelope_is_never_a_whole_run(sim: SimulatedAmd, pinned_count: int | None) -> None:
    shard = shard_envelope(sim, 0, 3)
    values = expected(sim) if pinned_count is None else expected(sim, shardCount=pinned_count)
    result = verify(shard, values)
    assert result.exit_code == 8
    assert first_failure(result)[0] == "expectation.shard"


def test_the_only_shard_of_one_is_still_a_shard(sim: SimulatedAmd) -> None:
    """Shard 0 of 1 attests a shard result (partials), not the report: never a whole run."""
    shard = shard_envelope(sim, 0, 1)
    assert verify(shard, expected(sim, shardCount=1)).exit_code == 8
    merged = merged_of([shard])
    assert merged["resultDigest"] == outcome(None, 1).result_digest
    assert verify(merged, expected(sim, shardCount=1)).exit_code == 0
    assert verify(merged, expected(sim, shardCount=2)).exit_code == 8


# -- genuine shards of two different somethings, mixed -----------------------------------------

OTHER_CORPUS = "sha256:" + "1" * 64
OTHER_EVALUATION = "sha256:" + "2" * 64
MIXES: list[tuple[str, dict[str, Any], str]] = [
    ("run", {"run_id": "run-merged-2"}, "binds run_id run-merged-2"),
    ("tenant", {"tenant": "globex"}, "binds tenant globex"),
    ("corpus", {"corpus_checksum": OTHER_CORPUS}, f"binds corpus_checksum {OTHER_CORPUS}"),
    (
        "evaluation",
        {"evaluation_digest": OTHER_EVALUATION},
        f"binds evaluation_digest {OTHER_EVALUATION}",
    ),
    ("workload", {"workload": OTHER_WORKLOAD}, f"binds workload {OTHER_WORKLOAD.digest}"),
    (
        "nonce",
        {"nonce": "tenant-nonce-2"},
        "binds nonce tenant-nonce-2, the merged envelope says absent",
    ),
    (
        "image",
        {"image_digest": None},
        f"binds image_digest absent, the merged envelope says {IMAGE}",
    ),
]


@pytest.mark.parametrize(("what", "changes", "detail"), MIXES, ids=[m[0] for m in MIXES])
def test_shards_of_two_runs_do_not_merge(
    sim: SimulatedAmd, genuine: Document, what: str, changes: dict[str, Any], detail: str
) -> None:
    """Shard 1 is genuine but of another run/tenant/corpus/...: refused whichever header."""
    intruder = shard_envelope(sim, 1, 3, **changes)
    shards = copy.deepcopy(genuine["shards"])
    shards[1] = intruder
    result = verify(assembled(genuine, shards), expected(sim))
    assert result.exit_code == 7
    assert first_failure(result)[0] == "merged.shards"
    assert detail in first_failure(result)[1]
    # the header taken from the intruder's run instead: then shard 0 is the foreign one
    header = copy.deepcopy(genuine)
    for key in ("runId", "tenant", "corpusChecksum", "evaluationDigest", "workload", "nonce"):
        header.pop(key, None)
    header.pop("imageDigest", None)
    header.update(
        {
            key: value
            for key, value in intruder["binding"].items()
            if key not in {"resultDigest", "shard"}
        }
    )
    result = verify(assembled(header, shards), expected(sim))
    assert result.exit_code == 7
    assert first_failure(result)[0] == "merged.shards"
    assert first_failure(result)[1].startswith("shards[0] (shard 0) binds")
    # ...and merge refuses to build it
    with pytest.raises(ShardMergeError, match="it is not a shard of this run"):
        merged_of(shards)


def test_a_whole_run_among_the_shards_does_not_merge(sim: SimulatedAmd, genuine: Document) -> None:
    """A genuine unsharded envelope of this very run, put in shard 1's place."""
    whole = signed(sim, result_of(None, 1), shard=None)
    shards = copy.deepcopy(genuine["shards"])
    shards[1] = whole
    verdict = verify(assembled(genuine, shards), expected(sim))
    assert verdict.exit_code == 7
    assert first_failure(verdict) == (
        "merged.shards",
        "shards[1] is the envelope of a whole run, not of a shard",
    )


def test_shards_of_two_shard_counts_do_not_merge(sim: SimulatedAmd, genuine: Document) -> None:
    shards = copy.deepcopy(genuine["shards"])
    shards[2] = shard_envelope(sim, 1, 2)  # this run's, split in two: the second half
    result = verify(assembled(genuine, shards), expected(sim))
    assert (result.exit_code, first_failure(result)[0]) == (7, "merged.shards")


@pytest.mark.parametrize(
    ("launch", "detail"),
    [
        (Launch(measurement=bytes.fromhex("ab" * 48)), "another MEASUREMENT or HOST_DATA"),
        (Launch(host_data=bytes.fromhex("cd" * 32)), "another MEASUREMENT or HOST_DATA"),
    ],
)
def test_shards_of_two_launch_configurations_do_not_merge(
    sim: SimulatedAmd, genuine: Document, launch: Launch, detail: str
) -> None:
    """Even when the tenant's policy accepts both measurements / both HOST_DATA values."""
    shards = copy.deepcopy(genuine["shards"])
    shards[2] = shard_envelope(sim, 2, 3, launch=launch)
    both = expected(
        sim,
        measurements=[DEFAULT_MEASUREMENT.hex(), launch.measurement.hex()],
        hostData=[bytes(32).hex(), launch.host_data.hex()],
    )
    result = verify(assembled(genuine, shards), both)
    assert result.exit_code == 7
    name, message = first_failure(result)
    assert (name, message.startswith("shards[2] (shard 2) has ")) == ("merged.shards", True)
    assert detail in message


def test_shards_on_different_chips_merge(sim: SimulatedAmd) -> None:
    """One Indexed Job runs its pods on several nodes: different chips are one run."""
    shards = [
        shard_envelope(sim, index, 3, launch=Launch(chip_id=bytes([index + 1]) * 64))
        for index in range(3)
    ]
    assert verify(merged_of(shards), expected(sim)).exit_code == 0


# -- the tenant's policy and expectations apply to every shard ----------------------------------


def test_the_policy_applies_to_every_shard(sim: SimulatedAmd, genuine: Document) -> None:
    shards = copy.deepcopy(genuine["shards"])
    shards[2] = shard_envelope(sim, 2, 3, launch=Launch(policy=0x30000 | 1 << 19))  # DEBUG
    result = verify(assembled(genuine, shards), expected(sim))
    assert result.exit_code == 5
    assert first_failure(result)[0] == "shards[2].policy.debug"


def test_the_tcb_minimum_applies_to_every_shard(sim: SimulatedAmd, genuine: Document) -> None:
    old = TcbVersion(ProductLine.GENOA, bl=1, tee=0, snp=1, ucode=1, spl4=0)
    shards = copy.deepcopy(genuine["shards"])
    shards[1] = shard_envelope(sim, 1, 3, launch=Launch(reported_tcb=old))
    result = verify(assembled(genuine, shards), expected(sim, minimumTcb={"snp": 2}))
    assert result.exit_code == 5
    assert first_failure(result)[0].startswith("shards[1].policy.")


@pytest.mark.parametrize(
    ("pinned", "check"),
    [
        ({"measurements": ["ab" * 48]}, "shards[0].workload.measurement"),
        ({"hostData": ["cd" * 32]}, "shards[0].workload.host-data"),
    ],
)
def test_the_workload_identity_applies_to_every_shard(
    sim: SimulatedAmd, genuine: Document, pinned: dict[str, Any], check: str
) -> None:
    result = verify(genuine, expected(sim, **pinned))
    assert result.exit_code == 6
    assert {c.name for c in result.failed_checks} == {
        check.replace("[0]", f"[{index}]") for index in range(3)
    }


@pytest.mark.parametrize(
    ("key", "value", "check"),
    [
        ("runId", "run-merged-2", "expectation.run-id"),
        ("tenant", "globex", "expectation.tenant"),
        ("corpusChecksum", "sha256:" + "1" * 64, "expectation.corpus-checksum"),
        ("evaluationDigest", "sha256:" + "2" * 64, "expectation.evaluation-digest"),
        ("workloadDigest", "sha256:" + "3" * 64, "expectation.workload"),
        ("resultDigest", "sha256:" + "4" * 64, "expectation.result-digest"),
        ("imageDigest", "sha256:" + "5" * 64, "expectation.image-digest"),
        ("shardCount", 2, "expectation.shard"),
    ],
)
def test_every_expected_value_applies_to_the_merged_run(
    sim: SimulatedAmd, genuine: Document, key: str, value: Any, check: str
) -> None:
    """A genuine merged run of another run/tenant/corpus/... is refused as such (8)."""
    result = verify(genuine, expected(sim, **{key: value}))
    assert result.exit_code == 8
    assert [failed.name for failed in result.failed_checks] == [check]


# -- what the operator assembles: set, order, counts, header, result ----------------------------


def test_a_duplicated_index_with_other_partials_is_refused(
    sim: SimulatedAmd, genuine: Document
) -> None:
    """Two genuine shard 1s of this very run (a rerun) with different partials."""
    result = result_of(1, 3)
    result["runs"][0]["correct"] -= 1  # the rerun "scored" differently
    rerun = signed(sim, result, shard=ShardPosition(index=1, count=3))
    for shards in (
        [genuine["shards"][0], genuine["shards"][1], rerun],
        [genuine["shards"][0], rerun, genuine["shards"][2], genuine["shards"][1]],
    ):
        verdict = verify(assembled(genuine, shards), expected(sim))
        assert (verdict.exit_code, first_failure(verdict)[0]) == (7, "merged.shards")


def test_a_rerun_shard_with_other_partials_is_the_merge_of_what_it_signed(
    sim: SimulatedAmd, genuine: Document
) -> None:
    """A genuine shard 1 whose partial differs from the original: the merge is recomputed from
    the partials the hardware signed, so the header's digest can only be the recomputed one."""
    result = result_of(1, 3)
    result["runs"][0]["correct"] -= 1
    rerun = signed(sim, result, shard=ShardPosition(index=1, count=3))
    shards = [genuine["shards"][0], rerun, genuine["shards"][2]]
    verdict = verify(assembled(genuine, shards), expected(sim))
    assert first_failure(verdict)[0] == "merged.result"
    assert verdict.exit_code == 7


def test_a_shard_index_at_or_above_the_count_is_malformed(
    sim: SimulatedAmd, genuine: Document
) -> None:
    document = copy.deepcopy(genuine)
    document["shards"][2]["binding"]["shard"] = {"index": 3, "count": 3}
    verdict = verify(document, expected(sim))
    assert (verdict.exit_code, first_failure(verdict)[0]) == (1, "envelope.parse")


@pytest.mark.parametrize("count", [0, 257, 2.0, "3", True])
def test_a_bad_header_shard_count_is_malformed(
    sim: SimulatedAmd, genuine: Document, count: Any
) -> None:
    document = copy.deepcopy(genuine)
    document["shardCount"] = count
    verdict = verify(document, expected(sim))
    assert (verdict.exit_code, first_failure(verdict)[0]) == (1, "envelope.parse")


def test_no_shards_is_malformed(sim: SimulatedAmd, genuine: Document) -> None:
    verdict = verify(assembled(genuine, []), expected(sim))
    assert (verdict.exit_code, first_failure(verdict)[0]) == (1, "envelope.parse")


def test_a_shard_without_its_result_does_not_merge(sim: SimulatedAmd, genuine: Document) -> None:
    document = copy.deepcopy(genuine)
    del document["shards"][1]["result"]
    verdict = verify(document, expected(sim))
    assert verdict.exit_code == 7
    assert first_failure(verdict) == (
        "merged.result",
        (
            "the shard results do not merge: shards[1] carries no result: its partial is "
            "needed for the merge"
        ),
    )


def test_the_merged_result_may_be_omitted(sim: SimulatedAmd, genuine: Document) -> None:
    document = copy.deepcopy(genuine)
    del document["result"]
    assert verify(document, expected(sim)).exit_code == 0
    document["resultDigest"] = "sha256:" + "0" * 64
    verdict = verify(document, expected(sim))
    assert (verdict.exit_code, first_failure(verdict)[0]) == (7, "merged.result")


def _extra_key(result: Document) -> None:
    result["verified_by"] = "AMD"


def _dropped_key(result: Document) -> None:
    del result["marks"][4]["detail"]


def _changed_mark(result: Document) -> None:
    result["marks"][2]["result"] = "met"


def _int_as_string(result: Document) -> None:
    result["arms"][0]["runs"][0]["metrics"][0]["value"] = "3000"


def _true_for_one(result: Document) -> None:
    result["arms"][0]["stable"] = 1


@pytest.mark.parametrize(
    "mutate", [_extra_key, _dropped_key, _changed_mark, _int_as_string, _true_for_one]
)
def test_a_merged_result_that_is_not_the_merge_is_refused(
    sim: SimulatedAmd, genuine: Document, mutate: Callable[[Document], None]
) -> None:
    document = copy.deepcopy(genuine)
    mutate(document["result"])
    verdict = verify(document, expected(sim))
    assert verdict.exit_code == 7
    assert first_failure(verdict)[0] == "merged.result"


@pytest.mark.parametrize("value", ["\ud800", 2**53, 10**300])
def test_a_merged_result_that_cannot_be_canonicalized_is_a_verdict_not_a_crash(
    sim: SimulatedAmd, genuine: Document, value: object
) -> None:
    """Valid JSON without an RFC 8785 form (a lone surrogate, an integer beyond 2**53): the
    single-envelope path answers 7 for such a result; the merged one must too, not raise."""
    document = copy.deepcopy(genuine)
    document["result"]["evaluation_ref"] = value
    data = json.dumps(document).encode()  # ensure_ascii: the JSON text is "\ud800"
    verdict = verify(data, expected(sim))
    assert verdict.exit_code == 7
    assert first_failure(verdict)[0] == "merged.result"


# -- partials a faulty workload could sign ------------------------------------------------------


def _resigned(sim: SimulatedAmd, genuine: Document, mutate: Callable[[Document], None]) -> Document:
    """The genuine set with shard 1's result changed and re-signed (a faulty workload)."""
    result = result_of(1, 3)
    mutate(result)
    shards = copy.deepcopy(genuine["shards"])
    shards[1] = signed(sim, result, shard=ShardPosition(index=1, count=3))
    return assembled(genuine, shards)


def _other_tail_root(result: Document) -> None:
    result["runs"][0]["latency_tail_root"] = "sha256:" + "0" * 64


def _malformed_tail_root(result: Document) -> None:
    result["runs"][0]["latency_tail_root"] = "sha256:xyz"


def _negative_count(result: Document) -> None:
    result["runs"][0]["errors"] = -1


def _more_correct_than_cases(result: Document) -> None:
    result["runs"][0]["correct"] = result["runs"][0]["cases"] + 1


def _other_range(result: Document) -> None:
    result["first_case"] += 1


def _other_case_count(result: Document) -> None:
    result["case_count"] += 1  # 3001 cases are 12 blocks too: shard 1 of 3 is still [1024, 2048)


def _other_plan(result: Document) -> None:
    result["plan"]["spread_limit_points"] = 50


def _missing_run(result: Document) -> None:
    result["runs"] = result["runs"][:-1]


def _duplicated_run(result: Document) -> None:
    result["runs"] = [*result["runs"][:-1], result["runs"][0]]


def _other_position(result: Document) -> None:
    # shard 0 of 3 is as long as shard 1 (four blocks): a valid result, of another position
    result["shard_index"] = 0
    result["first_case"], result["end_case"] = shard_range(0, 3, 3000)


def _negative_cost(result: Document) -> None:
    result["runs"][0]["cost_total_usd"] = "-1.5"


def _exponent_cost(result: Document) -> None:
    result["runs"][0]["cost_total_usd"] = "1e3"


def _bool_count(result: Document) -> None:
    result["runs"][0]["abstentions"] = False


SHARD_RESULT = "shards[1].binding.shard-result"


@pytest.mark.parametrize(
    ("mutate", "check", "detail"),
    [
        # wrong on its own: the shard's own check, as when it is verified alone
        (_malformed_tail_root, SHARD_RESULT, "latency_tail_root"),
        (_negative_count, SHARD_RESULT, "not a shard result"),
        (_more_correct_than_cases, SHARD_RESULT, "correct exceeds cases"),
        (_other_range, SHARD_RESULT, "is not shard 1 of 3"),
        (_missing_run, SHARD_RESULT, "the plan asks for exactly"),
        (_duplicated_run, SHARD_RESULT, "the plan asks for exactly"),
        (_other_position, SHARD_RESULT, "not its binding's"),
        (_negative_cost, SHARD_RESULT, "cost_total_usd"),
        (_exponent_cost, SHARD_RESULT, "cost_total_usd"),
        (_bool_count, SHARD_RESULT, "not a shard result"),
        # right on its own, not with the other shards: the merge
        (_other_case_count, "merged.result", "differs from shard 0 in case_count"),
        (_other_plan, "merged.result", "differs from shard 0 in plan"),
        # a tail root the merge's openings do not open (as if its tail were another)
        (_other_tail_root, "merged.result", "run A0/1: shard 1's tail opening: block"),
    ],
)
def test_inconsistent_partials_do_not_merge(
    sim: SimulatedAmd,
    genuine: Document,
    mutate: Callable[[Document], None],
    check: str,
    detail: str,
) -> None:
    verdict = verify(_resigned(sim, genuine, mutate), expected(sim))
    assert verdict.exit_code == 7
    name, message = first_failure(verdict)
    assert name == check
    assert detail in message


def test_a_shard_whose_result_names_another_corpus_fails_its_own_check(
    sim: SimulatedAmd, genuine: Document
) -> None:
    result = result_of(1, 3)
    result["set_checksum"] = OTHER_CORPUS
    shards = copy.deepcopy(genuine["shards"])
    shards[1] = signed(sim, result, shard=ShardPosition(index=1, count=3))
    verdict = verify(assembled(genuine, shards), expected(sim))
    assert verdict.exit_code == 7
    assert first_failure(verdict) == (
        SHARD_RESULT,
        "shard 1 of 3: its result is of another corpus or evaluation",
    )


# -- a signed shard result re-encoded: same digest, same values, or refused ----------------------


def _reordered(result: Document) -> Document:
    return dict(reversed(list(result.items())))


def test_a_shard_result_in_another_key_order_is_the_same_result(
    sim: SimulatedAmd, genuine: Document
) -> None:
    document = copy.deepcopy(genuine)
    document["shards"][1]["result"] = _reordered(document["shards"][1]["result"])
    data = json.dumps(document).replace('"A0"', '"\\u0041\\u0030"').encode()  # escapes too
    assert b"\\u0041\\u0030" in data
    assert verify(data, expected(sim)).exit_code == 0


def test_a_shard_count_written_as_a_float_keeps_the_digest_but_is_refused(
    sim: SimulatedAmd, genuine: Document
) -> None:
    """``1000.0`` hashes as ``1000`` (RFC 8785), so the shard's binding holds; the shard result
    reads counts as integers only, so the merge refuses it rather than guess."""
    document = copy.deepcopy(genuine)
    run = document["shards"][1]["result"]["runs"][0]
    run["cases"] = float(run["cases"])
    verdict = verify(document, expected(sim))
    assert verdict.exit_code == 7
    name, detail = first_failure(verdict)
    assert (name, "not a shard result" in detail) == (SHARD_RESULT, True)


# -- JSON failure classes: a merged envelope that is not one is malformed (1) --------------------


def _text(genuine: Document) -> str:
    return json.dumps(genuine)


MALFORMED: list[tuple[str, Callable[[Document], bytes]]] = [
    ("truncated", lambda g: _text(g)[:-10].encode()),
    ("not an object", lambda g: json.dumps([g]).encode()),
    ("duplicate key", lambda g: _text(g).replace('"runId"', '"runId": "x", "runId"', 1).encode()),
    (
        "duplicate key in a shard result",
        lambda g: _text(g).replace('"case_count"', '"case_count": 1, "case_count"', 1).encode(),
    ),
    ("NaN", lambda g: _text(g).replace('"shardCount": 3', '"shardCount": NaN').encode()),
    ("unknown header key", lambda g: json.dumps({**g, "verifiedBy": "AMD"}).encode()),
    (
        "unknown key in a shard",
        lambda g: json.dumps(
            {**g, "shards": [{**g["shards"][0], "x": 1}, *g["shards"][1:]]}
        ).encode(),
    ),
    ("no kind", lambda g: json.dumps({k: v for k, v in g.items() if k != "kind"}).encode()),
    ("shards not a list", lambda g: json.dumps({**g, "shards": g["shards"][0]}).encode()),
    (
        "a merged envelope as a shard",
        lambda g: json.dumps({**g, "shards": [g, *g["shards"][1:]]}).encode(),
    ),
    (
        "not UTF-8",
        lambda g: _text(g).replace('"acme"', '"ac\\u00e9"').encode().replace(b"\\u00e9", b"\xe9"),
    ),
]


@pytest.mark.parametrize("make", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_a_merged_envelope_that_is_not_one_is_malformed(
    sim: SimulatedAmd, genuine: Document, make: Callable[[Document], bytes]
) -> None:
    verdict = verify(make(genuine), expected(sim))
    assert verdict.exit_code == 1
    assert first_failure(verdict)[0] == "envelope.parse"


# -- caps: refused before any shard is verified ---------------------------------------------------


def _count_verifications(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from attestation.verify.verifier import Verifier

    calls: list[int] = []
    original = Verifier.check

    def counting(self: Verifier, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Verifier, "check", counting)
    return calls


def test_more_shards_than_the_cap_are_refused_before_verifying_any(
    sim: SimulatedAmd, genuine: Document, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attestation.contracts import MAX_SHARD_COUNT

    calls = _count_verifications(monkeypatch)
    document = assembled(genuine, [genuine["shards"][0]] * (MAX_SHARD_COUNT + 1))
    verdict = verify(document, expected(sim))
    assert (verdict.exit_code, first_failure(verdict)[0], calls) == (1, "envelope.parse", [])


@pytest.mark.parametrize("what", ["bytes", "items"])
def test_an_envelope_over_the_caps_is_refused_before_parsing(
    sim: SimulatedAmd, genuine: Document, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    from attestation.contracts import MAX_ENVELOPE_BYTES, MAX_ENVELOPE_JSON_ITEMS

    calls = _count_verifications(monkeypatch)
    document = copy.deepcopy(genuine)
    if what == "bytes":
        document["result"]["padding"] = "x" * MAX_ENVELOPE_BYTES
    else:
        document["result"]["padding"] = [0] * MAX_ENVELOPE_JSON_ITEMS
    verdict = verify(document, expected(sim))
    assert (verdict.exit_code, calls) == (1, [])
    assert "limit" in first_failure(verdict)[1]


def test_a_merged_envelope_costs_one_verification_per_shard(
    sim: SimulatedAmd, genuine: Document, monkeypatch: pytest.MonkeyPatch
) -> None:
    """N shards: N report verifications, whatever fails afterwards (none are repeated)."""
    calls = _count_verifications(monkeypatch)
    assert verify(genuine, expected(sim)).exit_code == 0
    assert len(calls) == 3
    calls.clear()
    document = assembled(genuine, [genuine["shards"][0]] * 256)
    document["shardCount"] = 256
    assert verify(document, expected(sim)).exit_code == 7
    assert len(calls) == 256


# -- the operator's merge: bounded before it reads everything ------------------------------------


def test_merge_refuses_more_shards_than_the_cap(sim: SimulatedAmd, genuine: Document) -> None:
    from attestation.contracts import MAX_SHARD_COUNT
    from attestation.scoring.shards import ShardMergeError

    shard = Envelope.model_validate(genuine["shards"][0])
    with pytest.raises(
        ShardMergeError, match=f"257 shard envelopes, more than the {MAX_SHARD_COUNT}"
    ):
        merge_envelopes([shard] * (MAX_SHARD_COUNT + 1), ())


def test_merge_command_refuses_more_shards_than_the_cap_before_reading_them(
    genuine: Document, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli import main as runner_main

    shard = tmp_path / "shard-0.json"
    shard.write_text(json.dumps(genuine["shards"][0]))
    paths = []
    for index in range(257):
        path = tmp_path / f"copy-{index}.json"
        path.symlink_to(shard)
        paths.append(str(path))
    code = runner_main(["merge", *paths, "--out", str(tmp_path / "merged.json")])
    assert code == 1
    assert "257 shard envelopes, more than the 256" in capsys.readouterr().err
    assert not (tmp_path / "merged.json").exists()


def test_merge_command_stops_reading_once_the_merged_envelope_cannot_fit(
    genuine: Document,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Shards of 6 MiB each: the third already makes the merged envelope too large, so the
    fourth is never parsed (memory stays near one envelope cap, whatever N is)."""
    from attestation.envelope import model
    from runner.cli import main as runner_main
    from runner.pipeline import merge as merge_module

    parsed: list[int] = []
    original = model.parse_envelope

    def counting(data: bytes) -> Envelope:
        parsed.append(len(data))
        return original(data)

    monkeypatch.setattr(merge_module, "parse_envelope", counting)
    paths = []
    for index in range(4):
        document = copy.deepcopy(genuine["shards"][index % 3])
        document["result"]["padding"] = "x" * (6 * 1024 * 1024)
        path = tmp_path / f"shard-{index}.json"
        path.write_text(json.dumps(document))
        paths.append(str(path))
    code = runner_main(["merge", *paths, "--out", str(tmp_path / "merged.json")])
    assert code == 1
    err = capsys.readouterr().err
    assert "over the 16777216-byte envelope limit" in err
    assert "shard-2.json" in err
    assert len(parsed) == 3


def test_merge_refuses_a_fifo_as_a_shard_without_waiting_on_it(
    genuine: Document, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli import main as runner_main
    from tests.fifo_guard import fifo

    shards = []
    for index in range(2):
        path = tmp_path / f"shard-{index}.json"
        path.write_text(json.dumps(genuine["shards"][index]))
        shards.append(str(path))
    with fifo(tmp_path / "shard-2.json") as pipe:
        code = runner_main(["merge", *shards, str(pipe), "--out", str(tmp_path / "merged.json")])
    assert code == 9
    assert f"shard envelope {pipe}: cannot read it: is a FIFO, not a regular file" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "merged.json").exists()


# -- tenant reproduce: the merged (or one shard's) numbers recomputed from the corpus ----------


def _reproduce(
    document: Document, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> tuple[int, Document]:
    from runner.cli import main as runner_main

    path = tmp_path / "envelope.json"
    path.write_text(json.dumps(document))
    capsys.readouterr()
    code = runner_main(
        ["tenant", "reproduce", "--envelope", str(path), "--corpus", str(EXAMPLE_CORPUS), "--json"]
    )
    report: Document = json.loads(capsys.readouterr().out)
    assert report["exitCode"] == code
    return code, report


def _digests(report: Document) -> dict[str, tuple[str, str | None]]:
    return {c["name"]: (c["bound"], c["recomputed"]) for c in report["comparisons"]}


@pytest.fixture(scope="module")
def this_code() -> Workload:
    from runner.workload import current_workload

    return current_workload()


def test_reproduce_recomputes_a_merged_envelope_as_the_unsharded_run(
    sim: SimulatedAmd, this_code: Workload, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    merged = merged_of([shard_envelope(sim, i, 3, workload=this_code) for i in range(3)])
    code, report = _reproduce(merged, tmp_path, capsys)
    whole = outcome(None, 1)
    assert (code, report["reproduced"]) == (0, True)
    assert _digests(report)["result digest"] == (whole.result_digest, whole.result_digest)
    assert "merged from 3 shards" in report["reason"]


def test_reproduce_catches_shards_whose_merge_is_not_the_corpus_result(
    sim: SimulatedAmd, this_code: Workload, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shard 1's partial was signed with one answer fewer right (a faulty or swapped workload
    under this code digest): the set verifies, since every shard is genuine and the header is
    their merge, but the corpus does not give these numbers (7)."""
    result = result_of(1, 3)
    result["runs"][0]["correct"] -= 1
    shards = [shard_envelope(sim, i, 3, workload=this_code) for i in (0, 2)]
    faulty = signed(sim, result, shard=ShardPosition(index=1, count=3), workload=this_code)
    merged = merged_of([shards[0], faulty, shards[1]])
    assert verify(merged, expected(sim)).exit_code == 0
    code, report = _reproduce(merged, tmp_path, capsys)
    assert (code, report["failureClass"]) == (7, "binding")
    bound, recomputed = _digests(report)["result digest"]
    assert (bound, recomputed) == (merged["resultDigest"], outcome(None, 1).result_digest)
    assert report["resultDifferences"]


def test_reproduce_refuses_a_merged_result_that_is_not_its_digest(
    sim: SimulatedAmd, this_code: Workload, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    merged = merged_of([shard_envelope(sim, i, 3, workload=this_code) for i in range(3)])
    merged["result"]["case_count"] += 1
    code, report = _reproduce(merged, tmp_path, capsys)
    assert (code, report["failureClass"]) == (7, "binding")
    assert "the result was changed after binding" in report["reason"]


def test_reproduce_recomputes_one_shard_as_that_shard(
    sim: SimulatedAmd, this_code: Workload, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = shard_envelope(sim, 1, 3, workload=this_code)
    code, report = _reproduce(shard, tmp_path, capsys)
    assert (code, report["reproduced"]) == (0, True)
    assert _digests(report)["result digest"] == (shard["binding"]["resultDigest"],) * 2
    assert "shard 1 of 3" in report["reason"]
    result = result_of(1, 3)
    result["runs"][0]["correct"] -= 1
    faulty = signed(sim, result, shard=ShardPosition(index=1, count=3), workload=this_code)
    code, report = _reproduce(faulty, tmp_path, capsys)
    assert (code, report["failureClass"]) == (7, "binding")
    assert _digests(report)["result digest"] == (
        faulty["binding"]["resultDigest"],
        shard["binding"]["resultDigest"],
    )


# -- simulated and genuine evidence in one run ----------------------------------------------------


@pytest.fixture(scope="module")
def hardware() -> SimulatedAmd:
    """A second PKI that the verifier is told is AMD's (a trust store pinning it in AMD's
    place): its reports are "genuine hardware", labelled ``sev-snp``, while ``sim``'s stay
    simulated under the tenant's pinned simulated root."""
    return SimulatedAmd.generate()


def _as_amd(hardware: SimulatedAmd) -> Any:
    from attestation.endorsement.trust import AmdRole, TrustStore

    certificates = dict(TrustStore.amd().amd_certificates())
    certificates[ProductLine.GENOA, AmdRole.ARK] = hardware.ark_certificate
    certificates[ProductLine.GENOA, AmdRole.ASK] = hardware.ask_certificate
    certificates[ProductLine.GENOA, AmdRole.ASVK] = hardware.asvk_certificate
    return TrustStore(certificates)


def _on_hardware(hardware: SimulatedAmd, index: int) -> Document:
    document = shard_envelope(hardware, index, 3)
    document["platform"] = "sev-snp"
    return document


def test_simulated_and_genuine_shards_do_not_merge(
    sim: SimulatedAmd, genuine: Document, hardware: SimulatedAmd
) -> None:
    """The tenant trusts AMD and, for its tests, a simulated root: a run is one or the other.
    Shards 0 and 1 ran on hardware, shard 2 is simulated evidence whoever holds that root
    could have signed: refused (7), though each shard verifies on its own."""
    trust = _as_amd(hardware)
    now = dt.datetime.now(dt.UTC)
    on_hardware = [_on_hardware(hardware, index) for index in range(3)]
    data = json.dumps(merged_of(on_hardware)).encode()
    # Hardware evidence needs its launch MEASUREMENT pinned (the simulated shards do not).
    pins = expected(sim, measurements=[on_hardware[0]["measurement"]])
    assert verify_envelope(data, pins, now=now, trust=trust).exit_code == 0
    simulated = genuine["shards"]
    mixes = [
        (
            [on_hardware[0], on_hardware[1], simulated[2]],
            "shards[2] (shard 2) is simulated",
            "sev-snp",
        ),
        (
            [simulated[0], on_hardware[1], on_hardware[2]],
            "shards[1] (shard 1) is sev-snp",
            "simulated",
        ),
    ]
    for shards, where, first in mixes:
        document = json.dumps(assembled(genuine, shards)).encode()
        verdict = verify_envelope(document, pins, now=now, trust=trust)
        assert verdict.exit_code == 7
        assert first_failure(verdict) == (
            "merged.shards",
            f"{where} evidence, shard 0 {first}: a run's shards are all genuine or all simulated",
        )
        with pytest.raises(ShardMergeError, match="all genuine or all simulated"):
            merged_of(shards)
