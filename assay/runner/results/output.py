"""Writing the results JSON and the samples JSONL where lm-eval writes them.

lm-eval's `EvaluationTracker` decides file names and the last top-level keys of the
results file; tools that read lm-eval output (leaderboards, notebooks, `datasets`)
rely on both, so Assay keeps them:

- `--output_path DIR`: `DIR/<model_name_sanitized>/results_<date_id>.json` and
  `samples_<task>_<date_id>.jsonl` beside it;
- `--output_path FILE.json`: `FILE_<date_id>.json`, samples in FILE's folder;
- date_id is the local ISO time of saving with ':' replaced by '-';
- after the evaluator's keys come `task_hashes`, then the run info (model_source,
  model_name, model_name_sanitized, system_instruction(+_sha), fewshot_as_multiturn,
  chat_template(+_sha), total_evaluation_time_seconds as a string).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import os
import random
import re
import string
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from assay.errors import UserError

log = logging.getLogger(__name__)

# Model-name keys in the order lm-eval looks for them (peft/delta come with pretrained).
_MODEL_NAME_KEYS = ("peft", "delta", "pretrained", "model", "path", "engine")
_UNSAFE_PATH_CHARS = re.compile(r"[\"<>:/|\\?*\[\]]+")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def json_default(value: Any) -> Any:
    """What json cannot serialise, as lm-eval's handle_non_serializable converts it.

    numpy bools/ints/floats become Python values, sets become lists, anything else
    (tensors, dtypes, paths, ...) its str().
    """
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        np = None  # type: ignore[assignment]
    if np is not None:
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.floating):
            return float(value)
    if isinstance(value, set):
        return list(value)
    return str(value)


def dumps(results: Mapping[str, Any]) -> str:
    """The results file's text (indent 2, non-ASCII kept)."""
    return json.dumps(results, indent=2, default=json_default, ensure_ascii=False)


def sanitize_model_name(name: str) -> str:
    """lm-eval's folder name for a model (`/` and the like become `__`), except that a leading dot
    is dropped: lm-eval names `pretrained=../model`'s folder `..__model`, hidden from `ls`."""
    return _UNSAFE_PATH_CHARS.sub("__", name).lstrip(".") or "model"


def sanitize_task_name(name: str) -> str:
    return re.sub(r"\W", "_", name)


def model_name_from_args(model_args: str | Mapping[str, Any] | None) -> str | None:
    """The model's name as lm-eval finds it in model_args (dict or `k=v,...` string)."""
    if isinstance(model_args, Mapping):
        for key in _MODEL_NAME_KEYS:
            if key in model_args:
                return str(model_args[key])
    elif isinstance(model_args, str):
        for key in _MODEL_NAME_KEYS:
            marker = f"{key}="
            if marker in model_args:
                return model_args.split(marker)[1].split(",")[0]
    return None


def _random_name() -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=8))


def new_date_id(now: datetime.datetime | None = None) -> str:
    return (now or datetime.datetime.now()).isoformat().replace(":", "-")


@dataclasses.dataclass
class RunInfo:
    """The run facts lm-eval appends to the results file, in its key order."""

    model_source: str | None = None
    model_name: str | None = None
    model_name_sanitized: str | None = None
    system_instruction: str | None = None
    system_instruction_sha: str | None = None
    fewshot_as_multiturn: bool | None = None
    chat_template: str | None = None
    chat_template_sha: str | None = None
    total_evaluation_time_seconds: str | None = None

    @classmethod
    def build(
        cls,
        *,
        model_source: str,
        model_args: str | Mapping[str, Any] | None,
        system_instruction: str | None,
        chat_template: str | None,
        fewshot_as_multiturn: bool | None,
        start_time: float | None = None,
        end_time: float | None = None,
    ) -> RunInfo:
        # lm-eval names a model without a name in model_args (its dummy model, a custom LM) by 8
        # random characters, a folder nobody can tell apart from a temporary one: the backend's
        # name says more (`dummy/results_<date>.json`), and the date in each file name keeps runs apart.
        name = model_name_from_args(model_args) or model_source or _random_name()
        return cls(
            model_source=model_source,
            model_name=name,
            model_name_sanitized=sanitize_model_name(name),
            system_instruction=system_instruction,
            system_instruction_sha=sha256(system_instruction) if system_instruction else None,
            fewshot_as_multiturn=fewshot_as_multiturn,
            chat_template=chat_template,
            chat_template_sha=sha256(chat_template) if chat_template else None,
            total_evaluation_time_seconds=(
                str(end_time - start_time) if start_time is not None and end_time is not None else None
            ),
        )


