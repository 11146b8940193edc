"""The runner Job's entry point: one Evaluation spec in, results on disk and in status out.

The operator starts `python -m assay.runner` (one process) or `torchrun ... -m
assay.runner` (several; `assay runner` is the same program) with the spec in a file its
environment names (the contract is in `assay.spec`). Every rank runs the same program; rank 0
alone writes the results JSON (and samples JSONL with `logSamples`) under
ASSAY_OUTPUT_DIR, reports progress and the outcome to the status sink, and prints the
results table to its log.

Exit codes (the Job's podFailurePolicy and `kubectl logs` readers rely on them):

- 0: the evaluation finished and its scores are in the Evaluation's status (or, with no
  Evaluation to report to, in the log and the files). Rank 0 reports the scores before it
  writes the files: a full output volume (ENOSPC) then costs the files, not the scores,
  and the operator shows it as the condition OutputWritten=False.
- 74 (`assay.spec.RESULTS_NOT_RECORDED_EXIT_CODE`, sysexits' EX_IOERR): the evaluation
  finished but its scores could not be written to status (refused, or the API server
  away past the sink's patience). The files are still written where they can be, and the
  log says where; the podFailurePolicy fails the Job (the operator: ResultsNotRecorded).
- 78 (`assay.spec.CONFIG_ERROR_EXIT_CODE`, sysexits' EX_CONFIG): the spec cannot run as
  written (an `assay.errors.UserError` or `UsageError`: unknown task or model, bad field,
  bad model argument; an output directory it cannot write to, found before the model
  loads). The message is one sentence naming the input and the fix; the
  podFailurePolicy fails the Job at once instead of retrying. `--check` does only this
  validation (spec, output directory, model name, what `assay validate` checks offline
  through `assay.runner.checks.offline_check`: model_args, task names and each task's YAML, then
  `assay.runner.checks.preflight`: model paths, and in offline mode the hub models and datasets in
  the caches) without loading the model or data; with several processes it runs first as an init
  container, before the ranks meet. A run does the same checks before its model loads.
- 3: loading or running the model or reading the data failed (an error raised inside
  transformers, datasets, huggingface_hub, safetensors, tokenizers, accelerate, or
  Assay's model backends and data loaders; CUDA out of memory).
- 75 (`assay.spec.PEER_FAILED_EXIT_CODE`, sysexits' EX_TEMPFAIL): another rank reported
  its own failure and this one stopped for it ("rank 1 failed: ..."); the podFailurePolicy
  ignores it, so the failing rank's exit alone counts against backoffLimit.
- 143 (128 + SIGTERM, as a shell says it): the pod was stopped (deleted, evicted, preempted,
  its node drained) and the single-process runner left at once instead of waiting out the
  grace period; not reported as the run's failure. A retried pod answers what was already
  computed from the run's response cache.
- 1: anything else, including a peer rank that stopped responding (the message names the
  rank: "rank 1 stopped responding; see its log"): a silent peer may be hung rather than
  gone, and a retry that never counted would wait for it forever.

A failing rank posts its error to the rendezvous store before it exits, so the other
ranks stop at once instead of waiting for it (see `assay.runner.distributed`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from assay import errors
from assay import spec as spec_module
from assay.errors import DataError, UserError
from assay.runner import distributed
from assay.runner.results import recording, status_sink, versus_baseline
from assay.runner.spec_file import load_spec

if TYPE_CHECKING:
    from assay.run_results import RunResults

log = logging.getLogger("assay.runner")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_MODEL_OR_DATA = 3
EXIT_CONFIG = spec_module.CONFIG_ERROR_EXIT_CODE
EXIT_PEER_FAILED = spec_module.PEER_FAILED_EXIT_CODE
EXIT_RESULTS_NOT_RECORDED = spec_module.RESULTS_NOT_RECORDED_EXIT_CODE
EXIT_STOPPED = 128 + signal.SIGTERM

ENV_USE_CACHE = spec_module.ENV_USE_CACHE
ENV_INCLUDE_PATH = "ASSAY_INCLUDE_PATH"
ENV_TASK_CODE = spec_module.ENV_TASK_CODE
"""`allowed` or `refused`: whether `!function` helpers of the include path (a tenant's task
sources) may run. Set by the operator from the admin's policy; a pod without it refuses."""
PROGRESS_LOG_INTERVAL_S = 10.0

