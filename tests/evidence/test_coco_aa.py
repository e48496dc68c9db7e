"""coco-aa provider against a real HTTP server on loopback that speaks the agent's API."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import http.server
import json
import socket
import threading
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from pytest_httpserver import HTTPServer

from attestation.abi.product import ProductLine
from attestation.abi.tpm import parse_quote
from attestation.endorsement.trust import TrustStore
from attestation.envelope.binding import report_data_from_canonical
from attestation.simulated_amd import SimulatedAmd
from attestation.verify.policy import CRYPTO_ONLY
from attestation.verify.verifier import verify_report
from runner.errors import EvidenceError, EvidenceUnavailableError
from runner.evidence.az_vtpm_json import AzVtpmJsonError, az_vtpm_evidence_from_document
from runner.evidence.coco_aa import (
    AgentVersionError,
    CocoAgentProvider,
    parse_agent_version,
)
from runner.evidence.common import (
    AgentAttestationDisabledError,
    NoTeeError,
    ReportDataMismatchError,
)
from runner.exit_codes import exit_code_for
from tests.azure_sets import AZURE
from tests.azure_sets import load as load_azure_set
from tests.evidence.emulators import AZURE_EVIDENCE, AgentEmulator, assert_chain_signs


def _serve(server: HTTPServer, agent: AgentEmulator) -> CocoAgentProvider:
    server.expect_request("/info").respond_with_handler(agent.info)
    server.expect_request("/aa/evidence").respond_with_handler(agent.evidence)
    return CocoAgentProvider(server.url_for("/").rstrip("/"), timeout=5)


@pytest.mark.parametrize(
    ("text", "version"),
    [("v0.21.0", (0, 21, 0)), ("0.17.1-rc2", (0, 17, 1)), ("unknown", None)],
)
def test_parse_agent_version(text: str, version: tuple[int, int, int] | None) -> None:
    assert parse_agent_version(text) == version


def test_new_agent_gets_base64_sha512(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    agent = AgentEmulator(sim_amd, version="v0.21.0")
    evidence = _serve(httpserver, agent).obtain(binding)
    digest = hashlib.sha512(binding).digest()
    assert evidence.report_data_encoding == "sha512"
    assert evidence.report[0x50:0x90] == digest
    assert agent.requests == [
        {
            "runtime_data": base64.urlsafe_b64encode(digest).rstrip(b"=").decode(),
            "encoding": "base64",
        }
    ]
    assert evidence.cert_chain == ()  # the agent sent "cert_chain": null
    assert evidence.provider == "coco-aa"


def test_old_agent_gets_hex_text(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    agent = AgentEmulator(sim_amd, version="v0.20.0")
    evidence = _serve(httpserver, agent).obtain(binding)
    hex_text = hashlib.sha256(binding).hexdigest()
    assert evidence.report_data_encoding == "sha256-hex"
    assert evidence.report[0x50:0x90] == hex_text.encode("ascii")
    assert agent.requests == [{"runtime_data": hex_text}]


def test_version_is_compared_as_numbers(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    """v0.3.0 is older than the v0.18.0 floor although it sorts after it as a string."""
    agent = AgentEmulator(sim_amd, version="v0.3.0")
    with pytest.raises(AgentVersionError, match=r"reports v0\.3\.0 .* below the floor"):
        _serve(httpserver, agent).obtain(binding)
    assert agent.requests == []
    newer = AgentEmulator(sim_amd, version="v0.100.0")
    httpserver.clear()
    assert _serve(httpserver, newer).obtain(binding).report_data_encoding == "sha512"


@pytest.mark.parametrize(
    ("version", "found"),
    [
        (None, "has no /info"),
        ("v0.17.0", "reports v0.17.0 ('Guest Components Version: v0.17.0'), below the floor"),
        ("", "reports no version ('Guest Components Version: '), below the floor"),
        ("v0.17.0-17-g9aae2eae", "reports v0.17.0"),
    ],
)
def test_agents_below_the_floor_are_refused_before_the_replay(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, version: str | None, found: str
) -> None:
    """Below guest-components v0.18.0 the runner cannot know the image policy is enforced."""
    agent = AgentEmulator(sim_amd, version=version)
    provider = _serve(httpserver, agent)
    with pytest.raises(AgentVersionError, match=r"guest-components v0\.18\.0") as caught:
        provider.check_available()
    assert found in str(caught.value)
    assert "refusing to attest" in str(caught.value)
    assert exit_code_for(caught.value) == 3
    assert agent.requests == []


@pytest.mark.parametrize("version", ["v0.18.0", "v0.21.0-67-gd4dce5ce"])
def test_agents_at_or_above_the_floor_are_accepted(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes, version: str
) -> None:
    provider = _serve(httpserver, AgentEmulator(sim_amd, version=version))
    provider.check_available()
    assert provider.obtain(binding).provider == "coco-aa"


@pytest.mark.parametrize("version", [1, 2])
def test_azure_vtpm_evidence_over_the_requested_nonce_is_accepted(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes, version: int
) -> None:
    agent = AgentEmulator(sim_amd, tee="azsnpvtpm", mode="azure-sim", azure_version=version)
    provider = _serve(httpserver, agent)
    provider.check_available()
    evidence = provider.obtain(binding)
    assert evidence.vtpm is not None
    assert evidence.vtpm.format_version == version
    assert evidence.report == evidence.vtpm.hcl_report
    assert len(evidence.report) == 2600
    assert parse_quote(evidence.vtpm.quote).extra_data == hashlib.sha512(binding).digest()
    assert len(evidence.cert_chain) == 1  # the VCEK; the pod mounts ASK and ARK
    assert agent.requests[0]["encoding"] == "base64"


def test_azure_vtpm_quote_over_another_nonce_is_refused(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    agent = AgentEmulator(sim_amd, tee="azsnpvtpm", mode="azure-sim-wrong-nonce")
    with pytest.raises(ReportDataMismatchError, match="the vTPM quote's nonce") as caught:
        _serve(httpserver, agent).obtain(binding)
    assert exit_code_for(caught.value) == 3


def test_real_azure_evidence_is_refused_for_its_nonce(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    """Real az-snp-vtpm evidence (trustee's test data, nonce "challenge") answers any request:
    the quote's nonce is not the one asked for."""
    agent = AgentEmulator(sim_amd, tee=None, mode="azure")
    with pytest.raises(ReportDataMismatchError, match=b"challenge".hex()):
        _serve(httpserver, agent).obtain(binding)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 3}, "version 3 is not 1 or 2"),
        ({"hcl_report": "***"}, "hcl_report is not base64url"),
        ({"tpm_quote": {"message": "00"}}, "tpm_quote must be an object"),
        ({"extra": 1}, "keys "),
    ],
)
def test_malformed_azure_evidence_is_refused(change: dict[str, object], message: str) -> None:
    document = json.loads(AZURE_EVIDENCE.read_text())
    document.update(change)
    with pytest.raises(AzVtpmJsonError, match=message):
        az_vtpm_evidence_from_document(document)


