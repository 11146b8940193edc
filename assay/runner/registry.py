"""A name → object registry with close-match suggestions, one per kind of plug-in.

Each model, filter, metric and aggregation is registered exactly once, in the module that
defines it; lookups of unknown names raise a UserError that suggests near names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from assay.errors import UserError, suggest

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, *names: str) -> Callable[[T], T]:
        def add(obj: T) -> T:
            for name in names:
                if name in self._entries and self._entries[name] is not obj:
                    raise ValueError(f"{self.kind} {name!r} is registered twice")
                self._entries[name] = obj
            return obj

        return add

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise UserError(
                f"Unknown {self.kind} {name!r}.{suggest(name, self._entries.keys())}"
                f" Known: {', '.join(sorted(self._entries))}."
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        return sorted(self._entries)