# Where an exception was raised tells whether the model or the data is at fault.
_MODEL_OR_DATA_MODULES = (
    "transformers",
    "datasets",
    "huggingface_hub",
    "safetensors",
    "tokenizers",
    "accelerate",
    "pyarrow",
    "fsspec",
    "assay.runner.models",
    "assay.runner.data.local",
    "assay.runner.data.importer",
)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("ASSAY_LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # In a pod the include path holds a tenant's task files: no code unless the operator says so.
    os.environ.setdefault(ENV_TASK_CODE, "refused")
    try:
        spec = load_spec(args.spec)
        include_path = args.include_path or os.environ.get(ENV_INCLUDE_PATH) or None
        if args.check:
            output_dir = args.output_dir or os.environ.get(spec_module.ENV_OUTPUT_DIR) or None
            check_spec(spec, include_path=include_path, output_dir=output_dir)
            print(f"The Evaluation spec is valid: model {spec.model!r}, tasks {', '.join(spec.tasks)}.")
            return EXIT_OK
        distributed.init_from_env()
    except UserError as error:
        print(f"assay runner: {error}", file=sys.stderr)
        return EXIT_CONFIG
    except Exception as error:
        traceback.print_exc()
        print(f"assay runner: could not join the other ranks: {failure_message(error)}", file=sys.stderr)
        return EXIT_FAILURE
    rank, world = distributed.rank_and_world()
    sink = _sink(rank)
    previous_sigterm = _stop_on_sigterm()
    try:
        results = run_spec(
            spec,
            args.output_dir or os.environ.get(spec_module.ENV_OUTPUT_DIR) or None,
            include_path=include_path,
            use_cache=args.use_cache or os.environ.get(ENV_USE_CACHE) or None,
            sink=sink,
        )
        if results is not None:
            from assay.runner.results.table import make_table

            print(make_table(results))
            if results.groups:
                print(make_table(results, "groups"))
        return EXIT_OK
    except Stopped:
        print(
            "assay runner: stopped (SIGTERM: the pod is being deleted, evicted or preempted); a retried "
            "pod answers what was computed from the run's response cache",
            file=sys.stderr,
        )
        return EXIT_STOPPED
    except BaseException as error:
        return _failed(error, sink, rank=rank, world=world)
    finally:
        # The run's alone: a caller in the same process (a test, a notebook) keeps its own, and
        # so do the processes it forks later (multiprocessing's pools stop theirs with SIGTERM).
        signal.signal(signal.SIGTERM, previous_sigterm)
        distributed.shutdown()


class Stopped(BaseException):
    """SIGTERM arrived: the pod is going away. Not an Exception, so no handler takes it for a failure."""


def _stop_on_sigterm() -> Any:
    """Leave at once on SIGTERM, as the process in its own container; the handler it replaces.

    There it is PID 1, for which the kernel drops a signal with no handler: without one, every
    stop of the pod (a deletion, an eviction, preemption) waited out the grace period and came
    down by SIGKILL, and the Job made its replacement only then. torchrun's workers keep the
    default: their launcher stops them, and reads a worker killed by SIGTERM as its own doing.
    """
    if "LOCAL_RANK" in os.environ:
        return signal.getsignal(signal.SIGTERM)

    def stop(signum: int, frame: object) -> None:
        raise Stopped()

    return signal.signal(signal.SIGTERM, stop)


def _failed(error: BaseException, sink: Any, *, rank: int, world: int) -> int:
    """Report a failed run (to the peers, the log and the status) and give its exit code."""
    code = exit_code_for(error)
    message = failure_message(error)
    distributed.report_failure(message)
    if code not in (EXIT_CONFIG, EXIT_RESULTS_NOT_RECORDED) and not isinstance(error, distributed.PeerFailure):
        traceback.print_exc()
    print(f"assay runner (rank {rank} of {world}): {message}", file=sys.stderr)
    # The status write is what failed: trying it again would only wait out the same refusal.
    if code != EXIT_RESULTS_NOT_RECORDED:
        sink.failed(message if world == 1 else f"rank {rank}: {message}")
    return 130 if isinstance(error, KeyboardInterrupt) else code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="assay runner",
        description="Run one Evaluation spec (from --spec or ASSAY_EVALUATION_FILE); the runner Job's entry point.",
    )
    parser.add_argument(
        "--spec",
        metavar="FILE",
        help="the spec (or a whole Evaluation manifest) as JSON or YAML; overrides ASSAY_EVALUATION_FILE",
    )
    parser.add_argument(
        "--output-dir",
        "--output_dir",
        dest="output_dir",
        metavar="DIR",
        help="where results (and samples) go; default ASSAY_OUTPUT_DIR",
    )
    parser.add_argument(
        "--include-path",
        "--include_path",
        dest="include_path",
        metavar="DIR",
        help="extra task YAML folder; default ASSAY_INCLUDE_PATH",
    )
    parser.add_argument(
        "--use-cache",
        "--use_cache",
        dest="use_cache",
        metavar="PATH",
        help="sqlite response cache prefix (per rank PATH_rank{r}.db): a rerun computes only "
        "what is missing; default ASSAY_USE_CACHE",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only check the spec, output directory, model and model_args, task names and task "
        "YAML, and (offline) data without loading them; exit 0 or 78",
    )
    return parser


# --- the spec -------------------------------------------------------------------------


