"""`assay run --stop-early` and its flags: what they make, and each mistake refused in one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay import cli
from assay.run_options import SequentialSettings


def _flags(*argv: str):  # type: ignore[no-untyped-def]
    parser = cli.build_parser()
    return cli.resolve_run_config(parser.parse_args(cli.normalize_argv(["run", "--tasks", "x", *argv], parser)))


def test_stop_early_against_a_baseline_makes_the_runs_settings(tmp_path: Path) -> None:
    flags = _flags(
        "--stop-early", "--baseline", str(tmp_path), "--max-drop", "0.02", "--max-drop", "mmlu*:acc=0.05", "--seed", "7"
    )
    assert flags.run_options().sequential == SequentialSettings(
        baseline=str(tmp_path), max_drop=0.02, max_drop_for={"mmlu*:acc": 0.05}, seed=7
    )


def test_stop_early_at_a_precision_needs_no_baseline() -> None:
    assert _flags("--stop-early", "--target-ci", "0.02").sequential == SequentialSettings(target_half_width=0.02)


def test_an_ordinary_run_has_no_sequential_settings() -> None:
    assert _flags().run_options().sequential is None


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["--stop-early"], "--stop-early needs --baseline <path>"),
        (["--baseline", "."], "--baseline is used only with --stop-early"),
        (["--target-ci", "0.1"], "--target-ci is used only with --stop-early"),
        (["--stop-early", "--target-ci", "0"], "--target-ci must be a half-width above 0"),
        (["--stop-early", "--target-ci", "1.5"], "--target-ci must be a half-width above 0"),
        (["--stop-early", "--target-ci", "0.1", "--max-drop", "0.1"], "--max-drop needs --baseline"),
        (["--stop-early", "--baseline", "/no/such/run"], "--baseline /no/such/run does not exist"),
        (["--stop-early", "--baseline", ".", "--max-drop", "a=b"], "--max-drop 'a=b'"),
        (
            ["--stop-early", "--target-ci", "0.1", "--predict_only", "--output_path", "o"],
            "--predict_only computes none",
        ),
    ],
)
def test_mistakes_are_one_sentence(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", "--model", "dummy", "--tasks", "x", *argv])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
