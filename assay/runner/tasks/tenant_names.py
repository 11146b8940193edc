"""A tenant's task files may not take, or change, a name of the task library.

In a runner pod (and in the operator's checks) the include path holds a tenant's task
sources. Results are read by task name: a tenant task called `arc_easy`, or a tenant group
that lists the library's `arc_easy` with its own `dataset_path` (lm-eval applies a group's
keys to its members and keeps the member's name), would report the tenant's rows as the
library task's scores, and gates that judge the library's config would judge the wrong one.
A tenant group may list library tasks, groups and tags as they are; to change one, it
defines a task of its own name (`include:` of the library YAML, then the changes).

`assay run --include_path` on a user's own machine keeps lm-eval's behaviour (a later
folder overrides an earlier one): only the tenant index applies these rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from assay.errors import UserError


class _Entry(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def path(self) -> Any: ...


def refuse_shadowing(found: Mapping[str, _Entry], library: set[str]) -> None:
    """A tenant's task, group or tag may not take a library name: its scores would be read as the library's."""
    for name, entry in sorted(found.items()):
        if name in library:
            where = f" in {entry.path}" if entry.path else ""
            raise UserError(
                f"The {entry.kind} {name!r}{where} reuses a name of the task library, which a task source may not do: "
                f"rename it (for example to 'custom_{name}')."
            )


def refuse_override(group: str, member: str, changes: Mapping[str, Any]) -> None:
    """A tenant group may list a library task, group or tag, but not change it under the library's name."""
    if changes:
        key = sorted(changes)[0]
        raise UserError(
            f"Group {group!r} changes {key!r} of the library's {member!r}, which a task source may not do: its "
            f"results would be reported as {member!r}; list {member!r} unchanged, or define a task of your own name "
            f"(for example 'custom_{member}', with `include:` of the library's YAML) that makes the change."
        )
