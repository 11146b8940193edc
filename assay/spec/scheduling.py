"""spec.podTemplate's tolerations and affinity: core/v1's shapes, checked as the Evaluation CRD checks them.

The CRD gives both their Kubernetes schemas (Toleration, Affinity and the NodeSelectorTerm,
LabelSelector and PodAffinityTerm inside it) with a bound on every list and string, and the
rules Kubernetes would apply when the runner's Job is created (an operator that needs values,
a key that is a label key), so that a mistake is refused when the Evaluation is applied rather
than when its Job is. The bounds here are the CRD's; they are far above any real pod's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from assay.errors import UserError
from assay.spec import kube_names
from assay.spec.model import JSON

TOLERATIONS_MAX = 64
TERMS_MAX = 16
"""Node selector terms, and pod affinity terms of each kind."""
REQUIREMENTS_MAX = 16
"""matchExpressions, matchFields, matchLabelKeys and mismatchLabelKeys of one term."""
VALUES_MAX = 256
"""Values of one requirement (e.g. node names listed one by one)."""
NAMESPACES_MAX = 64
_INT64 = 2**63

# How many values each operator of a requirement takes, as Kubernetes checks it: (fewest, most, in words).
_SOME, _ONE, _NONE = (1, VALUES_MAX, "one or more"), (1, 1, "exactly one"), (0, 0, "none")
_LABEL_OPERATORS = {"In": _SOME, "NotIn": _SOME, "Exists": _NONE, "DoesNotExist": _NONE}
_NODE_OPERATORS = {**_LABEL_OPERATORS, "Gt": _ONE, "Lt": _ONE}


def tolerations(value: JSON, where: str) -> tuple[dict[str, JSON], ...]:
    items = _list(value, where, max_items=TOLERATIONS_MAX)
    return tuple(_toleration(item, f"{where}[{i}]") for i, item in enumerate(items))


def affinity(value: JSON, where: str) -> dict[str, JSON]:
    data = _object(value, where, {"nodeAffinity", "podAffinity", "podAntiAffinity"})
    if data.get("nodeAffinity") is not None:
        _node_affinity(data["nodeAffinity"], f"{where}.nodeAffinity")
    for kind in ("podAffinity", "podAntiAffinity"):
        if data.get(kind) is not None:
            _pod_affinity(data[kind], f"{where}.{kind}")
    return dict(data)


def _toleration(value: JSON, where: str) -> dict[str, JSON]:
    data = _object(value, where, {"key", "operator", "value", "effect", "tolerationSeconds"})
    key = _string(data.get("key"), f"{where}.key", max_length=kube_names.QUALIFIED_NAME_MAX)
    if key:
        _label_key(key, f"{where}.key")
    operator = _choice(data.get("operator"), f"{where}.operator", ("Exists", "Equal"))
    tolerated = _string(data.get("value"), f"{where}.value", max_length=kube_names.LABEL_VALUE_MAX)
    if tolerated is not None:
        _label_value(tolerated, f"{where}.value")
    _choice(data.get("effect"), f"{where}.effect", ("NoSchedule", "PreferNoSchedule", "NoExecute"))
    seconds = data.get("tolerationSeconds")
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, int) or not -_INT64 <= seconds < _INT64
    ):
        raise UserError(f"{where}.tolerationSeconds must be an integer number of seconds, not {seconds!r}.")
    if not key and operator != "Exists":
        raise UserError(f"{where} has no key, so it needs operator: Exists (it then tolerates every taint).")
    if operator == "Exists" and tolerated:
        raise UserError(f"{where} has operator Exists, which matches any value: remove its value.")
    if seconds is not None and data.get("effect") != "NoExecute":
        raise UserError(f"{where}.tolerationSeconds needs effect: NoExecute (only that effect evicts a running pod).")
    return dict(data)


def _node_affinity(value: JSON, where: str) -> None:
    fields = {"requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"}
    data = _object(value, where, fields)
    required = data.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        at = f"{where}.requiredDuringSchedulingIgnoredDuringExecution"
        selector = _object(required, at, {"nodeSelectorTerms"}, required=("nodeSelectorTerms",))
        terms = _list(selector["nodeSelectorTerms"], f"{at}.nodeSelectorTerms", max_items=TERMS_MAX, min_items=1)
        for i, term in enumerate(terms):
            _node_selector_term(term, f"{at}.nodeSelectorTerms[{i}]")
    at = f"{where}.preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(
        _list(data.get("preferredDuringSchedulingIgnoredDuringExecution"), at, max_items=TERMS_MAX)
    ):
        weighted = _object(item, f"{at}[{i}]", {"weight", "preference"}, required=("weight", "preference"))
        _weight(weighted["weight"], f"{at}[{i}].weight")
        _node_selector_term(weighted["preference"], f"{at}[{i}].preference")


def _node_selector_term(value: JSON, where: str) -> None:
    data = _object(value, where, {"matchExpressions", "matchFields"})
    expressions = _list(data.get("matchExpressions"), f"{where}.matchExpressions", max_items=REQUIREMENTS_MAX)
    for i, item in enumerate(expressions):
        _requirement(item, f"{where}.matchExpressions[{i}]", _NODE_OPERATORS)
    fields = _list(data.get("matchFields"), f"{where}.matchFields", max_items=REQUIREMENTS_MAX)
    for i, item in enumerate(fields):
        at = f"{where}.matchFields[{i}]"
        requirement = _object(item, at, {"key", "operator", "values"}, required=("key", "operator", "values"))
        _choice(requirement["key"], f"{at}.key", ("metadata.name",))
        _choice(requirement["operator"], f"{at}.operator", ("In", "NotIn"))
        names = _list(requirement["values"], f"{at}.values", max_items=1, min_items=1)
        name = _string(names[0], f"{at}.values[0]", max_length=kube_names.SUBDOMAIN_MAX)
        if name is None or not kube_names.is_object_name(name):
            raise UserError(f"{at}.values[0] must be a node name: {kube_names.OBJECT_NAME_RULE}.")


def _pod_affinity(value: JSON, where: str) -> None:
    fields = {"requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"}
    data = _object(value, where, fields)
    at = f"{where}.requiredDuringSchedulingIgnoredDuringExecution"
    for i, term in enumerate(
        _list(data.get("requiredDuringSchedulingIgnoredDuringExecution"), at, max_items=TERMS_MAX)
    ):
        _pod_affinity_term(term, f"{at}[{i}]")
    at = f"{where}.preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(
        _list(data.get("preferredDuringSchedulingIgnoredDuringExecution"), at, max_items=TERMS_MAX)
    ):
        weighted = _object(item, f"{at}[{i}]", {"weight", "podAffinityTerm"}, required=("weight", "podAffinityTerm"))
        _weight(weighted["weight"], f"{at}[{i}].weight")
        _pod_affinity_term(weighted["podAffinityTerm"], f"{at}[{i}].podAffinityTerm")


def _pod_affinity_term(value: JSON, where: str) -> None:
    fields = {"labelSelector", "namespaceSelector", "namespaces", "topologyKey", "matchLabelKeys", "mismatchLabelKeys"}
    data = _object(value, where, fields, required=("topologyKey",))
    for selector in ("labelSelector", "namespaceSelector"):
        if data.get(selector) is not None:
            _label_selector(data[selector], f"{where}.{selector}")
    for i, namespace in enumerate(_list(data.get("namespaces"), f"{where}.namespaces", max_items=NAMESPACES_MAX)):
        name = _string(namespace, f"{where}.namespaces[{i}]", max_length=kube_names.DNS_LABEL_MAX)
        if name is None or not kube_names.is_namespace(name):
            raise UserError(
                f"{where}.namespaces[{i}] {kube_names.quoted(str(name))} is not a namespace name: use at most "
                "63 lowercase letters, digits and '-', starting and ending with a letter or digit."
            )
    _label_key(
        _string(data["topologyKey"], f"{where}.topologyKey", max_length=kube_names.QUALIFIED_NAME_MAX),
        f"{where}.topologyKey",
    )
    for field in ("matchLabelKeys", "mismatchLabelKeys"):
        for i, key in enumerate(_list(data.get(field), f"{where}.{field}", max_items=REQUIREMENTS_MAX)):
            at = f"{where}.{field}[{i}]"
            _label_key(_string(key, at, max_length=kube_names.QUALIFIED_NAME_MAX), at)


def _label_selector(value: JSON, where: str) -> None:
    data = _object(value, where, {"matchLabels", "matchExpressions"})
    if data.get("matchLabels") is not None:
        kube_names.check_labels(_object(data["matchLabels"], f"{where}.matchLabels", None), f"{where}.matchLabels")
    expressions = _list(data.get("matchExpressions"), f"{where}.matchExpressions", max_items=REQUIREMENTS_MAX)
    for i, item in enumerate(expressions):
        _requirement(item, f"{where}.matchExpressions[{i}]", _LABEL_OPERATORS)


def _requirement(value: JSON, where: str, operators: Mapping[str, tuple[int, int, str]]) -> None:
    """A label selector's or node selector's requirement: a label key, an operator and the values it takes."""
    requirement = _object(value, where, {"key", "operator", "values"}, required=("key", "operator"))
    _label_key(_string(requirement["key"], f"{where}.key", max_length=kube_names.QUALIFIED_NAME_MAX), f"{where}.key")
    operator = _choice(requirement["operator"], f"{where}.operator", tuple(operators))
    values = _list(requirement.get("values"), f"{where}.values", max_items=VALUES_MAX)
    for i, item in enumerate(values):
        _label_value(
            _string(item, f"{where}.values[{i}]", max_length=kube_names.LABEL_VALUE_MAX), f"{where}.values[{i}]"
        )
    fewest, most, words = operators[str(operator)]
    if not fewest <= len(values) <= most:
        raise UserError(f"{where} has operator {operator} and {len(values)} values: give it {words}.")


def _weight(value: JSON, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise UserError(f"{where} must be an integer from 1 to 100, not {value!r}.")


def _object(value: JSON, where: str, fields: set[str] | None, *, required: Sequence[str] = ()) -> Mapping[str, JSON]:
    """A mapping with only `fields` (any keys when None) and the `required` ones set."""
    if not isinstance(value, Mapping):
        raise UserError(f"{where} must be a mapping, not {value!r}.")
    unknown = sorted(set(value) - fields) if fields is not None else []
    if unknown:
        known = ", ".join(sorted(fields or ()))
        raise UserError(f"Unknown field {where}.{unknown[0]} in the Evaluation spec. Known fields: {known}.")
    for name in required:
        if value.get(name) is None:
            raise UserError(f"{where}.{name} is required: set it.")
    return value


def _list(value: JSON, where: str, *, max_items: int, min_items: int = 0) -> Sequence[JSON]:
    if value is None:
        value = []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise UserError(f"{where} must be a list, not {value!r}.")
    if len(value) > max_items:
        raise UserError(f"{where} has {len(value)} items; keep at most {max_items}.")
    if len(value) < min_items:
        raise UserError(f"{where} needs at least {min_items} item{'s' if min_items > 1 else ''}.")
    return value


def _string(value: JSON, where: str, *, max_length: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise UserError(f"{where} must be a string, not {value!r}: quote it in YAML.")
    if len(value) > max_length:
        raise UserError(f"{where} is {len(value)} characters long; shorten it to at most {max_length}.")
    return value


def _choice(value: JSON, where: str, choices: Sequence[str]) -> str | None:
    if value is not None and value not in choices:
        raise UserError(f"{where} must be one of {', '.join(choices)}, not {value!r}.")
    return value if value is None else str(value)


def _label_key(key: str | None, where: str) -> None:
    if key is None or not kube_names.is_label_key(key):
        raise UserError(f"{where} {kube_names.quoted(str(key))} is not a label key: use {kube_names.LABEL_KEY_RULE}.")


def _label_value(value: str | None, where: str) -> None:
    if value is not None and not kube_names.is_label_value(value):
        raise UserError(f"{where} {kube_names.quoted(value)} is not a label value: use {kube_names.LABEL_VALUE_RULE}.")