def test_sample_tee_is_no_tee(httpserver: HTTPServer, sim_amd: SimulatedAmd) -> None:
    with pytest.raises(NoTeeError, match="sample attester"):
        _serve(httpserver, AgentEmulator(sim_amd, tee="sample")).check_available()


def test_forcing_base64_on_an_old_agent_fails_loudly(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    """An old agent ignores encoding=base64: the 86-character text is too long for it."""
    agent = AgentEmulator(sim_amd, version="v0.20.0")
    provider = _serve(httpserver, agent)
    provider.encoding = "sha512"
    with pytest.raises(
        EvidenceError, match="HTTP 500: SNP Attester: runtime data must be <= 64"
    ) as caught:
        provider.obtain(binding)
    assert type(caught.value) is EvidenceError


def test_forced_hex_on_new_agent(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    agent = AgentEmulator(sim_amd, version="v0.21.0")
    provider = _serve(httpserver, agent)
    provider.encoding = "sha256-hex"
    assert provider.obtain(binding).report_data_encoding == "sha256-hex"


@pytest.mark.parametrize("product", [ProductLine.MILAN, ProductLine.GENOA, ProductLine.TURIN])
def test_full_cert_chain_is_returned_signer_first(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes, product: ProductLine
) -> None:
    agent = AgentEmulator(sim_amd, chain="full", product_line=product)
    evidence = _serve(httpserver, agent).obtain(binding)
    assert_chain_signs(evidence.report, evidence.cert_chain, sim_amd)


def test_empty_cert_chain(httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes) -> None:
    agent = AgentEmulator(sim_amd, chain="empty")
    assert _serve(httpserver, agent).obtain(binding).cert_chain == ()


def test_feature_disabled_names_the_annotation(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    agent = AgentEmulator(sim_amd, mode="disabled")
    with pytest.raises(AgentAttestationDisabledError) as info:
        _serve(httpserver, agent).obtain(binding)
    message = str(info.value)
    assert "Attestation Feature Not Enabled" in message
    assert (
        'io.katacontainers.config.hypervisor.kernel_params: "agent.guest_components_rest_api='
        'attestation"' in message
    )
    assert isinstance(info.value, EvidenceUnavailableError)
    assert exit_code_for(info.value) == 3


def test_no_tee_sample_attester(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    agent = AgentEmulator(sim_amd, mode="sample")
    with pytest.raises(NoTeeError, match=r"no TEE.*kata-qemu-coco-dev"):
        _serve(httpserver, agent).obtain(binding)


def test_server_error(httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes) -> None:
    agent = AgentEmulator(sim_amd, mode="error500")
    with pytest.raises(EvidenceError, match="answered HTTP 500: get evidence failed") as info:
        _serve(httpserver, agent).obtain(binding)
    assert type(info.value) is EvidenceError
    assert not isinstance(info.value, EvidenceUnavailableError)


def test_timeout(httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes) -> None:
    agent = AgentEmulator(sim_amd, mode="slow")  # answers only once released
    provider = _serve(httpserver, agent)
    provider.timeout = 0.2
    try:
        with pytest.raises(EvidenceError, match=r"no answer from .* within 0\.2 s") as info:
            provider.obtain(binding)
    finally:
        agent.release.set()
    assert type(info.value) is EvidenceError


def test_malformed_json(httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes) -> None:
    agent = AgentEmulator(sim_amd, mode="malformed")
    with pytest.raises(EvidenceError, match="evidence is not JSON") as caught:
        _serve(httpserver, agent).obtain(binding)
    assert type(caught.value) is EvidenceError


def test_evidence_of_the_wrong_shape_names_the_field(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    agent = AgentEmulator(sim_amd, mode="wrong-shape")
    with pytest.raises(EvidenceError) as info:
        _serve(httpserver, agent).obtain(binding)
    assert type(info.value) is EvidenceError
    assert str(info.value) == (
        "coco-aa: malformed SNP evidence from the agent: attestation_report lacks chip_id"
    )
    assert not isinstance(info.value, EvidenceUnavailableError)


def test_report_over_other_data_is_refused(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    agent = AgentEmulator(sim_amd, mode="wrong-data")
    with pytest.raises(ReportDataMismatchError, match="is not what was requested"):
        _serve(httpserver, agent).obtain(binding)


def test_forbidden(httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes) -> None:
    httpserver.expect_request("/info").respond_with_handler(AgentEmulator(sim_amd).info)
    httpserver.expect_request("/aa/evidence").respond_with_data("Forbidden", status=403)
    provider = CocoAgentProvider(httpserver.url_for("/").rstrip("/"), encoding="sha256-hex")
    with pytest.raises(
        EvidenceError, match="403: the agent only serves requests from loopback"
    ) as caught:
        provider.obtain(binding)
    assert type(caught.value) is EvidenceError


def free_loopback_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_no_agent_listening_is_unavailable(binding: bytes) -> None:
    url = f"http://127.0.0.1:{free_loopback_port()}"
    provider = CocoAgentProvider(url, timeout=2)
    with pytest.raises(EvidenceUnavailableError, match="no attestation agent at") as caught:
        provider.obtain(binding)
    assert type(caught.value) is EvidenceUnavailableError


class _Clock:
    """A clock that only moves when the provider sleeps: waits cost no real time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def test_agent_that_never_listens_is_given_up_after_the_wait() -> None:
    clock = _Clock()
    provider = CocoAgentProvider(
        f"http://127.0.0.1:{free_loopback_port()}",
        wait=5,
        clock=lambda: clock.now,
        sleep=clock.sleep,
    )
    with pytest.raises(EvidenceUnavailableError) as caught:
        provider.check_available()
    assert clock.pauses == [0.1, 0.2, 0.4, 0.8, 1.6, pytest.approx(1.9)]
    assert str(caught.value).endswith(
        "nothing listened within 5 s (7 attempts): the agent's REST server (api-server-rest) "
        "did not start"
    )
    assert str(caught.value).startswith("coco-aa: no attestation agent at http://127.0.0.1:")
    assert exit_code_for(caught.value) == 3


def test_agent_that_starts_late_is_waited_for() -> None:
    """The kata agent spawns api-server-rest without waiting for its socket: the first
    connections are refused, then it answers."""
    server = http.server.HTTPServer(
        ("127.0.0.1", 0), http.server.BaseHTTPRequestHandler, bind_and_activate=False
    )
    server.server_bind()  # bound, not listening: connections are refused
    port = server.server_address[1]

    def start_later() -> None:
        time.sleep(0.5)
        server.server_activate()
        server.handle_request()  # answers 501 to GET /info: an agent exists

    thread = threading.Thread(target=start_later, daemon=True)
    thread.start()
    try:
        provider = CocoAgentProvider(f"http://127.0.0.1:{port}", wait=30)
        started = time.monotonic()
        # The wait ends at the first answer; that answer is then checked (no usable /info).
        with pytest.raises(EvidenceError, match="answered HTTP 501") as caught:
            provider.check_available()
        assert not isinstance(caught.value, EvidenceUnavailableError)
        assert time.monotonic() - started < 10
    finally:
        thread.join()
        server.server_close()


def test_any_answer_ends_the_wait(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/info").respond_with_data("nope", status=500)
    clock = _Clock()
    provider = CocoAgentProvider(
        httpserver.url_for("/").rstrip("/"), wait=30, clock=lambda: clock.now, sleep=clock.sleep
    )
    with pytest.raises(EvidenceError, match="answered HTTP 500: nope") as caught:
        provider.check_available()
    assert type(caught.value) is EvidenceError  # an agent answered: not "unavailable"
    assert clock.pauses == []


def test_agent_that_hangs_up_is_an_error_not_absence(binding: bytes) -> None:
    """Something listens but closes every connection without answering: the agent exists
    and is broken, so this must not read as "no agent" (which would let `auto` move on)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def hang_up() -> None:  # one request (forced encoding: no /info), one hang-up
            connection, _ = listener.accept()
            connection.close()

        thread = threading.Thread(target=hang_up, daemon=True)
        thread.start()
        provider = CocoAgentProvider(f"http://127.0.0.1:{port}", encoding="sha512", timeout=5)
        with pytest.raises(EvidenceError, match=r"coco-aa: request to .* failed") as info:
            provider.obtain(binding)
        assert type(info.value) is EvidenceError
        thread.join()
    assert not isinstance(info.value, EvidenceUnavailableError)


@pytest.mark.parametrize(
    ("version", "encoding"), [("v0.21.0", "sha512"), ("v0.20.0", "sha256-hex")]
)
def test_agent_evidence_verifies_with_the_simulated_root_pinned(
    httpserver: HTTPServer, sim_amd: SimulatedAmd, binding: bytes, version: str, encoding: str
) -> None:
    """The rebuilt report passes the tenant's report verifier (signature, chain, TCB)."""
    agent = AgentEmulator(sim_amd, version=version, chain="full")
    evidence = _serve(httpserver, agent).obtain(binding)
    assert evidence.report_data_encoding == encoding
    assert evidence.report[0x50:0x90] == report_data_from_canonical(binding, encoding)
    certificates = [x509.load_der_x509_certificate(der) for der in evidence.cert_chain]
    trust = TrustStore.amd().with_simulated_root(sim_amd.ark_pem.encode())
    result = verify_report(
        evidence.report, certificates, policy=CRYPTO_ONLY, trust=trust, now=dt.datetime.now(dt.UTC)
    )
    assert result.ok, [c.to_json_dict() for c in result.failed_checks]
    untrusting = verify_report(
        evidence.report,
        certificates,
        policy=CRYPTO_ONLY,
        trust=TrustStore.amd(),
        now=dt.datetime.now(dt.UTC),
    )
    assert not untrusting.ok  # without pinning, simulated evidence never verifies


@pytest.mark.parametrize(
    "name", ["evidence-v0.json", "evidence-v1.json", "evidence-v2.json", "evidence-genoa.json"]
)
def test_every_real_azure_answer_decodes_to_its_evidence(name: str) -> None:
    evidence_set = load_azure_set(name)
    answer = az_vtpm_evidence_from_document(json.loads((AZURE / name).read_text()))
    assert answer.evidence == evidence_set.evidence
    first = x509.load_pem_x509_certificates(evidence_set.endorsement)[0]
    assert answer.vcek_der == first.public_bytes(serialization.Encoding.DER)
