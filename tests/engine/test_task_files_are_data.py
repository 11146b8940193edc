"""A task file is data: its templates render sandboxed, its includes and helpers stay in its tree.

Each attempt below ran code or read files outside the task folder before templates were
sandboxed and paths confined; each is now one sentence and no side effect.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from assay.errors import UserError
from assay.runner.tasks import task as task_module
from assay.runner.tasks import templates
from assay.runner.tasks.index import TaskManager
from assay.runner.tasks.yaml_loader import load_yaml

DOC = {"question": "Is water wet?", "choices": {"label": ["A", "B"], "text": ["yes", "no"]}, "answerKey": "A"}


def _task(name: str, **fields: str) -> str:
    lines = [f"task: {name}", "dataset_path: json", "output_type: generate_until", "test_split: test"]
    return "\n".join(lines + [f"{key}: {value}" for key, value in fields.items()]) + "\n"


def test_lm_eval_style_templates_render_as_before() -> None:
    assert templates.render("Q: {{question}}\nA:", DOC) == "Q: Is water wet?\nA:"
    assert templates.render("{{choices.label.index(answerKey)}}", DOC) == "0"
    assert templates.render("{{ question.strip().lower() | regex_replace('wet', 'dry') }}", DOC) == "is water dry?"
    assert templates.render("{{ choices.text | join(', ') }}", DOC) == "yes, no"


@pytest.mark.parametrize(
    "template",
    [
        "{{ lipsum.__globals__['os'].popen('touch {marker}').read() }}",
        "{{ cycler.__init__.__globals__.os.popen('touch {marker}').read() }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ question.__class__.__base__ }}",
    ],
    ids=["lipsum-globals", "cycler-init", "str-mro", "dunder-class"],
)
def test_a_template_that_reaches_python_internals_is_refused_and_runs_nothing(template: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(UserError) as error:
        templates.render(template.replace("{marker}", str(marker)), DOC)
    assert "reaches past the document" in str(error.value)
    assert not marker.exists()


def test_a_template_may_not_change_the_document() -> None:
    with pytest.raises(UserError, match="reaches past the document"):
        templates.render("{{ choices.label.append('C') }}", DOC)
    assert DOC["choices"]["label"] == ["A", "B"]


@pytest.mark.parametrize(
    ("include", "message"),
    [
        ("/proc/self/status", "an include is a path relative to the YAML, not one starting with `/` or `~`"),
        ("~/outside.yaml", "an include is a path relative to the YAML, not one starting with `/` or `~`"),
        ("../outside.yaml", "which leads outside the task folder"),
        ("sub/../../outside.yaml", "which leads outside the task folder"),
    ],
)
def test_an_include_stays_inside_the_task_folder(tmp_path: Path, include: str, message: str) -> None:
    (tmp_path / "outside.yaml").write_text("doc_to_text: leaked\n")
    tree = tmp_path / "tasks"
    tree.mkdir()
    (tree / "t.yaml").write_text(f"include: {include}\n" + _task("t"))
    with pytest.raises(UserError, match=re.escape(message)):
        load_yaml(tree / "t.yaml", root=tree)


def test_an_include_one_folder_up_inside_the_tree_works_as_in_lm_eval(tmp_path: Path) -> None:
    (tmp_path / "tasks" / "sub").mkdir(parents=True)
    (tmp_path / "tasks" / "_template_yaml").write_text("output_type: loglikelihood\n")
    (tmp_path / "tasks" / "sub" / "t.yaml").write_text("include: ../_template_yaml\n" + _task("t"))
    config = load_yaml(tmp_path / "tasks" / "sub" / "t.yaml", root=tmp_path / "tasks")
    assert config["task"] == "t"


def test_an_include_through_a_symlink_out_of_the_tree_is_refused(tmp_path: Path) -> None:
    (tmp_path / "outside.yaml").write_text("doc_to_text: leaked\n")
    tree = tmp_path / "tasks"
    tree.mkdir()
    (tree / "link.yaml").symlink_to(tmp_path / "outside.yaml")
    (tree / "t.yaml").write_text("include: link.yaml\n" + _task("t"))
    with pytest.raises(UserError, match="leads outside the task folder"):
        load_yaml(tree / "t.yaml", root=tree)


def test_includes_and_helpers_inside_the_tree_still_work(tmp_path: Path) -> None:
    tree = tmp_path / "tasks"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "base.yaml").write_text("doc_to_text: '{{question}}'\n")
    (tree / "sub" / "helpers.py").write_text("def shout(doc):\n    return doc['question'].upper()\n")
    (tree / "t.yaml").write_text("include: sub/base.yaml\ndoc_to_target: !function sub.helpers.shout\n" + _task("t"))
    config = load_yaml(tree / "t.yaml", root=tree)
    assert config["doc_to_text"] == "{{question}}"
    assert config["doc_to_target"](DOC) == "IS WATER WET?"


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        (".cache.evil.mod.fn", "needs the form module.function"),  # once /cache/evil/mod.py
        ("os.system", "there is no os.py beside the YAML"),  # once any installed module
        ("subprocess.getoutput", "there is no subprocess.py beside the YAML"),
        ("fn", "needs the form module.function"),
    ],
)
def test_a_function_reference_names_a_helper_beside_the_yaml_only(tmp_path: Path, reference: str, message: str) -> None:
    evil = tmp_path / "cache" / "evil"
    evil.mkdir(parents=True)
    (evil / "mod.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\ndef fn(doc):\n    return ''\n")
    tree = tmp_path / "tasks"
    tree.mkdir()
    (tree / "t.yaml").write_text(f"doc_to_text: !function {reference}\n" + _task("t"))
    with pytest.raises(UserError, match=message):
        load_yaml(tree / "t.yaml", root=tree)
    assert not (tmp_path / "ran").exists()


def test_a_tenants_folder_runs_no_helper_and_takes_no_library_name(tmp_path: Path) -> None:
    (tmp_path / "utils.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\ndef f(doc):\n    return ''\n")
    (tmp_path / "mine.yaml").write_text("doc_to_text: !function utils.f\n" + _task("mine"))
    manager = TaskManager(str(tmp_path), include_code=False, include_may_shadow=False)
    assert "mine" in manager.index  # listed, so the refusal names it
    with pytest.raises(UserError, match="task code from this folder is not allowed here"):
        manager.load(["mine"])
    assert not (tmp_path / "ran").exists()
    # The same folder on a user's own machine (lm-eval's trust model) runs its helper.
    TaskManager(str(tmp_path)).leaf_configs(["mine"])  # resolving nothing: no helper runs for a check
    assert not (tmp_path / "ran").exists()

    (tmp_path / "arc.yaml").write_text(_task("arc_easy"))
    with pytest.raises(UserError, match="'arc_easy' in .* reuses a name of the task library"):
        TaskManager(str(tmp_path), include_code=False, include_may_shadow=False)
    assert TaskManager(str(tmp_path)).index["arc_easy"].path == tmp_path / "arc.yaml"  # lm-eval: later roots win


def test_leaf_configs_follow_groups_and_their_overrides_without_building(tmp_path: Path) -> None:
    (tmp_path / "runs_code.yaml").write_text(_task("runs_code", unsafe_code="true"))
    (tmp_path / "plain.yaml").write_text(_task("plain"))
    (tmp_path / "suite.yaml").write_text("group: suite\ntask:\n  - plain\n  - group: inner\n    task: [runs_code]\n")
    (tmp_path / "flagged.yaml").write_text("group: flagged\ntask:\n  - task: plain\n    unsafe_code: true\n")
    manager = TaskManager(str(tmp_path), include_code=False)

    def unsafe(names: list[str]) -> list[str]:
        return sorted(name for name, config in manager.leaf_configs(names).items() if config.get("unsafe_code"))

    assert unsafe(["suite"]) == ["runs_code"]  # through a nested group
    assert unsafe(["flagged"]) == ["plain"]  # the group's member entry sets it
    assert unsafe(["plain"]) == []


def test_leaf_configs_build_nothing_while_another_thread_asks_the_same_manager(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator asks one shared manager from several threads: one thread finishing its question
    must not turn another's into a real build (which reads the dataset, from the hub if need be)."""
    (tmp_path / "plain.yaml").write_text(_task("plain"))
    manager = TaskManager(str(tmp_path), include_code=False)
    built: list[str] = []

    def build(self: object, *args: object, **kwargs: object) -> None:
        built.append(threading.current_thread().name)
        raise AssertionError("a task was built")

    monkeypatch.setattr(task_module.Task, "__init__", build)
    inside, go_on = threading.Event(), threading.Event()
    match_tasks = manager.match_tasks

    def held_match(names: list[str]) -> list[str]:
        if threading.current_thread().name == "first":
            inside.set()
            go_on.wait(10)
        return list(match_tasks(names))

    monkeypatch.setattr(manager, "match_tasks", held_match)
    answers: dict[str, object] = {}
    first = threading.Thread(target=lambda: answers.update(first=manager.leaf_configs(["plain"])), name="first")
    first.start()
    assert inside.wait(10)
    assert "plain" in manager.leaf_configs(["plain"])  # another thread asks, and is answered, meanwhile
    go_on.set()
    first.join(10)
    assert built == [] and "plain" in str(answers["first"])


@pytest.mark.slow  # a fresh interpreter (subprocess), not the quick loop's pure Python
def test_assay_run_refuses_a_template_that_reaches_os_in_one_sentence(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    data = tmp_path / "data.jsonl"
    data.write_text('{"question": "q", "answer": "a"}\n')
    evil = (
        "task: evil\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\noutput_type: generate_until\n"
        f"doc_to_text: \"{{{{ lipsum.__globals__['os'].popen('touch {marker}').read() }}}}\"\n"
        "doc_to_target: answer\ngeneration_kwargs:\n  until: ['\\n']\nmetric_list:\n  - metric: exact_match\n"
    )
    (tmp_path / "evil.yaml").write_text(evil)
    done = subprocess.run(
        [sys.executable, "-m", "assay", "run", "--model", "dummy", "--tasks", str(tmp_path / "evil.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    assert not marker.exists()
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if "reaches past the document" in line]
    assert len(lines) == 1, done.stderr
