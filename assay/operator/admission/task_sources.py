"""Custom tasks from ConfigMaps (spec.taskSources), checked before any Job exists.

A suite kept in Git carries its own task YAMLs as ConfigMaps (a kustomize
configMapGenerator makes them), so a new benchmark needs no image rebuild. Each key is
one task YAML; the runner sees the ConfigMaps as one read-only folder on its include
path (`/etc/assay/tasks/<configmap>/<key>`, one ConfigMap volume each).

The operator reads them first and refuses, with one sentence naming the ConfigMap and
key, what the runner would fail on: a missing ConfigMap, one too large, binary data, a
key that is not a YAML file, malformed YAML, an unknown task field, and task names in
spec.tasks that neither the library nor the ConfigMaps define. A ConfigMap is a tenant's
data: Python keys (`utils.py`) and `!function` tags are refused unless the admin's
policy sets `allowTaskCode`, and a task, group or tag may not take a name of the task
library (its scores would be read as the library task's, and the unsafe-code gate would
judge the library's config, not the tenant's).

What was checked is recorded in status.taskSources (name, resourceVersion, tasks); a
ConfigMap edited after that reaches a pod that starts later (a retry) unchecked, which
the README names as a limitation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from assay.errors import UserError
from assay.operator.admission import bounded_parse
from assay.runner import api as engine
from assay.spec import Evaluation

MOUNT = "/etc/assay/tasks"
ENV_INCLUDE_PATH = "ASSAY_INCLUDE_PATH"
"""The runner's include path variable (assay.runner.job reads it; the operator may not import it)."""
VOLUME = "task-sources"
MAX_BYTES = 512 * 1024
"""Task YAML per ConfigMap: a task file is a few KiB; more is a data file that belongs on a volume."""
_YAML_SUFFIXES = (".yaml", ".yml")
_TEXT_CHECK = "assay.runner.api:check_task_texts"
"""What the bounded child runs on the texts: the task loader's own parse."""

ConfigMapGetter = Callable[[str], Mapping[str, Any] | None]
"""name → the ConfigMap of that name in the Evaluation's namespace, None if there is none."""
FileChecker = Callable[[str], Sequence[str]]
"""path → the names a task YAML defines (raises UserError)."""


@dataclasses.dataclass(frozen=True)
class TaskSource:
    """One ConfigMap of spec.taskSources as the operator read it."""

    config_map: str
    resource_version: str
    files: Mapping[str, str]
    """key → task YAML text."""
    tasks: tuple[str, ...] = ()
    """Tasks, groups and tags its keys define (once checked)."""

    def status(self) -> dict[str, Any]:
        return {"configMap": self.config_map, "resourceVersion": self.resource_version, "tasks": list(self.tasks)}


def read(names: Sequence[str], *, namespace: str, get: ConfigMapGetter, allow_code: bool = False) -> list[TaskSource]:
    """The ConfigMaps named in spec.taskSources; UserError for one that is missing or unusable."""
    sources = []
    for name in names:
        config_map = get(name)
        if config_map is None:
            raise UserError(
                f"spec.taskSources: ConfigMap {name!r} does not exist in namespace {namespace!r}; create it "
                f"(kubectl create configmap {name} --from-file=TASK.yaml) or remove it from spec.taskSources."
            )
        sources.append(_source(name, config_map, allow_code=allow_code))
    return sources


def _source(name: str, config_map: Mapping[str, Any], *, allow_code: bool) -> TaskSource:
    if config_map.get("binaryData"):
        key = sorted(config_map["binaryData"])[0]
        raise UserError(f"spec.taskSources: ConfigMap {name!r} key {key!r} is binary data; task YAMLs are text.")
    data = {str(k): str(v) for k, v in (config_map.get("data") or {}).items()}
    if not data:
        raise UserError(f"spec.taskSources: ConfigMap {name!r} has no keys; add task YAMLs (NAME.yaml) to it.")
    size = sum(len(text.encode()) for text in data.values())
    if size > MAX_BYTES:
        raise UserError(
            f"spec.taskSources: ConfigMap {name!r} holds {size} bytes, more than the {MAX_BYTES} allowed for "
            "task YAMLs; split it into several ConfigMaps or put data files on a volume."
        )
    for key in sorted(data):
        if key.endswith(".py") and allow_code:
            continue
        if key.endswith(".py"):
            raise UserError(
                f"spec.taskSources: ConfigMap {name!r} key {key!r} is Python code, which this cluster does not run "
                "from ConfigMaps: remove it and its `!function` tags, or ask the cluster admin to set "
                "policy.allowTaskCode."
            )
        if not key.endswith(_YAML_SUFFIXES):
            raise UserError(f"spec.taskSources: ConfigMap {name!r} key {key!r} is not a task YAML; name it KEY.yaml.")
    version = str((config_map.get("metadata") or {}).get("resourceVersion") or "")
    return TaskSource(config_map=name, resource_version=version, files=data)


