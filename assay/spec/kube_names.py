"""Kubernetes' rules for object names, data keys, label keys and label values.

The Evaluation CRD states them as OpenAPI patterns and CEL `matches()` rules; these are the
same regular expressions (from k8s.io/apimachinery/pkg/util/validation), so that the spec
parser refuses exactly what the API server refuses. They are used with `fullmatch`: the
API server's regular expressions (RE2) do not let `$` match before a trailing newline, as
Python's `re.match` would.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from assay.errors import UserError

SUBDOMAIN_MAX = 253
"""An object name (Secret, ConfigMap, PVC, PriorityClass) and a label key's prefix."""
LABEL_VALUE_MAX = 63
DNS_LABEL_MAX = 63
"""A namespace name."""
QUALIFIED_NAME_MAX = SUBDOMAIN_MAX + 1 + 63
"""A label key: prefix, '/', name."""
LABELS_MAX = 64
"""Entries of a label or annotation map in the spec (pod labels, nodeSelector, matchLabels)."""
ANNOTATION_VALUE_MAX = 3072
"""64 such values and their keys stay under the API server's 256 KiB for all of a pod's annotations."""

_SUBDOMAIN = "[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
# Kubernetes lowercases an annotation key before it checks it: its prefix may be in any case.
_SUBDOMAIN_ANY_CASE = "[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?([.][A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*"
_NAME = "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_SUBDOMAIN_RE = re.compile(_SUBDOMAIN)
_DNS_LABEL_RE = re.compile("[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DATA_KEY_RE = re.compile("[.]?[-_A-Za-z0-9][-._A-Za-z0-9]*")
_LABEL_KEY_RE = re.compile(f"({_SUBDOMAIN}/)?{_NAME}")
_ANNOTATION_KEY_RE = re.compile(f"({_SUBDOMAIN_ANY_CASE}/)?{_NAME}")
_LABEL_VALUE_RE = re.compile("(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

OBJECT_NAME_RULE = "at most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
DATA_KEY_RULE = "at most 253 letters, digits, '-', '_' and '.', not '.' and not starting with '..'"
LABEL_KEY_RULE = (
    "an optional lowercase DNS subdomain of at most 253 characters and '/', then a name of at most 63 letters, "
    "digits, '-', '_' or '.' that starts and ends with a letter or digit"
)
ANNOTATION_KEY_RULE = LABEL_KEY_RULE.replace("lowercase DNS subdomain", "DNS subdomain (any case)")
LABEL_VALUE_RULE = "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or empty"


def is_object_name(name: str) -> bool:
    """A DNS-1123 subdomain: the name of a Secret, ConfigMap, PVC, PriorityClass or node."""
    return len(name) <= SUBDOMAIN_MAX and _SUBDOMAIN_RE.fullmatch(name) is not None


def is_namespace(name: str) -> bool:
    return len(name) <= DNS_LABEL_MAX and _DNS_LABEL_RE.fullmatch(name) is not None


def is_data_key(key: str) -> bool:
    """A key of a Secret's or ConfigMap's data (it becomes a file name when mounted)."""
    return len(key) <= SUBDOMAIN_MAX and _DATA_KEY_RE.fullmatch(key) is not None


def is_label_key(key: str, *, any_case_prefix: bool = False) -> bool:
    """A qualified name; `any_case_prefix` for an annotation key, whose prefix Kubernetes lowercases first."""
    pattern = _ANNOTATION_KEY_RE if any_case_prefix else _LABEL_KEY_RE
    prefix, _, _ = key.rpartition("/")
    return len(prefix) <= SUBDOMAIN_MAX and pattern.fullmatch(key) is not None


def is_label_value(value: str) -> bool:
    return len(value) <= LABEL_VALUE_MAX and _LABEL_VALUE_RE.fullmatch(value) is not None


def quoted(text: str, limit: int = 80) -> str:
    """`text` as an error message quotes it: repr (control characters visible), at most `limit` characters."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def check_labels(value: Mapping[str, object], where: str, *, annotations: bool = False) -> dict[str, str]:
    """A label (or annotation) map as Kubernetes checks a pod's, with the spec's bound on its size."""
    if len(value) > LABELS_MAX:
        raise UserError(f"{where} has {len(value)} entries; keep at most {LABELS_MAX}.")
    kind, rule = ("annotation", ANNOTATION_KEY_RULE) if annotations else ("label", LABEL_KEY_RULE)
    checked: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not is_label_key(key, any_case_prefix=annotations):
            shown = quoted(key) if isinstance(key, str) else repr(key)
            raise UserError(f"{where} key {shown} is not a Kubernetes {kind} key: use {rule}.")
        if not isinstance(item, str):
            raise UserError(f"{where}[{key!r}] must be a string, not {item!r}: quote it in YAML.")
        if annotations and len(item) > ANNOTATION_VALUE_MAX:
            raise UserError(
                f"{where}[{key!r}] is {len(item)} characters long; shorten it to at most {ANNOTATION_VALUE_MAX}."
            )
        if not annotations and not is_label_value(item):
            raise UserError(
                f"{where}[{key!r}] value {quoted(item)} is not a Kubernetes label value: use {LABEL_VALUE_RULE}."
            )
        checked[key] = item
    return checked
