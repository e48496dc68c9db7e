"""CoCo init-data: the TOML that Kata hashes into HOST_DATA.

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

HOST_DATA (kata-types ``calculate_initdata_digest`` + ``adjust_digest``) therefore commits to
everything below. Container images are not in MEASUREMENT: ``cdh.toml`` carries an image policy
that rejects every image except the pinned digest, and ``policy.rego``
(:mod:`runner.coco.policy`) admits exactly the replay container of one Job.
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
#: ``registry/repository@sha256:<64 hex>`` with the registry written out (a host with a dot or
#: a port, or ``localhost``): then containerd's normalisation leaves the reference unchanged, and
#: the string the Job names is the one the guest pulls (the guest-pull storage's ``source`` is the
#: ``io.kubernetes.cri.image-name`` annotation, kata_agent.go ``handleImageGuestPullBlockVolume``)
#: and the key the image policy matches (image-rs matches ``Reference::whole()`` first).
_PINNED_IMAGE = re.compile(
    r"^(?P<registry>(?:[a-z0-9]+(?:-+[a-z0-9]+)*\.)+[a-z0-9]+(?:-+[a-z0-9]+)*(?::[0-9]{1,5})?"
    r"|[a-z0-9]+(?:-+[a-z0-9]+)*:[0-9]{1,5}|localhost)"
    r"(?P<path>(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)+)"
    r"@(?P<digest>sha256:[0-9a-f]{64})$"
)

#: attested-replay asks the attestation agent for evidence only: no KBS, no token. Every table
#: of the agent's config has a default (guest-components attestation-agent ``config/mod.rs``:
#: ``token_configs`` serde default, ``eventlog_config`` set by the builder; an empty file is one of
#: upstream's parser test inputs), so a file with only a comment is a complete config.
AA_TOML: Final = (
    "# attestation-agent: no token or KBS configured (attested-replay asks for evidence only)\n"
)


def image_policy_json(image: str) -> str:
    """containers-policy.json: reject everything, accept only ``repo@sha256:...``."""
    policy = {
        "default": [{"type": "reject"}],
        "transports": {"docker": {image: [{"type": "insecureAcceptAnything"}]}},
    }
    return json.dumps(policy, indent=2, sort_keys=True)


def cdh_toml(image: str) -> str:
    """CDH config whose ``[image]`` policy admits only the pinned image.

    ``[kbc]`` with ``name`` is required by CDH's parser (guest-components
    ``confidential-data-hub/hub/src/config``: ``kbc: KbsConfig`` without a serde default,
    ``name: String``); without it CDH exits and the kata agent aborts the sandbox.
    ``offline_fs_kbc`` is upstream's own fallback when no KBS is configured. The inline
    ``image_security_policy`` is read from guest-components v0.17.0 (kata 3.25.0); older CDHs
    ignore the key silently.
    """
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
            f"--image {image!r} must be pinned by digest with its registry written out: "
            "registry.host/repository@sha256:<64 hex> (a tag is mutable; a short name such as "
            "library/x is rewritten by the container runtime and would not match the policies)"
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


def render_initdata(*, image: str, policy_rego: str, algorithm: Algorithm = "sha256") -> InitData:
    """The init-data TOML of a replay pod: its agent policy, the AA config and the CDH config
    with the image policy for ``image``."""
    check_pinned_image(image)
    if algorithm not in ALGORITHMS:
        raise UsageError(f"--algorithm must be one of {', '.join(ALGORITHMS)}")
    entries = {"aa.toml": AA_TOML, "cdh.toml": cdh_toml(image), "policy.rego": policy_rego}
    lines = [f'version = "{INITDATA_VERSION}"', f'algorithm = "{algorithm}"', "", "[data]"]
    lines.extend(f'"{name}" = {_toml_string(content)}' for name, content in entries.items())
    return InitData(("\n".join(lines) + "\n").encode("utf-8"), algorithm)


def init_data_annotation(toml_bytes: bytes) -> str:
    """The ``cc_init_data`` annotation value: base64(gzip(TOML)) as Kata reads it, gzipped
    with mtime 0 so the same TOML always gives the same annotation."""
    return base64.b64encode(gzip.compress(toml_bytes, compresslevel=9, mtime=0)).decode("ascii")
