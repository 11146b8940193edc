"""Reading task YAML: `include` chains and `!function module.fn` references.

The index reads every YAML at start-up, so it loads them with functions left unresolved
(a `FunctionRef` records where the function lives); only a task that is actually built
imports its helper modules.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from assay.errors import UserError

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclasses.dataclass(frozen=True)
class FunctionRef:
    """`!function utils.fn` as written in a YAML file in `base_dir`."""

    qualname: str
    base_dir: Path

    def resolve(self) -> Callable[..., Any]:
        module_name, _, fn_name = self.qualname.rpartition(".")
        if not module_name:
            raise UserError(f"!function {self.qualname!r} in {self.base_dir} needs the form module.function.")
        local = self.base_dir / (module_name.replace(".", "/") + ".py")
        if local.is_file():
            module = _import_file(local)
        else:
            try:
                module = importlib.import_module(module_name)
            except ImportError as err:
                raise UserError(
                    f"!function {self.qualname!r} in {self.base_dir}: no {local.name} next to the YAML and "
                    f"no importable module {module_name!r} ({err})."
                ) from None
        try:
            fn: Callable[..., Any] = getattr(module, fn_name)
            return fn
        except AttributeError:
            raise UserError(f"!function {self.qualname!r}: module {module_name!r} has no function {fn_name!r}.") from None


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


def _loader_for(base_dir: Path, resolve: bool) -> type:
    class Loader(_BaseLoader):  # type: ignore[misc, valid-type]
        pass

    def construct_function(loader: Any, node: Any) -> Any:
        ref = FunctionRef(loader.construct_scalar(node), base_dir)
        return ref.resolve() if resolve else ref

    Loader.add_constructor("!function", construct_function)
    return Loader


def load_yaml(path: str | Path, *, resolve_functions: bool = True, _seen: frozenset[Path] = frozenset()) -> dict[str, Any]:
    """Load one task/group YAML with its includes merged (the file's own keys win)."""
    path = Path(path).expanduser().resolve()
    if path in _seen:
        raise UserError(f"Task YAML {path} includes itself (include cycle); remove the cycle.")
    try:
        with path.open("rb") as handle:
            config = yaml.load(handle, Loader=_loader_for(path.parent, resolve_functions))  # noqa: S506 - only adds !function
    except FileNotFoundError:
        raise UserError(f"Task YAML {path} does not exist; check the path or the include.") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"Task YAML {path} is malformed{where}: {getattr(err, 'problem', err)}; fix the YAML syntax.") from None
    if not isinstance(config, dict):
        raise UserError(f"Task YAML {path} must hold a mapping of keys, not {type(config).__name__}.")
    includes = config.pop("include", None)
    if includes is None:
        return config
    merged: dict[str, Any] = {}
    for include in includes if isinstance(includes, list) else [includes]:
        include_path = Path(include) if Path(include).is_absolute() else path.parent / include
        included = load_yaml(include_path, resolve_functions=resolve_functions, _seen=_seen | {path})
        included.pop("task_list", None)
        merged.update(included)
    merged.update(config)
    return merged


def resolve_functions(value: Any) -> Any:
    """Resolve every FunctionRef left in a config loaded with resolve_functions=False."""
    if isinstance(value, FunctionRef):
        return value.resolve()
    if isinstance(value, dict):
        return {key: resolve_functions(item) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve_functions(item) for item in value]
    return value
