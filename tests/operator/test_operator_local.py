"""`assay apply --local` and the operator's validation: what runs before any evaluation does."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from assay.errors import UsageError, UserError
from assay.operator import local
from assay.operator.admission import validation
from assay.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]
MANIFEST = """
apiVersion: assay.dev/v1alpha1
kind: Evaluation
metadata: {name: first}
spec: {model: dummy, tasks: [arc_easy], limit: 4, resources: {gpusPerNode: 0}}
---
apiVersion: assay.dev/v1alpha1
kind: Evaluation
metadata: {name: second}
spec: {model: hf, tasks: [arc_easy], resources: {nodes: 2, gpusPerNode: 2}, output: {path: runs/two}}
"""


def test_apply_needs_local() -> None:
    with pytest.raises(UsageError, match="kubectl apply"):
        local.main(["-f", "x.yaml"])


def test_manifests_load_from_a_file_or_stdin(tmp_path: Path) -> None:
    path = tmp_path / "evals.yaml"
    path.write_text(MANIFEST)
    loaded = local.load_manifests(str(path))
    assert [m["name"] for m, _ in loaded] == ["first", "second"]
    assert [m["name"] for m, _ in local.load_manifests("-", stdin=io.StringIO(MANIFEST))] == ["first", "second"]
    (_, first), (_, second) = loaded
    assert local.output_dir_for({"name": "first"}, first, "out") == Path("out/first")
    assert local.output_dir_for({"name": "second"}, second, "out") == Path("out/runs/two")
    assert local.torchrun_command(second)[1:] == [
        "-m",
        "assay.runner.launch",
        "--standalone",
        "--nproc_per_node=4",
        "--max_restarts=0",
        "-m",
        "assay.runner",
    ]
    assert second.resources.world_size == 4 and first.resources.world_size == 1


@pytest.mark.slow  # a fresh interpreter (subprocess), not the quick loop's pure Python
def test_a_spec_too_large_for_an_environment_variable_reaches_the_runner_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linux refuses to start a process with one environment variable over 128 KiB: the spec goes as a file."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "rows.jsonl").write_text('{"text": "a", "target": " b"}\n')
    (tasks / "big_env.yaml").write_text(
        f"task: big_env\ndataset_path: json\ndataset_kwargs: {{data_files: {{test: {tasks / 'rows.jsonl'}}}}}\n"
        "test_split: test\noutput_type: loglikelihood\ndoc_to_text: '{{text}}'\ndoc_to_target: '{{target}}'\n"
    )
    monkeypatch.setenv("ASSAY_INCLUDE_PATH", str(tasks))  # the runner's process inherits this environment
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(tasks))  # the runner reads its include path's data_files there only
    samples = {"big_env": list(range(40_000))}
    spec = parse_spec({"model": "dummy", "tasks": ["big_env"], "samples": samples, "resources": {"gpusPerNode": 2}})
    assert len(spec.to_json()) > 200 * 1024
    # The runner's own check in place of torchrun's workers: a real process, reading the spec it was given.
    monkeypatch.setattr(local, "torchrun_command", lambda _: [sys.executable, "-m", "assay.runner", "--check"])
    started: list[dict[str, str]] = []
    call = subprocess.call

    def recording_call(command: list[str], *, env: dict[str, str]) -> int:
        started.append(env)
        return call(command, env=env, cwd=REPO)

    monkeypatch.setattr(local.subprocess, "call", recording_call)
    (tmp_path / "out").mkdir()
    code, status = local.run_under_torchrun({"name": "big"}, spec, tmp_path / "out", output_root=str(tmp_path))
    assert code == 0 and status == {}
    (env,) = started
    assert max(len(value) for value in env.values()) < 128 * 1024 and "ASSAY_EVALUATION" not in env
    assert not Path(env["ASSAY_EVALUATION_FILE"]).exists()  # a temporary file, gone with the run


@pytest.mark.parametrize(
    "text,expected",
    [
        ("kind: [", "not valid YAML"),
        ("", "holds no manifest"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "Expected apiVersion"),
        ("apiVersion: assay.dev/v1alpha1\nkind: Evaluation\nmetadata: {name: x}\nspec: {model: hf}\n", "spec.tasks"),
    ],
)
def test_bad_manifests_are_one_sentence(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        local.load_manifests(str(path))
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="Cannot read"):
        local.load_manifests(str(tmp_path / "nope.yaml"))


def test_unknown_model_is_rejected_before_running(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(MANIFEST.split("---")[0].replace("model: dummy", "model: hff"))
    with pytest.raises(UserError, match="Did you mean hf"):
        local.main(["-f", str(path), "--local", "--output-dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


SPEC = {"model": "hf", "modelArgs": {"pretrained": "m"}, "tasks": ["arc_easy"]}


def test_validation_with_the_real_task_index() -> None:
    pytest.importorskip("assay.runner.tasks.index", reason="the engine's task index is not in this checkout yet")
    validation.validate(parse_spec(SPEC))
    with pytest.raises(UserError, match="arc_eazy"):
        validation.validate(parse_spec({**SPEC, "tasks": ["arc_eazy"]}))


def test_validation_hooks() -> None:
    none = lambda names: []  # noqa: E731
    with pytest.raises(UserError, match="trustRemoteCode"):
        validation.validate(parse_spec({**SPEC, "modelArgs": {"trust_remote_code": True}}), tasks_resolver=none)
    validation.validate(
        parse_spec({**SPEC, "modelArgs": {"trust_remote_code": True}, "trustRemoteCode": True}),
        tasks_resolver=none,
        unsafe_finder=none,
    )
    unsafe = lambda names: ["humaneval"]  # noqa: E731
    with pytest.raises(UserError, match="allowUnsafeCode"):
        validation.validate(parse_spec(SPEC), tasks_resolver=none, unsafe_finder=unsafe)
    validation.validate(parse_spec({**SPEC, "allowUnsafeCode": True}), tasks_resolver=none, unsafe_finder=unsafe)
    with pytest.raises(UserError, match="Unknown tasks in spec.tasks: x"):
        validation.validate(parse_spec(SPEC), tasks_resolver=lambda names: ["x"], unsafe_finder=none)
    with pytest.raises(UserError, match="Known models"):
        validation.validate(parse_spec({**SPEC, "model": "mystery"}), tasks_resolver=none, unsafe_finder=none)


def test_operator_command_line() -> None:
    from assay.operator import main, settings

    args = main.parse_args(["--namespace", "a", "--namespace", "b", "--metrics-port", "0", "--standalone"])
    assert main.scope(args) == (False, ["a", "b"]) and args.standalone and args.metrics_port == 0
    assert main.scope(main.parse_args(["--all-namespaces"])) == (True, [])
    # without --namespace, those of ASSAY_NAMESPACES (the operator's settings); none: all
    watched = settings.from_env({"ASSAY_NAMESPACES": "a, b,"})
    assert main.scope(main.parse_args([], watched), watched) == (False, ["a", "b"])
    assert main.scope(main.parse_args([], settings.OperatorSettings())) == (True, [])
    with pytest.raises(UsageError):
        main.parse_args(["--namespace", "a", "--all-namespaces"])


def test_handlers_register_with_kopf() -> None:
    import kopf

    from assay.operator import handlers  # noqa: F401

    registry = kopf.get_default_registry()
    ids = {h.id for h in registry._watching.get_all_handlers()}
    assert {"evaluation_changed", "mirror_job", "mirror_pod"} <= ids
    # No create/update/resume/delete handler: kopf then keeps no progress, no copy of a spec
    # (which could hold a refused literal token) and no finalizer on any object.
    assert list(registry._changing.get_all_handlers()) == []


def test_operator_without_credentials_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.config import kube_config

    from assay.operator import main

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    # The client reads $KUBECONFIG once, when first imported: a test that imported it under
    # another KUBECONFIG (tests/cli_cluster) must not lend this one its credentials.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(UserError, match="No Kubernetes credentials"):
        main.main(["--metrics-port", "0", "--health-port", "0", "--standalone"])


GATED = """
apiVersion: assay.dev/v1alpha1
kind: Evaluation
metadata: {name: base}
spec: {model: dummy, tasks: [arc_easy], limit: 30, seed: 7, resources: {gpusPerNode: 0}}
---
apiVersion: assay.dev/v1alpha1
kind: Evaluation
metadata: {name: again}
spec: {model: dummy, tasks: [arc_easy], limit: 30, seed: 7, resources: {gpusPerNode: 0}, baseline: {path: base}}
---
apiVersion: assay.dev/v1alpha1
kind: Evaluation
metadata: {name: by-name}
spec: {model: dummy, tasks: [arc_easy], limit: 30, seed: 7, resources: {gpusPerNode: 0}, baseline: {evaluation: base}}
"""


def test_apply_local_compares_with_a_baseline_folder_under_the_output_dir(
    tmp_path: Path, converted: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(converted))
    path = tmp_path / "gated.yaml"
    path.write_text(GATED)
    assert local.main(["-f", str(path), "--local", "--output-dir", str(tmp_path / "out")]) == 0
    base, again, by_name = [doc["status"] for doc in yaml.safe_load_all(capsys.readouterr().out)]
    assert "comparison" not in base
    assert list((tmp_path / "out" / "base").glob("**/scores_arc_easy_*.jsonl"))  # any run can be a baseline
    # The same seeded answers on the same documents: nothing changed, and a powered "no change".
    assert again["comparison"]["verdict"] == "unchanged" and again["comparison"]["baseline"] == "path:base"
    assert {row["n"] for row in again["comparison"]["rows"]} == {30}
    assert by_name["comparison"] == {
        "baseline": "base",
        "error": "The baseline Evaluation base can be read only on a "
        "cluster; give spec.baseline.path (its results folder) instead.",
    }
