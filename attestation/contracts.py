"""Wire contracts: every identifier, size limit and digest the tenant's side reads, defined once.

Everything that crosses a process or trust boundary on the tenant's side (the envelope, the
publication log, the tenant's input files) is spelled here, and every part of attested-replay
imports it from here: the verifier, the tenant's tools, the replay pod, the Kubernetes
operator commands and the publication service. (The pod's own output, its framed log line and
termination message, only the operator reads: :mod:`runner.pod_output`.) A change to a
grammar or a limit is one edit, and no two components can disagree on it.

Identifiers
    :data:`RunId` (``[A-Za-z0-9._-]{1,128}``, not ``.`` or ``..``), :data:`TenantId` (a DNS
    label: it appears in Kubernetes names and URL paths) and :data:`Sha256Digest` (``sha256:``
    + 64 lowercase hex)
    are pydantic types; :func:`is_run_id`, :func:`is_tenant_id` and :func:`is_sha256_digest`
    test plain strings with the same regular expressions.

Limits (bytes; each refused before it is parsed or while it is read)
    ==================================== =========== ========================================
    limit                                value       applies to
    ==================================== =========== ========================================
    :data:`MAX_ENVELOPE_BYTES`           16 MiB      envelopes everywhere: the verifier, the
                                                     publication service, ``tenant fetch``,
                                                     ``collect``, the publisher
    :data:`MAX_ENVELOPE_JSON_ITEMS`      100,000     JSON values in an envelope (counted
                                                     before parsing: memory stays < 10x size)
    :data:`MAX_ENVELOPE_JSON_DEPTH`      64 levels   nesting of arrays and objects in an
                                                     envelope (checked before parsing)
    :data:`MAX_EXPECTED_BYTES`           1 MiB       the tenant's expected-values file
    :data:`MAX_POLICY_BYTES`             1 MiB       a raw-mode policy file
    :data:`MAX_REPORT_FILE_BYTES`        64 KiB      a raw report file (the report is 1184)
    :data:`MAX_CERTIFICATE_BYTES`        1 MiB       a certificate or root file
    :data:`MAX_CRL_BYTES`                16 MiB      a CRL file
    :data:`MAX_EXPORT_MANIFEST_BYTES`    64 KiB      a corpus export's manifest
    :data:`MAX_EXPORT_FILES_BYTES`       64 GiB      the corpus files of one export, unpacked
    :data:`DEFAULT_MAX_CORPUS_EXPORT_BYTES` 256 MiB  a corpus export the publication service
                                                     stores (``serve --max-corpus-export-bytes``)
    ==================================== =========== ========================================

    :data:`MAX_SHARD_COUNT` (256) bounds the shards of one sharded replay: a merged envelope
    carries every shard's report and chain (about 12 KB each) within the envelope cap, and a
    Job name leaves room for the controller's ``-<index>`` hostname suffix.

Corpus archives (``run --corpus https://...``; checked while unpacking, entry by entry)
    :data:`MAX_CORPUS_ARCHIVE_BYTES` (4 GiB downloaded), :data:`MAX_CORPUS_ARCHIVE_ENTRIES`
    (8: the four files, the root and one top directory, room for two more; refused at the
    ninth header, never after listing), :data:`MAX_CORPUS_UNPACKED_BYTES` (16 GiB in all),
    :data:`MAX_CORPUS_ARCHIVE_RATIO` (unpacked at most 200 times the compressed size once past
    :data:`CORPUS_RATIO_FLOOR`, 64 MiB; JSON lines compress 5 to 20 times), and
    :data:`MAX_ARCHIVE_HEADER_BYTES` (64 KiB for one entry's header with its pax or GNU
    long-name extensions). Sparse, linked and special entries are refused.

    The envelope cap is the verifier's: a report and its chain are about 10 KB and the rest is
    the evaluation report, so 16 MiB leaves room for large results, and every component that
    stores or forwards envelopes must accept every envelope the verifier accepts.

Digests
    :func:`sha256_digest` is the one ``sha256:<hex>`` of bytes (envelope digests, result
    digests, workload code digests); :func:`corpus_checksum` is the corpus checksum's head
    over the tree of :data:`EVALUATION_BLOCK_CASES`-case blocks.

"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints
from pydantic.alias_generators import to_camel

from attestation.encoding.canonical import canonicalize
from attestation.encoding.json_document import plain_message

# -- identifiers ------------------------------------------------------------------------------

#: The grammar of a run ID, as shown in messages. "." and ".." are refused: a run ID names
#: files and URL path segments, where they mean this and the parent directory.
RUN_ID_GRAMMAR: Final = "[A-Za-z0-9._-]{1,128}, not '.' or '..'"
#: The same without look-ahead (pydantic's regex engine has none): a first character other
#: than '.', or '.' and then another character, or '..' and at least one more.
RUN_ID_PATTERN: Final = (
    r"^(?:[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}"
    r"|\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,126}"
    r"|\.\.[A-Za-z0-9._-]{1,126})$"
)
#: Tenants are DNS labels: they appear in Kubernetes object names, labels and URL paths.
TENANT_ID_PATTERN: Final = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
SHA256_DIGEST_PATTERN: Final = r"^sha256:[0-9a-f]{64}$"

RunId = Annotated[str, StringConstraints(pattern=RUN_ID_PATTERN)]
TenantId = Annotated[str, StringConstraints(pattern=TENANT_ID_PATTERN)]
Sha256Digest = Annotated[str, StringConstraints(pattern=SHA256_DIGEST_PATTERN)]
#: Fixed-size byte strings as lowercase hex (report fields and the values a policy allows).
Hex32 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Hex48 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{96}$")]
Hex64 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{128}$")]
#: What produced the evidence: AMD hardware (the chain reached AMD's pinned roots) or the
#: simulated AMD (the chain reached a simulated root a tenant pinned).
Platform = Literal["sev-snp", "simulated"]
#: A tenant-chosen nonce bound into REPORT_DATA with the run.
MAX_NONCE_LENGTH: Final = 256
Nonce = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NONCE_LENGTH)]
NONCE_RULE: Final = f"1 to {MAX_NONCE_LENGTH} characters"

#: Each identifier's rule in words, for messages: a user reads these, not regular expressions.
IDENTIFIER_RULES: Final = MappingProxyType(
    {
        RUN_ID_PATTERN: "1 to 128 letters, digits, '.', '_' or '-', and not '.' or '..'",
        TENANT_ID_PATTERN: (
            "a DNS label: 1 to 63 lowercase letters, digits or '-', starting and ending with a "
            "letter or digit"
        ),
        SHA256_DIGEST_PATTERN: "'sha256:' followed by 64 lowercase hex digits",
    }
)

_RUN_ID: Final = re.compile(RUN_ID_PATTERN)
_TENANT_ID: Final = re.compile(TENANT_ID_PATTERN)
_SHA256_DIGEST: Final = re.compile(SHA256_DIGEST_PATTERN)


def is_run_id(text: str) -> bool:
    """Whether ``text`` is a valid run ID (:data:`RunId`)."""
    return _RUN_ID.fullmatch(text) is not None


def is_tenant_id(text: str) -> bool:
    """Whether ``text`` is a valid tenant ID (:data:`TenantId`, a DNS label)."""
    return _TENANT_ID.fullmatch(text) is not None


def is_nonce(text: str) -> bool:
    """Whether ``text`` is a valid nonce (:data:`Nonce`)."""
    return 1 <= len(text) <= MAX_NONCE_LENGTH


def is_sha256_digest(text: str) -> bool:
    """Whether ``text`` is ``sha256:`` followed by 64 lowercase hex digits."""
    return _SHA256_DIGEST.fullmatch(text) is not None


_HEX_PATTERN: Final = re.compile(r"\^\[0-9a-f\]\{(\d+)\}\$")


def explain_problem(problem: Mapping[str, Any]) -> str:
    """One pydantic validation problem in words: an identifier's rule instead of its regular
    expression, the allowed values of a choice, "unknown key" for a forbidden extra key."""
    kind = problem.get("type")
    context = problem.get("ctx") or {}
    if kind == "string_pattern_mismatch":
        pattern = str(context.get("pattern"))
        if pattern in IDENTIFIER_RULES:
            return f"must be {IDENTIFIER_RULES[pattern]}"
        hex_digits = _HEX_PATTERN.fullmatch(pattern)
        if hex_digits is not None:
            return f"must be {hex_digits[1]} lowercase hex digits"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required, missing"
    if kind == "literal_error":
        return f"must be one of {context.get('expected')}"
    return plain_message(str(problem.get("msg", "invalid")).removeprefix("Value error, "))


# -- limits (bytes) ---------------------------------------------------------------------------

MAX_ENVELOPE_BYTES: Final = 16 * 1024 * 1024
#: JSON values in one envelope (an upper bound counted before parsing). An evaluation report
#: holds a few thousand (<= 10 arms x 5 runs x 12 metrics, <= 12 marks); 100,000 keeps the
#: parsed envelope within 10x the largest envelope's size whatever its values are.
MAX_ENVELOPE_JSON_ITEMS: Final = 100_000
#: How deep arrays and objects may nest in one envelope (checked before parsing, by the
#: publication service, the publishing client and the verifier alike). A merged envelope's
#: deepest value is about a dozen levels down; the canonicalizer (recursive, two frames per
#: object) and Python's parsers reach the interpreter's recursion limit from about 490 levels,
#: so 64 is well inside what every reader of an envelope handles.
MAX_ENVELOPE_JSON_DEPTH: Final = 64
MAX_EXPECTED_BYTES: Final = 1024 * 1024
MAX_POLICY_BYTES: Final = 1024 * 1024
MAX_REPORT_FILE_BYTES: Final = 64 * 1024
MAX_CERTIFICATE_BYTES: Final = 1024 * 1024
MAX_CRL_BYTES: Final = 16 * 1024 * 1024
MAX_EXPORT_MANIFEST_BYTES: Final = 64 * 1024
MAX_EXPORT_FILES_BYTES: Final = 64 * 1024**3
DEFAULT_MAX_CORPUS_EXPORT_BYTES: Final = 256 * 1024 * 1024
#: The kubelet truncates termination messages at 4096 bytes: digests only, never the envelope.

# -- corpus archives --------------------------------------------------------------------------

MAX_CORPUS_ARCHIVE_BYTES: Final = 4 * 1024**3
MAX_CORPUS_ARCHIVE_ENTRIES: Final = 8
MAX_CORPUS_UNPACKED_BYTES: Final = 16 * 1024**3
MAX_CORPUS_ARCHIVE_RATIO: Final = 200
CORPUS_RATIO_FLOOR: Final = 64 * 1024**2
MAX_ARCHIVE_HEADER_BYTES: Final = 64 * 1024

#: The most shards one replay may be split into (indices 0..255: three digits).
MAX_SHARD_COUNT: Final = 256
#: Cases are hashed in blocks of this many, in both digests a tenant pins: the corpus
#: checksum's tree over ``cases.jsonl`` (:func:`corpus_checksum`) and each run's tree of case
#: results in the evaluation digest. A shard scores whole blocks, so it can hash just its own
#: share of both (``runner.corpus.case_blocks``, ``runner.corpus.evaluation_files``,
#: ``attestation.scoring.partial``).
EVALUATION_BLOCK_CASES: Final = 256
#: What the corpus checksum hashes first: its version and the size of its blocks.
CORPUS_CHECKSUM_PREAMBLE: Final = (
    f"attested-replay corpus checksum v2: cases in blocks of {EVALUATION_BLOCK_CASES}, "
    "RFC 6962 tree\n"
).encode("ascii")
#: A shard attests its latency tail by a Merkle root over blocks of this many values (the
#: leaves; ``attestation.scoring.tails``), and a merge opens a few blocks per shard.
TAIL_BLOCK_VALUES: Final = 32
#: The most cases a sharded replay may have (a shard refuses more: no corpus comes near, and
#: it bounds a tail's inclusion proofs, so every split below merges).
MAX_SHARDED_CASES: Final = 2**40
#: The longest inclusion proof of a tail block (a tail has at most MAX_SHARDED_CASES values).
MAX_TAIL_PATH: Final = (MAX_SHARDED_CASES.bit_length() - 1) - (TAIL_BLOCK_VALUES.bit_length() - 1)
#: One shard's opening of one run's tail: at most four blocks (those around the values above
#: the p95 and around those at least it), each with its proof.
MAX_TAIL_OPENING_BYTES: Final = 4 * (8 * TAIL_BLOCK_VALUES + 32 * MAX_TAIL_PATH)
#: The most runs a plan has (10 arms x 5 runs per arm; ``attestation.scoring.models``).
MAX_PLAN_ARMS: Final = 10
MAX_RUNS_PER_ARM: Final = 5
MAX_PLAN_RUNS: Final = MAX_PLAN_ARMS * MAX_RUNS_PER_ARM
#: A shard envelope (report, chain, binding and shard result: counters, cost totals and tail
#: roots, never latencies) is at most this, whatever the number of cases: ``run`` refuses to
#: write a larger one (a plan and marks near their own limits, or cost totals of thousands
#: of digits). Its JSON values likewise.
MAX_SHARD_ENVELOPE_BYTES: Final = 64 * 1024
MAX_SHARD_ENVELOPE_JSON_ITEMS: Final = 1_500
#: What a merged envelope holds besides its shards and openings: its header and the merged
#: report (a report is bounded by its plan and marks: a few thousand values, tens of KB).
MERGED_BASE_BYTES: Final = 256 * 1024
MERGED_BASE_JSON_ITEMS: Final = 10_000
#: One shard's opening in a merged envelope as JSON (``{"above":A,"atLeast":B,"proof":"..."}``
#: with 16-digit counts and base64 of the largest proof, and its comma) and its values.
TAIL_OPENING_JSON_BYTES: Final = 4 * -(-MAX_TAIL_OPENING_BYTES // 3) + 64
TAIL_OPENING_JSON_ITEMS: Final = 4
#: One run's openings besides the shards' (arm, run index, p95, brackets).
RUN_OPENINGS_JSON_BYTES: Final = 128
RUN_OPENINGS_JSON_ITEMS: Final = 8


def merged_envelope_bound(shards: int, runs: int) -> tuple[int, int]:
    """An upper bound of the bytes and JSON values of the merged envelope of ``shards`` shards
    of a plan of ``runs`` runs, whatever the number of cases: each shard envelope within
    :data:`MAX_SHARD_ENVELOPE_BYTES`, each run's openings within their largest size."""
    size = (
        MERGED_BASE_BYTES
        + shards * (MAX_SHARD_ENVELOPE_BYTES + 1)
        + runs * (RUN_OPENINGS_JSON_BYTES + shards * TAIL_OPENING_JSON_BYTES)
    )
    items = (
        MERGED_BASE_JSON_ITEMS
        + shards * (MAX_SHARD_ENVELOPE_JSON_ITEMS + 1)
        + runs * (RUN_OPENINGS_JSON_ITEMS + shards * TAIL_OPENING_JSON_ITEMS)
    )
    return size, items


