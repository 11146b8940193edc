"""Result loggers behind `--wandb_args` and `--hf_hub_log_args`, as lm-eval logs.

Both services are optional: `wandb` and `huggingface_hub` are imported only when their
flag is used, and a missing package, a missing token or an unreachable service ends in
one sentence that names the flag, never a traceback. Files are always written locally
first, so a failed push loses nothing.

W&B (lm-eval's WandbLogger): run config {task_configs, cli_configs}; every numeric metric
logged as `<task>/<metric>[,<filter>]` (",none" dropped); string values (e.g. "N/A"
stderr) go to the run summary; tables `evaluation/eval_results` (and
`evaluation/group_eval_results`); the results JSON as artifact `results`; per task a
samples table `<task>_eval_results` and artifact `<task>` (`<task>_eval_samples.json`).

Hub (lm-eval's EvaluationTracker): the results file goes to `<org>/<results_repo>` under
`<model_name>/`, the samples folder to `<org>/<details_repo>` under
`<model_name_sanitized>/`; repos get a `-private` suffix unless public_repo=True.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from assay import scores
from assay.booleans import strict_bool
from assay.errors import UsageError, UserError
from assay.extras import needs_extra
from assay.run_results import ABSENT, RunResults
from assay.runner.results.output import SavedRun, json_default

# --- Weights & Biases -----------------------------------------------------------------


class WandbLogger:
    def __init__(
        self, init_args: Mapping[str, Any] | None = None, config_args: Mapping[str, Any] | None = None
    ) -> None:
        with needs_extra("--wandb_args", "wandb", "wandb"):
            import wandb
        # wandb's own annotations are narrower than what it accepts (columns, data): held as Any.
        self._wandb: Any = wandb
        self.run: Any
        args = dict(init_args or {})
        self.step = args.pop("step", None)
        try:
            if wandb.run is None:
                self.run = wandb.init(**args)
                if config_args:
                    self.run.config.update(dict(config_args))
            else:
                self.run = wandb.run
        except TypeError as err:
            raise UsageError(f"--wandb_args has an argument wandb.init does not take ({err}).") from None
        except Exception as err:  # wandb raises its own error types for login/network problems
            raise UserError(
                f"Could not start a W&B run with --wandb_args ({_first_line(err)}); try mode=offline."
            ) from None
        self.results: dict[str, Any] = {}

    def post_init(self, results: RunResults | Mapping[str, Any]) -> None:
        """The run's results; a dict (lm-eval's `post_init` takes one) is read as a `RunResults`."""
        run = results if isinstance(results, RunResults) else RunResults.from_lmeval_dict(results)
        self.run_results = run.without_samples()
        self.results = copy.deepcopy(self.run_results.to_lmeval_dict())
        self.task_names = run.results_names()
        self.group_names = list(run.groups)

    def log_eval_result(self) -> None:
        self.run.config.update(
            {"task_configs": self.results.get("configs", {}), "cli_configs": self.results.get("config", {})},
            allow_val_change=self.step is not None,
        )
        summary, metrics = split_metrics({name: self.run_results.row(name) for name in self.task_names})
        self.run.summary.update(summary)
        self.run.log(metrics, step=self.step)
        self.run.log({"evaluation/eval_results": self._table("Tasks", "results")}, step=self.step)
        if self.group_names:
            self.run.log({"evaluation/group_eval_results": self._table("Groups", "groups")}, step=self.step)
        artifact = self._wandb.Artifact("results", type="eval_results")
        with artifact.new_file("results.json", mode="w", encoding="utf-8") as handle:
            handle.write(json.dumps(self.results, indent=2, default=json_default, ensure_ascii=False))
        self.run.log_artifact(artifact)

    def _table(self, first: str, key: str) -> Any:
        table = self._wandb.Table(columns=[first, *WANDB_TABLE_COLUMNS])
        for row in wandb_table_rows(self.run_results, key, skip=self.group_names if key != "groups" else ()):
            table.add_data(*row)
        return table

    def log_eval_samples(self, samples: Mapping[str, list[Mapping[str, Any]]]) -> None:
        for task in (name for name in self.task_names if name not in self.group_names):
            if task not in samples:
                continue
            columns, rows = samples_table(samples[task], self.run_results.config_of(task))
            self.run.log({f"{task}_eval_results": self._wandb.Table(columns=columns, data=rows)}, step=self.step)
            artifact = self._wandb.Artifact(task, type="samples_by_task")
            with artifact.new_file(f"{task}_eval_samples.json", mode="w", encoding="utf-8") as handle:
                handle.write(json.dumps(samples[task], indent=2, default=json_default, ensure_ascii=False))
            self.run.log_artifact(artifact)

    def finish(self) -> None:
        self.run.finish()


WANDB_TABLE_COLUMNS = ["Version", "Filter", "num_fewshot", "Metric", "Value", "Stderr"]


def split_metrics(rows: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(summary of string values, numeric metrics) keyed `<task>/<metric>` with ',none' dropped.

    Like lm-eval's logger, every member of a task's row counts: its alias and name go to the
    summary, its sample_len to the metrics."""
    summary: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    for task, entry in rows.items():
        for key, value in entry.items():
            name = key[: -len(",none")] if key.endswith(",none") else key
            if isinstance(value, str):
                summary[f"{task}/{name}"] = value
            else:
                metrics[f"{task}/{name}"] = value
    return summary, metrics