def check_spec(
    spec: spec_module.Evaluation, *, include_path: str | None = None, output_dir: str | os.PathLike[str] | None = None
) -> None:
    """What `--check` validates without loading the model or data: the output directory, the model
    name, what `assay validate` checks offline (`offline_check`: model_args, task names, each task's
    config) and the run's preflight (model paths, offline models and datasets present)."""
    from assay.runner.checks import offline_check, preflight
    from assay.runner.models import get_model

    if output_dir is not None:
        _check_output_dir(output_dir)
    get_model(spec.model)
    task_manager = offline_check.spec_task_index(spec, include_path)
    errors.raise_first(offline_check.spec_problems(spec, task_manager))
    preflight.check(
        model=spec.model,
        model_args=spec.model_args,
        tasks=spec.tasks,
        task_manager=task_manager,
        num_fewshot=spec.num_fewshot,
    )


def _check_output_dir(output_dir: str | os.PathLike[str]) -> None:
    from assay.runner.results import output

    # Before the model loads: a read-only or full volume is found in seconds, not hours.
    output.check_writable(
        output_dir,
        name="the output directory",
        fix="check spec.output (the PVC's access mode, permissions and free space)",
    )


# --- the run --------------------------------------------------------------------------


def run_spec(
    spec: spec_module.Evaluation | Mapping[str, Any],
    output_dir: str | os.PathLike[str] | None,
    *,
    include_path: str | None = None,
    use_cache: str | None = None,
    sink: Any = None,
    output_root: str | None = None,
) -> RunResults | None:
    """Evaluate `spec` on this process's share; on rank 0 write outputs and return results.

    Call `distributed.init_from_env()` first when running under torchrun. Returns None
    on ranks other than 0. `sink` defaults to the environment's status sink on rank 0;
    `output_root` (where spec.baseline.path is read) to ASSAY_OUTPUT_ROOT, then /output.
    """
    from assay.runner import evaluator
    from assay.runner.checks import offline_check

    if not isinstance(spec, spec_module.Evaluation):
        spec = spec_module.parse_spec(spec)
    rank, world = distributed.rank_and_world()
    if sink is None:
        sink = _sink(rank)
    if rank == 0 and output_dir is not None:
        _check_output_dir(output_dir)
    options = spec.run_options(use_cache=use_cache)
    if rank == 0 and options.sequential is not None and spec.baseline is not None and spec.gate.sequential:
        options = versus_baseline.with_folder(spec, options, sink=sink, output_root=output_root)
    task_manager = offline_check.spec_task_index(spec, include_path)
    log.info("rank %d of %d: evaluating %s on %s", rank, world, spec.model_label, ", ".join(spec.tasks))
    started = time.perf_counter()
    results = evaluator.run_results(
        options, task_manager=task_manager, progress=ProgressReporter(sink) if rank == 0 else None
    )
    if results is None:
        return None
    records = results.samples_by_task()
    facts = dataclasses.replace(results, run_info={**results.run_info, **recording.prompt_facts(spec, options)})
    comparison = versus_baseline.status_of(
        spec, facts, records, sink=sink, output_root=output_root or os.environ.get(spec_module.ENV_OUTPUT_ROOT)
    )
    save = functools.partial(recording.save, results, records, spec, options, output_dir, started)
    recording.record(results, save, sink, output_dir, comparison=comparison)
    return results


class ProgressReporter:
    """The evaluator's progress callback: every report to the sink (which writes only what changes
    what a reader sees, at the operator's pace: `results.progress_gate`), to the log every few seconds."""

    def __init__(
        self, sink: Any, *, interval_s: float = PROGRESS_LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.sink, self.interval_s, self.clock = sink, interval_s, clock
        self._last: float | None = None

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if done >= total or self._last is None or now - self._last >= self.interval_s:
            self._last = now
            log.info("progress: %d of %d requests", done, total)
        try:
            self.sink.progress(done, total)
        except Exception as error:
            log.warning("could not report progress: %s", error)


def _sink(rank: int) -> Any:
    from assay.runner.results import status_sink

    return status_sink.sink_from_env() if rank == 0 else status_sink.NullSink()


# --- failures -------------------------------------------------------------------------


def exit_code_for(error: BaseException) -> int:
    if isinstance(error, status_sink.ResultsNotRecorded):
        return EXIT_RESULTS_NOT_RECORDED
    if isinstance(error, DataError):
        return EXIT_MODEL_OR_DATA
    if isinstance(error, UserError):
        return EXIT_CONFIG
    if isinstance(error, distributed.PeerFailure):
        return EXIT_PEER_FAILED if error.reported else EXIT_FAILURE
    if type(error).__name__ == "OutOfMemoryError" or _raised_in(error, _MODEL_OR_DATA_MODULES):
        return EXIT_MODEL_OR_DATA
    return EXIT_FAILURE


def failure_message(error: BaseException) -> str:
    if isinstance(error, (UserError, distributed.PeerFailure, status_sink.ResultsNotRecorded)):
        return str(error)
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _raised_in(error: BaseException, prefixes: tuple[str, ...]) -> bool:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        tb = current.__traceback__
        while tb is not None:
            module = str(tb.tb_frame.f_globals.get("__name__", ""))
            if any(module == p or module.startswith(p + ".") for p in prefixes):
                return True
            tb = tb.tb_next
        current = current.__cause__
    return False
