"""The run parameters of a replay Job, shared by ``submit``, ``init-data`` and ``expected``.

They all build a :class:`runner.k8s.job.ReplaySpec` from the same options and hand it to
:func:`runner.k8s.job.build_replay`, so the Job the operator submits, the init-data file and
the HOST_DATA a tenant pins come from one function of one set of parameters.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attestation.contracts import MAX_MERGEABLE_SHARD_COUNT
from runner.commands.parsing import input_dir
from runner.errors import UsageError
from runner.image.layout import manifest_digest
from runner.k8s.job import OVERLAYS, CorpusSource, CorpusUrl, CorpusVolume, ReplaySpec

DEFAULT_NAMESPACE = "attested-replay"


def add_job_arguments(
    parser: argparse._ActionsContainer, *, corpus_flag: str = "--corpus", required: bool = True
) -> None:
    """The options whose values end up in the pod (and so in its agent policy)."""
    parser.add_argument(
        corpus_flag,
        dest="corpus_source",
        required=required,
        metavar="URL_OR_PATH",
        help="https:// URL of the corpus .tar.gz, or a directory inside --corpus-claim",
    )
    parser.add_argument(
        "--corpus-claim", metavar="CLAIM", help="PersistentVolumeClaim holding the corpus path"
    )
    parser.add_argument(
        "--image",
        required=required,
        metavar="IMAGE",
        help="runner image, registry.host/repository@sha256:<64 hex>",
    )
    parser.add_argument(
        "--image-layout",
        type=input_dir("--image-layout"),
        metavar="DIR",
        help="OCI layout from `image build` (yours or a rebuild from the tagged source): "
        "refuse an --image not pinned to its digest (docs/image.md)",
    )
    parser.add_argument(
        "--overlay",
        required=required,
        choices=sorted(OVERLAYS),
        help="the manifests' overlay (runtime class and node selection)",
    )
    parser.add_argument(
        "--publish-url",
        metavar="URL",
        help="publication endpoint the pod publishes to (https://; needs --publish-token-secret)",
    )
    parser.add_argument(
        "--publish-token-secret",
        metavar="SECRET",
        help="Secret (key 'token', an operator token) the pod reads its publish token from",
    )
    parser.add_argument(
        "--endorsement-secret",
        help="Secret (key 'endorsement.pem': VCEK, ASK, ARK from `vcek fetch`) for platforms "
        "that send no certificates",
    )
    parser.add_argument(
        "--nonce",
        metavar="TEXT",
        help="the tenant's nonce for this run, bound into REPORT_DATA (the tenant pins it with "
        "`expected --nonce`)",
    )
    parser.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help=f"split the replay into N shards: an Indexed Job with one TEE per shard, merged by "
        f"`collect` (at most {MAX_MERGEABLE_SHARD_COUNT}, so that the shards merge within the "
        "envelope limits; the pods' agent policy admits indices 0..N-1)",
    )


def corpus_source(args: argparse.Namespace, *, flag: str = "--corpus") -> CorpusSource:
    text: str = args.corpus_source
    if text.startswith("https://"):
        if args.corpus_claim:
            raise UsageError("--corpus-claim is for a path inside a volume, not a URL")
        return CorpusUrl(text)
    if args.corpus_claim:
        return CorpusVolume(args.corpus_claim, text.strip("/"))
    raise UsageError(f"{flag} {text!r}: give an https:// URL, or a path with --corpus-claim")


def check_image_layout(layout: Path, pinned: str | None) -> str:
    """The image digest of ``layout`` (``image build``'s OCI layout), which must be ``pinned``
    when a digest is pinned already (by --image or --image-digest)."""
    digest = manifest_digest(layout)
    if pinned is not None and pinned != digest:
        raise UsageError(
            f"--image-layout {layout} is image {digest}, but the image pinned is {pinned}: "
            "that image was not built from this source"
        )
    return digest


def replay_spec(args: argparse.Namespace, *, checksum: str, flag: str = "--corpus") -> ReplaySpec:
    """The ReplaySpec of these options. ``submit`` adds its own fields (namespace, cpu,
    deadlines ...) with ``dataclasses.replace``; none of them changes the pod's init-data."""
    if args.image_layout is not None:
        check_image_layout(args.image_layout, args.image.rpartition("@")[2])
    return ReplaySpec(
        tenant=args.tenant,
        run_id=args.run_id,
        corpus=corpus_source(args, flag=flag),
        checksum=checksum,
        image=args.image,
        overlay=args.overlay,
        publish_url=args.publish_url,
        publish_token_secret=args.publish_token_secret,
        endorsement_secret=args.endorsement_secret,
        shards=args.shards,
        nonce=args.nonce,
    )
