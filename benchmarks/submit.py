"""Submission cost per run, and API requests per run, with N concurrent runs on one watch.

Runs the real submitter (official ``kubernetes`` client) against the loopback API server of
the test suite (``tests/k8s/apiserver.py``) for N = 10, 50 and 200 runs:

* submit: ``Submitter.submit`` for each run (Job build + canonical spec digest + create);
* wait: one ``Submitter.wait`` for all N runs while a scripted controller completes them;
* requests per run in each phase, counted by the server.

Every number is also given as a ratio to the N = 10 baseline of the same run, so the
claim "requests per run do not grow with the number of runs" is read off directly.
Times are wall-clock and include the loopback server, which shares the process.

    python benchmarks/submit.py [--runs 10 50 200] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from attestation.tenant.http import RetryPolicy  # noqa: E402
from runner.k8s.job import CorpusUrl, ReplaySpec  # noqa: E402
from runner.k8s.submit import Submitter  # noqa: E402
from runner.log import configure_logging  # noqa: E402
from tests.k8s.apiserver import ApiServer  # noqa: E402
from tests.k8s.cluster import FakeCluster  # noqa: E402

WAIT_REQUESTS = (
    "LIST jobs",
    "LIST pods",
    "LIST events",
    "WATCH jobs",
    "WATCH pods",
    "WATCH events",
)


def spec(index: int) -> ReplaySpec:
    return ReplaySpec(
        tenant="bench",
        run_id=f"bench-{index:04d}",
        corpus=CorpusUrl("https://corpora.example/bench.tar.gz"),
        checksum="sha256:" + "3" * 64,
        image="registry.example/attested-replay@sha256:" + "4" * 64,
        overlay="coco-dev",
    )


def measure(runs: int) -> dict[str, Any]:
    cluster = FakeCluster(validate=False)
    with ApiServer(cluster) as server:
        configuration = client.Configuration()
        configuration.host = server.url
        submitter = Submitter(
            client.ApiClient(configuration),
            namespace="attested-replay",
            retry_policy=RetryPolicy(backoff_factor=0.01),
            watch_timeout=60,
        )
        started = time.perf_counter()
        names = [submitter.submit(spec(i)).name for i in range(runs)]
        submit_seconds = time.perf_counter() - started
        submit_requests = cluster.requests["total"]

        def controller() -> None:
            cluster.wait_until(
                lambda: cluster.requests["WATCH jobs"] >= 1 and cluster.requests["WATCH pods"] >= 1
            )
            for name in names:
                pod = cluster.start_pod(name)
                cluster.running(pod)
                cluster.succeed(pod, log="")

        thread = threading.Thread(target=controller)
        thread.start()
        started = time.perf_counter()
        outcomes = submitter.wait(names, timeout=120)
        wait_seconds = time.perf_counter() - started
        thread.join()
    if sorted(o.state for o in outcomes.values()) != ["succeeded"] * runs:
        raise SystemExit(f"benchmark run failed: {outcomes}")
    wait_requests = sum(cluster.requests[key] for key in WAIT_REQUESTS)
    return {
        "runs": runs,
        "submit_ms_per_run": 1000 * submit_seconds / runs,
        "submit_requests_per_run": submit_requests / runs,
        "wait_ms_per_run": 1000 * wait_seconds / runs,
        "wait_requests": wait_requests,
        "wait_requests_per_run": wait_requests / runs,
        "watch_streams": cluster.watchers(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[10, 50, 200])
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    configure_logging(level="warning")
    measure(5)  # warm-up: imports, connection pool, schema caches
    results = [measure(n) for n in args.runs]
    base = results[0]
    print(
        f"{'runs':>5} {'submit ms/run':>14} {'x base':>7} {'submit req/run':>15} "
        f"{'wait req':>9} {'wait req/run':>13} {'x base':>7} {'watch streams':>14}"
    )
    for row in results:
        print(
            f"{row['runs']:>5} {row['submit_ms_per_run']:>14.2f} "
            f"{row['submit_ms_per_run'] / base['submit_ms_per_run']:>7.2f} "
            f"{row['submit_requests_per_run']:>15.2f} {row['wait_requests']:>9} "
            f"{row['wait_requests_per_run']:>13.3f} "
            f"{row['wait_requests_per_run'] / base['wait_requests_per_run']:>7.3f} "
            f"{row['watch_streams']:>14}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
