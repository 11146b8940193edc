"""spec.taskSources: ConfigMaps of task YAMLs, checked with the engine's own loader before any
Job exists, and mounted read-only on the runner's include path."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from assay.errors import UserError
from assay.operator.admission import task_sources, validation
from assay.operator.build import builders
from assay.runner.job import ENV_INCLUDE_PATH
from assay.runner.tasks.index import TaskManager
from assay.spec import parse_spec
from tests.operator.task_yaml import ARC_QA


def _config_map(name: str, data: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "4711"}, "data": data, **extra}


def _validated(
    spec: dict[str, Any], config_maps: dict[str, dict[str, Any]], *, allow_task_code: bool = False
) -> list[dict[str, Any]]:
    return validation.validate_with_sources(
        parse_spec(spec), namespace="team-a", get=config_maps.get, allow_task_code=allow_task_code
    )


SPEC = {"model": "dummy", "tasks": ["arc_easy_qa"], "taskSources": [{"configMap": "suite"}]}


def test_a_suites_own_task_resolves_and_its_source_is_recorded() -> None:
    statuses = _validated(SPEC, {"suite": _config_map("suite", {"arc_easy_qa.yaml": ARC_QA})})
    assert statuses == [{"configMap": "suite", "resourceVersion": "4711", "tasks": ["arc_easy_qa", "suite_qa"]}]
    # Its tag and the library's tasks resolve beside it.
    _validated({**SPEC, "tasks": ["suite_qa", "arc_easy"]}, {"suite": _config_map("suite", {"a.yaml": ARC_QA})})


def test_without_the_config_map_the_task_is_unknown() -> None:
    with pytest.raises(UserError, match="arc_easy_qa"):
        _validated({"model": "dummy", "tasks": ["arc_easy_qa"]}, {})


@pytest.mark.parametrize(
    ("config_maps", "message"),
    [
        (
            {},
            "spec.taskSources: ConfigMap 'suite' does not exist in namespace 'team-a'; create it "
            "(kubectl create configmap suite --from-file=TASK.yaml) or remove it from spec.taskSources.",
        ),
        ({"suite": _config_map("suite", {})}, "ConfigMap 'suite' has no keys; add task YAMLs (NAME.yaml) to it."),
        (
            {"suite": _config_map("suite", {"a.yaml": "task: x\n", "b.yaml": "#" * task_sources.MAX_BYTES})},
            f"ConfigMap 'suite' holds {task_sources.MAX_BYTES + 8} bytes, more than the {task_sources.MAX_BYTES} allowed",
        ),
        (
            {"suite": _config_map("suite", {"a.yaml": ARC_QA}, binaryData={"b.bin": "AAAA"})},
            "ConfigMap 'suite' key 'b.bin' is binary data; task YAMLs are text.",
        ),
        (
            {"suite": _config_map("suite", {"a.yaml": ARC_QA, "utils.py": "def f(): pass\n"})},
            "ConfigMap 'suite' key 'utils.py' is Python code, which this cluster does not run from ConfigMaps: remove "
            "it and its `!function` tags, or ask the cluster admin to set policy.allowTaskCode.",
        ),
        ({"suite": _config_map("suite", {"a.json": "{}"})}, "ConfigMap 'suite' key 'a.json' is not a task YAML"),
        (
            {"suite": _config_map("suite", {"a.yaml": "task: [arc_easy_qa\n"})},
            "spec.taskSources: ConfigMap 'suite' key 'a.yaml': It is malformed at line 2: did not find expected ',' or "
            "']'; fix the YAML syntax.",
        ),
        (
            {"suite": _config_map("suite", {"a.yaml": ARC_QA.replace("doc_to_text", "doc_to_txt")})},
            "spec.taskSources: ConfigMap 'suite' key 'a.yaml': Task 'arc_easy_qa' has unknown key 'doc_to_txt'.",
        ),
        (
            {"suite": _config_map("suite", {"a.yaml": "dataset_path: x\n"})},
            "ConfigMap 'suite' key 'a.yaml': It has neither a 'task' nor a 'group' key",
        ),
        (
            {"suite": _config_map("suite", {"a.yaml": "include: missing.yaml\ntask: t\n"})},
            "ConfigMap 'suite' key 'a.yaml': Task YAML missing.yaml does not exist; check the path or the include.",
        ),
    ],
    ids=[
        "missing",
        "empty",
        "too-large",
        "binary",
        "python",
        "not-yaml",
        "malformed",
        "unknown-field",
        "no-name",
        "missing-include",
    ],
)
def test_bad_config_maps_are_refused_in_one_sentence_naming_them(config_maps: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as error:
        _validated(SPEC, config_maps)
    text = str(error.value)
    assert message in text, text
    assert "\n" not in text and "/tmp" not in text and "Traceback" not in text


def test_a_key_may_include_another_key_of_its_config_map() -> None:
    data = {"base.yaml": ARC_QA, "variant.yaml": "include: base.yaml\ntask: arc_easy_qa2\n"}
    statuses = _validated({**SPEC, "tasks": ["arc_easy_qa2"]}, {"suite": _config_map("suite", data)})
    assert statuses[0]["tasks"] == ["arc_easy_qa", "suite_qa", "arc_easy_qa2"]


def test_the_runner_job_mounts_each_config_map_read_only_on_the_include_path() -> None:
    spec = parse_spec({**SPEC, "taskSources": [{"configMap": "suite"}, {"configMap": "extra"}]})
    ref = builders.EvaluationRef(name="ev", namespace="team-a", uid="u1", generation=1)
    pod = builders.job(ref, spec)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["task-sources-0"] == {"name": "task-sources-0", "configMap": {"name": "suite"}}
    assert volumes["task-sources-1"]["configMap"] == {"name": "extra"}
    (runner,) = pod["containers"]
    mounts = [m for m in runner["volumeMounts"] if m["name"].startswith("task-sources")]
    assert mounts == [
        {"name": "task-sources-0", "mountPath": "/etc/assay/tasks/suite", "readOnly": True},
        {"name": "task-sources-1", "mountPath": "/etc/assay/tasks/extra", "readOnly": True},
    ]
    env = {e["name"]: e.get("value") for e in runner["env"]}
    assert task_sources.ENV_INCLUDE_PATH == ENV_INCLUDE_PATH  # the name the runner reads
    assert env[ENV_INCLUDE_PATH] == "/etc/assay/tasks"
    # Without sources nothing changes.
    plain = builders.job(ref, parse_spec({"model": "dummy", "tasks": ["arc_easy"]}))["spec"]["template"]["spec"]
    assert not [v for v in plain["volumes"] if v["name"].startswith("task-sources")]
    assert ENV_INCLUDE_PATH not in {e["name"] for e in plain["containers"][0]["env"]}


def test_the_index_reads_a_config_map_volume_once_per_key(tmp_path: Path) -> None:
    # The kubelet's layout: KEY → ..data/KEY, ..data → ..<timestamp>/ (atomic updates).
    volume = tmp_path / "suite"
    stamp = volume / "..2026_12_01_09_00_00.123"
    stamp.mkdir(parents=True)
    (stamp / "arc_easy_qa.yaml").write_text(ARC_QA)
    os.symlink(stamp.name, volume / "..data")
    os.symlink("..data/arc_easy_qa.yaml", volume / "arc_easy_qa.yaml")
    manager = TaskManager(str(tmp_path))
    entry = manager.index["arc_easy_qa"]
    assert entry.path == volume / "arc_easy_qa.yaml"
    assert manager.index["suite_qa"].members == {"arc_easy_qa"}


# --- a tenant's task files are data (the admin's policy decides on code) --------------------

HELPER = "def text(doc):\n    return doc['question']\n"


def test_a_function_tag_is_refused_unless_the_admin_allows_task_code() -> None:
    uses_code = ARC_QA.replace('doc_to_text: "Q: {{question}}\\nA:"', "doc_to_text: !function utils.text")
    assert "!function" in uses_code
    with pytest.raises(UserError) as error:
        _validated(SPEC, {"suite": _config_map("suite", {"a.yaml": uses_code})})
    assert str(error.value) == (
        "spec.taskSources: ConfigMap 'suite' key 'a.yaml': It uses `!function utils.text`, and task code from task "
        "sources is not allowed in this cluster: use YAML fields and templates only, or ask the cluster admin to set "
        "policy.allowTaskCode."
    )
    # Allowed by the admin: the helper ships in the same ConfigMap.
    data = {"a.yaml": uses_code, "utils.py": HELPER}
    statuses = _validated(SPEC, {"suite": _config_map("suite", data)}, allow_task_code=True)
    assert statuses[0]["tasks"] == ["arc_easy_qa", "suite_qa"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("include: /proc/self/status\ntask: t\n", "includes '/proc/self/status': an include is a path relative"),
        ("include: ../../etc/passwd\ntask: t\n", "includes '../../etc/passwd', which leads outside the task folder"),
        ("task: t\ndoc_to_text: !function .cache.x.mod.fn\n", "needs the form module.function"),
    ],
    ids=["absolute-include", "dotdot-include", "leading-dot-function"],
)
def test_includes_and_functions_may_not_leave_the_config_map(text: str, message: str) -> None:
    with pytest.raises(UserError) as error:
        _validated({**SPEC, "tasks": ["t"]}, {"suite": _config_map("suite", {"a.yaml": text})}, allow_task_code=True)
    assert message in str(error.value) and str(error.value).startswith(
        "spec.taskSources: ConfigMap 'suite' key 'a.yaml'"
    )
    assert "/tmp" not in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("name", ["arc_easy", "mmlu_stem_tasks"], ids=["task", "tag"])
def test_a_source_may_not_take_a_library_name(name: str) -> None:
    if name == "arc_easy":
        text = ARC_QA.replace("task: arc_easy_qa", "task: arc_easy")
    else:
        text = ARC_QA.replace("tag: [suite_qa]", f"tag: [{name}]")
    with pytest.raises(UserError) as error:
        _validated({**SPEC, "tasks": ["arc_easy"]}, {"suite": _config_map("suite", {"a.yaml": text})})
    assert str(error.value) == (
        f"spec.taskSources: ConfigMap 'suite' defines {name!r}, a name of the task library, which a task source may "
        f"not reuse: rename it (for example to 'custom_{name}')."
    )


def test_the_unsafe_code_gate_follows_groups_as_the_engine_does() -> None:
    unsafe = ARC_QA.replace("task: arc_easy_qa", "task: runs_code").replace("tag: [suite_qa]", "unsafe_code: true")
    group = "group: suite_all\ntask:\n  - arc_easy_qa\n  - group: inner\n    task: [runs_code]\n"
    data = {"a.yaml": ARC_QA, "b.yaml": unsafe, "suite.yaml": group}
    with pytest.raises(UserError, match="^Tasks runs_code execute model-generated code"):
        _validated({**SPEC, "tasks": ["suite_all"]}, {"suite": _config_map("suite", data)})
    _validated({**SPEC, "tasks": ["suite_all"], "allowUnsafeCode": True}, {"suite": _config_map("suite", data)})


def test_the_runner_is_told_whether_task_code_may_run() -> None:
    from assay.operator.settings import from_env

    ref = builders.EvaluationRef(name="ev", namespace="team-a", uid="u1", generation=1)
    spec = parse_spec(SPEC)

    def task_code(operator_env: dict[str, str]) -> str | None:
        job = builders.job(ref, spec, runner=from_env(operator_env).runner)
        env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        return env.get("ASSAY_TASK_CODE")

    assert task_code({}) == "refused"
    assert task_code({"ASSAY_POLICY": '{"allowTaskCode": true}'}) == "allowed"


def test_a_runner_pod_refuses_task_code_its_operator_did_not_allow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A ConfigMap edited after the operator's check reaches a retry's pod unchecked: the runner holds the line.
    from assay.runner.checks import offline_check

    (tmp_path / "utils.py").write_text(
        f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\ndef text(doc):\n    return ''\n"
    )
    (tmp_path / "a.yaml").write_text(
        ARC_QA.replace('doc_to_text: "Q: {{question}}\\nA:"', "doc_to_text: !function utils.text")
    )
    spec = parse_spec(SPEC)
    monkeypatch.setenv("ASSAY_TASK_CODE", "refused")
    with pytest.raises(UserError, match="task code from this folder is not allowed here"):
        offline_check.spec_task_index(spec, str(tmp_path)).load(["arc_easy_qa"])
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    "group",
    [
        "group: suite_all\ntask:\n  - task: arc_easy\n    dataset_path: json\n",
        "group: suite_all\ntask: [arc_easy_qa, arc_easy]\ndoc_to_text: 'crafted'\n",
    ],
    ids=["member mapping", "group-level key"],
)
def test_a_source_group_may_not_change_a_library_task(group: str) -> None:
    """Its rows would be reported as the library's arc_easy."""
    with pytest.raises(UserError) as error:
        _validated(
            {**SPEC, "tasks": ["suite_all"]}, {"suite": _config_map("suite", {"a.yaml": ARC_QA, "g.yaml": group})}
        )
    assert str(error.value).startswith("Group 'suite_all' changes ")
    assert "of the library's 'arc_easy', which a task source may not do" in str(error.value)
    # Listing it unchanged is a suite's ordinary use.
    plain = {"a.yaml": ARC_QA, "g.yaml": "group: suite_all\ntask: [arc_easy_qa, arc_easy]\n"}
    _validated({**SPEC, "tasks": ["suite_all"]}, {"suite": _config_map("suite", plain)})


def test_a_source_group_may_not_take_a_library_group_s_name() -> None:
    with pytest.raises(UserError, match="defines 'mmlu', a name of the task library"):
        _validated(
            {**SPEC, "tasks": ["mmlu"]},
            {"suite": _config_map("suite", {"a.yaml": ARC_QA, "g.yaml": "group: mmlu\ntask: [arc_easy_qa]\n"})},
        )
