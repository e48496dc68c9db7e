"""Render ``k8s/`` overlays: the small subset of kustomize this project uses, and no more.

There is no kustomize binary in CI, and ``kubectl apply -k`` must give the same objects, so
this renderer implements exactly these ``kustomization.yaml`` fields with kustomize's
meaning and rejects every other field (fail closed rather than silently ignore):

* ``resources``: YAML files (one or more documents) or directories holding a
  ``kustomization.yaml``, rendered recursively, in order.
* ``namespace``: sets ``metadata.namespace`` on namespaced objects and on RoleBinding
  subjects of kind ServiceAccount (as kustomize's namespace transformer does).
* ``labels``: a list of ``{pairs: {...}, includeTemplates: bool}``; pairs go into
  ``metadata.labels`` and, with ``includeTemplates``, into ``spec.template.metadata.labels``.
  Selectors are never touched (``includeSelectors`` is refused).
* ``patches``: ``{path: FILE, target: {kind, name}}`` where FILE is a JSON 6902 patch (a YAML
  list of ``add``/``replace``/``remove``/``test`` operations). Strategic-merge patches are
  refused: their list-merge rules depend on schema metadata this renderer does not carry.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import yaml

from runner.errors import InputError

KUSTOMIZATION: Final = "kustomization.yaml"
_KNOWN_FIELDS: Final = frozenset(
    {"apiVersion", "kind", "resources", "namespace", "labels", "patches"}
)
_CLUSTER_SCOPED: Final = frozenset(
    {"Namespace", "ClusterRole", "ClusterRoleBinding", "RuntimeClass", "Node"}
)

Resource = dict[str, Any]


def render(directory: Path) -> list[Resource]:
    """The objects of the kustomization in ``directory``, with every transformer applied."""
    path = directory / KUSTOMIZATION
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read kustomization: {exc}") from exc
    if not isinstance(spec, dict):
        raise InputError(f"{path}: a kustomization must be a mapping")
    unknown = set(spec) - _KNOWN_FIELDS
    if unknown:
        raise InputError(f"{path}: fields not supported by this renderer: {sorted(unknown)}")
    resources: list[Resource] = []
    for entry in spec.get("resources", []):
        target = directory / str(entry)
        if target.is_dir():
            resources.extend(render(target))
        else:
            resources.extend(_load_documents(target))
    for patch in spec.get("patches", []):
        _apply_patch_entry(directory, patch, resources)
    if "namespace" in spec:
        _set_namespace(str(spec["namespace"]), resources)
    for label_set in spec.get("labels", []):
        _add_labels(path, label_set, resources)
    return resources


def _load_documents(path: Path) -> Iterator[Resource]:
    try:
        documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read resource: {exc}") from exc
    for index, document in enumerate(documents):
        if document is None:
            continue
        if not isinstance(document, dict) or "kind" not in document:
            raise InputError(f"{path}: document {index} is not a Kubernetes object")
        yield document


def _apply_patch_entry(directory: Path, entry: object, resources: list[Resource]) -> None:
    if not isinstance(entry, dict) or set(entry) != {"path", "target"}:
        raise InputError(f"{directory}: a patch needs exactly 'path' and 'target': {entry!r}")
    target = entry["target"]
    if not isinstance(target, dict) or set(target) - {"kind", "name"}:
        raise InputError(f"{directory}: patch target supports only kind and name: {target!r}")
    patch_path = directory / str(entry["path"])
    try:
        operations = yaml.safe_load(patch_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{patch_path}: cannot read patch: {exc}") from exc
    if not isinstance(operations, list):
        raise InputError(
            f"{patch_path}: only JSON 6902 patches (a list of operations) are supported"
        )
    matched = [
        resource
        for resource in resources
        if resource.get("kind") == target.get("kind", resource.get("kind"))
        and resource.get("metadata", {}).get("name")
        == target.get("name", resource.get("metadata", {}).get("name"))
    ]
    if not matched:
        raise InputError(f"{patch_path}: target {target!r} matches no resource")
    for resource in matched:
        for operation in operations:
            apply_json6902(resource, operation, where=str(patch_path))


def apply_json6902(document: Resource, operation: object, *, where: str) -> None:
    """Apply one RFC 6902 operation (add, replace, remove, test) in place."""
    if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
        raise InputError(f"{where}: malformed operation {operation!r}")
    op = operation["op"]
    tokens = _pointer_tokens(str(operation["path"]), where)
    if not tokens:
        raise InputError(f"{where}: operations on the whole document are not supported")
    parent = _resolve(document, tokens[:-1], where)
    last = tokens[-1]
    if op in {"add", "replace", "test"} and "value" not in operation:
        raise InputError(f"{where}: {op} at {operation['path']} needs a value")
    value = copy.deepcopy(operation.get("value"))
    if isinstance(parent, dict):
        exists = last in parent
        if op == "add":
            parent[last] = value
        elif not exists:
            raise InputError(f"{where}: {op} at {operation['path']}: no such member")
        elif op == "replace":
            parent[last] = value
        elif op == "remove":
            del parent[last]
        elif op == "test":
            if parent[last] != value:
                raise InputError(f"{where}: test at {operation['path']} failed")
        else:
            raise InputError(f"{where}: unsupported operation {op!r}")
        return
    if isinstance(parent, list):
        if op == "add" and last == "-":
            parent.append(value)
            return
        index = _index(last, len(parent) + (1 if op == "add" else 0), where)
        if op == "add":
            parent.insert(index, value)
        elif op == "replace":
            parent[index] = value
        elif op == "remove":
            del parent[index]
        elif op == "test":
            if parent[index] != value:
                raise InputError(f"{where}: test at {operation['path']} failed")
        else:
            raise InputError(f"{where}: unsupported operation {op!r}")
        return
    raise InputError(f"{where}: {operation['path']} does not point into an object or list")


def _pointer_tokens(pointer: str, where: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise InputError(f"{where}: JSON pointer {pointer!r} must start with '/'")
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def _resolve(document: object, tokens: list[str], where: str) -> object:
    node: object = document
    for token in tokens:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(token, len(node), where)]
        else:
            raise InputError(f"{where}: path element {token!r} does not exist")
    return node


def _index(token: str, length: int, where: str) -> int:
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise InputError(f"{where}: {token!r} is not a list index")
    index = int(token)
    if index >= length:
        raise InputError(f"{where}: list index {index} out of range")
    return index


def _set_namespace(namespace: str, resources: list[Resource]) -> None:
    for resource in resources:
        kind = resource["kind"]
        if kind == "Namespace":
            if resource["metadata"]["name"] != namespace:
                raise InputError(
                    f"namespace {namespace!r} differs from the Namespace object "
                    f"{resource['metadata']['name']!r}; this renderer does not rename it"
                )
            continue
        if kind in _CLUSTER_SCOPED:
            continue
        resource.setdefault("metadata", {})["namespace"] = namespace
        if kind == "RoleBinding":
            for subject in resource.get("subjects", []):
                if subject.get("kind") == "ServiceAccount":
                    subject["namespace"] = namespace


def _add_labels(path: Path, label_set: object, resources: list[Resource]) -> None:
    if not isinstance(label_set, dict) or set(label_set) - {"pairs", "includeTemplates"}:
        raise InputError(f"{path}: labels entries support only pairs and includeTemplates")
    pairs = label_set.get("pairs", {})
    if not isinstance(pairs, dict):
        raise InputError(f"{path}: labels.pairs must be a mapping")
    for resource in resources:
        resource.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
        template = resource.get("spec", {}).get("template")
        if label_set.get("includeTemplates") and isinstance(template, dict):
            template.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
