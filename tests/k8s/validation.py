"""Object-meta and pod-template validation of a Job, as kube-apiserver answers it (422).

Read from Kubernetes v1.34 ``pkg/apis/core/validation/validation.go`` (ValidateVolumeMounts,
ValidateResourceRequirements, the Job template's restart policy in
``pkg/apis/batch/validation/validation.go`` validateJobSpec and
validatePodFailurePolicyRuleOnExitCodes) and apimachinery ``pkg/api/validation/objectmeta.go``
(ValidateAnnotationsSize) / ``pkg/apis/meta/v1/validation`` (ValidateLabels). Field paths and
messages are the real server's, checked against it by tests/k8s/test_real_cluster.py where the
real control plane runs.
"""

from __future__ import annotations

import itertools
import json
import re
from fractions import Fraction
from typing import Any, Final

#: apimachinery ``TotalAnnotationSizeLimitB``: keys and values of one object's annotations.
TOTAL_ANNOTATION_SIZE_LIMIT: Final = 256 * 1024
#: apimachinery ``validation.LabelValueMaxLength``.
LABEL_VALUE_MAX_LENGTH: Final = 63
_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY: Final = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]?)$")


def quantity(text: str) -> Fraction:
    """A resource quantity's value (apimachinery ``resource.ParseQuantity`` suffixes)."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in {"e", "E"}:
        return number * Fraction(10) ** int(suffix[1:])
    return number * _DECIMAL[suffix]


def _annotations_size(annotations: dict[str, str], path: str) -> list[str]:
    total = sum(len(key) + len(value) for key, value in annotations.items())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        return [f"{path}: Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"]
    return []


def _labels(labels: dict[str, str], path: str) -> list[str]:
    return [
        f"{path}: Invalid value: {json.dumps(value)}: must be no more than "
        f"{LABEL_VALUE_MAX_LENGTH} characters"
        for value in labels.values()
        if len(value) > LABEL_VALUE_MAX_LENGTH
    ]


def _container(container: dict[str, Any], volumes: set[str], path: str) -> list[str]:
    problems = [
        f'{path}.volumeMounts[{index}].name: Not found: "{mount["name"]}"'
        for index, mount in enumerate(container.get("volumeMounts") or [])
        if mount["name"] not in volumes
    ]
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    for name, request in (resources.get("requests") or {}).items():
        limit = limits.get(name)
        if limit is not None and quantity(str(request)) > quantity(str(limit)):
            problems.append(
                f'{path}.resources.requests: Invalid value: "{request}": must be less than or '
                f"equal to {name} limit of {limit}"
            )
    return problems


def _exit_codes(policy: dict[str, Any] | None) -> list[str]:
    problems: list[str] = []
    for index, rule in enumerate((policy or {}).get("rules") or []):
        values = (rule.get("onExitCodes") or {}).get("values") or []
        path = f"spec.podFailurePolicy.rules[{index}].onExitCodes.values"
        seen: set[int] = set()
        for position, value in enumerate(values):
            if value in seen:
                problems.append(f"{path}[{position}]: Duplicate value: {value}")
            seen.add(value)
        if any(earlier > later for earlier, later in itertools.pairwise(values)):
            problems.append(
                f"{path}: Invalid value: {json.dumps(values, separators=(',', ':'))}: "
                "must be ordered"
            )
    return problems


def job_object_problems(job: dict[str, Any]) -> list[str]:
    """What the server refuses in a Job's metadata and pod template, in its words."""
    metadata = job.get("metadata") or {}
    template = job["spec"]["template"]
    template_meta = template.get("metadata") or {}
    pod = template["spec"]
    volumes = {volume["name"] for volume in pod.get("volumes") or []}
    problems = [
        *_labels(metadata.get("labels") or {}, "metadata.labels"),
        *_annotations_size(metadata.get("annotations") or {}, "metadata.annotations"),
        *_labels(template_meta.get("labels") or {}, "spec.template.labels"),
        *_annotations_size(template_meta.get("annotations") or {}, "spec.template.annotations"),
    ]
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(pod.get(kind) or []):
            problems.extend(_container(container, volumes, f"spec.template.spec.{kind}[{index}]"))
    if pod.get("restartPolicy") not in {"OnFailure", "Never"}:
        problems.append(
            'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"'
        )
    problems.extend(_exit_codes(job["spec"].get("podFailurePolicy")))
    return problems
