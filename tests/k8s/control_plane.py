"""A real Kubernetes control plane for the tests, started once per session on loopback.

etcd, kube-apiserver (default admission plugins, RBAC, a static token file), kube-controller-
manager (Job, garbage-collector, TTL-after-finished, ServiceAccount and namespace controllers)
and kube-scheduler, built from their Go modules by ``.ci/k8s-bins.sh``; kwok plays the nodes
and kubelets (tests/k8s/kwok/stages.yaml) and serves container logs from CRI-format files named
by kwok ``Logs`` objects, with the kubelet's own log reader (cri-client ``ReadLogs``). This is
the envtest recipe (controller-runtime pkg/internal/testing/controlplane), except that the
ServiceAccount admission plugin stays on, as on a real cluster.

The project's manifests (the coco-dev overlay without its example Job, rendered by
``kubectl kustomize``) are applied with ``kubectl apply``; the RuntimeClasses are created as
kata-deploy writes them (handler = name, overhead, the kata-runtime node selector).

Without the binaries the tests that need them skip, except in CI (``CI`` set), where they
fail: ``.ci/run`` builds them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
import requests
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.k8s.kustomize import kubectl, kustomize

REPOSITORY: Final = Path(__file__).resolve().parents[2]
BUILD_SCRIPT: Final = REPOSITORY / ".ci" / "k8s-bins.sh"
STAGES: Final = Path(__file__).parent / "kwok" / "stages.yaml"
BINARIES: Final = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: kwok's Logs CRD, copied by .ci/k8s-bins.sh from the kwok module (kustomize/crd/bases).
LOGS_CRD: Final = "kwok.x-k8s.io_logs.yaml"
NAMESPACE: Final = "attested-replay"
NODE: Final = "kwok-snp-0"
EXIT_CODE_ANNOTATION: Final = "kwok.attested-replay.test/exit-code"
START_TIMEOUT_SECONDS: Final = 90.0
#: The users of the static token file: an administrator, an operator bound only by the
#: project's Role/ClusterRole (group attested-replay:operators) and a user with no binding.
ADMIN: Final = "admin"
OPERATOR: Final = "operator"
UNBOUND: Final = "mallory"
_USERS: Final = {
    ADMIN: "system:masters",
    OPERATOR: "attested-replay:operators",
    UNBOUND: "",
}
#: RuntimeClasses as kata-deploy 3.29 writes them (helm-chart/kata-deploy/templates/
#: runtimeclasses.yaml: handler = name, overhead per shim, the kata-runtime node selector).
RUNTIME_CLASSES: Final = {
    "kata-qemu-coco-dev": {"memory": "160Mi", "cpu": "250m"},
    "kata-qemu-snp": {"memory": "2048Mi", "cpu": "1"},
}


def binaries_directory() -> Path:
    """Where ``.ci/k8s-bins.sh`` puts the binaries (its ``ATTESTED_REPLAY_K8S_BINS`` or default)."""
    configured = os.environ.get("ATTESTED_REPLAY_K8S_BINS")
    if configured:
        return Path(configured)
    match = re.search(r'K8S_VERSION="\$\{K8S_VERSION:-(v[0-9.]+)\}"', BUILD_SCRIPT.read_text())
    assert match is not None, f"{BUILD_SCRIPT} no longer names its default K8S_VERSION"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "attested-replay" / f"k8s-{match.group(1)}"


def _running_in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# -- certificates ---------------------------------------------------------------------------


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0] if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(
            x509.BasicConstraints(ca=True, path_length=0), critical=True
        )
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


@dataclass(frozen=True)
class _Pki:
    ca: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    service_account_public: Path


def _write_pki(directory: Path) -> _Pki:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("attested-replay-test-ca", ca_key, None)
    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving = _certificate("127.0.0.1", serving_key, (ca.subject, ca_key))
    account_key = ec.generate_private_key(ec.SECP256R1())
    pki = _Pki(
        directory / "ca.crt",
        directory / "serving.crt",
        directory / "serving.key",
        directory / "sa.key",
        directory / "sa.pub",
    )
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.serving_cert.write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    pki.serving_key.write_bytes(_pem_key(serving_key))
    pki.service_account_key.write_bytes(_pem_key(account_key))
    pki.service_account_public.write_bytes(
        account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


# -- processes ------------------------------------------------------------------------------


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    argv: tuple[str, ...]

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)


@dataclass
class ControlPlane:
    """The running control plane: its URL, kubeconfigs per user, and an admin client."""

    directory: Path
    url: str
    ca: Path
    tokens: dict[str, str]
    etcd_url: str
    binaries: Path
    processes: list[_Process] = field(default_factory=list)

    def kubeconfig(self, user: str, path: Path, namespace: str | None = None) -> Path:
        context: dict[str, Any] = {"cluster": "test", "user": user}
        if namespace:
            context["namespace"] = namespace
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca)},
                }
            ],
            "users": [{"name": user, "user": {"token": self.tokens[user]}}],
            "contexts": [{"name": "test", "context": context}],
            "current-context": "test",
        }
        # Atomically: kubectl() writes the admin's file again while the controller manager,
        # scheduler and kwok may be reading it (a truncated file reads as "no configuration").
        partial = path.with_name(path.name + ".partial")
        partial.write_text(yaml.safe_dump(document))
        partial.replace(path)
        return path

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        user: str = ADMIN,
        content_type: str = "application/json",
    ) -> requests.Response:
        """One API request as ``user``, the answer as the server gave it."""
        return requests.request(
            method,
            f"{self.url}{path}",
            json=body,
            headers={"Authorization": f"Bearer {self.tokens[user]}", "Content-Type": content_type},
            verify=str(self.ca),
            timeout=30,
        )

    def json(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        """``request``, which must succeed; its JSON body."""
        answer = self.request(method, path, body, **options)
        assert answer.ok, f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json()

    def kubectl(self, *argv: str, stdin: str | None = None) -> str:
        admin = self.kubeconfig(ADMIN, self.directory / f"{ADMIN}.kubeconfig")
        result = subprocess.run(
            [kubectl(), "--kubeconfig", str(admin), *argv],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            pytest.fail(f"kubectl {' '.join(argv)}: {result.stderr.strip()}", pytrace=False)
        return result.stdout

    def delete_jobs(self) -> None:
        """Delete every Job of every namespace with its pods, and wait until no pod is left."""
        self.kubectl("delete", "jobs", "--all", "--all-namespaces", "--cascade=background")
        self.wait_for(
            "the pods of deleted Jobs to go",
            lambda: not self.json("GET", "/api/v1/pods")["items"],
        )

    def process(self, name: str) -> _Process:
        return next(process for process in self.processes if process.name == name)

    def start(self, name: str, *argv: str) -> _Process:
        log = self.directory / f"{name}.log"
        with log.open("ab") as sink:
            popen = subprocess.Popen(
                [str(self.binaries / name), *argv],
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process = _Process(name, popen, log, argv)
        self.processes.append(process)
        return process

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again: open watches are cut."""
        old = self.process("kube-apiserver")
        old.stop()
        self.processes.remove(old)
        self.start("kube-apiserver", *old.argv)
        self.wait_for(
            "kube-apiserver /readyz after its restart",
            lambda: self.request("GET", "/readyz").status_code == 200,
        )

    def wait_for(
        self, what: str, ready: Callable[[], bool], timeout: float = START_TIMEOUT_SECONDS
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.popen.poll() is not None:
                    pytest.fail(
                        f"{process.name} exited ({process.popen.returncode}) while waiting for "
                        f"{what}:\n{process.tail()}",
                        pytrace=False,
                    )
            with contextlib.suppress(requests.RequestException):
                if ready():
                    return
            time.sleep(0.2)
        logs = "\n".join(f"== {p.name}\n{p.tail(10)}" for p in self.processes)
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{logs}", pytrace=False)

    def open_watches(self, resource: str, scope: str = "namespace") -> int:
        """Watches of ``resource`` the API server is serving now (its
        ``apiserver_longrunning_requests`` gauge)."""
        prefix = (
            f'apiserver_longrunning_requests{{component="apiserver",group="",'
            f'resource="{resource}",scope="{scope}",subresource="",verb="WATCH",'
        )
        lines = self.request("GET", "/metrics").text.splitlines()
        return sum(int(float(line.rsplit(" ", 1)[1])) for line in lines if line.startswith(prefix))

    def compact_etcd(self) -> None:
        """Write twice, then compact etcd at its current revision: a watch from any version
        held before the call (which resumes at version + 1) now starts below the compacted
        revision, so the API server answers it 410 Expired. (A resource without a watch cache,
        as events are by default, meets it on its next watch.)"""
        marker = f"/api/v1/namespaces/default/configmaps/compaction-{os.urandom(4).hex()}"
        name = marker.rsplit("/", 1)[1]
        self.json("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": name}})
        self.json("DELETE", marker)
        current = requests.post(f"{self.etcd_url}/v3/kv/range", json={"key": "AA=="}, timeout=10)
        current.raise_for_status()
        revision = int(current.json()["header"]["revision"])
        compact = requests.post(
            f"{self.etcd_url}/v3/kv/compaction",
            json={"revision": revision, "physical": True},
            timeout=30,
        )
        compact.raise_for_status()


