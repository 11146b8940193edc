"""A tenant's task names data only on the hub or inside ASSAY_DATASETS_DIR.

Each task below is a tenant's (a task folder indexed as a runner pod indexes a ConfigMap's:
code refused, library names refused) and is built for real: the refusals come before
`datasets` reads anything (its cache stays empty), the accepted ones load real files.
A file standing in for the pod's environment holds a key that no message may carry.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.errors import UserError
from assay.runner import evaluator, job
from assay.runner.checks import offline_check
from assay.runner.data import tenant_data
from assay.runner.tasks.index import TaskManager

datasets = pytest.importorskip("datasets")

SECRET = "OPENAI_API_KEY=sk-test-0123456789abcdef"
TASK = (
    "output_type: generate_until\ntest_split: test\ndoc_to_text: '{{text}}'\ndoc_to_target: ''\n"
    "generation_kwargs:\n  until: ['\\n']\nmetric_list:\n  - metric: exact_match\n"
)


@pytest.fixture()
def pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A datasets directory with one JSON Lines file, a secret file beside it, an empty datasets cache."""
    (tmp_path / "datasets" / "mine").mkdir(parents=True)
    (tmp_path / "datasets" / "mine" / "test.jsonl").write_text(json.dumps({"text": "hello"}) + "\n")
    (tmp_path / "secret.env").write_text(SECRET + "\n")
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(tmp_path / "datasets"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    (tmp_path / "tasks").mkdir()
    return tmp_path


def _tenant(root: Path, body: str, name: str = "leak") -> TaskManager:
    (root / "tasks" / f"{name}.yaml").write_text(f"task: {name}\n{body}{TASK}")
    return TaskManager(str(root / "tasks"), include_code=False, include_may_shadow=False)


def _refused(root: Path, body: str) -> str:
    manager = _tenant(root, body)
    with pytest.raises(UserError) as error:
        manager.load(["leak"])
    message = str(error.value)
    assert SECRET not in message and "sk-test" not in message
    assert not (root / "hf-cache").exists() or not any((root / "hf-cache").iterdir()), "datasets read something"
    # The runner's check (`--check`, and a pod before its model loads) says the same.
    problems = offline_check.task_problems(manager, ["leak"])
    assert [problem.message for problem in problems] == [message]
    return message


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            "dataset_path: text\ndataset_kwargs:\n  data_files:\n    test: /proc/self/environ\n",
            "dataset_kwargs.data_files '/proc/self/environ' is an absolute path",
        ),
        ("dataset_path: text\ndataset_kwargs:\n  data_files:\n    test: {root}/secret.env\n", "is an absolute path"),
        ("dataset_path: text\ndataset_kwargs:\n  data_files: {root}/secret.env\n", "is an absolute path"),
        (
            "dataset_path: text\ndataset_kwargs:\n  data_files: [mine/test.jsonl, {root}/secret.env]\n",
            "is an absolute path",
        ),
        (
            "dataset_path: text\ndataset_kwargs:\n  data_files:\n    test: [../secret.env]\n",
            "leads out of its folder (`..`)",
        ),
        (
            "dataset_path: text\ndataset_kwargs:\n  data_files:\n    test: mine/../../secret.env\n",
            "leads out of its folder",
        ),
        ("dataset_path: text\ndataset_kwargs:\n  data_files:\n    test: ~/secret.env\n", "is a path in a home folder"),
        ("dataset_path: text\ndataset_kwargs:\n  data_files:\n    test: file://{root}/secret.env\n", "is a URL"),
        ("dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: http://169.254.169.254/latest\n", "is a URL"),
        ("dataset_path: text\ndataset_kwargs:\n  data_files:\n    test: simplecache::{root}/secret.env\n", "is a URL"),
        (
            "dataset_path: text\ndataset_kwargs:\n  data_dir: {root}\n  data_files: secret.env\n",
            "dataset_kwargs.data_dir",
        ),
        ("dataset_path: text\n", "needs dataset_kwargs.data_files"),
        ("dataset_path: '{root}'\n", "is an absolute path outside ASSAY_DATASETS_DIR"),
        ("dataset_path: ../secret.env\n", "dataset_path '../secret.env' leads out of its folder"),
        ("dataset_path: mine\ndataset_name: ../../secret.env\n", "dataset_name '../../secret.env' is a path"),
        (
            "dataset_path: allenai/ai2_arc\ndataset_kwargs:\n  data_files:\n    test: {root}/secret.env\n",
            "is an absolute path",
        ),
        ("dataset_path: allenai/ai2_arc\ndataset_kwargs:\n  data_dir: ../..\n", "leads out of its folder"),
        ("dataset_path: allenai/ai2_arc\ndataset_kwargs:\n  cache_dir: {root}\n", "cache_dir"),
        ("dataset_path: allenai/ai2_arc\ndataset_kwargs:\n  storage_options: {}\n", "storage_options"),
        ("dataset_path: sql\ndataset_kwargs:\n  sql: t\n  con: 'sqlite:///{root}/x.db'\n", "connects to a database"),
        ("dataset_path: pandas\ndataset_kwargs:\n  data_files: mine/x.pkl\n", "unpickles its files"),
    ],
)
def test_a_tenants_task_naming_data_elsewhere_is_refused_before_anything_is_read(
    pod: Path, body: str, said: str
) -> None:
    message = _refused(pod, body.replace("{root}", str(pod)))
    assert said in message and message.startswith("Task 'leak': ")
    assert message.endswith("a tenant's task reads a hub dataset, or files inside ASSAY_DATASETS_DIR.")