def task_hashes(samples_by_task: Mapping[str, Iterable[Mapping[str, Any]]] | None) -> dict[str, str]:
    """Per task, sha256 over every sample's doc_hash + prompt_hash + target_hash."""
    if not samples_by_task:
        return {}
    return {
        task: sha256("".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in samples))
        for task, samples in samples_by_task.items()
    }


def add_run_info(
    results: dict[str, Any],
    *,
    model_source: str,
    model_args: str | Mapping[str, Any] | None,
    system_instruction: str | None,
    chat_template: str | None,
    fewshot_as_multiturn: bool | None,
    start_time: float | None,
    end_time: float | None,
    samples: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
) -> RunInfo:
    """Append `task_hashes` and the run info to `results` (in place), as lm-eval saves them.

    start_time/end_time are `time.perf_counter()` readings (only their difference is kept).
    """
    info = RunInfo.build(
        model_source=model_source,
        model_args=model_args,
        system_instruction=system_instruction,
        chat_template=chat_template,
        fewshot_as_multiturn=fewshot_as_multiturn,
        start_time=start_time,
        end_time=end_time,
    )
    results["task_hashes"] = task_hashes(samples)
    results.update(dataclasses.asdict(info))
    return info


def results_file(output_path: str | Path, model_name_sanitized: str | None, date_id: str) -> Path:
    path = Path(output_path)
    if path.suffix == ".json":
        return path.with_name(f"{path.stem}_{date_id}.json")
    return path / str(model_name_sanitized) / f"results_{date_id}.json"


def samples_dir(output_path: str | Path, model_name_sanitized: str | None) -> Path:
    path = Path(output_path)
    if path.suffix == ".json":
        return path.parent
    return path / str(model_name_sanitized)


def check_writable(
    output_path: str | os.PathLike[str], *, name: str, fix: str = "choose a folder you can write to, with free space"
) -> list[Path]:
    """UserError unless a file can be written where `output_path`'s results will go.

    A real write and delete of a temporary file (permissions, read-only mounts and a full
    disk all show), before the model loads: lm-eval finds out after the whole evaluation.
    `name` is how the error names the input (`--output_path`), `fix` what to do. Returns the
    folders it created, deepest first, for a caller that removes them if the run writes nothing."""
    path = Path(output_path)
    folder = path.parent if path.suffix == ".json" else path
    created = [parent for parent in (folder, *folder.parents) if not parent.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".assay-write-check-") as probe:
            probe.write(b"assay")
            probe.flush()
    except FileExistsError:
        raise UserError(f"Cannot write to {name} {output_path} ({folder} is a file, not a folder); {fix}.") from None
    except OSError as error:
        raise UserError(f"Cannot write to {name} {output_path} ({error.strerror or error}); {fix}.") from None
    return created


