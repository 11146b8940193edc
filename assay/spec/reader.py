"""Typed, bounded access to one mapping of an Evaluation spec, every error one sentence naming the field."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from assay.errors import UserError
from assay.spec import kube_names
from assay.spec.model import JSON, QUANTITY_RE

QUANTITY_MAX = 64
"""The CRD's maxLength of resources.cpu and resources.memory."""


class Reader:
    """Typed access to one mapping of the spec; every error names the field's path."""

    def __init__(self, data: Mapping[str, JSON], path: str, known: set[str]) -> None:
        if not isinstance(data, Mapping):
            raise UserError(f"{path or 'spec'} must be a mapping, not {kind(data)}.")
        unknown = sorted(set(data) - known)
        if unknown:
            raise unknown_field(path, unknown[0], known)
        self.data = data
        self.path = path

    def where(self, key: str) -> str:
        return join_path(self.path, key)

    def get(self, key: str) -> JSON:
        return self.data.get(key)

    def string(self, key: str, *, max_length: int, required: bool = False, allow_empty: bool = False) -> str | None:
        """A string within the CRD's bounds: at most `max_length` characters, and not empty unless `allow_empty`."""
        value = self.data.get(key)
        if value is None:
            if required:
                raise UserError(f"{self.where(key)} is required: set it to a non-empty string.")
            return None
        if not isinstance(value, str) or (not allow_empty and not value):
            raise UserError(f"{self.where(key)} must be a non-empty string, not {kind(value)}.")
        if len(value) > max_length:
            raise UserError(f"{self.where(key)} is {len(value)} characters long; shorten it to at most {max_length}.")
        return value

    def object_name(self, key: str, *, required: bool = False) -> str | None:
        """The name of a Secret, ConfigMap, PVC or PriorityClass: a DNS-1123 subdomain."""
        value = self.string(key, max_length=kube_names.SUBDOMAIN_MAX, required=required)
        if value is not None and not kube_names.is_object_name(value):
            raise UserError(
                f"{self.where(key)} {kube_names.quoted(value)} is not a Kubernetes object name: "
                f"use {kube_names.OBJECT_NAME_RULE}."
            )
        return value

    def data_key(self, key: str, default: str) -> str:
        """A key of a Secret's or ConfigMap's data."""
        value = self.string(key, max_length=kube_names.SUBDOMAIN_MAX)
        if value is not None and not kube_names.is_data_key(value):
            raise UserError(
                f"{self.where(key)} {kube_names.quoted(value)} is not a Secret or ConfigMap key: "
                f"use {kube_names.DATA_KEY_RULE}."
            )
        return default if value is None else value

    def boolean(self, key: str, default: bool | None) -> bool | None:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise UserError(f"{self.where(key)} must be true or false, not {kind(value)}.")
        return value

    def integer(self, key: str, default: int | None, *, minimum: int) -> int | None:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{self.where(key)} must be an integer, not {kind(value)}.")
        if value < minimum:
            raise UserError(f"{self.where(key)} must be at least {minimum}, not {value}.")
        return value

    def mapping(self, key: str, *, max_entries: int | None = None) -> Mapping[str, JSON] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise UserError(f"{self.where(key)} must be a mapping, not {kind(value)}.")
        if max_entries is not None and len(value) > max_entries:
            raise UserError(f"{self.where(key)} has {len(value)} entries; keep at most {max_entries}.")
        return value

    def quantity(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, str) and len(value) > QUANTITY_MAX:
            raise UserError(
                f"{self.where(key)} is {len(value)} characters long; a quantity has at most {QUANTITY_MAX}."
            )
        if isinstance(value, bool) or not isinstance(value, (int, str)) or not QUANTITY_RE.fullmatch(str(value)):
            raise UserError(f"{self.where(key)} must be a Kubernetes quantity such as 4, 500m or 16Gi, not {value!r}.")
        return str(value)


def unknown_field(path: str, key: str, known: set[str]) -> UserError:
    """The error for a field the spec does not have, with the closest known name."""
    return UserError(
        f"Unknown field {join_path(path, key)!r} in the Evaluation spec.{suggestion(key, known)} "
        f"Known fields: {', '.join(sorted(known))}."
    )


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def kind(value: JSON) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, Sequence):
        return "a list"
    return type(value).__name__


def suggestion(name: str, known: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""
