"""`assay validate`: the one offline check of task names, task YAML and Evaluation manifests.

Each case runs the real command on real files and holds it to the exact report: every
problem at once, file:line first where it is known, exit 1 on any and 0 on none. The runner
pod's `--check` shares the checks; the last tests hold it to them.
"""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest

from assay import cli
from assay.errors import UserError
from assay.runner import job
from assay.runner.tasks.index import TaskManager

GOOD = """\
task: v_good
dataset_path: json
dataset_kwargs: {data_files: {test: data.jsonl}}
test_split: test
output_type: multiple_choice
doc_to_text: "Q: {{q}}"
doc_to_choice: "{{choices}}"
doc_to_target: label
"""


def _run(
    capsys: pytest.CaptureFixture[str],
    *argv: str,
    stdin: str | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, list[str]]:
    if stdin is not None and monkeypatch is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = cli.main(["validate", *argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out.splitlines()


@pytest.fixture(autouse=True)
def _no_task_code_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    # As on a laptop: no runner pod's ASSAY_TASK_CODE (a `job.main` run in this process sets one).
    monkeypatch.delenv("ASSAY_TASK_CODE", raising=False)


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "good.yaml").write_text(GOOD)
    return folder


# -- task names and task YAML ------------------------------------------------------------------


def test_a_valid_task_passes_and_an_unknown_one_gets_the_closest_names(
    tasks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(capsys, "--tasks", "v_good,arc_easy", "--include_path", str(tasks)) == (
        0,
        ["Validating tasks: ['v_good', 'arc_easy']", "All tasks found and valid"],
    )
    code, out = _run(capsys, "--tasks", "v_god,arc_eazy", "--include_path", str(tasks))
    assert code == 1 and out == [
        "Validating tasks: ['v_god', 'arc_eazy']",
        "Unknown task 'v_god'. Did you mean v_good? Run `assay ls tasks` to see the names, or add --include_path for your own YAMLs.",
        "Unknown task 'arc_eazy'. Did you mean arc_easy? Run `assay ls tasks` to see the names, or add --include_path for your own YAMLs.",
        "2 problems found.",
    ]


def test_a_broken_yaml_under_the_include_path_is_reported_not_skipped(
    tasks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tasks / "broken.yaml").write_text("task: v_broken\ndataset_path: json\ndoc_to_text: [unclosed\n")
    (tasks / "lost.yaml").write_text("task: v_lost\ninclude: _missing_template.yaml\n")
    code, out = _run(capsys, "--tasks", "v_good", "--include_path", str(tasks))
    assert code == 1 and out == [
        "Validating tasks: ['v_good']",
        f"{tasks}/broken.yaml:4: Task YAML {tasks}/broken.yaml is malformed at line 4: did not find expected ',' or ']'; "
        "fix the YAML syntax.",
        f"{tasks}/lost.yaml: Task YAML {tasks}/_missing_template.yaml does not exist; check the path or the include.",
        "2 problems found.",
    ]


def test_an_unknown_task_that_a_broken_file_defines_names_the_file_and_its_error(
    tasks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tasks / "mine.yaml").write_text("task: v_mine\ndoc_to_text: [unclosed\n")
    malformed = (
        f"Task YAML {tasks}/mine.yaml is malformed at line 3: did not find expected ',' or ']'; fix the YAML syntax."
    )
    code, out = _run(capsys, "--tasks", "v_mine", "--include_path", str(tasks))
    assert code == 1 and out == [
        "Validating tasks: ['v_mine']",
        f"'v_mine' is defined in {tasks}/mine.yaml, which failed to load: {malformed}",
        "1 problem found.",
    ]
    # The same sentence wherever a run meets the name, by its file's stem too.
    with pytest.raises(UserError) as caught:
        TaskManager(str(tasks)).match_tasks(["mine"])
    assert str(caught.value) == f"'mine' is defined in {tasks}/mine.yaml, which failed to load: {malformed}"


def test_a_task_config_reports_every_unknown_key_template_and_function_problem(
    tasks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tasks / "utils.py").write_text("def other(docs):\n    return docs\n")
    (tasks / "typo.yaml").write_text(
        textwrap.dedent("""\
        task: v_typo
        dataset_path: json
        test_split: test
        output_type: multiple_choice
        doc_to_txt: "{{q}}"
        doc_to_text: "{{ q }"
        doc_to_target: label
        doc_to_choice: "{{ choices"
        process_docs: !function utils.process
        process_results: !function helpers.score
        """)
    )
    code, out = _run(capsys, "--tasks", "v_typo", "--include_path", str(tasks))
    typo = f"{tasks}/typo.yaml"
    assert code == 1 and out == [
        "Validating tasks: ['v_typo']",
        f"{typo}:5: Task 'v_typo' has unknown key 'doc_to_txt'. Did you mean doc_to_text, doc_to_target, doc_to_image? "
        "Remove it or fix its spelling.",
        f"{typo}:6: Task 'v_typo': doc_to_text is not a valid Jinja template: unexpected '}}' (line 1 of the template); "
        "fix the template.",
        f"{typo}:8: Task 'v_typo': doc_to_choice is not a valid Jinja template: unexpected end of template, expected "
        "'end of print statement' (line 1 of the template); fix the template.",
        f"{typo}:9: Task 'v_typo': process_docs: !function 'utils.process': utils.py has no function 'process'.",
        f"{typo}:10: Task 'v_typo': process_results is `!function helpers.score`, and there is no helpers.py in {tasks}; "
        "put the helper file beside the YAML.",
        "5 problems found.",
    ]


def test_a_helper_whose_import_fails_is_reported_and_refused_code_is_never_imported(
    tasks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = tmp_path / "ran"
    (tasks / "helpers.py").write_text(f"open({str(ran)!r}, 'w').write('x')\nimport no_such_module_here\n")
    (tasks / "fn.yaml").write_text(GOOD.replace("v_good", "v_fn") + "process_docs: !function helpers.docs\n")
    code, out = _run(capsys, "--tasks", "v_fn", "--include_path", str(tasks))
    assert code == 1 and out[1] == (
        f"{tasks}/fn.yaml:9: Task 'v_fn': process_docs is `!function helpers.docs`, and importing {tasks}/helpers.py "
        "failed (ModuleNotFoundError: No module named 'no_such_module_here'); fix the helper or install what it imports."
    )
    ran.unlink()
    # A runner pod's policy (ASSAY_TASK_CODE): a tenant's helper is named, never imported.
    monkeypatch.setenv("ASSAY_TASK_CODE", "refused")
    code, out = _run(capsys, "--tasks", "v_fn", "--include_path", str(tasks))
    assert code == 1 and out[1] == (
        f"{tasks}/fn.yaml:9: Task 'v_fn': process_docs is `!function helpers.docs`, which exists as a reference to "
        f"helpers.py but was not imported: task code from {tasks} is refused here; use YAML fields and templates only, "
        "or ask the cluster admin to set policy.allowTaskCode."
    )
    assert not ran.exists()


def test_validate_needs_tasks_or_a_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate"]) == 2
    assert capsys.readouterr().err == "assay: error: Give --tasks, -f FILE, or both (see `assay validate --help`).\n"


# -- Evaluation manifests ----------------------------------------------------------------------

MANIFESTS = """\
apiVersion: assay.dev/v1alpha1
kind: Evaluation
metadata: {name: first}
spec:
  model: hf
  modelArgs: {pretrained: EleutherAI/pythia-160m, dtpye: bfloat16}
  tasks: arc_easy
  resources:
    nodes: 0
  limitt: 5
---
apiVersion: assay.dev/v1alpha1
kind: Evaluation
metadata: {name: second}
spec:
  model: local-completions
  modelArgs: {api_key: sk-1, base_url: "http://vllm:8000/v1/completions", tokenizer: gpt2}
  tasks: [arc_easy, arc_easyy]
  numFewshot: -1
---
apiVersion: assay.dev/v1alpha1
kind: Evaluation
metadata: {name: third}
spec: {model: dummy, tasks: [arc_easy]}
"""


def test_every_error_of_every_document_is_reported_at_once_on_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "evals.yaml"
    path.write_text(MANIFESTS)
    code, out = _run(capsys, "-f", str(path))
    known = (
        "activeDeadlineSeconds, allowUnsafeCode, applyChatTemplate, backoffLimit, baseline, batchSize, bootstrapIters, cache, "
        "chatTemplate, "
        "endpoint, fewshotAsMultiturn, gate, genKwargs, hfTokenSecret, image, limit, logSamples, maxBatchSize, metadata, "
        "model, modelArgs, numFewshot, output, podTemplate, predictOnly, resources, samples, seed, sentinels, stopAt, suspend, "
        "systemInstruction, taskSources, tasks, trustRemoteCode"
    )
    assert code == 1 and out == [
        f"{path}: Evaluation 'third' is valid: model 'dummy', tasks arc_easy.",
        f"{path}:10: Unknown field 'spec.limitt' in the Evaluation spec. Did you mean 'limit'? Known fields: {known}.",
        f"{path}:7: spec.tasks must be a list of task names, not a string: write tasks: [arc_easy].",
        f"{path}:9: spec.resources.nodes must be at least 1, not 0.",
        f"{path}:6: Unknown model_arg 'dtpye' for the hf model. Did you mean dtype?",
        f"{path}:19: spec.numFewshot must be at least 0, not -1.",
        f"{path}:17: model_args api_key is not how the local-completions model gets its key: set the OPENAI_API_KEY "
        "environment variable instead (on a cluster, spec.endpoint.apiKeySecret names the Secret that holds it), and "
        "remove api_key from model_args.",
        f"{path}:18: Unknown task 'arc_easyy'. Did you mean arc_easy? Run `assay ls tasks` to see the names, or add "
        "--include_path for your own YAMLs.",
        "7 problems found.",
    ]


def test_a_rule_between_fields_is_skipped_when_a_field_it_involves_failed() -> None:
    from assay.spec import read_spec

    reading = read_spec(
        {
            "model": 5,
            "tasks": ["arc_easy"],
            "applyChatTemplate": "yes",
            "chatTemplate": "tool_use",
            "endpoint": {"url": "http://vllm:8000/v1/completions"},
            "seed": "x",
        }
    )
    assert [str(error) for error in reading.errors] == [
        "spec.model must be a non-empty string, not the number 5.",
        "spec.applyChatTemplate must be true or false, not the string 'yes'.",
        'spec.seed must be an integer (all four seeds) or four comma-separated values "random,numpy,torch,fewshot" '
        "such as \"0,1234,1234,None\", not 'x'.",
    ]  # not "chatTemplate needs applyChatTemplate", nor "endpoint needs an API model": judged on stand-ins
    assert reading.failed == {"model", "applyChatTemplate", "endpoint", "seed"} and reading.usable("tasks")


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "eval.yaml"
    path.write_text("apiVersion: assay.dev/v1alpha1\nkind: Evaluation\nspec:\n  tasks: [arc_easy\n  model: hf\n")
    assert _run(capsys, "-f", str(path)) == (
        1,
        [
            f"{path}:5: not valid YAML: expected ',' or ']', but got ':' (while parsing a flow sequence); fix the YAML syntax.",
            "1 problem found.",
        ],
    )


def test_manifests_from_stdin_and_several_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "apiVersion: assay.dev/v1alpha1\nkind: Evaluation\nmetadata: {name: ok}\nspec: {model: dummy, tasks: [arc_easy]}\n"
    )
    code, out = _run(
        capsys,
        "-f",
        str(good),
        "-f",
        "-",
        "-f",
        str(tmp_path / "absent.yaml"),
        stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
        monkeypatch=monkeypatch,
    )
    assert code == 1 and out == [
        f"{good}: Evaluation 'ok' is valid: model 'dummy', tasks arc_easy.",
        "<stdin>:1: Expected apiVersion: assay.dev/v1alpha1 and kind: Evaluation, got apiVersion: 'v1' and kind: 'ConfigMap'.",
        f"Cannot read {tmp_path / 'absent.yaml'}: No such file or directory; check the -f path.",
        "2 problems found.",
    ]
    assert _run(capsys, "-f", str(good)) == (0, [f"{good}: Evaluation 'ok' is valid: model 'dummy', tasks arc_easy."])


def test_admission_rules_and_task_sources_offline(
    tmp_path: Path, tasks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "eval.yaml"
    path.write_text(
        textwrap.dedent("""\
        apiVersion: assay.dev/v1alpha1
        kind: Evaluation
        metadata: {name: tenant}
        spec:
          model: hf
          modelArgs: {pretrained: gpt2, trust_remote_code: true}
          tasks: [v_good, arc_easy]
          taskSources: [{configMap: my-tasks}]
        """)
    )
    remote = (
        f"{path}:6: spec.modelArgs.trust_remote_code asks to run the model repository's code: set "
        "spec.trustRemoteCode: true to allow it."
    )
    assert _run(capsys, "-f", str(path)) == (
        1,
        [
            f"note: {path}:8: the tasks of spec.taskSources (ConfigMaps my-tasks) cannot be read offline and were not checked; "
            "pass their YAML files with --include_path to check them.",
            remote,
            "1 problem found.",
        ],
    )
    (tasks / "good.yaml").write_text(GOOD + "unsafe_code: true\n")
    assert _run(capsys, "-f", str(path), "--include_path", str(tasks)) == (
        1,
        [
            remote,
            f"{path}:7: Tasks v_good execute model-generated code: set spec.allowUnsafeCode: true to allow it.",
            "2 problems found.",
        ],
    )


# -- the runner pod's --check shares the checks --------------------------------------------------


def test_the_runner_check_reports_the_first_problem_and_counts_the_rest(
    tasks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSAY_TASK_CODE", "allowed")  # as a pod's operator sets it (job.main would set "refused")
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(tmp_path))  # where a pod reads a task source's data_files
    (tasks / "typo.yaml").write_text(GOOD.replace("v_good", "v_typo").replace("doc_to_text", "doc_to_txt"))
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "model": "local-completions",
                "tasks": ["v_typo"],
                "modelArgs": {"api_key": "k", "base_url": "http://x/v1/completions", "tokenizer": "gpt2"},
            }
        )
    )
    assert job.main(["--check", "--spec", str(spec), "--include_path", str(tasks)]) == job.EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.startswith("assay runner: model_args api_key is not how the local-completions model gets its key")
    assert err.endswith(" (1 more problem: `assay validate` lists them all.)\n")
