"""Load a task's dataset from local files when the Hugging Face hub is out of reach.

Task YAMLs name hub datasets (`dataset_path: allenai/ai2_arc`, `dataset_name: ARC-Easy`),
and they must stay identical to lm-eval's. Air-gapped clusters therefore get their data by
*location*, not by editing YAMLs: if `ASSAY_DATASETS_DIR` (one folder, or several joined
with os.pathsep, searched in order) holds

    <dir>/<dataset_path>/<dataset_name or "default">/<split>.{jsonl,json,parquet,csv}

those files are the dataset, one split per file, and the hub is never contacted.
`assay.runner.data.importer` writes this layout from the public benchmark files. Otherwise
the call is the ordinary `datasets.load_dataset(dataset_path, dataset_name,
**dataset_kwargs)`, so local-file tasks (`dataset_path: json` + `data_files`) and the HF
cache work as usual, including HF_HUB_OFFLINE / HF_DATASETS_OFFLINE.

When local files serve a dataset, `dataset_kwargs` (hub options such as `revision` or
`data_dir`) are ignored: the folder is the whole dataset.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.errors import DataError
from assay.extras import needs_extra
from assay.runner.data import converters, plain_jsonl

if TYPE_CHECKING:
    import datasets

ENV_VAR = "ASSAY_DATASETS_DIR"
DEFAULT_CONFIG = "default"

# File suffix -> the `datasets` packaged builder that reads it. Checked in this order
# when one split exists in several formats.
_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def local_roots() -> list[Path]:
    """The folders named by ASSAY_DATASETS_DIR, in search order (empty entries skipped)."""
    value = os.environ.get(ENV_VAR, "")
    return [Path(part).expanduser() for part in value.split(os.pathsep) if part.strip()]


def roots_in_words() -> str:
    """ASSAY_DATASETS_DIR as an error names it: unset, its folders, or the ones that do not exist."""
    roots = local_roots()
    if not roots:
        return f"{ENV_VAR} (not set)"
    absent = [str(root) for root in roots if not root.is_dir()]
    if absent:
        return f"{ENV_VAR} ({', '.join(absent)}: no such folder)"
    return f"{ENV_VAR} ({os.pathsep.join(map(str, roots))})"


def fixes(dataset_path: str, dataset_name: str | None, *, last: str) -> str:
    """How to get a hub dataset this machine lacks, as an error's closing clause ending in `last`:
    `assay data import` where it builds the dataset, else where the data must come from."""
    folder = f"{dataset_path}/{dataset_name or DEFAULT_CONFIG}"
    cache = "set HF_DATASETS_CACHE to a datasets cache that holds it"
    benchmark = converters.benchmark_writing(folder)
    if benchmark is not None:
        return (
            f"set {ENV_VAR} to a folder holding {folder}/<split>.jsonl (`assay data import --from <benchmark files> "
            f"--to <folder> --only {benchmark}` writes one), {cache}, or {last}"
        )
    load = f"datasets.load_dataset({dataset_path!r}" + (f", {dataset_name!r})" if dataset_name else ")")
    return (
        f"`assay data import` cannot build it: its data comes from the Hugging Face hub, so run {load} once on a "
        f"machine that reaches the hub and {cache} (a copy of that machine's), write its splits yourself as "
        f"{folder}/<split>.jsonl in a folder named by {ENV_VAR}, or {last}"
    )


def find_local_files(
    dataset_path: str, dataset_name: str | None = None, *, roots: list[Path] | None = None
) -> dict[str, Path] | None:
    """Split name -> file for the first root holding this dataset/config, else None."""
    for root in local_roots() if roots is None else roots:
        folder = root / dataset_path / (dataset_name or DEFAULT_CONFIG)
        if not folder.is_dir():
            continue
        files: dict[str, Path] = {}
        for suffix in _BUILDERS:
            for path in sorted(folder.glob(f"*{suffix}")):
                files.setdefault(path.name[: -len(suffix)], path)
        if files:
            return files
    return None


def _datasets() -> Any:
    """`datasets`, imported on first use: with pandas and pyarrow it is ~1 s and ~150 MB of start-up,
    which a run whose documents are plain local JSON Lines (`plain_jsonl`) never needs. The core
    install has no `datasets` (the operator and `assay get` do without it): the sentence names the extra."""
    with needs_extra("Loading a task's dataset", "data", "datasets"):
        import datasets

    return datasets


def _load_local(files: dict[str, Path]) -> datasets.DatasetDict:
    datasets = _datasets()
    by_builder: dict[str, dict[str, str]] = {}
    for split, path in files.items():
        by_builder.setdefault(_BUILDERS[path.suffix], {})[split] = str(path)
    result = datasets.DatasetDict()
    for builder, data_files in by_builder.items():
        result.update(datasets.load_dataset(builder, data_files=data_files))
    # Keep a stable split order (the order of the files found), whatever the builders did.
    return datasets.DatasetDict({split: result[split] for split in files})


def datasets_offline() -> bool:
    """Whether `datasets` will refuse the hub (HF_DATASETS_OFFLINE, else HF_HUB_OFFLINE), as it reads them."""
    return bool(_datasets().config.HF_HUB_OFFLINE)


def is_hub_dataset(dataset_path: str) -> bool:
    """True when `datasets.load_dataset` would fetch `dataset_path` from the hub, by its own rules:
    not a packaged builder (`json`, `csv`, ...), not a local folder, and shaped `name` or `org/name`."""
    if "://" in dataset_path or os.path.isdir(dataset_path) or dataset_path.startswith((".", "/", "~")):
        return False
    if dataset_path.count("/") > 1:
        return False
    if "/" in dataset_path:  # `org/name`: no packaged builder is named so; no need to import datasets to know
        return True
    with needs_extra("Loading a task's dataset", "data", "datasets"):
        from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    return dataset_path not in _PACKAGED_DATASETS_MODULES


# dataset_kwargs that `load_dataset` takes itself; any other key becomes part of the cached config's id.
_NOT_CONFIG_KWARGS = frozenset({"revision", "cache_dir", "token", "trust_remote_code"})


def datasets_cache_dir(dataset_kwargs: dict[str, Any] | None = None) -> Path:
    cache_dir = (dataset_kwargs or {}).get("cache_dir")
    return Path(str(cache_dir or _datasets().config.HF_DATASETS_CACHE)).expanduser()


def in_datasets_cache(
    dataset_path: str, dataset_name: str | None, dataset_kwargs: dict[str, Any] | None = None
) -> bool:
    """Whether offline `load_dataset` finds this hub dataset already prepared in the datasets cache.

    The layout is `<cache>/<org>___<name>/<config id>/<version>/<hash>/` (`datasets`' Cache
    builder). The config is checked only when its id is its name (no extra kwargs); otherwise
    any cached config counts, so the check never refuses what `datasets` could load."""
    with needs_extra("Loading a task's dataset", "data", "datasets"):
        from datasets.naming import camelcase_to_snakecase

    parts = dataset_path.split("/")
    parts[-1] = camelcase_to_snakecase(parts[-1])
    root = datasets_cache_dir(dataset_kwargs) / "___".join(parts)
    plain = dataset_name is not None and not set(dataset_kwargs or {}) - _NOT_CONFIG_KWARGS
    pattern = f"{dataset_name}/*/*" if plain else "*/*/*"
    return any(path.is_dir() for path in root.glob(pattern))


def source_of(dataset_path: str, dataset_name: str | None = None, dataset_kwargs: dict[str, Any] | None = None) -> str:
    """Where `load_task_dataset` takes this dataset from, in words: a folder under ASSAY_DATASETS_DIR,
    the hub (or its local cache), or the task's own data files."""
    files = find_local_files(dataset_path, dataset_name)
    if files is not None:
        return f"{next(iter(files.values())).parent} ({ENV_VAR})"
    if is_hub_dataset(dataset_path):
        config = f" ({dataset_name})" if dataset_name else ""
        return f"the Hugging Face dataset {dataset_path}{config}"
    data_files = (dataset_kwargs or {}).get("data_files")
    return f"{dataset_path} files {data_files}" if data_files else dataset_path


