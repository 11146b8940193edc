"""`assay run --stop-early` on a group scored by the mean over its documents: one gate over all
its tasks' documents, pooled in one random order, stopping every task together.

Three two-choice tasks (ARC-Easy's questions, 160 each, with their first two choices) in a
group whose `acc` is weighted by size, as MMLU's is. Each question's gold answer is the
choice the baseline model prefers (from a first, ordinary run), so the baseline scores 1.0
and another tiny random model about 0.5: a clearly worse candidate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from assay import cli
from assay.run_results import RunResults
from assay.runner.results import stopped_early
from tests.helpers import write_choice_task
from tests.model_fixtures import gpt2_dir, tiny_gpt2  # noqa: F401  (fixture)

PER_TASK = 160
TASKS = ("seqg_a", "seqg_b", "seqg_c")
DOCUMENTS = PER_TASK * len(TASKS)
CHUNK = 64  # the default for 480 documents: 64 doubling up to max(64, 480/20) = 64


def _write(folder: Path, rows: dict[str, list[dict[str, Any]]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in TASKS:
        write_choice_task(folder, name, rows[name])
    members = ", ".join(TASKS)
    for group, weighted in (("seqg", "true"), ("seqg_equal", "false")):
        (folder / f"{group}.yaml").write_text(
            f"group: {group}\ntask: [{members}]\n"
            f"aggregate_metric_list: [{{metric: acc, weight_by_size: {weighted}}}]\nmetadata: {{version: 1.0}}\n"
        )
    return folder


def _run(model: Path, tasks: Path, out: Path, group: str, *extra: str) -> None:
    code = cli.main(
        [
            "run",
            "--model_args",
            f"pretrained={model},dtype=float32,device=cpu",
            "--tasks",
            group,
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
    assert code == 0


def _outputs(out: Path) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    [results] = sorted(out.glob("**/results_*.json"))
    samples = {}
    for name in TASKS:
        [path] = sorted(results.parent.glob(f"samples_{name}_*.jsonl"))
        samples[name] = [json.loads(line) for line in path.read_text().splitlines()]
    return json.loads(results.read_text()), samples


@pytest.fixture(scope="module")
def labelled(gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    lines = (shared_data / "arc/ARC-Easy-Test.jsonl").read_text().splitlines()[:DOCUMENTS]
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in TASKS}
    for number, line in enumerate(lines):
        question = json.loads(line)["question"]
        choices = [choice["text"] for choice in question["choices"][:2]]
        rows[TASKS[number // PER_TASK]].append({"q": question["stem"], "choices": choices, "label": 0})
    root = tmp_path_factory.mktemp("seqg")
    _run(gpt2_dir, _write(root / "unlabelled", rows), root / "label_run", "seqg")
    for name, samples in _outputs(root / "label_run")[1].items():
        for sample in samples:
            scores = [float(resp[0][0]) for resp in sample["resps"]]
            rows[name][sample["doc_id"]]["label"] = scores.index(max(scores))
    return _write(root / "labelled", rows)


@pytest.fixture(scope="module")
def baseline(labelled: Path, gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("baseline")
    _run(gpt2_dir, labelled, out, "seqg")
    results, _ = _outputs(out)
    assert results["results"]["seqg"]["acc,none"] == 1.0, "the labels are the baseline model's own choices"
    return out


def test_a_size_weighted_group_stops_as_one_with_all_its_tasks(
    capsys: pytest.CaptureFixture[str],
    labelled: Path,
    baseline: Path,
    tmp_path_factory: pytest.TempPathFactory,
    shared_data: Path,
) -> None:
    worse = tiny_gpt2(tmp_path_factory.mktemp("worse"), shared_data / "gpt2_tokenizer", seed=99)
    out = tmp_path_factory.mktemp("candidate")
    capsys.readouterr()
    _run(worse, labelled, out, "seqg", "--stop-early", "--baseline", str(baseline), "--max-drop", "0.05")
    printed = capsys.readouterr().out
    results, samples = _outputs(out)
    group = results["sequential"]["groups"]["seqg"]
    assert group["stopped"] == "regressed" and group["tasks"] == list(TASKS)
    assert group["total"] == DOCUMENTS and group["documents"] < DOCUMENTS and group["documents"] % CHUNK == 0
    [look] = group["interval"]
    assert look["metric"] == "acc,none" and look["n"] == group["documents"] and look["upper"] < -0.05
    entries = results["sequential"]["tasks"]
    assert sorted(entries) == sorted(TASKS)
    for name in TASKS:
        entry = entries[name]
        assert entry["group"] == "seqg" and entry["stopped"] == "regressed" and entry["total"] == PER_TASK
        assert 0 < entry["documents"] < PER_TASK, "the pooled order draws from every task, and stops them all"
        assert len(samples[name]) == entry["documents"]
        assert results["n-samples"][name] == {"original": PER_TASK, "effective": entry["documents"]}
    assert sum(entries[name]["documents"] for name in TASKS) == group["documents"]
    assert f"⏹ seqg (its 3 tasks as one): {group['documents']} of {DOCUMENTS} documents, stopped regressed" in printed
    # status: one row for the group, saved work over its tasks
    run = RunResults.from_lmeval_dict(results)
    status = stopped_early.status_block(run)
    assert status is not None and [row["task"] for row in status["tasks"]] == ["seqg"]
    assert status["tasks"][0]["subtasks"] == 3 and status["tasks"][0]["documents"] == group["documents"]
    saved = stopped_early.saved_work(run)
    assert saved is not None and saved["documents"] == DOCUMENTS - group["documents"]


def test_the_baseline_model_against_itself_stops_non_inferior_as_a_group(
    labelled: Path, baseline: Path, gpt2_dir: Path, tmp_path: Path
) -> None:
    _run(
        gpt2_dir, labelled, tmp_path / "same", "seqg", "--stop-early", "--baseline", str(baseline), "--max-drop", "0.05"
    )
    results, _ = _outputs(tmp_path / "same")
    group = results["sequential"]["groups"]["seqg"]
    assert group["stopped"] == "non_inferior" and group["documents"] < DOCUMENTS
    assert group["interval"][0]["lower"] >= -0.05
    assert {results["sequential"]["tasks"][name]["stopped"] for name in TASKS} == {"non_inferior"}


def test_a_group_weighing_its_tasks_equally_gates_each_task_on_its_own(
    labelled: Path, baseline: Path, gpt2_dir: Path, tmp_path: Path
) -> None:
    _run(
        gpt2_dir,
        labelled,
        tmp_path / "equal",
        "seqg_equal",
        "--stop-early",
        "--baseline",
        str(baseline),
        "--max-drop",
        "0.05",
    )
    results, _ = _outputs(tmp_path / "equal")
    assert results["sequential"]["groups"] == {}
    for name in TASKS:
        entry = results["sequential"]["tasks"][name]
        assert "group" not in entry and entry["total"] == PER_TASK
        assert entry["stopped"] == "non_inferior" and entry["interval"][0]["n"] == entry["documents"]
