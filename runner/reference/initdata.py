"""CoCo init-data: the TOML that Kata hashes into HOST_DATA (design/coco-runtime.md 1d).

Document (Kata ``kata-types/src/initdata.rs``)::

    version = "0.1.0"
    algorithm = "sha256" | "sha384" | "sha512"     # no dash: Kata rejects "sha-256"
    [data]
    "aa.toml" = ...      # attestation-agent config
    "cdh.toml" = ...     # confidential-data-hub config, here with the image policy
    "policy.rego" = ...  # the Kata agent policy

HOST_DATA = algorithm(TOML bytes exactly as sent), cut or zero-padded to 32 bytes. The pod
annotation ``io.katacontainers.config.hypervisor.cc_init_data`` carries base64(gzip(TOML));
we gzip with mtime 0 so the annotation is reproducible.

Container images are not in MEASUREMENT, and Kata's generated agent policy does not pin the
image pulled inside the guest, so ``cdh.toml`` carries an image policy that rejects every
image except the pinned digest; through HOST_DATA the report then commits to that image.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Final, Literal

from runner.errors import UsageError

INITDATA_VERSION: Final = "0.1.0"
ANNOTATION: Final = "io.katacontainers.config.hypervisor.cc_init_data"
HOST_DATA_SIZE: Final = 32
Algorithm = Literal["sha256", "sha384", "sha512"]
ALGORITHMS: Final[tuple[Algorithm, ...]] = ("sha256", "sha384", "sha512")
_PINNED_IMAGE = re.compile(
    r"^(?P<repo>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)+)"
    r"@(?P<digest>sha256:[0-9a-f]{64})$"
)

#: Default agent policy: every agent request is allowed except exec, changing the policy at
#: run time, and writing to a container's stdin. Copying files stays allowed because with
#: ``shared_fs=none`` Kata delivers ConfigMap/Secret volumes (the endorsement bundle) that
#: way. For production generate a pod-specific policy with Kata's genpolicy; this default
#: only keeps operators out of the running VM.
DEFAULT_POLICY_REGO: Final = """package agent_policy

default AddARPNeighborsRequest := true
default AddSwapRequest := true
default CloseStdinRequest := true
default CopyFileRequest := true
default CreateContainerRequest := true
default CreateSandboxRequest := true
default DestroySandboxRequest := true
default ExecProcessRequest := false
default GetMetricsRequest := true
default GetOOMEventRequest := true
default GuestDetailsRequest := true
default ListInterfacesRequest := true
default ListRoutesRequest := true
default MemHotplugByProbeRequest := true
default OnlineCPUMemRequest := true
default PauseContainerRequest := true
default PullImageRequest := true
default ReadStreamRequest := true
default RemoveContainerRequest := true
default RemoveStaleVirtiofsShareMountsRequest := true
default ReseedRandomDevRequest := true
default ResumeContainerRequest := true
default SetGuestDateTimeRequest := true
default SetPolicyRequest := false
default SignalProcessRequest := true
default StartContainerRequest := true
default StartTracingRequest := true
default StatsContainerRequest := true
default StopTracingRequest := true
default TtyWinResizeRequest := true
default UpdateContainerRequest := true
default UpdateEphemeralMountsRequest := true
default UpdateInterfaceRequest := true
default UpdateRoutesRequest := true
default WaitProcessRequest := true
default WriteStreamRequest := false
"""

#: Default attestation-agent config: no KBS; the runner only asks for evidence.
DEFAULT_AA_TOML: Final = (
    "# attestation-agent: no token or KBS configured (attested-replay asks for evidence only)\n"
)


def image_policy_json(image: str) -> str:
    """containers-policy.json: reject everything, accept only ``repo@sha256:...``."""
    policy = {
        "default": [{"type": "reject"}],
        "transports": {"docker": {image: [{"type": "insecureAcceptAnything"}]}},
    }
    return json.dumps(policy, indent=2, sort_keys=True)


def default_cdh_toml(image: str) -> str:
    """CDH config whose ``[image]`` policy admits only the pinned image."""
    return (
        'socket = "unix:///run/confidential-containers/cdh.sock"\n'
        "\n"
        "[kbc]\n"
        'name = "offline_fs_kbc"\n'
        'url = ""\n'
        "\n"
        "[image]\n"
        f"image_security_policy = {_toml_string(image_policy_json(image))}\n"
    )


def check_pinned_image(image: str) -> str:
    """``registry/repo@sha256:<64 hex>`` or a UsageError (a tag would not pin anything)."""
    if _PINNED_IMAGE.fullmatch(image) is None:
        raise UsageError(
            f"--image {image!r} must be pinned by digest: registry/repository@sha256:<64 hex>"
        )
    return image


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _toml_string(text: str) -> str:
    """A TOML string for ``text``: a multi-line literal when that is exact, else escaped."""
    if (
        "'''" not in text
        and not text.endswith("'")
        and "\r" not in text
        and not _CONTROL.search(text)
    ):
        # A newline right after the opening delimiter is trimmed by TOML, so content is exact.
        return "'''\n" + text + "'''"
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


@dataclass(frozen=True, slots=True)
class InitData:
    """A rendered init-data document and the values derived from it."""

    toml: bytes
    algorithm: Algorithm

    @property
    def digest(self) -> bytes:
        return hashlib.new(self.algorithm, self.toml).digest()

    @property
    def host_data(self) -> bytes:
        """HOST_DATA as Kata sets it: the digest cut or zero-padded to 32 bytes."""
        return self.digest[:HOST_DATA_SIZE].ljust(HOST_DATA_SIZE, b"\0")

    @property
    def annotation_value(self) -> str:
        """base64(gzip(TOML)) with a fixed gzip header (mtime 0): reproducible."""
        return init_data_annotation(self.toml)

    def host_data_snippet(self) -> dict[str, list[str]]:
        """The expected-values key: ``{"hostData": ["<64 hex>"]}``."""
        return {"hostData": [self.host_data.hex()]}


def render_initdata(
    *,
    image: str,
    algorithm: Algorithm = "sha256",
    policy_rego: str | None = None,
    aa_toml: str | None = None,
    cdh_toml: str | None = None,
) -> InitData:
    """Build the init-data TOML. ``cdh_toml`` replaces the generated one entirely; it must
    then carry its own image policy (we check that it names the pinned image)."""
    check_pinned_image(image)
    if algorithm not in ALGORITHMS:
        raise UsageError(f"--algorithm must be one of {', '.join(ALGORITHMS)}")
    cdh = cdh_toml if cdh_toml is not None else default_cdh_toml(image)
    if image not in cdh:
        raise UsageError(
            "the --cdh-toml file does not mention the pinned image digest: without an image "
            "policy, HOST_DATA would not commit to the container image"
        )
    entries = {
        "aa.toml": aa_toml if aa_toml is not None else DEFAULT_AA_TOML,
        "cdh.toml": cdh,
        "policy.rego": policy_rego if policy_rego is not None else DEFAULT_POLICY_REGO,
    }
    lines = [f'version = "{INITDATA_VERSION}"', f'algorithm = "{algorithm}"', "", "[data]"]
    lines.extend(f'"{name}" = {_toml_string(content)}' for name, content in entries.items())
    return InitData(("\n".join(lines) + "\n").encode("utf-8"), algorithm)


def init_data_annotation(toml_bytes: bytes) -> str:
    """The ``cc_init_data`` annotation value: base64(gzip(TOML)) as Kata reads it, gzipped
    with mtime 0 so the same TOML always gives the same annotation."""
    return base64.b64encode(gzip.compress(toml_bytes, compresslevel=9, mtime=0)).decode("ascii")
