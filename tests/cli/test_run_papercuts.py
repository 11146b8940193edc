"""Small things `assay run` says: lm-eval's old `--tasks list`, each flag's own example, an
unknown --model as a command-line error, the help's environment and exit status."""

from __future__ import annotations

import pytest

from assay import cli
from assay.runner.models import model_args


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "name,what", [("list", "tasks"), ("list_groups", "groups"), ("list_subtasks", "subtasks"), ("list_tags", "tags")]
)
def test_lm_evals_old_tasks_list_lists_as_ls_does(name: str, what: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, listed, err = _main(capsys, "ls", what)
    assert code == 0 and "|" in listed, err
    for argv in (["run", "--tasks", name], ["--model", "dummy", "--tasks", name]):
        assert _main(capsys, *argv) == (0, listed, "")


def test_a_task_named_like_list_among_others_is_still_a_task(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "run", "--model", "dummy", "--tasks", "list,arc_easy")
    assert code == 1 and "Unknown task 'list'" in err


def test_each_flags_error_shows_an_example_of_its_own_that_parses(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "run", "--model", "dummy", "--tasks", "arc_easy", "--gen_kwargs", "temperature")
    assert code == 2
    assert err == (
        "assay: error: --gen_kwargs entry 'temperature' is not of the form key=value; "
        "write e.g. temperature=0,max_gen_toks=256.\n"
    )
    for flag, example in model_args._EXAMPLES.items():
        assert model_args.parse_model_args(example, flag=flag), (flag, example)
        assert "pretrained" not in example or flag in ("--model_args", "-a")


def test_an_unknown_model_is_a_command_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "run", "--model", "dumy", "--tasks", "arc_easy")
    assert code == 2 and "Unknown model 'dumy'" in err and "Did you mean dummy?" in err


def test_the_help_names_the_data_folder_and_every_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = capsys.readouterr().out
    assert "ASSAY_DATASETS_DIR" in text
    statuses = [line.split()[0] for line in text.split("exit status:")[1].splitlines() if line[:6].strip().isdigit()]
    assert statuses == ["0", "1", "2", "130"]


def _flags(*argv: str) -> object:
    from assay.run_flags import resolve_run_config

    args = cli.build_parser().parse_args(["run", "--model", "dummy", "--tasks", "arc_easy", *argv])
    return resolve_run_config(args)


def test_a_limit_is_a_whole_count_or_a_fraction_below_one() -> None:
    # lm-eval runs --limit 1.5 as int(1.5) = 1 document per task without a word; spec.limit and
    # the CRD refuse it too (tests/cli/test_validator_corpus.py holds the three to one answer).
    from assay.errors import UsageError

    assert _flags("--limit", "2.0").limit == 2.0
    assert _flags("--limit", "0.5").limit == 0.5
    with pytest.raises(UsageError) as refused:
        _flags("--limit", "1.5")
    assert str(refused.value) == (
        "--limit 1.5 is neither a whole count of documents nor a fraction below 1 (lm-eval would run 1 per task); "
        "pass e.g. 1 or 0.5."
    )
    assert refused.value.exit_code == 2


def test_spec_limit_refuses_what_the_command_line_refuses() -> None:
    from assay.errors import UserError
    from assay.spec import parse_spec

    base = {"model": "dummy", "tasks": ["arc_easy"]}
    assert parse_spec({**base, "limit": 2.0}).limit == 2
    with pytest.raises(UserError) as refused:
        parse_spec({**base, "limit": 1.5})
    assert (
        str(refused.value)
        == "spec.limit 1.5 is neither a whole count of documents nor a fraction below 1; write e.g. 1 or 0.5."
    )
