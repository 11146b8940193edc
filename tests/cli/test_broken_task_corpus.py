"""The broken-task corpus: `assay run` and `assay validate` refuse each mistake with the same sentence.

Each YAML under tests/fixtures/tasks/broken/ is a task-YAML mistake lm-eval users make (no
evaluation split, multiple choice without doc_to_choice, a misspelt metric, key, output type or
filter, bad Jinja, a missing `!function` helper, ...). Each runs, in a folder of its own, through
`assay run --model dummy` (which must stop before the model loads, with one `assay: error:` line
and exit 1) and `assay validate` (which must print that same problem, file:line first, and exit
1). `good.yaml` is the control: validate accepts it and run scores it, so a harness that
refused everything would fail here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay import cli

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "broken"

# Each case, and words its sentence must hold (the did-you-mean where there is a close name).
EXPECTED = {
    "no_eval_split": ["has neither test_split nor validation_split; set one of them."],
    "no_doc_to_choice": ["is multiple_choice but has no doc_to_choice; add doc_to_choice"],
    "metric_typo": ["Unknown metric 'acuracy'. Did you mean acc?"],
    "metric_without_name": ["every metric_list entry needs a 'metric' key."],
    "bad_jinja": ["doc_to_text is not a valid Jinja template", "fix the template."],
    "bad_jinja_choice": ["doc_to_choice is not a valid Jinja template"],
    "key_typo": ["unknown key 'doc_to_txt'. Did you mean doc_to_text,"],
    "output_type_typo": ["output_type 'multiple_choices'; use one of"],
    "filter_typo": ["Unknown filter 'regexx'. Did you mean regex,"],
    "fewshot_key_typo": ["fewshot_config has unknown key 'doc_to_txt'. Did you mean doc_to_text,"],
    "missing_helper": ["`!function utils.process_docs`", "there is no utils.py in"],
}


# Where the line's key is not named in the sentence: the key the line points at.
LINE_KEY = {"no_eval_split": "task", "no_doc_to_choice": "output_type", "metric_without_name": "metric_list"}


def test_the_corpus_and_the_expectations_name_the_same_cases() -> None:
    assert {path.stem for path in CORPUS.glob("*.yaml")} == {*EXPECTED, "good"}


@pytest.fixture(autouse=True)
def _no_task_code_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    # As on a laptop: no runner pod's ASSAY_TASK_CODE (a `job.main` run in this process sets one).
    monkeypatch.delenv("ASSAY_TASK_CODE", raising=False)


def _folder(case: str, tmp_path: Path) -> Path:
    """The case's YAML alone in an include folder, its data beside it."""
    folder = tmp_path / case
    folder.mkdir()
    rows = [{"q": "2+2", "choices": ["4", "5"], "label": 0}, {"q": "1+1", "choices": ["3", "2"], "label": 1}]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    text = (CORPUS / f"{case}.yaml").read_text().replace("@WORK@", str(tmp_path))
    (folder / f"{case}.yaml").write_text(text)
    return folder


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    # In process: an exception that escaped the command line would fail the test as a traceback would.
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_run_and_validate_refuse_with_the_same_sentence(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(case, tmp_path)
    task = f"broken_{case}"
    code, out, err = _cli(capsys, "run", "--model", "dummy", "--tasks", task, "--include_path", str(folder))
    assert "Traceback" not in out + err
    [line] = [line for line in err.splitlines() if line.startswith("assay: error: ")]
    assert code == 1 and err.strip().endswith(line), err
    refused = line.removeprefix("assay: error: ")
    for words in EXPECTED[case]:
        assert words in refused, refused
    assert "Did you mean" not in refused or refused.count("Did you mean") == 1

    code, out, err = _cli(capsys, "validate", "--tasks", task, "--include_path", str(folder))
    assert (code, err) == (1, ""), err
    assert out.splitlines()[1:] == [refused, "1 problem found."]
    # file:line first: the line of the key the mistake is in.
    path = folder / f"{case}.yaml"
    where, _, _ = refused.partition(": ")
    assert where.startswith(f"{path}:"), refused
    line_text = path.read_text().splitlines()[int(where.rsplit(":", 1)[1]) - 1]
    assert line_text.split(":")[0] in LINE_KEY.get(case, refused), (line_text, refused)


def test_the_control_is_valid_and_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder("good", tmp_path)
    code, out, err = _cli(capsys, "validate", "--tasks", "broken_good", "--include_path", str(folder))
    assert (code, out.splitlines()[-1]) == (0, "All tasks found and valid"), out + err
    code, out, err = _cli(capsys, "run", "--model", "dummy", "--tasks", "broken_good", "--include_path", str(folder))
    assert code == 0, err
    assert "|broken_good|" in out.replace(" ", "")


def test_every_task_in_the_library_passes_the_check_run_now_makes() -> None:
    # `run` refuses on these problems before the model loads: none may be a false alarm on the library.
    from assay.runner.checks import offline_check
    from assay.runner.tasks.index import TaskManager

    manager = TaskManager()
    assert len(manager.index) > 50
    assert offline_check.task_problems(manager, sorted(manager.index)) == []