def _write_tokens(path: Path) -> dict[str, str]:
    tokens = {user: f"{user}-{os.urandom(12).hex()}" for user in _USERS}
    lines = [
        f'{tokens[user]},{user},{user}-uid,"{groups}"'
        if groups
        else f"{tokens[user]},{user},{user}-uid"
        for user, groups in _USERS.items()
    ]
    path.write_text("\n".join(lines) + "\n")
    return tokens


def _start(directory: Path, binaries: Path, processes: list[_Process]) -> ControlPlane:
    pki = _write_pki(directory)
    tokens = _write_tokens(directory / "tokens.csv")
    etcd_port, peer_port, api_port, kwok_port = (_free_port() for _ in range(4))
    plane = ControlPlane(
        directory,
        f"https://127.0.0.1:{api_port}",
        pki.ca,
        tokens,
        f"http://127.0.0.1:{etcd_port}",
        binaries,
        processes,
    )
    peer = f"http://127.0.0.1:{peer_port}"
    plane.start(
        "etcd",
        "--name=test",
        f"--data-dir={directory / 'etcd'}",
        f"--listen-client-urls={plane.etcd_url}",
        f"--advertise-client-urls={plane.etcd_url}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=test={peer}",
        "--unsafe-no-fsync",
    )
    plane.wait_for(
        "etcd", lambda: requests.get(f"{plane.etcd_url}/health", timeout=2).status_code == 200
    )
    plane.start(
        "kube-apiserver",
        f"--etcd-servers={plane.etcd_url}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={api_port}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca}",
        f"--token-auth-file={directory / 'tokens.csv'}",
        "--authorization-mode=Node,RBAC",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={pki.service_account_public}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        "--endpoint-reconciler-type=none",
        "--kubelet-preferred-address-types=InternalIP",
    )
    admin = {"Authorization": f"Bearer {tokens[ADMIN]}"}
    plane.wait_for(
        "kube-apiserver /readyz",
        lambda: (
            requests.get(
                f"{plane.url}/readyz", headers=admin, verify=str(pki.ca), timeout=2
            ).status_code
            == 200
        ),
    )
    admin_kubeconfig = plane.kubeconfig(ADMIN, directory / f"{ADMIN}.kubeconfig")
    plane.start(
        "kube-controller-manager",
        f"--kubeconfig={admin_kubeconfig}",
        "--leader-elect=false",
        "--use-service-account-credentials=false",
        "--controllers=job-controller,garbage-collector-controller,ttl-after-finished-controller,"
        "serviceaccount-controller,namespace-controller,pod-garbage-collector-controller,"
        # removes the not-ready taint TaintNodesByCondition admission puts on a new node
        "node-lifecycle-controller,"
        # fills in a ResourceQuota's usage, without which quota admission refuses every pod
        "resourcequota-controller",
        f"--root-ca-file={pki.ca}",
        "--secure-port=0",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        # the job controller syncs a Job at most this often (default 1 s): keep it.
    )
    plane.start(
        "kube-scheduler",
        f"--kubeconfig={admin_kubeconfig}",
        "--leader-elect=false",
        "--secure-port=0",
    )
    crd = binaries / "kwok-crds" / LOGS_CRD
    plane.kubectl("apply", "-f", str(crd))
    plane.wait_for(
        "kwok's Logs CRD",
        lambda: "Established" in plane.kubectl("get", "crd", "logs.kwok.x-k8s.io", "-o", "yaml"),
    )
    plane.start(
        "kwok",
        f"--kubeconfig={admin_kubeconfig}",
        f"--config={STAGES}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--enable-crds=Logs",
        "--node-ip=127.0.0.1",
        f"--node-port={kwok_port}",
        f"--server-address=127.0.0.1:{kwok_port}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
    )
    _install_cluster_objects(plane)
    return plane


