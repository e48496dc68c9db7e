"""The Kata agent's policy decisions, reproduced with real Rego engines.

kata-agent (src/agent/policy/src/policy.rs, kata 3.28-4.1) loads ``policy.rego`` into a fresh
regorus engine whose data is ``{"pstate": {}}``, asks ``data.agent_policy.AllowRequestsFailingPolicy``
once with input ``{}`` (true turns every later denial into an allow), then for each ttrpc request
sets the request's JSON as input and evaluates the bare query ``data.agent_policy.<RequestName>``:

* not exactly one result (an undefined rule) is an error, and the request fails;
* a boolean is the verdict;
* an object is ``{"allowed": bool, "ops": [RFC 6902 operations]}``: when allowed, the operations
  are applied to the engine's data (the policy's state, under ``/pstate``).

:class:`RegorusAgent` does exactly that with regorus (PyPI ``gordon-to-regorus``), in the Rego
dialect of either kata generation: kata 3.28-3.29 link regorus 0.2.8, whose engine defaults to
Rego v0, kata 3.30.0 to 4.1.0 link regorus 0.9.1 (Cargo.lock), which defaults to v1. :class:`RegopyAgent` does the same
with rego-cpp (PyPI ``regopy``), an independent implementation. The agent also turns builtin
errors into undefined values (``set_strict_builtin_errors(false)``); the Python bindings cannot,
so an engine error is raised here as :class:`EngineError` instead of being read as a denial.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import regopy
import regorus

INITIAL_DATA: Final[dict[str, Any]] = {"pstate": {}}


class EngineError(Exception):
    """The engine failed to load the policy or to evaluate a query."""


class RegorusAgent:
    """kata-agent's policy checks on regorus."""

    def __init__(self, policy: str, *, rego_v0: bool) -> None:
        self.rego_v0 = rego_v0
        self.data: dict[str, Any] = copy.deepcopy(INITIAL_DATA)
        self._engine = regorus.Engine()
        self._engine.set_rego_v0(rego_v0)
        try:
            self._engine.add_policy("agent_policy", policy)
        except RuntimeError as exc:
            raise EngineError(str(exc).partition("Stack backtrace:")[0].strip()) from exc
        self._engine.add_data(self.data)
        self.allow_failures = False
        self.allow_failures = self.allows("AllowRequestsFailingPolicy", {})

    def allows(self, request_name: str, request: Any) -> bool:
        return self.allows_json(request_name, json.dumps(request))

    def allows_json(self, request_name: str, request_json: str) -> bool:
        self._engine.set_input_json(request_json)
        try:
            answer = self._engine.eval_query(f"data.agent_policy.{request_name}")
        except RuntimeError as exc:
            raise EngineError(str(exc).partition("Stack backtrace:")[0].strip()) from exc
        values = [result["expressions"][0]["value"] for result in answer.get("result", [])]
        return self._decide(values)

    def _decide(self, values: list[Any]) -> bool:
        if len(values) != 1:
            return self.allow_failures
        allowed, ops = _verdict(values[0])
        if allowed and ops:
            self.data = apply_patch(self.data, ops)
            self._engine.clear_data()
            self._engine.add_data(self.data)
        return allowed or self.allow_failures


class RegopyAgent:
    """kata-agent's policy checks on rego-cpp.

    Queried as ``x = data.agent_policy.<Name>`` because rego-cpp reports a bare query whose
    value is ``false`` as undefined; input is given as JSON text, which rego-cpp reads like the
    agent's serde JSON (a Python object input is decoded differently). Each query is compiled
    once into a bundle. rego-cpp cannot drop data, so the interpreter is rebuilt with the new
    state after each allowed patch.
    """

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.data: dict[str, Any] = copy.deepcopy(INITIAL_DATA)
        self._bundles: dict[str, regopy.Bundle] = {}
        self._interpreter = self._build()
        self.allow_failures = False
        self.allow_failures = self.allows("AllowRequestsFailingPolicy", {})

    def _build(self) -> regopy.Interpreter:
        interpreter = regopy.Interpreter()
        try:
            with _quiet_stdout():
                interpreter.add_module("agent_policy.rego", self.policy)
        except regopy.RegoError as exc:
            messages = re.findall(r"\(errormsg \d+:([^)]*)\)", str(exc))
            raise EngineError("; ".join(messages) or str(exc)) from exc
        interpreter.add_data(self.data)
        return interpreter

    def allows(self, request_name: str, request: Any) -> bool:
        if request_name not in self._bundles:
            with _quiet_stdout():
                query = f"x = data.agent_policy.{request_name}"
                self._bundles[request_name] = self._interpreter.build(query)
        self._interpreter.set_input_term(json.dumps(request))
        with _quiet_stdout():
            output = self._interpreter.query_bundle(self._bundles[request_name])
        if not output.ok():
            raise EngineError(str(output))
        results = output.results
        if len(results) != 1 or "x" not in results[0].bindings:
            return self.allow_failures
        allowed, ops = _verdict(results[0].bindings["x"])
        if allowed and ops:
            self.data = apply_patch(self.data, ops)
            self._interpreter = self._build()
            self._bundles.clear()
        return allowed or self.allow_failures


def _verdict(value: Any) -> tuple[bool, list[dict[str, Any]]]:
    if isinstance(value, bool):
        return value, []
    if isinstance(value, dict) and isinstance(value.get("allowed"), bool):
        ops = value.get("ops") or []
        return value["allowed"], list(ops)
    # The agent answers "unexpected eval_query result type" and fails the request.
    raise EngineError(f"a policy answer the agent cannot read: {value!r}")


def apply_patch(document: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``add``/``remove``/``replace`` on object members, as the agent's json_patch."""
    patched = copy.deepcopy(document)
    for op in ops:
        *parents, leaf = [
            token.replace("~1", "/").replace("~0", "~") for token in op["path"].split("/")[1:]
        ]
        target = patched
        for token in parents:
            target = target[token]
        if op["op"] in {"add", "replace"}:
            if op["op"] == "replace" and leaf not in target:
                raise EngineError(f"json patch replace of a missing member: {op['path']}")
            target[leaf] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del target[leaf]
        else:
            raise EngineError(f"json patch operation the agent's policy never emits: {op}")
    return patched


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """rego-cpp writes the policy's print() output straight to file descriptor 1."""
    saved = os.dup(1)
    with Path(os.devnull).open("wb") as devnull:
        os.dup2(devnull.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)
