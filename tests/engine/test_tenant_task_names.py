"""A tenant's task folder may not take, or change, a name of the task library.

A group lists its members by name, and lm-eval applies a group's keys (and a member's own
mapping) to each member while keeping the member's name: a tenant group listing the
library's `arc_easy` with its own `dataset_path` reported the tenant's rows as `arc_easy`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.errors import UserError
from assay.runner.tasks.index import TaskManager

OWN = "task: mine\ndataset_path: json\noutput_type: generate_until\ntest_split: test\n"
# Each a tenant group that reports rows of its own choosing under a library name.
CHANGING = {
    "member mapping": "group: suite\ntask:\n  - task: arc_easy\n    dataset_path: json\n",
    "group-level key": "group: suite\ntask: [arc_easy]\ndataset_path: json\n",
    "library tag": "group: suite\ntask:\n  - task: ai2_arc\n    num_fewshot: 25\n",
    "library group": "group: suite\ntask:\n  - group: mmlu_stem\n    dataset_path: json\n",
    "nested inline group": "group: suite\ntask:\n  - group: inner\n    task: [arc_easy]\n    test_split: train\n",
}


def _tenant(folder: Path, **files: str) -> TaskManager:
    for name, text in files.items():
        (folder / f"{name}.yaml").write_text(text)
    return TaskManager(str(folder), include_code=False, include_may_shadow=False)


@pytest.mark.parametrize("text", CHANGING.values(), ids=CHANGING.keys())
def test_a_tenant_group_may_not_change_a_library_member(tmp_path: Path, text: str) -> None:
    manager = _tenant(tmp_path, suite=text)
    for ask in (manager.leaf_configs, lambda names: manager.load(manager.match_tasks(names))):
        with pytest.raises(UserError) as caught:
            ask(["suite"])
        message = str(caught.value)
        assert " of the library's " in message and "which a task source may not do" in message
        assert "\n" not in message and str(tmp_path) not in message


def test_a_tenant_group_may_list_library_tasks_as_they_are(tmp_path: Path) -> None:
    manager = _tenant(tmp_path, mine=OWN, suite="group: suite\ntask: [arc_easy, mine, {task: arc_challenge}]\n")
    configs = manager.leaf_configs(["suite"])
    assert set(configs) == {"arc_easy", "arc_challenge", "mine"}
    assert configs["arc_easy"]["dataset_path"] == TaskManager().leaf_configs(["arc_easy"])["arc_easy"]["dataset_path"]
    tagged = _tenant(tmp_path, suite="group: suite\ntask: [ai2_arc]\n").leaf_configs(["suite"])
    assert set(tagged) == {"arc_easy", "arc_challenge"}
    # Its own tasks it may change: they carry its names.
    changed = _tenant(tmp_path, suite="group: suite\ntask:\n  - task: mine\n    test_split: train\n")
    assert changed.leaf_configs(["suite"])["mine"]["test_split"] == "train"


@pytest.mark.parametrize(
    "text",
    ["group: arc_easy\ntask: [mine]\n", "group: mmlu\ntask: [mine]\n", OWN.replace("task: mine", "task: ai2_arc")],
    ids=["group named as a task", "group named as a group", "task named as a tag"],
)
def test_a_tenant_name_may_not_be_a_library_name(tmp_path: Path, text: str) -> None:
    (tmp_path / "mine.yaml").write_text(OWN)
    with pytest.raises(UserError, match="reuses a name of the task library"):
        _tenant(tmp_path, taken=text)


def test_assay_run_s_include_path_keeps_lm_eval_s_overrides(tmp_path: Path) -> None:
    """On a user's own machine lm-eval's rules hold: a group changes a member, a folder overrides a name."""
    (tmp_path / "suite.yaml").write_text(CHANGING["member mapping"])
    (tmp_path / "arc.yaml").write_text(OWN.replace("task: mine", "task: arc_challenge"))
    manager = TaskManager(str(tmp_path))
    assert manager.leaf_configs(["suite"])["arc_easy"]["dataset_path"] == "json"
    assert manager.index["arc_challenge"].path == tmp_path / "arc.yaml"


def test_a_library_group_s_own_overrides_still_apply_in_a_tenant_index(tmp_path: Path) -> None:
    """The rule is about the tenant's groups: mmlu's own group keys reach its members as before."""
    library = TaskManager().leaf_configs(["mmlu_stem"])
    assert _tenant(tmp_path, mine=OWN).leaf_configs(["mmlu_stem"]) == library


def test_a_runner_pod_s_index_refuses_the_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index a runner pod builds from its environment (ASSAY_TASK_CODE marks a tenant's folder)."""
    from assay import spec as spec_module
    from assay.runner.checks import offline_check

    (tmp_path / "suite.yaml").write_text(CHANGING["group-level key"])
    monkeypatch.setenv(spec_module.ENV_TASK_CODE, "refused")
    with pytest.raises(UserError, match="Group 'suite' changes 'dataset_path' of the library's 'arc_easy'"):
        offline_check.task_index(str(tmp_path)).leaf_configs(["suite"])
    monkeypatch.delenv(spec_module.ENV_TASK_CODE)
    assert offline_check.task_index(str(tmp_path)).leaf_configs(["suite"])["arc_easy"]["dataset_path"] == "json"
