"""YAML that someone else wrote, read within bounds: size, nesting depth and nodes after aliases.

A task file may be a tenant's (a ConfigMap of spec.taskSources, read by the operator and
again by the runner), so its parse must cost about what its size says. Three inputs do not:

- deep nesting: libyaml's C composer recurses once per level, so 60 KB of `[[[[...]]]]`
  (30,000 levels) overflows the C stack and kills the process (SIGSEGV, PyYAML 6.0.3);
  at 20,000 levels Python's constructor raises RecursionError instead;
- aliases: `*a` repeats a whole anchored node, so a few hundred bytes of anchors that each
  repeat the one before name billions of nodes, and whatever walks the loaded value (a
  deep copy, a search for `!function`) walks all of them;
- size: a file far larger than any task.

`check` reads the document's event stream first (libyaml's parser keeps its nesting on a
stack, not in recursion) and stops at the first event past a bound: at 30,000 levels it
has read a hundred events. Only a document within the bounds is composed. Aliases stay
allowed as long as what they expand to fits: a node's count and depth include what its
aliases repeat.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from assay.errors import UserError

_Parser: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_BYTES = 1024 * 1024
"""A task file is a few KiB; lm-eval's largest are under 100 KiB."""
MAX_DEPTH = 64
"""Nested collections: lm-eval's task files nest 6 deep at most; Python's own recursion limit is 1,000."""
MAX_NODES = 200_000
"""Values (scalars and collections), aliases counted as what they repeat: a 1 MiB file of
one-character list items holds about 500,000 bytes' worth, a real task file a few hundred."""


@dataclasses.dataclass(frozen=True)
class Limits:
    max_bytes: int = MAX_BYTES
    max_depth: int = MAX_DEPTH
    max_nodes: int = MAX_NODES


LIMITS = Limits()


class YamlBoundsError(UserError):
    """A YAML document past one of the bounds: the sentence names the source, the bound and the line."""

    def __init__(self, message: str, *, line: int | None) -> None:
        super().__init__(message)
        self.line = line


def read(path: Path, *, source: str, limits: Limits = LIMITS) -> bytes:
    """The bytes of `path`, refused (YamlBoundsError) when there are more than the bound; OSError as open raises it."""
    with path.open("rb") as handle:
        data = handle.read(limits.max_bytes + 1)
    _check_size(len(data), source=source, limits=limits, at_least=len(data) > limits.max_bytes)
    return data


def check(text: str | bytes, *, source: str, limits: Limits = LIMITS) -> None:
    """Refuse (YamlBoundsError) a document past a bound; `source` begins the sentence ("Task YAML x.yaml").

    yaml.YAMLError for a document that is no YAML at all, as the parser raises it."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    _check_size(size, source=source, limits=limits)
    _Walk(source, limits).run(text)


def load(text: str | bytes, *, source: str, loader: type = _Parser, limits: Limits = LIMITS) -> Any:
    """`check`, then the document as `loader` (a yaml Loader class) constructs it."""
    check(text, source=source, limits=limits)
    return yaml.load(text, Loader=loader)


def _check_size(size: int, *, source: str, limits: Limits, at_least: bool = False) -> None:
    if size > limits.max_bytes:
        held = f"more than {limits.max_bytes}" if at_least else f"{size}"
        raise YamlBoundsError(
            f"{source} holds {held} bytes, more than the {limits.max_bytes} a YAML file may hold here; "
            "split it into smaller files.",
            line=None,
        )


@dataclasses.dataclass
class _Open:
    """A collection whose end has not been read yet."""

    anchor: str | None
    nodes: int = 1
    height: int = 1
    """Levels from this collection down to its deepest value, aliases' included."""


class _Walk:
    """One pass over a document's events, counting depth and nodes (aliases as what they repeat)."""

    def __init__(self, source: str, limits: Limits) -> None:
        self.source, self.limits = source, limits
        self.open: list[_Open] = []
        self.anchors: dict[str, tuple[int, int]] = {}
        """anchor → (nodes, height) of the node it names."""
        self.nodes = 0
        self.aliases = False

    def run(self, text: str | bytes) -> None:
        try:
            self._walk(text)
        except yaml.MarkedYAMLError as error:
            # PyYAML 6.0.4's libyaml stops at 1,000 levels on its own, while reading ahead of the
            # events: the same refusal, whichever notices first.
            if "maximum nesting depth" not in str(error.problem):
                raise
            line = error.problem_mark.line + 1 if error.problem_mark is not None else None
            raise self._too_deep(line) from None

    def _walk(self, text: str | bytes) -> None:
        for event in yaml.parse(text, Loader=_Parser):
            line = event.start_mark.line + 1 if event.start_mark is not None else None
            if isinstance(event, yaml.CollectionStartEvent):
                self._add(1, 1, line)
                self.open.append(_Open(event.anchor))
            elif isinstance(event, yaml.CollectionEndEvent):
                done = self.open.pop()
                if done.anchor:
                    self.anchors[done.anchor] = (done.nodes, done.height)
                self._pass_up(done.nodes, done.height)
            elif isinstance(event, yaml.ScalarEvent):
                self._add(1, 0, line)
                self._pass_up(1, 0)
                if event.anchor:
                    self.anchors[event.anchor] = (1, 0)
            elif isinstance(event, yaml.AliasEvent):
                self.aliases = True
                nodes, height = self.anchors.get(event.anchor or "", (1, 0))
                self._add(nodes, height, line)
                self._pass_up(nodes, height)

    def _add(self, nodes: int, height: int, line: int | None) -> None:
        """A value begins at the current level: `nodes` values, `height` levels deep (a scalar: 0); refused past a bound."""
        self.nodes += nodes
        if len(self.open) + height > self.limits.max_depth:
            raise self._too_deep(line)
        if self.nodes > self.limits.max_nodes:
            raise YamlBoundsError(
                f"{self.source} holds more than {self.limits.max_nodes} values{self._through_aliases()}{_at(line)}; "
                "write repeated values out once instead of through aliases (*name), or split the file.",
                line=line,
            )

    def _pass_up(self, nodes: int, height: int) -> None:
        """A value ended (or an alias was read): its collection holds its nodes and levels too."""
        if self.open:
            parent = self.open[-1]
            parent.nodes += nodes
            parent.height = max(parent.height, height + 1)

    def _too_deep(self, line: int | None) -> YamlBoundsError:
        return YamlBoundsError(
            f"{self.source} nests collections deeper than {self.limits.max_depth} levels"
            f"{self._through_aliases()}{_at(line)}; a task file is shallow: flatten it.",
            line=line,
        )

    def _through_aliases(self) -> str:
        return " once its aliases are expanded" if self.aliases else ""


def _at(line: int | None) -> str:
    return f" (line {line})" if line is not None else ""
