"""Reading task YAML: `include` chains and `!function module.fn` references.

The index reads every YAML at start-up, so it loads them with functions left unresolved
(a `FunctionRef` records where the function lives); only a task that is actually built
imports its helper modules.

A task file is data: what it names is read only from inside its own tree, the folder it
was found under (the task library, an `--include_path` folder, or the file's own folder).
`include:` takes a relative path that stays in the tree; `!function utils.fn` imports `utils.py`
from the YAML's folder or below, never an installed module (`os.system`) and never a file
outside the tree (`.cache.x.mod.fn` would otherwise name `/cache/x/mod.py`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from assay.errors import UserError
from assay.runner.tasks import bounded_yaml

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class TaskYamlError(UserError):
    """A task YAML its parser refused: the file and the line (1-based) where the parser stopped."""

    def __init__(self, message: str, *, path: Path, line: int | None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


@dataclasses.dataclass(frozen=True)
class FunctionRef:
    """`!function utils.fn` as written in a YAML file in `base_dir`, whose tree is `root`."""

    qualname: str
    base_dir: Path
    root: Path | None = None
    """The folder the YAML was found under; None: `base_dir` itself."""
    allowed: bool = True
    """False for task files whose code the admin has not allowed (a tenant's ConfigMaps)."""

    def module_path(self) -> Path:
        """The helper file this reference names; UserError when its code may not run or it lies outside the task tree."""
        if not self.allowed:
            raise UserError(
                f"Task YAML in {self.base_dir} uses `!function {self.qualname}`, and task code from this folder "
                "is not allowed here: use YAML fields and templates only, or ask the cluster admin to set "
                "policy.allowTaskCode."
            )
        return self.helper_path()

    def helper_path(self) -> Path:
        """The helper file this reference names, whether or not its code may run; UserError when it lies outside the task tree."""
        module_name, _, fn_name = self.qualname.rpartition(".")
        parts = module_name.split(".") if module_name else []
        if not parts or not all(part.isidentifier() for part in parts + [fn_name]):
            raise UserError(
                f"!function {self.qualname!r} in {self.base_dir} needs the form module.function "
                "(a helper file beside the YAML, such as utils.function)."
            )
        local = (self.base_dir / Path(*parts[:-1], parts[-1] + ".py")).resolve()
        root = (self.root or self.base_dir).resolve()
        if not local.is_relative_to(root):
            raise UserError(
                f"!function {self.qualname!r} in {self.base_dir} names {local}, outside the task folder {root}: "
                "put the helper file beside the YAML."
            )
        return local

    def resolve(self) -> Callable[..., Any]:
        local = self.module_path()
        if not local.is_file():
            raise UserError(
                f"!function {self.qualname!r} in {self.base_dir}: there is no {local.name} beside the YAML; "
                "task helpers are read from the task's own folder only."
            )
        module = _import_file(local)
        fn_name = self.qualname.rpartition(".")[2]
        try:
            fn: Callable[..., Any] = getattr(module, fn_name)
            return fn
        except AttributeError:
            raise UserError(f"!function {self.qualname!r}: {local.name} has no function {fn_name!r}.") from None


def _import_file(path: Path) -> Any:
    # One module object per file (keyed by its full path) so that repeated loads reuse it.
    key = f"assay_task_module_{abs(hash(str(path.resolve())))}"
    mtime = path.stat().st_mtime_ns
    cached = sys.modules.get(key)
    if cached is not None and getattr(cached, "__assay_mtime__", None) == mtime:
        return cached
    spec = importlib.util.spec_from_file_location(key, path)
    if spec is None or spec.loader is None:
        raise UserError(f"Cannot import {path}.")
    module = importlib.util.module_from_spec(spec)
    module.__assay_mtime__ = mtime  # type: ignore[attr-defined]
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def _loader_for(base_dir: Path, root: Path, resolve: bool, allow_code: bool) -> type:
    class Loader(_BaseLoader):  # type: ignore[misc, valid-type]
        pass

    def construct_function(loader: Any, node: Any) -> Any:
        ref = FunctionRef(loader.construct_scalar(node), base_dir, root, allow_code)
        return ref.resolve() if resolve else ref

    Loader.add_constructor("!function", construct_function)
    return Loader


def load_yaml(
    path: str | Path,
    *,
    resolve_functions: bool = True,
    root: str | Path | None = None,
    allow_code: bool = True,
    _seen: frozenset[Path] = frozenset(),
) -> dict[str, Any]:
    """Load one task/group YAML with its includes merged (the file's own keys win).

    `root` is the folder the file was found under (default: the file's own folder): includes
    and `!function` helpers are read from inside it only. With `allow_code` False a
    `!function` loads as a reference that refuses to resolve.
    """
    path = Path(path).expanduser().resolve()
    tree = Path(root).expanduser().resolve() if root is not None else path.parent
    if path in _seen:
        raise UserError(f"Task YAML {path} includes itself (include cycle); remove the cycle.")
    source = f"Task YAML {path}"
    try:
        text = bounded_yaml.read(path, source=source)
        # Depth, size and aliases are checked on the event stream before anything is composed.
        config = bounded_yaml.load(
            text, source=source, loader=_loader_for(path.parent, tree, resolve_functions, allow_code)
        )
    except FileNotFoundError:
        raise UserError(f"Task YAML {path} does not exist; check the path or the include.") from None
    except bounded_yaml.YamlBoundsError as err:
        raise TaskYamlError(str(err), path=path, line=err.line) from None
    except yaml.YAMLError as err:
        raise _malformed(err, source=source, path=path) from None
    if not isinstance(config, dict):
        raise UserError(f"Task YAML {path} must hold a mapping of keys, not {type(config).__name__}.")
    includes = config.pop("include", None)
    if includes is None:
        return config
    merged: dict[str, Any] = {}
    for include in includes if isinstance(includes, list) else [includes]:
        included = load_yaml(
            _include_path(path, str(include), tree),
            resolve_functions=resolve_functions,
            root=tree,
            allow_code=allow_code,
            _seen=_seen | {path},
        )
        included.pop("task_list", None)
        merged.update(included)
    merged.update(config)
    return merged


def _malformed(error: yaml.YAMLError, *, source: str, path: Path) -> TaskYamlError:
    mark = getattr(error, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    where = f" at line {line}" if line is not None else ""
    problem = getattr(error, "problem", error)
    return TaskYamlError(f"{source} is malformed{where}: {problem}; fix the YAML syntax.", path=path, line=line)


def check_text(text: str, *, source: str) -> None:
    """Parse one task YAML's text as `load_yaml` would (`!function` left a reference, includes not
    followed); UserError beginning with `source` when it is past a bound or malformed."""
    try:
        bounded_yaml.load(text, source=source, loader=_loader_for(Path("."), Path("."), False, False))
    except bounded_yaml.YamlBoundsError:
        raise
    except yaml.YAMLError as err:
        raise _malformed(err, source=source, path=Path(".")) from None


def _include_path(path: Path, include: str, tree: Path) -> Path:
    """The file `include:` names, from inside the task tree only.

    `..` is allowed while it stays in the tree: 390 of lm-eval's own task YAMLs include a
    template one folder up (`include: ../generate_until_template_yaml`).
    """
    relative = Path(include)
    if relative.is_absolute() or include.startswith("~"):
        raise UserError(
            f"Task YAML {path} includes {include!r}: an include is a path relative to the YAML, "
            "not one starting with `/` or `~`; copy the file into the task folder."
        )
    target = (path.parent / relative).resolve()
    if not target.is_relative_to(tree):
        raise UserError(
            f"Task YAML {path} includes {include!r}, which leads outside the task folder {tree}; "
            "copy the file into the task folder."
        )
    return target


def resolve_functions(value: Any) -> Any:
    """Resolve every FunctionRef left in a config loaded with resolve_functions=False."""
    if isinstance(value, FunctionRef):
        return value.resolve()
    if isinstance(value, dict):
        return {key: resolve_functions(item) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve_functions(item) for item in value]
    return value


def function_refs(value: Any) -> list[FunctionRef]:
    """Every `!function` left unresolved in a config loaded with resolve_functions=False."""
    if isinstance(value, FunctionRef):
        return [value]
    if isinstance(value, dict):
        return [ref for item in value.values() for ref in function_refs(item)]
    if isinstance(value, list):
        return [ref for item in value for ref in function_refs(item)]
    return []
