"""The task index: names, globs, tags, groups, include chains and the errors users see."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.errors import UserError
from assay.runner.tasks.index import TaskManager
from assay.runner.tasks.yaml_loader import load_yaml


def _write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def library(tmp_path: Path) -> Path:
    data = _write(tmp_path, "data/d.jsonl", "".join(f'{{"q": "q{i}", "a": "a{i}"}}\n' for i in range(6)))
    base = (
        f"dataset_path: json\ndataset_kwargs: {{data_files: {{test: {data}}}}}\ntest_split: test\n"
        "doc_to_text: '{{q}}'\ndoc_to_target: a\n"
    )
    _write(tmp_path, "lib/common.yaml", base)
    _write(tmp_path, "lib/alpha_one.yaml", "include: common.yaml\ntask: alpha_one\ntag: alphas\n")
    _write(tmp_path, "lib/alpha_two.yaml", "include: common.yaml\ntask: alpha_two\ntag: [alphas, evens]\n")
    _write(tmp_path, "lib/nested/beta.yaml", "include: ../common.yaml\ntask: beta\noutput_type: loglikelihood\n")
    _write(
        tmp_path,
        "lib/group.yaml",
        "group: greek\ntask: [alpha_one, {task: beta, task_alias: B}]\n"
        "aggregate_metric_list: [{metric: acc}]\nmetadata: {version: 1}\n",
    )
    _write(
        tmp_path,
        "lib/inline.yaml",
        "group: outer\ntask:\n  - group: inner\n    task: [alphas]\n  - task: gamma_inline\n"
        f"    dataset_path: json\n    dataset_kwargs: {{data_files: {{test: {data}}}}}\n    test_split: test\n"
        "    doc_to_text: q\n    doc_to_target: a\n",
    )
    _write(tmp_path, "lib/broken.yaml", "task: [unclosed\n")
    return tmp_path / "lib"


def test_index_lists_tasks_groups_and_tags(library: Path) -> None:
    manager = TaskManager(str(library), include_defaults=False)
    assert manager.all_subtasks == ["alpha_one", "alpha_two", "beta"]
    assert manager.all_groups == ["greek", "outer"]
    assert manager.all_tags == ["alphas", "evens"]
    assert manager.describe("beta").output_type == "loglikelihood"
    assert manager.describe("alphas").members == {"alpha_one", "alpha_two"}


def test_match_expands_globs_commas_and_paths(library: Path) -> None:
    manager = TaskManager(str(library), include_defaults=False)
    assert manager.match_tasks(["alpha_*,beta"]) == ["alpha_one", "alpha_two", "beta"]
    path = str(library / "alpha_one.yaml")
    assert manager.match_tasks([path]) == [path]


def test_unknown_task_suggests_close_names(library: Path) -> None:
    manager = TaskManager(str(library), include_defaults=False)
    with pytest.raises(UserError, match=r"Unknown task 'alpha_on'\. Did you mean alpha_one"):
        manager.match_tasks(["alpha_on"])


def test_tags_expand_and_groups_apply_member_overrides(library: Path) -> None:
    manager = TaskManager(str(library), include_defaults=False)
    loaded = manager.load(["greek", "evens"])
    assert list(loaded.tasks) == ["alpha_one", "beta", "alpha_two"]
    assert loaded.tasks["beta"].config.task_alias == "B"
    assert loaded.groups["greek"].child_names == ["alpha_one", "beta"]


def test_inline_groups_and_tasks_are_namespaced(library: Path) -> None:
    loaded = TaskManager(str(library), include_defaults=False).load(["outer"])
    assert set(loaded.groups) == {"outer", "outer::inner"}
    assert "outer::gamma_inline" in loaded.tasks


def test_asking_for_a_task_twice_is_an_error(library: Path) -> None:
    with pytest.raises(UserError, match="asked for twice"):
        TaskManager(str(library), include_defaults=False).load(["greek", "alpha_one"])


def test_include_cycle_and_malformed_yaml_are_one_sentence(tmp_path: Path, library: Path) -> None:
    _write(tmp_path, "a.yaml", "include: b.yaml\ntask: a\n")
    _write(tmp_path, "b.yaml", "include: a.yaml\n")
    with pytest.raises(UserError, match="include cycle"):
        load_yaml(tmp_path / "a.yaml")
    with pytest.raises(UserError, match=r"malformed at line 2"):
        load_yaml(library / "broken.yaml")


def test_unknown_config_key_names_the_key(tmp_path: Path, library: Path) -> None:
    _write(tmp_path, "typo.yaml", "include: lib/common.yaml\ntask: typo\ndoc_to_txt: q\n")
    manager = TaskManager(str(tmp_path), include_defaults=False)
    with pytest.raises(UserError, match=r"unknown key 'doc_to_txt'\. Did you mean doc_to_text"):
        manager.load(["typo"])


def test_missing_include_path_is_reported(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        TaskManager(str(tmp_path / "nope"))


def test_missing_local_data_file_is_one_sentence(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "t.yaml",
        f"task: lost\ndataset_path: json\ndataset_kwargs: {{data_files: {{test: {tmp_path / 'gone.jsonl'}}}}}\n"
        "test_split: test\ndoc_to_text: q\ndoc_to_target: a\n",
    )
    with pytest.raises(UserError, match=r"could not be loaded: .*gone\.jsonl.*check the task's dataset_kwargs"):
        TaskManager(str(tmp_path), include_defaults=False).load(["lost"])
