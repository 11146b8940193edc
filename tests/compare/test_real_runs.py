"""`assay compare` on real outputs of `assay run` and `lm_eval` (tests/compare/runs/README.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from assay.cli import main

RUNS = Path(__file__).resolve().parent / "runs"
ASSAY_0, ASSAY_1, LMEVAL = (str(RUNS / name) for name in ("assay_0shot", "assay_1shot", "lmeval_seed7"))


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(["compare", *argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_run_against_itself_is_delta_zero_and_p_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _json(capsys, ASSAY_0, ASSAY_0)
    assert code == 0 and report["verdict"] == "unchanged"
    assert {row["task"] for row in report["comparisons"]} == {"p_arc", "p_lambada", "p_rolling"}
    for row in report["comparisons"]:
        assert (row["delta"], row["p_value"], row["verdict"]) == (0.0, 1.0, "unchanged")
        assert row["n"] == 40
    assert [row["test"] for row in report["comparisons"] if row["task"] == "p_rolling"] == ["bootstrap"] * 3


def test_each_side_reproduces_its_results_json(capsys: pytest.CaptureFixture[str]) -> None:
    _, report = _json(capsys, ASSAY_0, LMEVAL)
    for side, folder in (("baseline", ASSAY_0), ("candidate", LMEVAL)):
        results = json.loads(next(Path(folder).glob("*/results_*.json")).read_text())["results"]
        for row in report["comparisons"]:
            assert row[side] == pytest.approx(results[row["task"]][f"{row['metric']},{row['filter']}"], rel=1e-12)


def test_assay_against_lm_eval_finds_the_dummy_that_is_never_greedy(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _json(capsys, ASSAY_0, LMEVAL)
    rows = {(row["task"], row["metric"]): row for row in report["comparisons"]}
    lambada = rows[("p_lambada", "acc")]
    assert lambada["candidate"] == 0.0 and lambada["flips"]["gained"] == 0 and lambada["verdict"] == "regressed"
    assert rows[("p_lambada", "perplexity")]["test"] == "bootstrap"
    assert rows[("p_arc", "acc")]["test"] == "mcnemar"
    assert code == 1 and report["verdict"] == "regressed"


def test_a_tolerated_drop_is_not_a_regression(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _json(capsys, ASSAY_0, LMEVAL, "--max-drop", "p_lambada:acc=0.9")
    lambada = next(row for row in report["comparisons"] if (row["task"], row["metric"]) == ("p_lambada", "acc"))
    assert lambada["max_drop"] == 0.9 and lambada["verdict"] == "unchanged"
    assert code == 0


def test_different_prompts_are_compared_and_named(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compare", ASSAY_0, ASSAY_1])
    out = capsys.readouterr().out
    assert "p_arc: 0-shot baseline, 1-shot candidate." in out
    assert "p_arc: 40 of 40 paired documents have different prompts." in out
    assert out.splitlines()[3].startswith("|  Tasks  |Filter|")
    assert code == 0  # nothing significantly worse on 40 documents


def test_strict_makes_an_inconclusive_comparison_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", ASSAY_0, ASSAY_1, "--strict", "--format", "markdown"]) == 3
    assert capsys.readouterr().out.startswith("## assay compare")


def test_plan_reports_the_detectable_effect_and_documents_needed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--plan", ASSAY_0, "--mde", "0.02", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["correlation"] == 0.5 and {row["task"] for row in plan["plans"]} == {"p_arc", "p_lambada"}
    assert all(row["needed"] > row["n"] for row in plan["plans"])


@pytest.mark.slow  # a fresh interpreter (subprocess), not the quick loop's pure Python
def test_compare_imports_no_torch() -> None:
    script = (
        f"import sys; from assay.cli import main; code = main(['compare', {ASSAY_0!r}, {LMEVAL!r}]); "
        "heavy = [m for m in ('torch', 'transformers', 'datasets', 'scipy', 'assay.runner') if m in sys.modules]; "
        "print('HEAVY', heavy); sys.exit(0 if not heavy and code == 1 else 1)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout[-500:] + done.stderr[-2000:]
