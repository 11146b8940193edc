"""The task index: every task, group and tag name under the built-in library and include paths.

Indexing reads YAML only (functions unresolved, no datasets, no torch) so `assay ls` is
fast; `load` builds Task and Group objects for the names a run asks for, applying group-
level overrides to children the way lm-eval 0.4.13 does.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import logging
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from assay.errors import UserError, suggest
from assay.runner.tasks import broken_files, tenant_names
from assay.runner.tasks.groups import GROUP_KEYS, AggregateMetric, Group
from assay.runner.tasks.index_entries import IndexEntry, builtin_tasks_dir, kind_of, skipped
from assay.runner.tasks.yaml_loader import load_yaml, resolve_functions

log = logging.getLogger(__name__)


@dataclasses.dataclass
class LoadedTasks:
    tasks: dict[str, Any]
    groups: dict[str, Group]
    roots: list[Any]
    """What was asked for, in order: Task or Group objects (tags already expanded)."""


@dataclasses.dataclass(frozen=True)
class _TaskConfigOnly:
    """A task as `leaf_configs` sees it: its name and composed config, nothing built."""

    name: str
    config: dict[str, Any]


class TaskManager:
    def __init__(
        self,
        include_path: str | Path | Sequence[str | Path] | None = None,
        *,
        include_defaults: bool = True,
        metadata: dict[str, Any] | None = None,
        include_code: bool = True,
        include_may_shadow: bool = True,
    ) -> None:
        """`include_code` False: `!function` in include-path files refuses to run (a tenant's tasks);
        `include_may_shadow` False: an include-path file may not reuse a library name."""
        include_roots: list[Path] = []
        if include_path:
            paths = [include_path] if isinstance(include_path, (str, Path)) else list(include_path)
            for path in paths:
                if not Path(path).exists():
                    raise UserError(f"--include_path {path} does not exist; point it at a folder of task YAMLs.")
                include_roots.append(Path(path))
        self.include_path = include_path
        self.metadata = dict(metadata or {})
        self.tenant = bool(include_roots) and not (include_code and include_may_shadow)
        """A tenant's task sources are in the include path: every task built here (a library task
        too, which a tenant's group may override) takes its data from the hub or ASSAY_DATASETS_DIR
        only, and tells its template failures in fixed sentences (`Task(tenant=True)`)."""
        # Per thread: the operator asks one shared manager from several threads at once, and
        # a flag on the instance let one thread's end of `leaf_configs` turn another's build real.
        self._mode = threading.local()
        self.broken: list[broken_files.BrokenFile] = []
        """YAML files under the roots that failed to load (a task meant, but unreadable)."""
        self.index: dict[str, IndexEntry] = self._index_root(builtin_tasks_dir()) if include_defaults else {}
        library = set(self.index)
        self._library = library if not include_may_shadow else None
        """The library's names when the include path is a tenant's: its groups may not change them."""
        for root in include_roots:
            found = self._index_root(root, code_allowed=include_code)
            if not include_may_shadow:
                tenant_names.refuse_shadowing(found, library)
            # Later roots override earlier ones, as in lm-eval.
            self.index.update(found)

    def _index_root(self, root: Path, *, code_allowed: bool = True) -> dict[str, IndexEntry]:
        found: dict[str, IndexEntry] = {}
        files = sorted(
            (p for p in root.glob("**/*.yaml") if not any(skipped(part) for part in p.relative_to(root).parts)),
            key=lambda p: p.as_posix(),
        )
        for path in files:
            try:
                config = load_yaml(path, resolve_functions=False, root=root, allow_code=code_allowed)
                kind = kind_of(config)
            except UserError as err:
                self.broken.append(broken_files.broken_file(path, err))
                continue
            except ValueError as err:  # no task: an include template, or YAML that is not about tasks
                log.debug("skipping %s: %s", path, err)
                continue
            name = config["group"] if kind == "group" else config["task"]
            if not isinstance(name, str):
                continue
            if name in found and found[name].kind != "tag":
                log.debug("duplicate %s %r in %s ignored", kind, name, path)
                continue
            found[name] = IndexEntry(name, kind, path, config, root=root, code_allowed=code_allowed)
            if kind != "group":
                tags = config.get("tag")
                for tag in [tags] if isinstance(tags, str) else (tags or []):
                    found.setdefault(tag, IndexEntry(tag, "tag", None)).members.add(name)
        return found

    # -- listing --------------------------------------------------------------------------

    @property
    def all_tasks(self) -> list[str]:
        return sorted(self.index)

    @property
    def all_subtasks(self) -> list[str]:
        return sorted(n for n, e in self.index.items() if e.kind in ("task", "python_task"))

    @property
    def all_groups(self) -> list[str]:
        return sorted(n for n, e in self.index.items() if e.kind == "group")

    @property
    def all_tags(self) -> list[str]:
        return sorted(n for n, e in self.index.items() if e.kind == "tag")

    def describe(self, name: str) -> IndexEntry:
        try:
            return self.index[name]
        except KeyError:
            raise UserError(self._unknown_message([name])) from None

    def _unknown_message(self, names: list[str]) -> str:
        """Unknown names with the closest known ones; a name a broken file would have defined, with that file's error."""
        broken = {name: file for name in names if (file := broken_files.defining(self.broken, name)) is not None}
        unknown = [name for name in names if name not in broken]
        sentences = [file.explain(name) for name, file in broken.items()]
        if unknown:
            hints = "".join(suggest(name, self.index.keys()) for name in unknown[:3])
            listed = ", ".join(repr(n) for n in unknown)
            sentences.insert(
                0,
                f"Unknown task {listed}.{hints} Run `assay ls tasks` to see the names, "
                "or add --include_path for your own YAMLs.",
            )
        return " ".join(sentences)

    def match_tasks(self, names: Iterable[str]) -> list[str]:
        """Expand comma lists, globs, YAML paths and directories; unknown names are an error."""
        matched: list[str] = []
        unknown: list[str] = []
        for raw in names:
            for name in (part.strip() for part in str(raw).split(",")):
                if not name:
                    continue
                path = Path(name)
                if name in self.index:
                    matched.append(name)
                elif name.endswith((".yaml", ".yml")) and path.is_file():
                    matched.append(str(path))
                elif path.is_dir():
                    yamls = sorted(str(p) for p in path.glob("**/*.yaml"))
                    if not yamls:
                        unknown.append(name)
                    matched.extend(yamls)
                elif any(ch in name for ch in "*?["):
                    hits = sorted(fnmatch.filter(self.index.keys(), name))
                    if hits:
                        matched.extend(hits)
                    else:
                        unknown.append(name)
                else:
                    unknown.append(name)
        if unknown:
            raise UserError(self._unknown_message(unknown))
        return list(dict.fromkeys(matched))

    # -- building -------------------------------------------------------------------------

    def leaf_configs(self, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Each task a run of `names` builds, with the config the engine composes for it.

        Groups, tags and group-level overrides are followed exactly as `load` follows them, but
        no task is built: no dataset is read and no `!function` helper is imported, so the
        operator can ask this of files a tenant wrote.
        """
        self._mode.configs_only = True
        try:
            loaded = self.load(self.match_tasks(names))
        finally:
            self._mode.configs_only = False
        return {name: leaf.config for name, leaf in loaded.tasks.items()}

    def load(self, specs: Sequence[Any]) -> LoadedTasks:
        roots: list[Any] = []
        for spec in specs:
            built = self._build_spec(spec)
            roots.extend(built if isinstance(built, list) else [built])
        tasks: dict[str, Any] = {}
        groups: dict[str, Group] = {}
        owner: dict[str, str] = {}
        for root in roots:
            leaves = root.leaf_tasks() if isinstance(root, Group) else [root]
            if isinstance(root, Group):
                groups[root.name] = root
                for sub in root.subgroups():
                    groups[sub.name] = sub
            for leaf in leaves:
                if leaf.name in owner and owner[leaf.name] != root.name:
                    raise UserError(
                        f"Task {leaf.name!r} is asked for twice (in {owner[leaf.name]!r} and {root.name!r}); list it once."
                    )
                owner[leaf.name] = root.name
                tasks[leaf.name] = leaf
        return LoadedTasks(tasks=tasks, groups=groups, roots=roots)

    def _build_spec(self, spec: Any) -> Any:
        from assay.runner.tasks.task import Task

        if isinstance(spec, (Task, Group)):
            return spec
        if isinstance(spec, dict):
            kind = "group" if "group" in spec else "task"
            if kind == "group":
                return self._build_group(spec["group"], spec, {}, None, tenant=False)
            base = self.index.get(spec.get("task", ""))
            return self._build_task(base, overrides=spec)
        if isinstance(spec, str):
            entry = self.index.get(spec)
            if entry is None and Path(spec).is_file():
                config = load_yaml(spec, resolve_functions=False)
                kind = kind_of(config)
                entry = IndexEntry(config.get("group") or config["task"], kind, Path(spec).resolve(), config)
            if entry is None:
                raise UserError(self._unknown_message([spec]))
            return self._build_entry(entry, {})
        raise UserError(
            f"Cannot load task spec of type {type(spec).__name__}; pass a name, a YAML path or a config dict."
        )

    def _build_entry(self, entry: IndexEntry, overrides: dict[str, Any]) -> Any:
        if entry.kind == "tag":
            return [
                self._build_task(self.index[name], overrides=overrides)
                for name in sorted(entry.members)
                if name in self.index
            ]
        if entry.kind == "group":
            return self._build_group(
                entry.name, self._full_config(entry), overrides, entry.path, tenant=self._tenants(entry)
            )
        return self._build_task(entry, overrides=overrides)

    @property
    def _configs_only(self) -> bool:
        return bool(getattr(self._mode, "configs_only", False))

    def _full_config(self, entry: IndexEntry | None) -> dict[str, Any]:
        if entry is None:
            return {}
        if entry.path is not None:
            loaded: dict[str, Any] = load_yaml(
                entry.path, resolve_functions=not self._configs_only, root=entry.root, allow_code=entry.code_allowed
            )
            return loaded
        return self._resolved(copy.deepcopy(entry.config or {}))

    def _resolved(self, config: dict[str, Any]) -> dict[str, Any]:
        resolved: dict[str, Any] = config if self._configs_only else resolve_functions(config)
        return resolved

    def _build_task(self, entry: IndexEntry | None, *, overrides: dict[str, Any]) -> Any:
        from assay.runner.tasks.config import TaskConfig
        from assay.runner.tasks.task import Task

        config = {**self._full_config(entry), **self._resolved(copy.deepcopy(overrides))}
        for key in ("tag", "group", "task_list"):
            config.pop(key, None)
        metadata = config.get("metadata")
        metadata = (
            dict(metadata) if isinstance(metadata, dict) else ({"_metadata": metadata} if metadata is not None else {})
        )
        config["metadata"] = {
            **metadata,
            **self.metadata,
            "config_source": str(entry.path) if entry and entry.path else "inline",
        }
        if self._configs_only:
            return _TaskConfigOnly(name=str(config.get("task")), config=config)
        if "class" in config:
            cls = config.pop("class")
            return cls(config=TaskConfig.from_dict(config))
        return Task(TaskConfig.from_dict(config), tenant=self.tenant)

    def _tenants(self, entry: IndexEntry) -> bool:
        """Whether `entry` is a tenant's (its names cannot be the library's: see `tenant_names`)."""
        return self._library is not None and entry.name not in self._library

    def _build_group(
        self, name: str, raw: dict[str, Any], overrides: dict[str, Any], path: Path | None, *, tenant: bool
    ) -> Group:
        aggregates = raw.get("aggregate_metric_list")
        if isinstance(aggregates, dict):
            aggregates = [aggregates]
        metadata = dict(raw.get("metadata") or {})
        metadata.update(self.metadata)
        group = Group(
            name=name,
            alias=raw.get("group_alias"),
            aggregate_metric_list=[AggregateMetric.from_yaml(a, name) for a in (aggregates or [])],
            metadata=metadata,
            raw_config=raw,
        )
        # Keys that are not group keys apply to every child (lm-eval semantics); the caller's win.
        inherited = {**{k: v for k, v in raw.items() if k not in GROUP_KEYS}, **overrides}
        members = raw.get("task")
        for item in [members] if isinstance(members, str) else (members or []):
            for child in self._build_member(item, name, inherited, tenant=tenant):
                group.add(child)
        return group

    def _build_member(self, item: Any, group_name: str, inherited: dict[str, Any], *, tenant: bool) -> list[Any]:
        """One entry of a group's `task` list; `tenant`: the group is a tenant's, so a library member stays as it is."""
        if isinstance(item, dict) and "group" in item:
            sub = item["group"]
            if sub in self.index and self.index[sub].kind == "group":
                indexed, extra = self.index[sub], {k: v for k, v in item.items() if k != "group"}
                if tenant and not self._tenants(indexed):
                    tenant_names.refuse_override(group_name, sub, {**inherited, **extra})
                return [
                    self._build_group(
                        sub,
                        self._full_config(indexed),
                        {**inherited, **extra},
                        indexed.path,
                        tenant=self._tenants(indexed),
                    )
                ]
            return [self._build_group(f"{group_name}::{sub}", item, inherited, None, tenant=tenant)]
        if isinstance(item, dict):
            if "task" not in item:
                raise UserError(f"Group {group_name!r}: a member entry needs a 'task' or 'group' key.")
            base, overrides = item["task"], {**inherited, **item}
        elif isinstance(item, str):
            base, overrides = item, dict(inherited)
        else:
            raise UserError(f"Group {group_name!r}: member {item!r} must be a name or a mapping.")
        entry = self.index.get(base)
        if entry is None:
            if isinstance(item, dict):
                inline = {**overrides, "task": f"{group_name}::{base}"}
                return [self._build_task(None, overrides=inline)]
            broken = broken_files.defining(self.broken, base)
            why = f" {broken.explain(base)}" if broken is not None else suggest(base, self.index.keys())
            raise UserError(f"Group {group_name!r} lists unknown task {base!r}.{why}")
        if tenant and not self._tenants(entry):
            tenant_names.refuse_override(group_name, base, {k: v for k, v in overrides.items() if k != "task"})
        if entry.kind == "group":
            return [
                self._build_group(
                    entry.name, self._full_config(entry), overrides, entry.path, tenant=self._tenants(entry)
                )
            ]
        if entry.kind == "tag":
            return [
                self._build_task(self.index[name], overrides={"task": name, **overrides})
                for name in sorted(entry.members)
            ]
        return [
            self._build_task(
                entry, overrides={**overrides, "task": base} if isinstance(item, str) else {"task": base, **overrides}
            )
        ]