def wandb_table_rows(run: RunResults, key: str, *, skip: Collection[str] = ()) -> list[list[Any]]:
    """lm-eval's W&B results table. Its logger walks each row dict, so a row's name, sample_len
    and sample_count are listed as metrics too: the rows are read from lm-eval's row."""
    rows = []
    for task, _ in run.rows(key):
        if task.name in skip:
            continue
        version = None if task.version is ABSENT or task.version == "N/A" else task.version
        n_shot = None if task.n_shot is ABSENT else task.n_shot
        for score in scores.read_row(run.row(task.name), skip={"alias"}):
            stderr = (
                "" if not score.has_stderr else scores.NOT_AVAILABLE if score.stderr is None else f"{score.stderr:.4f}"
            )
            rows.append([task.name, version, score.filter, n_shot, score.metric, str(score.value), stderr])
    return rows


def samples_table(samples: list[Mapping[str, Any]], config: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The per-task samples table lm-eval uploads (without pandas)."""
    output_type = config.get("output_type")
    columns: dict[str, list[Any]] = {"id": [s["doc_id"] for s in samples]}
    labels = [s["target"] for s in samples]
    inputs = [s["arguments"][0][0] for s in samples]
    raw: list[Any]
    filtered: list[Any]
    if output_type == "loglikelihood":
        labels = [s["arguments"][0][1] for s in samples]
        raw = [_ll_text(s["resps"][0][0]) for s in samples]
        filtered = [_ll_text(s["filtered_resps"][0]) for s in samples]
    elif output_type == "multiple_choice":
        columns["choices"] = ["\n".join(f"{i}. {args[1]}" for i, args in enumerate(s["arguments"])) for s in samples]
        raw = [_argmax([r[0][0] for r in s["resps"]]) for s in samples]
        filtered = [_argmax([r[0] for r in s["filtered_resps"]]) for s in samples]
    else:
        raw = [s["resps"][0][0] for s in samples]
        filtered = [s["filtered_resps"][0] for s in samples]
    columns = {"id": columns["id"], "data": inputs, **({"choices": columns["choices"]} if "choices" in columns else {})}
    columns.update(
        input_len=[len(text) for text in inputs],
        labels=labels,
        output_type=[output_type] * len(samples),
        raw_predictions=raw,
        filtered_predictions=filtered,
    )
    for item in config.get("metric_list", []) or []:
        metric = item.get("metric")
        if metric in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
            unit = "words" if metric == "word_perplexity" else "bytes"
            columns[f"{metric}_loglikelihood"] = [s[metric][0] for s in samples]
            columns[f"{metric}_{unit}"] = [s[metric][1] for s in samples]
        elif isinstance(metric, str):
            columns[metric] = [s.get(metric) for s in samples]
    names = list(columns)
    return names, [[columns[name][i] for name in names] for i in range(len(samples))]


def _ll_text(pair: Any) -> str:
    greedy = "be" if pair[1] else "not be"
    return f"log probability of continuation is {pair[0]} \n\ncontinuation will {greedy} generated with greedy sampling"


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i)) if values else -1


# --- Hugging Face Hub -----------------------------------------------------------------

HUB_ARG_DEFAULTS: dict[str, Any] = {
    "hub_results_org": "",
    "hub_repo_name": "",
    "details_repo_name": "",
    "results_repo_name": "",
    "push_results_to_hub": False,
    "push_samples_to_hub": False,
    "public_repo": False,
    "token": "",
    "leaderboard_url": "",
    "point_of_contact": "",
    "gated": False,
}


@dataclasses.dataclass(frozen=True)
class Upload:
    """One push: a local file (results) or folder (samples) into a dataset repo."""

    local: Path
    repo_id: str
    path_in_repo: str
    private: bool
    is_folder: bool


class HubLogger:
    """Pushes the saved results/samples to the Hub like lm-eval's EvaluationTracker."""

    def __init__(self, args: Mapping[str, Any] | None = None, *, endpoint: str | None = None) -> None:
        args = dict(args or {})
        args.pop("output_path", None)
        unknown = sorted(set(args) - set(HUB_ARG_DEFAULTS))
        if unknown:
            raise UsageError(
                f"--hf_hub_log_args has unknown key(s) {', '.join(unknown)}; known keys: {', '.join(HUB_ARG_DEFAULTS)}."
            )
        settings = {**HUB_ARG_DEFAULTS, **args}
        # Read strictly: bool("no") would make public_repo=no a public repository.
        flag = functools.partial(_hub_flag, settings)
        self.push_results = flag("push_results_to_hub")
        self.push_samples = flag("push_samples_to_hub")
        self.public = flag("public_repo")
        self.gated = flag("gated")
        self.token = str(settings["token"] or os.environ.get("HF_TOKEN", "") or "")
        self.endpoint = endpoint
        if self.enabled and not self.token:
            raise UsageError(
                "--hf_hub_log_args asks to push to the Hugging Face Hub but no token is set; set HF_TOKEN or pass token=..."
            )
        org = str(settings["hub_results_org"] or "")
        if self.enabled and not org:
            org = self._whoami()
        if settings["hub_repo_name"]:
            details = results_repo = str(settings["hub_repo_name"])
        else:
            details = str(settings["details_repo_name"] or "lm-eval-results")
            results_repo = str(settings["results_repo_name"] or details)
        suffix = "" if self.public else "-private"
        self.details_repo = f"{org}/{details}{suffix}"
        self.results_repo = f"{org}/{results_repo}{suffix}"

    @property
    def enabled(self) -> bool:
        return self.push_results or self.push_samples

    def _api(self) -> Any:
        with needs_extra("--hf_hub_log_args", "hub", "huggingface_hub"):
            from huggingface_hub import HfApi
        return HfApi(token=self.token, endpoint=self.endpoint)

    def _whoami(self) -> str:
        try:
            return str(self._api().whoami()["name"])
        except UserError:
            raise
        except Exception as err:
            raise UserError(
                f"Could not reach the Hugging Face Hub to find your user name ({_first_line(err)}); pass hub_results_org=... in --hf_hub_log_args or check the network."
            ) from None

    def plan(self, saved: SavedRun) -> list[Upload]:
        """What `push` would upload for this saved run (no network)."""
        uploads = []
        if self.push_results and saved.results_path is not None:
            uploads.append(
                Upload(
                    saved.results_path,
                    self.results_repo,
                    f"{saved.model_name}/{saved.results_path.name}",
                    not self.public,
                    False,
                )
            )
        if self.push_samples and saved.sample_paths:
            uploads.append(
                Upload(
                    saved.sample_paths[0].parent, self.details_repo, saved.model_name_sanitized, not self.public, True
                )
            )
        return uploads

    def push(self, saved: SavedRun) -> list[Upload]:
        uploads = self.plan(saved)
        if not uploads:
            return []
        api = self._api()
        for upload in uploads:
            try:
                api.create_repo(repo_id=upload.repo_id, repo_type="dataset", private=upload.private, exist_ok=True)
                if upload.is_folder:
                    api.upload_folder(
                        repo_id=upload.repo_id,
                        folder_path=str(upload.local),
                        path_in_repo=upload.path_in_repo,
                        repo_type="dataset",
                        commit_message=f"Adding samples results to {saved.model_name}",
                    )
                else:
                    api.upload_file(
                        repo_id=upload.repo_id,
                        path_or_fileobj=str(upload.local),
                        path_in_repo=upload.path_in_repo,
                        repo_type="dataset",
                        commit_message=f"Adding aggregated results for {saved.model_name}",
                    )
            except Exception as err:
                raise UserError(
                    f"Could not push {upload.local} to the Hugging Face Hub repo {upload.repo_id} ({_first_line(err)}); the files are saved locally."
                ) from None
        return uploads


def _hub_flag(settings: Mapping[str, Any], key: str) -> bool:
    return strict_bool(settings[key], name=f"--hf_hub_log_args {key}", error=UsageError)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
