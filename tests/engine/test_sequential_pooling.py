"""Which tasks a sequential run gates as one: a group whose score is the mean over its documents
(every aggregate a mean weighted by size, as MMLU's) is one unit with one random order over all
its tasks' documents; a group that weighs its tasks otherwise leaves each task to its own gate."""

from __future__ import annotations

from pathlib import Path

from assay.run_options import SequentialSettings
from assay.runner.doc_work import DocWork
from assay.runner.scoring.records import DocScores
from assay.runner.sequential import order as chunk_order
from assay.runner.sequential.pooling import group_metrics, units
from assay.runner.sequential.watch import Member, TaskWatch, doc_hash
from assay.runner.tasks.index import LoadedTasks, TaskManager
from tests.helpers import write_choice_task

SIZES = {"pool_a": 30, "pool_b": 50, "pool_c": 20}


def _library(folder: Path, *, weight_by_size: str = "true", clustered: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, size in SIZES.items():
        rows = [{"q": f"{name} {i}", "choices": ["a", "b"], "label": i % 2, "passage": i // 4} for i in range(size)]
        write_choice_task(folder, name, rows, cluster_key="passage" if name == clustered else None)
    aggregate = f"aggregate_metric_list: [{{metric: acc, weight_by_size: {weight_by_size}}}]"
    (folder / "pool.yaml").write_text(f"group: pool\ntask: [pool_a, pool_b, pool_c]\n{aggregate}\n")
    # MMLU's shape: a size-weighted group of size-weighted subgroups
    (folder / "pool_ab.yaml").write_text(f"group: pool_ab\ntask: [pool_a, pool_b]\n{aggregate}\n")
    (folder / "pool_nested.yaml").write_text(f"group: pool_nested\ntask: [pool_ab, pool_c]\n{aggregate}\n")
    # a group that only nests (no aggregate): its size-weighted subgroup pools, its other task is alone
    (folder / "pool_outer.yaml").write_text("group: pool_outer\ntask: [pool_ab, pool_c]\n")
    return folder


def _load(folder: Path, name: str) -> tuple[LoadedTasks, dict[str, list[DocWork]]]:
    loaded = TaskManager(include_path=str(folder)).load([name])
    work = {
        task_name: [DocWork(task, i, i, {"i": i}, []) for i in range(SIZES[task_name])]
        for task_name, task in loaded.tasks.items()
    }
    return loaded, work


def _plan(folder: Path, name: str) -> list[tuple[str, list[str], int]]:
    loaded, work = _load(folder, name)
    return [(unit.name, [task.name for task in unit.tasks], len(unit.items)) for unit in units(loaded, work)]


def test_a_size_weighted_group_is_one_unit_over_all_its_documents(tmp_path: Path) -> None:
    folder = _library(tmp_path)
    assert _plan(folder, "pool") == [("pool", ["pool_a", "pool_b", "pool_c"], 100)]
    assert _plan(folder, "pool_nested") == [("pool_nested", ["pool_a", "pool_b", "pool_c"], 100)]
    loaded, _ = _load(folder, "pool")
    assert {name: sorted(keys) for name, keys in group_metrics(loaded.groups["pool"]).items()} == {
        name: ["acc,none"] for name in SIZES
    }


def test_a_group_that_only_nests_pools_its_size_weighted_subgroup(tmp_path: Path) -> None:
    assert _plan(_library(tmp_path), "pool_outer") == [
        ("pool_ab", ["pool_a", "pool_b"], 80),
        ("pool_c", ["pool_c"], 20),
    ]


def test_a_group_weighing_its_tasks_equally_leaves_each_task_to_its_own_gate(tmp_path: Path) -> None:
    """Its score is the mean of its tasks' means, not of its documents: one pooled sequence does not answer it."""
    assert _plan(_library(tmp_path, weight_by_size="false"), "pool") == [
        ("pool_a", ["pool_a"], 30),
        ("pool_b", ["pool_b"], 50),
        ("pool_c", ["pool_c"], 20),
    ]


def test_a_group_with_a_clustered_task_is_not_pooled(tmp_path: Path) -> None:
    """The clustered task's documents are not independent: it never stops early, nor does a pool holding it."""
    folder = _library(tmp_path, clustered="pool_b")
    assert [name for name, _, _ in _plan(folder, "pool")] == ["pool_a", "pool_b", "pool_c"]
    loaded, work = _load(folder, "pool")
    assert {unit.name: dict(unit.metrics[unit.name]) == {} for unit in units(loaded, work)} == {
        "pool_a": False,
        "pool_b": True,
        "pool_c": False,
    }


def test_the_pooled_order_mixes_the_groups_tasks_and_is_drawn_again_alike(tmp_path: Path) -> None:
    loaded, work = _load(_library(tmp_path), "pool")
    [unit] = units(loaded, work)
    order = chunk_order.document_order(len(unit.items), seed=0, task=unit.name)
    assert sorted(order) == list(range(100))
    assert chunk_order.document_order(len(unit.items), seed=0, task=unit.name) == order, "a rerun resumes alike"
    first = [unit.items[index].task.name for index in order[:30]]
    assert set(first) == set(SIZES), "the first documents come from every task, not the first task's file"
    drawn = [(unit.items[index].task.name, unit.items[index].position) for index in order]
    assert sorted(drawn) == sorted((name, i) for name, size in SIZES.items() for i in range(size))


def test_the_pooled_gate_pairs_each_tasks_documents_and_sees_them_in_the_drawn_order(tmp_path: Path) -> None:
    loaded, work = _load(_library(tmp_path), "pool")
    [unit] = units(loaded, work)
    docs = {name: [item.doc for item in unit.items if item.task.name == name] for name in SIZES}
    # the baseline right on every document; the candidate wrong on pool_b's even positions only
    baseline = {name: {("none", doc_hash(doc), 0): {"acc": 1.0} for doc in docs[name]} for name in SIZES}
    members = [Member(task, docs[task.name], baseline[task.name]) for task in unit.tasks]
    settings = SequentialSettings(baseline="b", max_drop=0.05)
    watch = TaskWatch(unit.name, members, unit.metrics["pool_a"], settings, with_baseline=True)
    assert watch.gate is not None and list(watch.metrics) == ["acc,none"]
    order = chunk_order.document_order(len(unit.items), seed=0, task=unit.name)
    place = {(unit.items[i].task.name, unit.items[i].position): at for at, i in enumerate(order)}
    chunk = [unit.items[i] for i in order[:40]]
    records = [
        DocScores(
            item.task.name,
            0,
            item.position,
            {"acc": 0.0 if item.task.name == "pool_b" and item.position % 2 == 0 else 1.0},
            None,
        )
        for item in reversed(chunk)  # as gathered from the ranks: not in the drawn order
    ]
    watch.look(records, exhausted=False, place=place)
    expected = [-1.0 if item.task.name == "pool_b" and item.position % 2 == 0 else 0.0 for item in chunk]
    assert watch.gate.state()["values"]["acc,none"] == expected
    assert -1.0 in expected and 0.0 in expected