def check_parse(sources: Sequence[TaskSource], *, limits: bounded_parse.Limits = bounded_parse.LIMITS) -> None:
    """Parse every task YAML of `sources` in one bounded child process (`bounded_parse`) before the
    operator parses them itself; UserError naming the ConfigMap and key past a bound, or the
    ConfigMaps whose parse crashed or ran past a limit. No child without sources."""
    files = [
        [f"spec.taskSources: ConfigMap {source.config_map!r} key {key!r}: It", text]  # as `check` says it
        for source in sources
        for key, text in sorted(source.files.items())
        if key.endswith(_YAML_SUFFIXES)
    ]
    if not files:
        return
    try:
        bounded_parse.run(_TEXT_CHECK, [files], limits=limits)
    except bounded_parse.ChildFailed as failed:
        names = ", ".join(repr(source.config_map) for source in sources)
        raise UserError(
            f"spec.taskSources: parsing the task YAML of ConfigMap {names} {failed.what} in the operator's bounded "
            "parser; task files are small and shallow: shorten or flatten them."
        ) from None


@contextlib.contextmanager
def materialized(sources: Sequence[TaskSource]) -> Iterator[str | None]:
    """A folder laid out as the runner's mount (None without sources), for the engine's checks."""
    if not sources:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="assay-task-sources-") as root:
        for source in sources:
            folder = Path(root) / source.config_map
            folder.mkdir()
            for key, text in source.files.items():
                (folder / key).write_text(text)
        yield root


def check(
    sources: Sequence[TaskSource], root: str, *, checker: FileChecker = engine.check_task_file
) -> list[TaskSource]:
    """`sources` with the names each defines; UserError naming the ConfigMap and key of a broken file."""
    checked = []
    for source in sources:
        names: list[str] = []
        for key in sorted(k for k in source.files if k.endswith(_YAML_SUFFIXES)):
            path = str(Path(root) / source.config_map / key)
            try:
                names += checker(path)
            except UserError as error:
                # Paths of the scratch folder mean nothing to the user: say keys instead.
                detail = str(error).replace(f"Task YAML {path} ", "It ")
                detail = detail.replace(f"{Path(root) / source.config_map}/", "").replace(f"{root}/", "")
                detail = detail.replace(f" {Path(root).resolve()}", "").replace(f" {root}", "")
                raise UserError(f"spec.taskSources: ConfigMap {source.config_map!r} key {key!r}: {detail}") from None
        checked.append(dataclasses.replace(source, tasks=tuple(dict.fromkeys(names))))
    return checked


def refuse_library_names(sources: Sequence[TaskSource], library: frozenset[str]) -> None:
    """UserError naming the ConfigMap whose task, group or tag takes a name of the task library."""
    for source in sources:
        taken = [name for name in source.tasks if name in library]
        if taken:
            raise UserError(
                f"spec.taskSources: ConfigMap {source.config_map!r} defines {taken[0]!r}, a name of the task library, "
                f"which a task source may not reuse: rename it (for example to 'custom_{taken[0]}')."
            )


def volumes(spec: Evaluation) -> list[dict[str, Any]]:
    """One ConfigMap volume per source (volumes are always mounted read-only)."""
    return [{"name": f"{VOLUME}-{i}", "configMap": {"name": name}} for i, name in enumerate(spec.task_sources)]


def mounts(spec: Evaluation) -> list[dict[str, Any]]:
    return [
        {"name": f"{VOLUME}-{i}", "mountPath": f"{MOUNT}/{name}", "readOnly": True}
        for i, name in enumerate(spec.task_sources)
    ]
