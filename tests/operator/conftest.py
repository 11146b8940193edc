"""The Evaluation CRD as a validator: its OpenAPI schema (jsonschema) plus its CEL rules (cel-python).

No API server runs here, so this does what the API server does for a custom resource,
in its order: apply structural defaults, validate the OpenAPI v3 schema, then evaluate
every x-kubernetes-validations rule on the defaulted value at its node. It is a stand-in
for the server's validation, not for the server: the e2e suite applies the same CRD to a
real kube-apiserver.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / "deploy" / "crds" / "evaluations.assay.dev.yaml"


def openapi_to_jsonschema(node: Any) -> Any:
    """Kubernetes' OpenAPI v3 dialect → JSON Schema draft 4 (boolean exclusiveMinimum, as there)."""
    if isinstance(node, list):
        return [openapi_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: openapi_to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    out.pop("format", None)  # int64/date-time: the server checks these; draft 4 would ignore most anyway
    return out


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting as the API server does it: missing fields with a default get it."""
    if not isinstance(value, dict):
        return value
    value = dict(value)
    for key, sub in (schema.get("properties") or {}).items():
        if key not in value and "default" in sub:
            value[key] = copy.deepcopy(sub["default"])
        if key in value:
            value[key] = apply_defaults(sub, value[key])
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key in list(value):
            if key not in (schema.get("properties") or {}):
                value[key] = apply_defaults(extra, value[key])
    return value


def walk_rules(schema: dict[str, Any], value: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(path, rule, value at that node) for every CEL rule that applies to `value`."""
    for rule in schema.get("x-kubernetes-validations") or ():
        yield path, rule, value
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                yield from walk_rules(sub, value[key], f"{path}.{key}")
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in (schema.get("properties") or {}):
                    yield from walk_rules(extra, item, f"{path}[{key}]")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from walk_rules(schema["items"], item, f"{path}[{i}]")


def _re2_patterns(base: Any) -> Any:
    """`base` with `pattern` matched as the API server matches it: RE2, whose `$` refuses a trailing
    newline that Python's `re` (jsonschema's default) lets through."""
    import jsonschema
    import re2

    def pattern(validator: Any, regex: str, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
        if validator.is_type(instance, "string") and not re2.search(regex, instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {regex!r}")

    return jsonschema.validators.extend(base, {"pattern": pattern})


class CrdValidator:
    def __init__(self, crd: dict[str, Any]) -> None:
        import celpy
        import jsonschema

        self.crd = crd
        self.version = crd["spec"]["versions"][0]
        self.schema = self.version["schema"]["openAPIV3Schema"]
        self._json = _re2_patterns(jsonschema.Draft4Validator)(openapi_to_jsonschema(self.schema))
        self._cel = celpy.Environment()
        self._programs: dict[str, Any] = {}

    def program(self, rule: str) -> Any:
        if rule not in self._programs:
            self._programs[rule] = self._cel.program(self._cel.compile(rule))
        return self._programs[rule]

    def errors(self, obj: dict[str, Any]) -> list[str]:
        import celpy

        obj = apply_defaults(self.schema, obj)
        found = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in self._json.iter_errors(obj)]
        if found:
            return found
        # Each node converted to CEL once, however many rules it has: the spec's seven rules each
        # converted a 100,000-index spec.samples again (12 of a test's 15 s).
        converted: dict[int, Any] = {}
        for path, rule, value in walk_rules(self.schema, obj):
            if id(value) not in converted:
                converted[id(value)] = celpy.json_to_cel(value)
            result = self.program(rule["rule"]).evaluate({"self": converted[id(value)]})
            if result is not True and not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
                found.append(f"{path}: {rule['message']}")
        return found

    def defaulted(self, obj: dict[str, Any]) -> dict[str, Any]:
        return apply_defaults(self.schema, obj)


@pytest.fixture(scope="session")
def crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_PATH.read_text())


@pytest.fixture(scope="session")
def crd_validator(crd: dict[str, Any]) -> CrdValidator:
    pytest.importorskip("jsonschema", reason="jsonschema validates the CRD's OpenAPI schema (pip install jsonschema)")
    pytest.importorskip("celpy", reason="cel-python evaluates the CRD's CEL rules (pip install cel-python)")
    return CrdValidator(crd)


def _evaluation(**spec: Any) -> dict[str, Any]:
    base = {"model": "hf", "modelArgs": {"pretrained": "EleutherAI/pythia-160m"}, "tasks": ["arc_easy"]}
    base.update(spec)
    return {"apiVersion": "assay.dev/v1alpha1", "kind": "Evaluation", "metadata": {"name": "ev"}, "spec": base}


@pytest.fixture
def make_evaluation() -> Any:
    """make_evaluation(**spec_fields) → an Evaluation manifest with a minimal valid spec."""
    return _evaluation


@pytest.fixture(autouse=True)
def fresh_runner_identities(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's operator knows no namespace's runner identity yet, as a freshly started one."""
    from assay.operator.runtime import namespace_identity

    monkeypatch.setattr(namespace_identity, "identities", namespace_identity.RunnerIdentities())
