"""A finished run's record: its scores to the Evaluation's status first, then its files.

Status outlives an emptyDir output volume, and a full volume must not cost scores already
computed (`record`); the files are lm-eval's results JSON, the samples with logSamples, and
every document's scores for a later comparison (`save`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay import spec as spec_module
from assay.runner.results import status_sink

if TYPE_CHECKING:
    from assay.run_options import EvalOptions
    from assay.run_results import RunResults

# The runner's one logger, as in `assay.runner.job`: the pod's log names it.
log = logging.getLogger("assay.runner")


def record(
    results: RunResults,
    save: Callable[[], Path | None],
    sink: Any,
    output_dir: str | os.PathLike[str] | None,
    *,
    comparison: Mapping[str, Any] | None = None,
) -> None:
    """Scores to status first, then the files: status outlives an emptyDir output volume,
    and a full volume must not cost scores already computed.

    A run superseded by a newer one (`finished` is False) is not a failure: the operator
    deletes its Job and never reads its status, and failing it would only raise a Job-failed
    alert for a run the user replaced. Its files are still written, as its own output."""
    try:
        recorded = sink.finished(results, comparison=comparison)
    except status_sink.ResultsNotRecorded:
        try:
            path = save()
        except OSError as error:
            log.error("could not write the results files under %s either: %s", output_dir, error)
        else:
            if path is not None:
                log.warning("the scores did not reach status; they are only in %s", path)
        raise
    try:
        path = save()
    except OSError as error:
        if not recorded:
            raise  # the files were to be the only record
        note = f"The results files could not be written under {output_dir} ({error.strerror or error}); the scores are in status."
        log.warning("%s", note)
        sink.output(written=False, message=note)
        return
    if recorded and path is not None:
        sink.output(written=True, message=f"Results written to {path}.")


def save(
    results: RunResults,
    records: Mapping[str, Any],
    spec: spec_module.Evaluation,
    options: EvalOptions,
    output_dir: str | os.PathLike[str] | None,
    started: float,
) -> Path | None:
    from assay.compare import outputs
    from assay.runner.results import output

    tracker = output.EvaluationTracker(os.fspath(output_dir) if output_dir is not None else None)
    tracker.general_config_tracker.start_time = started
    chat_template = options.apply_chat_template
    saved = tracker.save(
        results.to_lmeval_dict(samples=False),
        records if options.log_samples else None,
        model_source=spec.model,
        model_args=dict(spec.model_args),
        system_instruction=spec.system_instruction,
        chat_template=chat_template if isinstance(chat_template, str) else None,
        fewshot_as_multiturn=options.fewshot_as_multiturn,
    )
    saved.log_paths()
    if saved.results_path is not None and records:
        # Any finished run can be a baseline: its documents' scores, whatever logSamples says.
        lines = {
            task: [
                outputs.score_line(record, cluster_key=outputs.cluster_key(results.config_of(task)))
                for record in task_records
            ]
            for task, task_records in records.items()
        }
        output.save_scores(lines, saved.results_path, saved.date_id)
    return saved.results_path


def prompt_facts(spec: spec_module.Evaluation, options: EvalOptions) -> dict[str, Any]:
    """The run facts the results file will carry that a comparison checks (prompts that differ),
    as `save` writes them: the comparison runs before the file exists."""
    from assay.runner.results import output

    template = options.apply_chat_template if isinstance(options.apply_chat_template, str) else None
    return {
        "system_instruction_sha": output.sha256(spec.system_instruction) if spec.system_instruction else None,
        "chat_template_sha": output.sha256(template) if template else None,
        "fewshot_as_multiturn": options.fewshot_as_multiturn,
    }
