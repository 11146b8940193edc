"""Which tasks a folder of imported data serves, and which tasks no import can build.

`assay data import` writes hub-id folders (`allenai/ai2_arc/ARC-Easy/test.jsonl`); what a
user runs are task names. So after an import it says, per benchmark, which files it read,
which folders it wrote and which tasks now find their evaluation split there, and it
names the tasks whose data must come from elsewhere (the Hugging Face hub).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from assay.runner.data import converters, local
from assay.runner.tasks.index import TaskManager


def hub_datasets(task_manager: TaskManager) -> dict[str, Mapping[str, Any]]:
    """Every task of the index whose data is a hub dataset, with its config."""
    configs = task_manager.leaf_configs(task_manager.all_subtasks)
    return {
        name: config for name, config in configs.items() if local.is_hub_dataset(str(config.get("dataset_path") or "."))
    }


def folder_of(config: Mapping[str, Any]) -> str:
    """`<hub id>/<config>`: where ASSAY_DATASETS_DIR holds this task's dataset."""
    return f"{config['dataset_path']}/{config.get('dataset_name') or local.DEFAULT_CONFIG}"


def served(root: Path, configs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The tasks whose evaluation split is under `root`."""
    found = []
    for name, config in configs.items():
        files = local.find_local_files(str(config["dataset_path"]), config.get("dataset_name"), roots=[root])
        split = config.get("test_split") or config.get("validation_split")
        if files is not None and split in files:
            found.append(name)
    return sorted(found)


def unbuildable(configs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Task -> hub dataset, for the tasks whose dataset no benchmark import writes."""
    return {
        name: str(config["dataset_path"])
        for name, config in sorted(configs.items())
        if converters.benchmark_writing(folder_of(config)) is None
    }


def import_report(written: Mapping[str, list[Path]], dst: Path, task_manager: TaskManager) -> str:
    """Per benchmark: the files read, the folders written, the tasks served; then the tasks no import builds."""
    configs = hub_datasets(task_manager)
    lines = []
    for name, paths in written.items():
        folders = sorted({path.parent.relative_to(dst).as_posix() for path in paths})
        tasks = served(dst, {task: c for task, c in configs.items() if folder_of(c) in folders})
        lines.append(
            f"{name}: {converters.BENCHMARKS[name].sources} -> {_folders(folders)}; tasks: {', '.join(tasks) or 'none'}"
        )
    missing = unbuildable(configs)
    if missing:
        listed = ", ".join(f"{task} ({dataset})" for task, dataset in missing.items())
        lines.append(f"not built by `assay data import` (their data comes from the Hugging Face hub): {listed}")
    return "\n".join(lines)


def _folders(folders: list[str]) -> str:
    """`cais/mmlu/<57 configs>` for a dataset with many configs, else the folders themselves."""
    by_hub_id: dict[str, list[str]] = defaultdict(list)
    for folder in folders:
        hub_id, _, config = folder.rpartition("/")
        by_hub_id[hub_id].append(config)
    return ", ".join(
        f"{hub_id}/<{len(names)} configs>" if len(names) > 3 else ", ".join(f"{hub_id}/{n}" for n in names)
        for hub_id, names in by_hub_id.items()
    )