def max_mergeable_shards(runs: int = MAX_PLAN_RUNS) -> int:
    """The most shards whose merged envelope fits the envelope limits for any corpus of a plan
    of ``runs`` runs (:func:`merged_envelope_bound`), at most :data:`MAX_SHARD_COUNT`."""
    fitting = 0
    for shards in range(1, MAX_SHARD_COUNT + 1):
        size, items = merged_envelope_bound(shards, runs)
        if size > MAX_ENVELOPE_BYTES or items > MAX_ENVELOPE_JSON_ITEMS:
            break
        fitting = shards
    return fitting


#: The most shards ``run --shard-count`` and ``submit --shards`` accept: every such split
#: merges, for any plan and any number of cases (checked before any shard runs).
MAX_MERGEABLE_SHARD_COUNT: Final = max_mergeable_shards()


def mergeable_shard_count_problem(count: int, option: str) -> str | None:
    """Why ``count`` shards cannot be merged (naming ``option`` and the limit), or None."""
    if 1 <= count <= MAX_MERGEABLE_SHARD_COUNT:
        return None
    size, items = merged_envelope_bound(count, MAX_PLAN_RUNS)
    return (
        f"{option} {count}: at most {MAX_MERGEABLE_SHARD_COUNT} shards can be merged: the "
        f"merged envelope of {count} shards of a plan of up to {MAX_PLAN_RUNS} runs may reach "
        f"{size} bytes and {items} JSON values, over the envelope limits "
        f"({MAX_ENVELOPE_BYTES} bytes, {MAX_ENVELOPE_JSON_ITEMS} values)"
        if count > MAX_MERGEABLE_SHARD_COUNT
        else f"{option} {count}: a replay has at least 1 shard"
    )


