"""What `assay run` tells the user it did: files written, cache answers, datasets loaded, checks run,
the tasks behind each progress bar, and how to resume after Ctrl-C.

Runs the real command on the library's tasks over the shared benchmark files (converted
once into ASSAY_DATASETS_DIR) with the `dummy` model, or the tiny GPT-2 where the backend's
progress bar is the point. In-process runs read the records with caplog (pytest's handlers
stand in for the terminal's); one fresh process checks that a default run prints them.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from assay import cli
from assay.runner import doc_work
from assay.runner.models import progress_label
from assay.runner.models.dummy import DummyLM
from assay.runner.models.instance import Instance, LoglikelihoodRequest, LoglikelihoodResult
from model_fixtures import gpt2_dir  # noqa: F401  (session fixture)

pytest.importorskip("datasets")


@pytest.fixture()
def imported(converted: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(converted))
    return converted


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name.startswith("assay")]


def _only(output_dir: Path, pattern: str) -> Path:
    (found,) = output_dir.rglob(pattern)
    return found


def test_a_run_says_where_it_wrote_results_and_samples(
    imported: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = cli.main(
        [
            "run",
            "--model",
            "dummy",
            "--tasks",
            "arc_easy,arc_challenge",
            "--limit",
            "2",
            "--output_path",
            str(out),
            "--log_samples",
        ]
    )
    assert code == 0, capsys.readouterr().err
    results, easy, challenge = (
        _only(out, "results_*.json"),
        _only(out, "samples_arc_easy_*"),
        _only(out, "samples_arc_challenge_*"),
    )
    messages = _messages(caplog)
    assert messages[-3:] == [
        f"Results written to {results}",
        f"Samples written to {challenge}",
        f"Samples written to {easy}",
    ]
    # the run's INFO records are shown by default; afterwards the `assay` logger is as it was
    assert logging.getLogger("assay").level == logging.NOTSET


def test_a_run_without_output_path_says_nothing_was_saved(imported: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert cli.main(["run", "--model", "dummy", "--tasks", "arc_easy", "--limit", "2"]) == 0
    assert "No --output_path given: the results are printed below, not saved to a file." in _messages(caplog)


def test_each_task_says_what_it_loaded_in_one_line_without_progress_bars(
    imported: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import datasets

    # a fresh datasets cache: `datasets` builds every split again, where it draws its bars
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    assert cli.main(["run", "--model", "dummy", "--tasks", "arc_easy,mmlu_anatomy,hellaswag", "--limit", "2"]) == 0
    err = capsys.readouterr().err
    assert "Generating" not in err and "Map" not in err and "examples/s" not in err
    assert [m for m in _messages(caplog) if " documents from " in m] == [
        f"arc_easy: 2376 test documents from {imported / 'allenai/ai2_arc/ARC-Easy'} (ASSAY_DATASETS_DIR)",
        f"mmlu_anatomy: 135 test documents from {imported / 'cais/mmlu/anatomy'} (ASSAY_DATASETS_DIR)",
        f"hellaswag: 10042 validation documents from {imported / 'Rowan/hellaswag/default'} (ASSAY_DATASETS_DIR)",
    ]
    assert not datasets.are_progress_bars_disabled()  # what lm-eval's code prints elsewhere is untouched


def test_check_integrity_says_what_it_checked(imported: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert (
        cli.main(["run", "--model", "dummy", "--tasks", "arc_easy,lambada_openai", "--limit", "1", "--check_integrity"])
        == 0
    )
    assert [m for m in _messages(caplog) if "--check_integrity" in m] == [
        "--check_integrity: arc_easy renders its first document: a 103-character prompt, target 0.",
        "--check_integrity: lambada_openai renders its first document: a 339-character prompt, target ' signs'.",
        "--check_integrity checked 2 tasks: each renders its first document's prompt and target "
        "(lm-eval's own test suite is not run).",
    ]


def test_the_response_cache_says_what_it_answered_and_ctrl_c_says_how_to_resume(
    imported: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C is raised from the model's second call (the cache sends 1024 requests per call), as the
    signal would raise it there; a rerun of the same command answers the first 1024 from the cache."""
    argv = ["run", "--model", "dummy", "--tasks", "arc_easy", "--limit", "300", "--use_cache", str(tmp_path / "cache")]
    calls: list[int] = []
    answer = DummyLM.loglikelihood

    def interrupted(
        self: DummyLM, requests: Sequence[LoglikelihoodRequest], **kwargs: Any
    ) -> list[LoglikelihoodResult]:
        calls.append(len(requests))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return answer(self, requests, **kwargs)

    monkeypatch.setattr(DummyLM, "loglikelihood", interrupted)
    assert cli.main(argv) == 130
    assert capsys.readouterr().err == (
        f"assay: interrupted; to resume, run the same command again: the response cache {tmp_path / 'cache'}_rank0.db "
        "keeps the 1024 answers computed so far.\n"
    )
    monkeypatch.setattr(DummyLM, "loglikelihood", answer)
    caplog.clear()
    assert cli.main(argv) == 0
    assert "loglikelihood: 1024 of 1199 requests answered from the response cache; 175 sent to the model" in _messages(
        caplog
    )


