"""Where a tenant's task may take its data from: the Hugging Face hub, or the datasets directory.

lm-eval's task files name their data freely (`dataset_path: json` with `data_files:
/any/file`): on a user's own machine those are the user's own files. A tenant's task runs in a
pod that holds a ServiceAccount token, environment variables and mounted volumes, and
`data_files: {test: /proc/self/environ}` made them its documents. So a task of a tenant's task
source (and any task whose code is refused) names only:

- a hub dataset (`org/name`, `name`): its `data_files` and `data_dir` are paths inside the
  dataset's repository, relative and without `..`;
- a packaged builder (`json`, `csv`, `parquet`, `text`, ...) with `data_files` inside
  ASSAY_DATASETS_DIR: absolute paths there, or relative ones, which are read from the first
  of its folders that holds them (never from the runner's working directory);
- a folder inside ASSAY_DATASETS_DIR (an absolute `dataset_path` there).

Refused before anything is read: a path outside ASSAY_DATASETS_DIR, `..`, `~`, URLs and
fsspec chains (`::`) in `dataset_path`, `dataset_name`, `data_files` and `data_dir`;
`cache_dir` and `storage_options` (the datasets cache and the file systems are the admin's);
a builder without `data_files` (it would scan the working directory); a local folder
elsewhere; and the builders that connect to a database (`sql`) or unpickle a file (`pandas`).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from assay.errors import UserError
from assay.extras import needs_extra
from assay.runner.data import local

_REFUSED_BUILDERS = {"sql": "connects to a database", "pandas": "unpickles its files, which runs code"}
_ADMINS_KWARGS = {"cache_dir": "the datasets cache is the admin's", "storage_options": "file systems are the admin's"}
_FIX = f"a tenant's task reads a hub dataset, or files inside {local.ENV_VAR}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def _refuse(task: str, field: str, value: object, why: str) -> UserError:
    return UserError(f"Task {task!r}: {field} {_shown(value)} {why}; {_FIX}.")


def _path_problem(path: str, roots: list[Path] | None = None) -> str | None:
    """Why `path` may not name a tenant's data, or None; an absolute path only inside `roots`."""
    if "://" in path or "::" in path:
        return "is a URL"
    if path.startswith("~"):
        return "is a path in a home folder"
    if ".." in path.replace("\\", "/").split("/"):
        return "leads out of its folder (`..`)"
    if os.path.isabs(path) and not _inside(Path(path), roots or []):
        return f"is an absolute path outside {local.roots_in_words()}"
    return None


def _packaged_builders() -> frozenset[str]:
    with needs_extra("Loading a task's dataset", "data", "datasets"):
        from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    return frozenset(_PACKAGED_DATASETS_MODULES)


def _inside(path: Path, roots: list[Path]) -> bool:
    resolved = path.expanduser().resolve()
    return any(resolved.is_relative_to(root.expanduser().resolve()) for root in roots)


def confine(
    task: str, dataset_path: Any, dataset_name: Any, dataset_kwargs: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The dataset_kwargs a tenant's task loads with (a builder's data_files made paths inside
    ASSAY_DATASETS_DIR); UserError naming the field when the task names data elsewhere."""
    if dataset_kwargs is not None and not isinstance(dataset_kwargs, Mapping):
        raise _refuse(task, "dataset_kwargs", dataset_kwargs, "is not a mapping of load_dataset's arguments")
    kwargs = dict(dataset_kwargs or {})
    for key, why in _ADMINS_KWARGS.items():
        if key in kwargs:
            raise _refuse(task, f"dataset_kwargs.{key}", kwargs[key], f"is not the task's to set ({why})")
    if not isinstance(dataset_path, str):
        return kwargs  # no dataset_path: the loader says so in its own sentence
    if dataset_name is not None and (
        not isinstance(dataset_name, str)
        or "/" in dataset_name
        or "\\" in dataset_name
        or _path_problem(dataset_name) is not None
    ):
        raise _refuse(task, "dataset_name", dataset_name, "is a path, not the name of a dataset's config")
    roots = local.local_roots()
    problem = _path_problem(dataset_path, roots)
    if problem is not None:
        raise _refuse(task, "dataset_path", dataset_path, problem)
    if os.path.isabs(dataset_path):  # a folder inside the datasets directory
        _check_entries(task, kwargs, roots)
        return kwargs
    if dataset_path in _REFUSED_BUILDERS:  # refused by name: `datasets` versions differ in which they ship
        raise _refuse(task, "dataset_path", dataset_path, f"is a builder that {_REFUSED_BUILDERS[dataset_path]}")
    if dataset_path in _packaged_builders():
        return _builder_kwargs(task, dataset_path, kwargs, roots)
    if os.path.exists(dataset_path) and not _inside(Path(dataset_path), roots):
        # `datasets` would read it as a local folder, relative to the working directory.
        raise _refuse(task, "dataset_path", dataset_path, f"is a local folder outside {local.roots_in_words()}")
    _check_entries(task, kwargs, [])  # a hub repository's paths: relative
    return kwargs


def _entries(task: str, data_files: Any) -> list[str]:
    """Every path a data_files value names: a path, a list of them, or split → path(s)."""
    values = list(data_files.values()) if isinstance(data_files, Mapping) else [data_files]
    entries: list[str] = []
    for value in values:
        for entry in value if isinstance(value, list) else [value]:
            if not isinstance(entry, str):
                raise _refuse(
                    task, "dataset_kwargs.data_files", data_files, "is not paths (a path, a list, or split: path)"
                )
            entries.append(entry)
    return entries


def _check_entries(task: str, kwargs: Mapping[str, Any], roots: list[Path]) -> None:
    """Every data_dir and data_files path: relative without `..`, or absolute inside `roots`."""
    for key in ("data_dir", "data_files"):
        if key in kwargs and kwargs[key] is not None:
            for entry in _entries(task, kwargs[key]) if key == "data_files" else [kwargs[key]]:
                problem = _path_problem(entry, roots) if isinstance(entry, str) else "is not a path"
                if problem is not None:
                    raise _refuse(task, f"dataset_kwargs.{key}", entry, problem)


def _builder_kwargs(task: str, builder: str, kwargs: dict[str, Any], roots: list[Path]) -> dict[str, Any]:
    if "data_dir" in kwargs:
        raise _refuse(task, "dataset_kwargs.data_dir", kwargs["data_dir"], "is read from the working directory")
    if not kwargs.get("data_files"):
        raise UserError(f"Task {task!r}: dataset_path {builder!r} needs dataset_kwargs.data_files; {_FIX}.")
    _check_entries(task, kwargs, roots)
    if not roots:
        raise UserError(
            f"Task {task!r}: its data_files are read from {local.ENV_VAR}, which is not set here; {_FIX} "
            f"(ask the cluster admin where {local.ENV_VAR} is)."
        )
    data_files = kwargs["data_files"]
    if isinstance(data_files, Mapping):
        kwargs["data_files"] = {split: _under_roots(value, roots) for split, value in data_files.items()}
    else:
        kwargs["data_files"] = _under_roots(data_files, roots)
    return kwargs


def _under_roots(value: Any, roots: list[Path]) -> Any:
    """A relative data_files entry (or a list of them) as a path in the first datasets folder that holds it."""
    if isinstance(value, list):
        return [_under_roots(entry, roots) for entry in value]
    if os.path.isabs(value):
        return value
    holder = next((root for root in roots if glob.glob(str(root / value), recursive=True)), roots[0])
    return str(holder / value)