#: Where a pod of an Indexed Job finds its completion index (the Job controller adds it to
#: every container); ``run --shard-count N`` reads its shard index from it.
SHARD_INDEX_VARIABLE: Final = "JOB_COMPLETION_INDEX"

# -- digests ----------------------------------------------------------------------------------


def sha256_digest(data: bytes) -> str:
    """``sha256:<lowercase hex>`` of ``data``."""
    return format_sha256(hashlib.sha256(data).digest())


def evaluation_block_count(case_count: int) -> int:
    """How many blocks of :data:`EVALUATION_BLOCK_CASES` a run of ``case_count`` case results
    has (the last may be shorter)."""
    return -(-case_count // EVALUATION_BLOCK_CASES)


def corpus_checksum(case_count: int, root: bytes) -> str:
    """The corpus checksum of ``case_count`` cases whose blocks' RFC 6962 tree has ``root``:
    ``sha256:`` + SHA-256 of :data:`CORPUS_CHECKSUM_PREAMBLE`, the decimal case count, a
    newline, the root's lowercase hex and a newline. The count is bound beside the root so a
    shard that takes it from an untrusted index cannot bind another count under the same
    tree (``runner.corpus.checksum`` computes the leaves)."""
    if case_count < 1 or len(root) != hashlib.sha256().digest_size:
        raise ValueError(f"a corpus tree of {case_count} cases and a {len(root)}-byte root")
    head = CORPUS_CHECKSUM_PREAMBLE + f"{case_count}\n{root.hex()}\n".encode("ascii")
    return sha256_digest(head)


def format_sha256(raw: bytes) -> str:
    """``sha256:<lowercase hex>`` of a 32-byte SHA-256 value computed elsewhere."""
    if len(raw) != hashlib.sha256().digest_size:
        raise ValueError(f"a SHA-256 value has 32 bytes, got {len(raw)}")
    return "sha256:" + raw.hex()


# -- the model base of every wire document ----------------------------------------------------


class WireModel(BaseModel):
    """Frozen, strict-keyed model with camelCase JSON names: the base of every wire document.

    Unknown keys are rejected (in a security document a typo would silently change its
    meaning); documents are built from these models, never from dicts.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON object of this model (camelCase keys, absent optionals omitted)."""
        return self.model_dump(mode="json", exclude_none=True)

    def canonical_bytes(self) -> bytes:
        """RFC 8785 canonical bytes of :meth:`to_json_dict`."""
        return canonicalize(self.to_json_dict())


class SnakeWireModel(WireModel):
    """The same base for the documents spelled in snake_case (corpus files, the evaluation
    report, shard results: the spelling of docs/replay.md), with strict types: a
    number in a corpus is never coerced from a string."""

    model_config = ConfigDict(alias_generator=None, strict=True)
