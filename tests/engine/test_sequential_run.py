"""`assay run --stop-early` with real tiny models: a clearly worse candidate stops regressed, the
same model against itself stops non-inferior, each on fewer documents than the task has.

The task is two-choice questions (ARC-Easy's questions with their first two choices) whose
gold answer is the choice the baseline model prefers: so the baseline scores 1.0 and another
tiny random model (other weights) about 0.5, a drop of about half the range. The labels come
from the baseline model's own log-likelihoods in a first, ordinary run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from assay import cli
from assay.runner.results import stopped_early
from tests.helpers import write_choice_task
from tests.model_fixtures import gpt2_dir, tiny_gpt2  # noqa: F401  (fixture)

DOCUMENTS = 320
CHUNK = 64  # the default for a task of 320 documents: max(64, 320/20)
TASK = "seq_pick"
COMPARE_REGRESSED = 1  # `assay compare`'s exit status for a regression


def _write_task(folder: Path, rows: list[dict[str, Any]]) -> Path:
    write_choice_task(folder, TASK, rows)
    return folder


def _run(capsys: pytest.CaptureFixture[str], model: Path, tasks: Path, out: Path, *extra: str) -> str:
    code = cli.main(
        [
            "run",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={model},dtype=float32,device=cpu",
            "--tasks",
            TASK,
            "--include_path",
            str(tasks),
            "--batch_size",
            "16",
            "--output_path",
            str(out),
            "--log_samples",
            *extra,
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    return printed.out


def _outputs(out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    [results] = sorted(out.glob("**/results_*.json"))
    [samples] = sorted(results.parent.glob(f"samples_{TASK}_*.jsonl"))
    return json.loads(results.read_text()), [json.loads(line) for line in samples.read_text().splitlines()]


@pytest.fixture(scope="module")
def labelled(gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """The task, labelled with the baseline model's preferred choice of each question."""
    questions = []
    for line in (shared_data / "arc/ARC-Easy-Test.jsonl").read_text().splitlines()[:DOCUMENTS]:
        row = json.loads(line)
        choices = [choice["text"] for choice in row["question"]["choices"][:2]]
        questions.append({"q": row["question"]["stem"], "choices": choices, "label": 0})
    root = tmp_path_factory.mktemp("seq")
    first = _write_task(root / "unlabelled", questions)
    code = cli.main(
        [
            "run",
            "--model_args",
            f"pretrained={gpt2_dir},dtype=float32,device=cpu",
            "--tasks",
            TASK,
            "--include_path",
            str(first),
            "--batch_size",
            "16",
            "--output_path",
            str(root / "label_run"),
            "--log_samples",
        ]
    )
    assert code == 0
    _, samples = _outputs(root / "label_run")
    for sample in samples:
        scores = [float(resp[0][0]) for resp in sample["resps"]]
        questions[sample["doc_id"]]["label"] = scores.index(max(scores))
    return _write_task(root / "labelled", questions)


@pytest.fixture(scope="module")
def worse_model(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    return tiny_gpt2(tmp_path_factory.mktemp("worse"), shared_data / "gpt2_tokenizer", seed=99)


@pytest.fixture(scope="module")
def baseline(labelled: Path, gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("baseline")
    code = cli.main(
        [
            "run",
            "--model_args",
            f"pretrained={gpt2_dir},dtype=float32,device=cpu",
            "--tasks",
            TASK,
            "--include_path",
            str(labelled),
            "--batch_size",
            "16",
            "--output_path",
            str(out),
            "--log_samples",
        ]
    )
    assert code == 0
    results, _ = _outputs(out)
    assert results["results"][TASK]["acc,none"] == 1.0, "the labels are the baseline model's own choices"
    return out


def test_a_clearly_worse_model_stops_regressed_on_fewer_documents(
    capsys: pytest.CaptureFixture[str], labelled: Path, baseline: Path, worse_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "candidate"
    printed = _run(
        capsys, worse_model, labelled, out, "--stop-early", "--baseline", str(baseline), "--max-drop", "0.05"
    )
    results, samples = _outputs(out)
    entry = results["sequential"]["tasks"][TASK]
    assert entry["stopped"] == "regressed"
    assert entry["documents"] < DOCUMENTS and entry["documents"] % CHUNK == 0
    assert entry["total"] == DOCUMENTS and entry["saved_documents"] == DOCUMENTS - entry["documents"]
    [look] = entry["interval"]
    assert look["metric"] == "acc,none" and look["upper"] < -0.05, "the whole interval lies below −maxDrop"
    assert results["n-samples"][TASK] == {"original": DOCUMENTS, "effective": entry["documents"]}
    assert len(samples) == entry["documents"]
    assert results["results"][TASK]["acc,none"] < 0.8
    assert results["sequential"]["seed"] == 0 and results["sequential"]["baseline"] == str(baseline)
    assert (
        f"{stopped_early.STOP_MARK} {TASK}: {entry['documents']} of {DOCUMENTS} documents, stopped regressed" in printed
    )
    # `assay compare` of the stopped run: the documents both runs have, and a note saying so
    code = cli.main(["compare", str(baseline), str(out), "--max-drop", "0.05"])
    compared = capsys.readouterr().out
    assert code == COMPARE_REGRESSED, compared
    assert (
        f"The candidate stopped early (a sequential run): {TASK} scored {entry['documents']} of {DOCUMENTS} "
        "documents (regressed); each task is compared on the documents both runs have." in compared
    )
    assert f"{TASK}: {entry['documents']} documents paired; left out {DOCUMENTS - entry['documents']}" in compared


def test_the_same_model_against_itself_stops_non_inferior(
    capsys: pytest.CaptureFixture[str],
    labelled: Path,
    baseline: Path,
    gpt2_dir: Path,
    tmp_path: Path,
) -> None:
    out = tmp_path / "same"
    _run(capsys, gpt2_dir, labelled, out, "--stop-early", "--baseline", str(baseline), "--max-drop", "0.05")
    results, samples = _outputs(out)
    entry = results["sequential"]["tasks"][TASK]
    assert entry["stopped"] == "non_inferior"
    assert entry["documents"] < DOCUMENTS
    assert entry["interval"][0]["lower"] >= -0.05
    # the documents scored are the seeded order's first chunks: the same draw gives the same set
    again = tmp_path / "again"
    _run(capsys, gpt2_dir, labelled, again, "--stop-early", "--baseline", str(baseline), "--max-drop", "0.05")
    assert sorted(s["doc_id"] for s in _outputs(again)[1]) == sorted(s["doc_id"] for s in samples)
    # another seed draws another order
    other = tmp_path / "other"
    _run(
        capsys,
        gpt2_dir,
        labelled,
        other,
        "--stop-early",
        "--baseline",
        str(baseline),
        "--max-drop",
        "0.05",
        "--seed",
        "7",
    )
    other_results, other_samples = _outputs(other)
    assert other_results["sequential"]["seed"] == 7
    assert sorted(s["doc_id"] for s in other_samples) != sorted(s["doc_id"] for s in samples)