@contextlib.contextmanager
def quiet_progress() -> Iterator[None]:
    """No `datasets` progress bars inside (one per split and per `map`: MMLU alone drew 171); the
    task says what it loaded in one line instead. HF_DATASETS_DISABLE_PROGRESS_BARS=0 keeps them."""
    datasets = _datasets()
    if (
        getattr(datasets.config, "HF_DATASETS_DISABLE_PROGRESS_BARS", None) is False
        or datasets.are_progress_bars_disabled()
    ):
        yield
        return
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.enable_progress_bars()


def _hub_unreachable_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ConnectionError]
    try:
        from huggingface_hub import errors as hub_errors

        errors += [hub_errors.LocalEntryNotFoundError, hub_errors.OfflineModeIsEnabled]
    except (ImportError, AttributeError):  # older huggingface_hub layouts
        pass
    return tuple(errors)


def load_task_dataset(
    dataset_path: str,
    dataset_name: str | None = None,
    dataset_kwargs: dict[str, Any] | None = None,
    *,
    trust_remote_code: bool = False,
    plain: bool = False,
) -> datasets.DatasetDict | dict[str, list[dict[str, Any]]]:
    """The DatasetDict for a task: local files first, then `datasets.load_dataset`. With `plain`, for a
    caller that only reads rows, local JSON Lines come as split -> rows where `plain_jsonl` can
    give exactly the rows `datasets` would."""
    files = find_local_files(dataset_path, dataset_name)
    if files is not None:
        rows = plain_jsonl.read_splits(files) if plain else None
        if rows is not None:
            return rows
        with quiet_progress():
            return _load_local(files)

    datasets = _datasets()
    kwargs = dict(dataset_kwargs or {})
    # datasets >= 4 has no loading scripts and rejects the flag; older versions need it.
    kwargs.pop("trust_remote_code", None)
    if trust_remote_code and int(datasets.__version__.split(".")[0]) < 4:
        kwargs["trust_remote_code"] = True
    try:
        with quiet_progress():
            return datasets.load_dataset(dataset_path, dataset_name, **kwargs)
    except _hub_unreachable_errors() as err:
        config = f" (config {dataset_name})" if dataset_name else ""
        raise DataError(
            f"Dataset {dataset_path}{config} is neither under {roots_in_words()} nor in the local datasets cache, and the"
            f" Hugging Face hub cannot be reached ({err}); {fixes(dataset_path, dataset_name, last='run where the hub can be reached')}."
        ) from err
    except FileNotFoundError as err:
        # A task YAML naming local data_files that are not there.
        raise DataError(
            f"Dataset {dataset_path} could not be loaded: {err}; check the task's dataset_kwargs data_files"
            f" (or set {ENV_VAR} for hub datasets)."
        ) from None
