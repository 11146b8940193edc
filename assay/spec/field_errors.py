"""Reading a spec field by field, so that one pass finds every field's error.

The operator and the runner want the first error of a spec (`parse_spec` raises it);
`assay validate` wants all of them at once. Both read the spec the same way: each top-level
field is read on its own, and a field whose reading fails keeps its error and takes a
stand-in value. A rule across fields (spec.chatTemplate needs spec.applyChatTemplate) and a
field read in the light of another (spec.endpoint needs spec.model) is skipped when a field
it involves failed, rather than judged on a stand-in. Within one field (a nested mapping such
as spec.resources) the first error is the one kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from assay.errors import UserError

T = TypeVar("T")


class FieldErrors:
    """The errors of a spec's fields, in reading order."""

    def __init__(self) -> None:
        self.errors: list[UserError] = []
        self._failed: set[str] = set()

    @property
    def failed(self) -> frozenset[str]:
        """The fields whose reading failed, or was skipped for a field it needs."""
        return frozenset(self._failed)

    def read(self, key: str, read: Callable[[], T], fallback: T, *, needs: Sequence[str] = ()) -> T:
        """`read()`, or `fallback` with its error kept; skipped (fallback, no error) when a field in `needs` failed."""
        if self._failed.intersection(needs):
            self._failed.add(key)
            return fallback
        try:
            return read()
        except UserError as error:
            self.errors.append(error)
            self._failed.add(key)
            return fallback

    def rule(self, keys: Sequence[str], check: Callable[[], object]) -> None:
        """A rule across `keys`, checked only when each of them was read without error."""
        if self._failed.intersection(keys):
            return
        try:
            check()
        except UserError as error:
            self.errors.append(error)
