"""Evidence from the CoCo attestation agent's REST API (guest-components ``api-server-rest``).

``GET {base}/aa/evidence?runtime_data=...[&encoding=base64]`` answers with the SNP report
*parsed into JSON*; :mod:`runner.evidence.agent_json` rebuilds the signed bytes.

Binding encoding. The agent puts the ``runtime_data`` bytes into REPORT_DATA unhashed
(zero-padded to 64). Agents from guest-components v0.21.0 decode ``encoding=base64``
(URL-safe, no padding), so we send SHA-512(binding) as 64 raw bytes ("sha512"). Older agents
ignore ``encoding`` and would put the base64 *text* (86 bytes, too long) into REPORT_DATA, so
for them we send the 64 lowercase hex characters of SHA-256(binding) as plain text
("sha256-hex"), which every agent passes through byte for byte.

Start-up race. The kata agent launches ``api-server-rest`` without waiting for its socket
(kata ``src/agent/src/main.rs``: ``wait_socket: None, timeout_secs: 0``, 3.22.0 … 4.1.0), while it
does wait for the attestation agent and CDH, so the replay container can start before
``127.0.0.1:8006`` listens. :meth:`CocoAgentProvider.check_available` therefore retries "connection
refused" (and only that: any answer means the server is up) for up to ``wait`` seconds before
the agent counts as absent (exit 3, which the Job's pod failure policy treats as final).

Which agent is this? Before anything else the runner asks ``GET /info`` (guest-components
``api-server-rest/src/router.rs``, from v0.18.0: ``{"version": "Guest Components Version:
v0.18.0", "tee": "snp", "feature": ...}``, ``tee`` being kbs-types' lowercase ``Tee`` name) and
refuses to attest (exit 3) when

* there is no ``/info``, or its version is below v0.18.0 or unreadable: the image policy that
  init-data carries (``cdh.toml [image] image_security_policy``) is read only from v0.17.0 and
  silently ignored before, so HOST_DATA would seem to pin an image nothing enforces, and an
  agent without ``/info`` cannot show which it is;

Azure (``tee`` ``azsnpvtpm``, CoCo peer pods). The agent's az-snp-vtpm attester answers with
the paravisor's HCL report (whose SNP report binds a vTPM attestation key), a TPM quote by that
key over the ``runtime_data`` bytes, and the PCR values (shape: :mod:`runner.evidence.
az_vtpm_json`). The runner sends the same REPORT_DATA value it would send for SEV-SNP and
accepts the answer only when the quote's nonce (extraData) is exactly that value; the envelope
then carries ``evidence.kind`` ``az-snp-vtpm`` and the tenant's verifier checks the whole chain
(:mod:`attestation.verify.az_vtpm`). Init-data is bound through PCR 8, not HOST_DATA.

``encoding="auto"`` then picks the binding encoding from that version: 0.21.0 or later selects
"sha512", older ones "sha256-hex". Either way the REPORT_DATA of the returned report must equal
what we asked for, so a wrong guess can only fail, never produce a report over other data.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from typing import Final, Literal, NamedTuple

import structlog

from attestation.abi.tpm import parse_quote
from attestation.envelope.binding import report_data_from_canonical, report_data_matches
from attestation.envelope.model import ReportDataEncoding
from attestation.errors import MalformedError
from attestation.tenant.http import (
    Answer,
    DeadlineExceededError,
    HttpClient,
    HttpError,
    HttpRefusedError,
    HttpUnavailableError,
    Limits,
    RetryPolicy,
)
from runner.errors import EvidenceError, EvidenceUnavailableError
from runner.evidence.agent_json import AgentEvidence, AgentJsonError, agent_evidence_from_document
from runner.evidence.az_vtpm_json import (
    AzVtpmJsonError,
    az_vtpm_evidence_from_document,
    is_az_vtpm_document,
)
from runner.evidence.base import Evidence
from runner.evidence.common import (
    AgentAttestationDisabledError,
    NoTeeError,
    ReportDataMismatchError,
    check_report,
)

DEFAULT_BASE_URL: Final = "http://127.0.0.1:8006"
DEFAULT_TIMEOUT: Final = 30.0
#: How long ``--evidence coco-aa`` waits for the agent's REST server to listen.
DEFAULT_WAIT: Final = 30.0
#: First pause between connection attempts; doubles up to :data:`_MAX_RETRY_PAUSE`.
_FIRST_RETRY_PAUSE: Final = 0.1
_MAX_RETRY_PAUSE: Final = 2.0
#: The first guest-components release whose REST API decodes ``encoding=base64``.
BASE64_MIN_VERSION: Final = (0, 21, 0)
#: The oldest agent the runner attests with: guest-components v0.18.0 (kata 3.28.0), the first
#: with ``GET /info``; it also enforces the inline image policy (from v0.17.0).
AGENT_VERSION_FLOOR: Final = (0, 18, 0)
ENABLE_ANNOTATION: Final = (
    "io.katacontainers.config.hypervisor.kernel_params: "
    '"agent.guest_components_rest_api=attestation"'
)
#: The agent's evidence: the report as JSON (about 6 KB) and its certificates (about 5 KB);
#: a few times that, so an endless or giant answer is cut off early.
MAX_AGENT_EVIDENCE_BYTES: Final = 256 * 1024
#: ``/info`` is a version string and a few fields.
MAX_AGENT_INFO_BYTES: Final = 16 * 1024
_MAX_ERROR_TEXT: Final = 300
_log = structlog.get_logger(__name__)

EncodingChoice = Literal["auto", "sha512", "sha256-hex"]


class AgentVersionError(EvidenceError):
    """The agent is older than the floor, or does not say which version it is."""


class AgentInfo(NamedTuple):
    """What ``GET /info`` says about the agent."""

    version: tuple[int, int, int]
    tee: str | None


#: One attempt per request, every status an answer: the agent is local, a retry could only
#: repeat it or stretch ``timeout`` (which bounds each request whole), and waiting for the REST
#: server to start is :meth:`CocoAgentProvider.check_available`'s own loop.
_AGENT_POLICY: Final = RetryPolicy(attempts=1, retry_statuses=frozenset())


def parse_agent_version(text: str) -> tuple[int, int, int] | None:
    """``"v0.21.0"``/``"0.21.0-rc1"`` -> ``(0, 21, 0)``; ``None`` if there is no version."""
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


class CocoAgentProvider:
    """SEV-SNP evidence from the attestation agent on ``127.0.0.1:8006`` inside a CoCo pod."""

    name = "coco-aa"

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        encoding: EncodingChoice = "auto",
        timeout: float = DEFAULT_TIMEOUT,
        wait: float = DEFAULT_WAIT,
        client: HttpClient | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.encoding = encoding
        self.timeout = timeout
        self.wait = wait
        self.client = client or HttpClient(retry=_AGENT_POLICY, what="agent URL")
        self._clock = clock
        self._sleep = sleep
        self._info: AgentInfo | None = None

    def check_available(self) -> None:
        """Only "nothing listens at the agent's address" counts as unavailable here; any
        answer, even an error, means an agent exists and :meth:`obtain` will report it.

        Nothing listening is retried for up to :attr:`wait` seconds (the REST server may not
        have started yet, see the module docstring), with pauses doubling from 0.1 s to 2 s.
        """
        deadline = self._clock() + self.wait
        pause = _FIRST_RETRY_PAUSE
        attempts = 0
        while True:
            attempts += 1
            try:
                response = self._request("/info", MAX_AGENT_INFO_BYTES)
            except HttpError as exc:
                error = self._transport_error(exc)
                if not isinstance(error, EvidenceUnavailableError):
                    return  # something answered or broke: obtain() reports it
                remaining = deadline - self._clock()
                if remaining <= 0:
                    if attempts > 1:
                        error = EvidenceUnavailableError(
                            f"{error}; nothing listened within {self.wait:g} s "
                            f"({attempts} attempts): the agent's REST server (api-server-rest) "
                            "did not start"
                        )
                    raise error from exc
                _log.info("coco_aa_waiting", url=self.base_url, attempt=attempts)
                self._sleep(min(pause, remaining))
                pause = min(pause * 2, _MAX_RETRY_PAUSE)
                continue
            # An agent listens: check before the replay that it is one we can attest with.
            self._info = self._check_info(response)
            return

    def obtain(self, canonical_binding: bytes) -> Evidence:
        info = self.agent_info()
        encoding = self.encoding if self.encoding != "auto" else _encoding_for(info)
        report_data = report_data_from_canonical(canonical_binding, encoding)
        if encoding == "sha512":
            params = {
                "runtime_data": base64.urlsafe_b64encode(report_data).rstrip(b"=").decode(),
                "encoding": "base64",
            }
        else:
            params = {"runtime_data": report_data.decode("ascii")}
        body = self._get("/aa/evidence", params)
        document = self._document(body)
        if is_az_vtpm_document(document):
            return self._azure_evidence(document, report_data, encoding)
        evidence = self._parse(document)
        return Evidence(
            report=check_report(evidence.report, report_data, provider=self.name),
            cert_chain=evidence.certificates,
            provider=self.name,
            report_data_encoding=encoding,
        )

    def _azure_evidence(
        self, document: object, report_data: bytes, encoding: ReportDataEncoding
    ) -> Evidence:
        """az-snp-vtpm evidence whose quote carries exactly ``report_data`` as its nonce."""
        try:
            answer = az_vtpm_evidence_from_document(document)
            quote = parse_quote(answer.evidence.quote)
        except (AzVtpmJsonError, MalformedError) as exc:
            raise EvidenceError(f"coco-aa: malformed az-snp-vtpm evidence: {exc}") from exc
        if not report_data_matches(report_data, quote.extra_data):
            raise ReportDataMismatchError(
                f"{self.name}: the vTPM quote's nonce ({quote.extra_data.hex()}) is not what was "
                f"requested ({report_data.hex()}); refusing the evidence"
            )
        _log.info("coco_aa_az_snp_vtpm", version=answer.evidence.format_version)
        return Evidence(
            report=answer.evidence.hcl_report,
            cert_chain=(answer.vcek_der,),
            provider=self.name,
            report_data_encoding=encoding,
            vtpm=answer.evidence,
        )

    def agent_info(self) -> AgentInfo:
        """The agent's ``/info``, checked (version floor, TEE); asked once per provider."""
        if self._info is None:
            try:
                response = self._request("/info", MAX_AGENT_INFO_BYTES)
            except HttpError as exc:
                raise self._transport_error(exc) from exc
            self._info = self._check_info(response)
        return self._info

    def _check_info(self, response: Answer) -> AgentInfo:
        url = f"{self.base_url}/info"
        floor = "v{}.{}.{}".format(*AGENT_VERSION_FLOOR)
        if response.status == 404:
            raise AgentVersionError(
                f"coco-aa: {url} answered 404: the attestation agent has no /info, so it is "
                f"older than guest-components {floor} (kata-containers 3.28.0), the floor "
                "attested-replay needs to know that the guest enforces the image policy in "
                "init-data (agents before v0.17.0 ignore it); refusing to attest"
            )
        if response.status != 200:
            text = response.text(_MAX_ERROR_TEXT).strip()
            raise EvidenceError(f"coco-aa: {url} answered HTTP {response.status}: {text}")
        try:
            info = response.json("the answer")
        except HttpRefusedError as exc:
            raise EvidenceError(f"coco-aa: {url} did not answer JSON ({exc})") from exc
        if not isinstance(info, dict):
            raise EvidenceError(f"coco-aa: {url} did not answer a JSON object")
        raw_version = str(info.get("version", ""))[:_MAX_ERROR_TEXT]
        version = parse_agent_version(raw_version)
        if version is None or version < AGENT_VERSION_FLOOR:
            found = "no version" if version is None else "v{}.{}.{}".format(*version)
            raise AgentVersionError(
                f"coco-aa: the attestation agent reports {found} ({raw_version!r}), below the "
                f"floor guest-components {floor} (kata-containers 3.28.0) that attested-replay "
                "needs to know that the guest enforces the image policy in init-data; "
                "refusing to attest"
            )
        tee = info.get("tee")
        tee = tee if isinstance(tee, str) else None
        if tee == "sample":
            raise NoTeeError(
                "coco-aa: the agent's TEE is the sample attester (no TEE): this pod runs without "
                "SEV-SNP (e.g. runtime class kata-qemu-coco-dev); use kata-qemu-snp"
            )
        _log.info("coco_aa_agent", agent_version=version, tee=tee)
        return AgentInfo(version, tee)

    def _request(self, path: str, max_bytes: int, params: dict[str, str] | None = None) -> Answer:
        return self.client.get(
            f"{self.base_url}{path}", limit=Limits(max_bytes, self.timeout), params=params
        )

    def _get(self, path: str, params: dict[str, str]) -> Answer:
        url = f"{self.base_url}{path}"
        try:
            answer = self._request(path, MAX_AGENT_EVIDENCE_BYTES, params)
        except HttpError as exc:
            raise self._transport_error(exc) from exc
        text = answer.text(_MAX_ERROR_TEXT).strip()
        if answer.status == 404:
            raise AgentAttestationDisabledError(
                f"coco-aa: {url} answered 404 ({text or 'no body'}): the agent's "
                f"attestation endpoints are off in this pod. Add the pod annotation "
                f"{ENABLE_ANNOTATION} (it changes the launch MEASUREMENT)"
            )
        if answer.status == 403:
            raise EvidenceError(
                f"coco-aa: {url} answered 403: the agent only serves requests from loopback"
            )
        if answer.status != 200:
            raise EvidenceError(f"coco-aa: {url} answered HTTP {answer.status}: {text}")
        return answer

    def _transport_error(self, exc: HttpError) -> EvidenceError:
        if isinstance(exc, DeadlineExceededError):
            return EvidenceError(f"coco-aa: no answer from {self.base_url} within {self.timeout} s")
        if isinstance(exc, HttpUnavailableError) and exc.refused:
            return EvidenceUnavailableError(
                f"coco-aa: no attestation agent at {self.base_url} (connection refused)"
            )
        # Something listens but the exchange broke (reset, closed mid-answer, an answer over
        # its cap): that agent exists, so `auto` must stop here with this error rather than
        # report "no agent".
        return EvidenceError(f"coco-aa: request to {self.base_url} failed: {exc}")

    def _document(self, answer: Answer) -> object:
        try:
            return answer.json("the answer")
        except HttpRefusedError as exc:
            raise EvidenceError(f"coco-aa: the agent's evidence is not JSON ({exc})") from exc

    def _parse(self, doc: object) -> AgentEvidence:
        if isinstance(doc, dict) and set(doc) == {"svn", "report_data"}:
            raise NoTeeError(
                "coco-aa: the agent answered with the sample attester (no TEE): this pod runs "
                "without SEV-SNP (e.g. runtime class kata-qemu-coco-dev); use kata-qemu-snp"
            )
        try:
            return agent_evidence_from_document(doc)
        except AgentJsonError as exc:
            raise EvidenceError(f"coco-aa: malformed SNP evidence from the agent: {exc}") from exc


def _encoding_for(info: AgentInfo) -> ReportDataEncoding:
    chosen: ReportDataEncoding = "sha512" if info.version >= BASE64_MIN_VERSION else "sha256-hex"
    _log.info("coco_aa_encoding", agent_version=info.version, encoding=chosen)
    return chosen