def test_ctrl_c_without_use_cache_says_how_to_keep_answers_and_leaves_no_empty_folder(
    imported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(DummyLM, "loglikelihood", interrupted)
    (tmp_path / "kept").mkdir()
    out = tmp_path / "kept" / "new" / "deeper"
    argv = ["run", "--model", "dummy", "--tasks", "arc_easy", "--limit", "2", "--output_path", str(out)]
    assert cli.main(argv) == 130
    assert capsys.readouterr().err == (
        "assay: interrupted; nothing was kept: run again with --use_cache <path> (a file prefix) to keep the answers "
        "as they come, so that the same command resumes after an interruption.\n"
    )
    # The folders --output_path made are gone; the one that was there before stays.
    assert list((tmp_path / "kept").iterdir()) == []


def test_a_failed_run_leaves_no_empty_output_folder_and_a_finished_one_keeps_it(
    imported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert cli.main(["run", "--model", "dummy", "--tasks", "arc_esy", "--output_path", str(out)]) == 1
    assert not out.exists()
    assert cli.main(["run", "--model", "dummy", "--tasks", "arc_easy", "--limit", "2", "--output_path", str(out)]) == 0
    assert list(out.rglob("results_*.json"))


@pytest.mark.slow  # a fresh interpreter (subprocess), not the quick loop's pure Python
def test_a_default_run_prints_its_info_lines_in_a_fresh_process(imported: Path, tmp_path: Path) -> None:
    """Without pytest's handlers: what a user at a terminal sees on stderr."""
    env = {**os.environ, "ASSAY_DATASETS_DIR": str(imported)}
    env.pop("LMEVAL_LOG_LEVEL", None)
    argv = [
        sys.executable,
        "-m",
        "assay",
        "run",
        "--model",
        "dummy",
        "--tasks",
        "arc_easy",
        "--limit",
        "2",
        "--output_path",
        str(tmp_path / "out"),
        "--use_cache",
        str(tmp_path / "cache"),
    ]
    # Two fresh processes (each imports torch, as lm-eval's seeding does): the first, at WARNING,
    # says nothing at INFO and fills the response cache; the second says what a default run says.
    quiet = subprocess.run([*argv, "--verbosity", "WARNING"], capture_output=True, text=True, timeout=300, env=env)
    assert quiet.returncode == 0 and "INFO" not in quiet.stderr, quiet.stderr
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    lines = [line.split("] ", 1)[1] for line in done.stderr.splitlines() if " INFO [assay" in line]
    assert lines == [
        f"arc_easy: 2376 test documents from {imported / 'allenai/ai2_arc/ARC-Easy'} (ASSAY_DATASETS_DIR)",
        "loglikelihood: 8 of 8 requests answered from the response cache; 0 sent to the model",
        f"Results written to {max((tmp_path / 'out').rglob('results_*.json'))}",
    ]


# -- progress bars name their tasks ---------------------------------------------------------


class _Recorder(DummyLM):
    """Records the bar label each call would show."""

    def __init__(self) -> None:
        self.labels: list[str] = []

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, disable_tqdm: bool = False
    ) -> list[LoglikelihoodResult]:
        self.labels.append(progress_label.bar_label("loglikelihood"))
        return [LoglikelihoodResult(0.0, True) for _ in requests]


def _instances(*task_names: str) -> list[Instance]:
    return [
        Instance("loglikelihood", LoglikelihoodRequest("c", " x"), {}, i, 0, name) for i, name in enumerate(task_names)
    ]


def test_a_bar_names_the_tasks_its_requests_come_from() -> None:
    lm = _Recorder()
    doc_work.run_requests(lm, _instances("arc_easy", "lambada_openai", "arc_easy"), None, global_total=3)
    doc_work.run_requests(lm, _instances(*(f"mmlu_{i}" for i in range(57))), None, global_total=57)
    assert lm.labels == [
        "Running loglikelihood requests (arc_easy, lambada_openai)",
        "Running loglikelihood requests (mmlu_0, mmlu_1, mmlu_2 and 54 more)",
    ]
    assert (
        progress_label.bar_label("generate_until") == "Running generate_until requests"
    )  # outside a run: lm-eval's words


def test_the_hf_backend_bar_names_the_tasks(imported: Path, gpt2_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "run",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={gpt2_dir}",
            "--tasks",
            "arc_easy,lambada_openai",
            "--limit",
            "2",
            "--device",
            "cpu",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Running loglikelihood requests (arc_easy, lambada_openai): 100%" in err