def remove_if_empty(folders: list[Path]) -> None:
    """`check_writable`'s folders, deepest first, where a run that stopped left them empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (something was written), or already gone
            return


def save_results(results: Mapping[str, Any], output_path: str | Path, *, date_id: str | None = None) -> Path:
    """Write the results JSON; its folder comes from `results["model_name_sanitized"]`."""
    date_id = date_id or new_date_id()
    target = results_file(output_path, results.get("model_name_sanitized"), date_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(dumps(results), encoding="utf-8")
    return target


def sample_record(sample: Mapping[str, Any]) -> dict[str, Any]:
    """One JSONL record: arguments as {gen_args_i: {arg_j}}, responses as strings, target str."""
    record = dict(sample)
    record["arguments"] = {
        f"gen_args_{i}": {f"arg_{j}": part for j, part in enumerate(args)} for i, args in enumerate(sample["arguments"])
    }
    record["resps"] = _strings(sample["resps"])
    record["filtered_resps"] = _strings(sample["filtered_resps"])
    record["target"] = str(sample["target"])
    # lm-eval rebuilds the dict in this order: arguments keep their place, the
    # replaced keys too (dict assignment does not move existing keys).
    return record


def _strings(value: Any) -> Any:
    if isinstance(value, list):
        return [_strings(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_strings(item) for item in value)
    return str(value)


def save_samples(
    samples_by_task: Mapping[str, Iterable[Mapping[str, Any]]],
    output_path: str | Path,
    date_id: str,
    *,
    model_name_sanitized: str | None = None,
) -> list[Path]:
    """Write `samples_<task>_<date_id>.jsonl` per task (appending, like lm-eval)."""
    folder = samples_dir(output_path, model_name_sanitized)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for task, samples in samples_by_task.items():
        target = folder / f"samples_{task}_{date_id}.jsonl"
        with open(target, "a", encoding="utf-8") as handle:
            for sample in samples:
                handle.write(json.dumps(sample_record(sample), default=json_default, ensure_ascii=False) + "\n")
        written.append(target)
    return written


def save_scores(
    scores_by_task: Mapping[str, Iterable[Mapping[str, Any]]], results_path: Path, date_id: str
) -> list[Path]:
    """Write `scores_<task>_<date_id>.jsonl` beside the results: per document, its identity and
    metric values (`assay.compare.outputs.score_line`), so that a later run can pair with this one."""
    written = []
    for task, lines in scores_by_task.items():
        target = results_path.parent / f"scores_{task}_{date_id}.jsonl"
        with open(target, "w", encoding="utf-8") as handle:
            for line in lines:
                handle.write(json.dumps(line, default=json_default, ensure_ascii=False) + "\n")
        written.append(target)
    return written


class GeneralConfigTracker:
    """lm-eval's `evaluation_tracker.general_config_tracker`, for evaluators that fill it."""

    def __init__(self) -> None:
        self.start_time = time.perf_counter()
        self.end_time: float | None = None
        self.logged: dict[str, Any] | None = None

    def log_experiment_args(
        self,
        model_source: str,
        model_args: str | Mapping[str, Any] | None,
        system_instruction: str | None,
        chat_template: str | None,
        fewshot_as_multiturn: bool | None,
    ) -> None:
        self.logged = {
            "model_source": model_source,
            "model_args": model_args,
            "system_instruction": system_instruction,
            "chat_template": chat_template,
            "fewshot_as_multiturn": fewshot_as_multiturn,
        }

    def log_end_time(self) -> None:
        self.end_time = time.perf_counter()


@dataclasses.dataclass
class SavedRun:
    results_path: Path | None
    sample_paths: list[Path]
    date_id: str
    model_name: str
    model_name_sanitized: str

    def log_paths(self) -> None:
        """Where the files went (lm-eval's tracker logs "Saving results aggregated" and the samples' folder)."""
        if self.results_path is not None:
            log.info("Results written to %s", self.results_path)
        for path in self.sample_paths:
            log.info("Samples written to %s", path)


class EvaluationTracker:
    """Saves one run's files; accepts lm-eval's `evaluation_tracker` calls.

    `simple_evaluate(..., evaluation_tracker=tracker)` may call
    `tracker.general_config_tracker.log_experiment_args(...)` (it knows the chat
    template); otherwise `save` uses the fallback facts the caller passes.
    """

    def __init__(self, output_path: str | Path | None = None) -> None:
        self.output_path = output_path
        self.general_config_tracker = GeneralConfigTracker()

    def save(
        self,
        results: dict[str, Any],
        samples: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
        *,
        model_source: str,
        model_args: str | Mapping[str, Any] | None,
        system_instruction: str | None = None,
        chat_template: str | None = None,
        fewshot_as_multiturn: bool | None = None,
    ) -> SavedRun:
        """Complete `results` with task hashes and run info; write the files if there is an output path."""
        tracker = self.general_config_tracker
        tracker.log_end_time()
        facts: dict[str, Any] = dict(
            model_source=model_source,
            model_args=model_args,
            system_instruction=system_instruction,
            chat_template=chat_template,
            fewshot_as_multiturn=fewshot_as_multiturn,
        )
        if tracker.logged is not None:
            facts.update(tracker.logged)
        info = add_run_info(results, **facts, start_time=tracker.start_time, end_time=tracker.end_time, samples=samples)
        date_id = new_date_id()
        results_path = None
        sample_paths: list[Path] = []
        if self.output_path:
            results_path = save_results(results, self.output_path, date_id=date_id)
            if samples:
                ordered = {task: samples[task] for task in results.get("configs", samples) if task in samples}
                sample_paths = save_samples(
                    ordered, self.output_path, date_id, model_name_sanitized=info.model_name_sanitized
                )
        return SavedRun(
            results_path=results_path,
            sample_paths=sample_paths,
            date_id=date_id,
            model_name=str(info.model_name),
            model_name_sanitized=str(info.model_name_sanitized),
        )
