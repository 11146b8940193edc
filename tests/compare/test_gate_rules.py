"""The gate's rules on crafted runs: what `unchanged` needs, what a few documents cannot show,
that the bootstrap can pass Holm among many rows, and that every row's verdict is its Holm p's."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from assay.cli import main
from assay.compare import statistics, verdicts
from tests.compare.crafted import write_run


def _report(capsys: pytest.CaptureFixture[str], baseline: Path, candidate: Path, *flags: str) -> tuple[int, dict]:
    code = main(["compare", str(baseline), str(candidate), "--format", "json", *flags])
    return code, json.loads(capsys.readouterr().out)


def _samples(metric: str, values: list[float] | np.ndarray) -> list[dict]:
    return [{"doc_id": i, "doc": f"d{i}", metric: float(v)} for i, v in enumerate(values)]


def test_a_total_collapse_on_five_documents_is_not_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every document right in the baseline, every one wrong in the candidate: SE 0, McNemar p = 0.0625.
    base = write_run(tmp_path / "a", {"t": _samples("acc", [1] * 5)})
    cand = write_run(tmp_path / "b", {"t": _samples("acc", [0] * 5)})
    for flags in ((), ("--max-drop", "0.5"), ("--strict",)):
        code, report = _report(capsys, base, cand, *flags)
        (row,) = report["comparisons"]
        assert row["delta"] == -1.0 and row["se"] == 0.0 and row["p_value"] == pytest.approx(0.0625)
        assert row["mde"] is None  # no spread, a non-zero difference: not a zero MDE
        assert row["verdict"] == "inconclusive" and report["verdict"] == "inconclusive", flags
        assert code == (3 if "--strict" in flags else 0)


def test_runs_that_agree_document_by_document_are_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_run(tmp_path / "a", {"t": _samples("acc", [1, 0, 1, 1, 0])})
    code, report = _report(capsys, base, base, "--strict")
    assert (code, report["verdict"], report["comparisons"][0]["mde"]) == (0, "unchanged", 0.0)


def _shifted(delta: float, se: float, n: int, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Partial-credit scores whose paired differences have exactly mean `delta` and paired SE `se`."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(n)
    noise = (noise - noise.mean()) / noise.std(ddof=1)
    baseline = rng.uniform(0.3, 0.7, n)
    return baseline, baseline + delta + noise * se * math.sqrt(n)


def test_an_interval_reaching_past_the_tolerance_is_not_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline, candidate = _shifted(-0.0069, 0.00357, 400)
    base = write_run(tmp_path / "a", {"t": _samples("score", baseline)})
    cand = write_run(tmp_path / "b", {"t": _samples("score", candidate)})
    code, report = _report(capsys, base, cand, "--max-drop", "0.01")
    (row,) = report["comparisons"]
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(-0.0139, abs=5e-5), pytest.approx(0.0001, abs=5e-5))
    # The one-sided non-inferiority test of H0: delta ≤ -0.01 does not reject (scipy: p ≈ 0.19).
    p_non_inferior = stats.ttest_1samp(candidate - baseline + 0.01, 0.0, alternative="greater").pvalue
    assert 0.15 < p_non_inferior < 0.25
    assert row["verdict"] == "inconclusive" and report["verdict"] == "inconclusive"
    # Against a tolerance its one-sided bound clears, the same run is unchanged (p of the same test < 0.05).
    assert stats.ttest_1samp(candidate - baseline + 0.02, 0.0, alternative="greater").pvalue < 0.05
    code, report = _report(capsys, base, cand, "--max-drop", "0.02")
    assert report["comparisons"][0]["verdict"] == "unchanged" and code == 0


def test_unchanged_is_decided_by_the_one_sided_bound_not_the_mde() -> None:
    baseline, candidate = _shifted(-0.0069, 0.00357, 400)
    result = statistics.paired_t(baseline, candidate, alpha=0.05)
    assert result.mde < 0.011  # "MDE ≤ tolerance" would have called it unchanged at 0.011
    bound = verdicts.non_inferiority_lower_bound(result, higher_is_better=True)
    assert bound == pytest.approx(stats.t.ppf(0.05, 399) * result.se + result.delta)
    rule = dict(higher_is_better=True, alpha=0.05, margin=None)
    assert verdicts.verdict(result, max_drop=0.011, **rule) == "inconclusive"  # type: ignore[arg-type]
    assert verdicts.verdict(result, max_drop=-bound, **rule) == "unchanged"  # type: ignore[arg-type]


def _log_likelihoods(perplexity: float, n: int, seed: int) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(0.0, 0.3, n)
    return -math.log(perplexity) + noise - noise.mean()


def test_a_perplexity_regression_among_27_rows_is_found_at_the_default_iterations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = [1, 0, 1, 1, 0, 1, 0, 1, 1, 1]
    tasks = {f"t{i:02d}": _samples("acc", same) for i in range(25)}
    base_tasks = {**tasks, "wiki": _samples("perplexity", _log_likelihoods(9.2, 60, 1))}
    cand_tasks = {**tasks, "wiki": _samples("perplexity", _log_likelihoods(25.1, 60, 2))}
    # The 27th row, unchanged: a bootstrap whose p is not below α keeps the requested iterations.
    base_tasks["books"] = cand_tasks["books"] = _samples("perplexity", _log_likelihoods(9.2, 60, 3))
    base = write_run(tmp_path / "a", base_tasks, directions={"perplexity": False})
    cand = write_run(tmp_path / "b", cand_tasks, directions={"perplexity": False})
    code, report = _report(capsys, base, cand)
    rows = {row["task"]: row for row in report["comparisons"]}
    assert len(rows) == 27
    wiki = rows["wiki"]
    assert (wiki["baseline"], wiki["candidate"]) == (pytest.approx(9.2), pytest.approx(25.1))
    assert wiki["p_holm"] < 0.05 and wiki["verdict"] == "regressed"
    assert report["verdict"] == "regressed" and code == 1
    iterations = report["bootstrap"]["iterations"]
    assert report["bootstrap"]["requested"] == 1000 and iterations == statistics.bootstrap_iterations(
        1000, rows=27, alpha=0.05
    )
    assert wiki["iterations"] == iterations and rows["books"]["iterations"] == 1000
    assert rows["books"]["verdict"] == "unchanged"
    assert 27 * 2 / (iterations + 1) < 0.05 / 10  # the smallest p, Holm-adjusted, is a tenth of α
    # With 1000 iterations, as before, no bootstrap row could pass Holm over 27 rows or more.
    assert 27 * 2 / 1001 > 0.05


def test_every_rows_verdict_is_its_holm_p_s(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One task loses 9 documents and gains 1: McNemar p = 0.021 on its own, 0.21 after Holm over 10 rows.
    worse = [1] * 9 + [0] + [1] * 30
    better = [0] * 9 + [1] + [1] * 30
    tasks_a = {"drop": _samples("acc", worse), **{f"t{i}": _samples("acc", [1, 0] * 10) for i in range(9)}}
    tasks_b = {"drop": _samples("acc", better), **{f"t{i}": _samples("acc", [1, 0] * 10) for i in range(9)}}
    code, report = _report(capsys, write_run(tmp_path / "a", tasks_a), write_run(tmp_path / "b", tasks_b))
    drop = next(row for row in report["comparisons"] if row["task"] == "drop")
    assert drop["p_value"] < 0.05 < drop["p_holm"]
    assert drop["verdict"] == "inconclusive" and report["verdict"] == "inconclusive"
    for row in report["comparisons"]:
        assert (row["verdict"] == "regressed") == (row["p_holm"] < 0.05 and row["delta"] < 0)


def test_bootstrap_iterations_grow_with_the_rows_and_never_shrink_a_request() -> None:
    assert statistics.bootstrap_iterations(1000, rows=1, alpha=0.05) == 1000
    assert statistics.bootstrap_iterations(50_000, rows=27, alpha=0.05) == 50_000
    for rows in (5, 26, 27, 100):
        iterations = statistics.bootstrap_iterations(1000, rows=rows, alpha=0.05)
        assert rows * 2 / (iterations + 1) < 0.05 / statistics.HOLM_RESOLUTION


def test_zero_spread_with_a_difference_has_no_minimum_detectable_effect() -> None:
    assert math.isnan(statistics.minimum_detectable_effect(0.0, alpha=0.05, delta=-1.0))
    assert statistics.minimum_detectable_effect(0.0, alpha=0.05, delta=0.0) == 0.0
    shifted = statistics.paired_t(np.array([0.5, 0.75, 1.0]), np.array([0.25, 0.5, 0.75]), alpha=0.05)
    assert math.isnan(shifted.mde) and shifted.p_value == 0.0


def test_a_doubt_from_outside_the_statistics_makes_a_pass_inconclusive_but_keeps_a_regression(
    tmp_path: Path,
) -> None:
    from assay.compare import comparison, outputs
    from assay.runner.results import versus_baseline

    same = write_run(tmp_path / "a", {"t": _samples("acc", [1, 0, 1, 1, 0])})
    run = outputs.read_run(same, label="baseline")
    result = comparison.compare_runs(run, run, comparison.Settings())
    assert result.verdict == "unchanged" and result.doubts == ()
    doubt = "the candidate's scores are not trusted (t: every choice scored alike)."
    doubted = comparison.inconclusive_because(result, doubt)
    assert (doubted.verdict, doubted.doubts) == ("inconclusive", (doubt,))
    status = versus_baseline.as_status(doubted, label="base", strict=True)
    assert status["message"] == f"Inconclusive against base (the gate is strict: this fails it): {doubt}"
    assert status["notes"][0] == f"Doubt: {doubt}"
    regressed = dataclasses.replace(result, verdict="regressed")
    assert comparison.inconclusive_because(regressed, doubt).verdict == "regressed"


def test_spec_gate_iterations_is_parsed_and_bounded() -> None:
    from assay import spec as spec_module
    from assay.errors import UserError

    base = {"model": "dummy", "tasks": ["arc_easy"], "baseline": {"path": "runs/v1"}}
    assert spec_module.parse_spec({**base, "gate": {"iterations": 5000}}).gate.iterations == 5000
    assert spec_module.parse_spec(base).gate.iterations == 1000
    with pytest.raises(UserError, match="spec.gate.iterations must be at most 1,000,000"):
        spec_module.parse_spec({**base, "gate": {"iterations": 2_000_000}})