def _install_cluster_objects(plane: ControlPlane) -> None:
    plane.json(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {
                    "kubernetes.io/hostname": NODE,
                    "kubernetes.io/os": "linux",
                    "katacontainers.io/kata-runtime": "true",
                    "amd.feature.node.kubernetes.io/snp": "true",
                },
            },
            "status": {
                "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
            },
        },
    )
    for name, overhead in RUNTIME_CLASSES.items():
        plane.json(
            "POST",
            "/apis/node.k8s.io/v1/runtimeclasses",
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": name},
                "handler": name,
                "overhead": {"podFixed": overhead},
                "scheduling": {"nodeSelector": {"katacontainers.io/kata-runtime": "true"}},
            },
        )
    objects = [
        document
        for document in kustomize(REPOSITORY / "k8s" / "overlays" / "coco-dev")
        if document["kind"] != "Job"
    ]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))

    def node_ready() -> bool:
        node = plane.json("GET", f"/api/v1/nodes/{NODE}")
        conditions = node["status"].get("conditions") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return ready and not node["spec"].get("taints")

    plane.wait_for("the kwok node to be Ready and untainted", node_ready)
    # The ServiceAccount controller has created the namespace's default account: the
    # controller manager is up.
    plane.wait_for(
        "kube-controller-manager",
        lambda: (
            plane.request(
                "GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"
            ).status_code
            == 200
        ),
    )


@contextlib.contextmanager
def control_plane(directory: Path) -> Iterator[ControlPlane]:
    binaries = binaries_directory()
    missing = [name for name in BINARIES if not (binaries / name).is_file()]
    if not (binaries / "kwok-crds" / LOGS_CRD).is_file():
        missing.append(f"kwok-crds/{LOGS_CRD}")
    if missing:
        message = (
            f"the real control plane is not built: {', '.join(missing)} missing in {binaries} "
            "(run .ci/k8s-bins.sh)"
        )
        if _running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    processes: list[_Process] = []
    try:
        yield _start(directory, binaries, processes)
    finally:
        for process in reversed(processes):
            process.stop()
        shutil.rmtree(directory / "etcd", ignore_errors=True)