def test_a_local_folder_relative_to_the_working_directory_is_refused(
    pod: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(pod)  # `datasets` would read `tasks/` here as a local dataset folder
    assert "dataset_path 'tasks' is a local folder outside ASSAY_DATASETS_DIR" in _refused(pod, "dataset_path: tasks\n")


def test_without_a_datasets_directory_a_builder_is_refused(pod: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSAY_DATASETS_DIR")
    message = _refused(pod, "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: mine/test.jsonl\n")
    assert "its data_files are read from ASSAY_DATASETS_DIR, which is not set here" in message


def test_a_builders_relative_data_files_are_read_inside_the_datasets_directory(
    pod: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    second = pod / "more"
    (second / "extra").mkdir(parents=True)
    (second / "extra" / "test.jsonl").write_text(json.dumps({"text": "from the second folder"}) + "\n")
    monkeypatch.setenv("ASSAY_DATASETS_DIR", f"{pod / 'datasets'}:{second}")
    monkeypatch.chdir(pod / "tasks")  # not where a tenant's relative paths are read
    manager = _tenant(pod, "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: mine/test.jsonl\n")
    assert manager.tenant
    assert manager.load(["leak"]).tasks["leak"].eval_docs == [{"text": "hello"}]
    other = _tenant(
        pod, "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: [extra/test.jsonl]\n", name="other"
    )
    assert other.load(["other"]).tasks["other"].eval_docs == [{"text": "from the second folder"}]


def test_a_folder_or_an_absolute_path_inside_the_datasets_directory_is_a_tenants_dataset(pod: Path) -> None:
    manager = _tenant(pod, f"dataset_path: '{pod / 'datasets' / 'mine'}'\n")
    assert manager.load(["leak"]).tasks["leak"].eval_docs == [{"text": "hello"}]
    inside = f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {pod}/datasets/mine/test.jsonl\n"
    assert _tenant(pod, inside, name="inside").load(["inside"]).tasks["inside"].eval_docs == [{"text": "hello"}]


def test_hub_datasets_keep_their_repository_paths() -> None:
    kwargs = {"data_files": {"test": "data/test-*.parquet"}, "data_dir": "ARC-Easy", "revision": "main"}
    assert tenant_data.confine("t", "allenai/ai2_arc", "ARC-Easy", kwargs) == kwargs


def test_a_tenants_group_may_not_point_a_library_task_at_a_file(pod: Path) -> None:
    group = f"group: mine\ntask:\n  - task: arc_easy\n    dataset_path: text\n    dataset_kwargs:\n      data_files:\n        test: {pod}/secret.env\n"
    (pod / "tasks" / "group.yaml").write_text(group)
    manager = TaskManager(str(pod / "tasks"), include_code=False, include_may_shadow=False)
    # Refused as a change to a library task (the tenant-names rule) before its data is looked at.
    with pytest.raises(UserError, match="of the library's 'arc_easy', which a task source may not do") as error:
        manager.load(["mine"])
    assert SECRET not in str(error.value)


def test_on_a_users_own_machine_task_files_name_any_file_as_lm_eval(pod: Path) -> None:
    (pod / "tasks" / "own.yaml").write_text(
        f"task: own\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {pod}/datasets/mine/test.jsonl\n{TASK}"
    )
    manager = TaskManager(str(pod / "tasks"))  # `assay run --include_path`: lm-eval's trust model
    assert not manager.tenant
    assert manager.load(["own"]).tasks["own"].eval_docs == [{"text": "hello"}]


def test_the_runner_pod_reports_the_refusal_without_the_files_content(
    pod: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The attempt as it was made: the runner's own entry point, its status file, its log; refused
    before the model is built (building it here fails the run with another exit code)."""

    def tripwire(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was built before the task's data was checked")

    monkeypatch.setattr(evaluator, "build_lm", tripwire)
    status = pod / "status.json"
    monkeypatch.setenv("ASSAY_STATUS_FILE", str(status))
    for path in (f"{pod}/secret.env", "../secret.env", "/proc/self/environ"):
        (pod / "tasks" / "leak.yaml").write_text(
            f"task: leak\ndataset_path: text\ndataset_kwargs:\n  data_files:\n    test: {path}\n"
            + TASK.replace("'{{text}}'", "'{{ {}[text] }}'")
        )
        spec = pod / "spec.json"
        spec.write_text(json.dumps({"model": "dummy", "tasks": ["leak"]}))
        code = job.main(["--spec", str(spec), "--include_path", str(pod / "tasks")])
        printed = capsys.readouterr()
        assert code == job.EXIT_CONFIG
        message = json.loads(status.read_text())["message"]
        assert "dataset_kwargs.data_files" in message and path in message
        for text in (message, printed.out, printed.err):
            assert "sk-test" not in text and "PATH=" not in text
