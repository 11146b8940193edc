"""A comparison with a run whose sentinels failed, on either side, never passes the gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.cli import main
from assay.compare import comparison, outputs, verdicts
from tests.compare.crafted import write_run

REASON = "100% of 200 documents scored every choice alike: the log-likelihoods do not discriminate"


def _docs(hits: list[int]) -> list[dict[str, object]]:
    return [{"doc_id": i, "doc": f"d{i}", "acc": hit} for i, hit in enumerate(hits)]


def _untrusted(results_path: Path) -> None:
    """What `assay run` adds to a results JSON whose sentinels failed."""
    results = json.loads(results_path.read_text())
    checks = {"degenerate": {"passed": False, "reason": REASON}}
    results["sentinels"] = {"trusted": False, "tasks": {"t": {"trusted": False, "checks": checks}}}
    results_path.write_text(json.dumps(results))


def _compare(base: Path, cand: Path) -> comparison.Comparison:
    return comparison.compare_runs(
        outputs.read_run(base, label="baseline"), outputs.read_run(cand, label="candidate"), comparison.Settings()
    )


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_an_unchanged_comparison_with_an_untrusted_run_is_inconclusive(tmp_path: Path, side: str) -> None:
    hits = [i % 2 for i in range(200)]
    base, cand = write_run(tmp_path / "a", {"t": _docs(hits)}), write_run(tmp_path / "b", {"t": _docs(hits)})
    assert _compare(base, cand).verdict != verdicts.INCONCLUSIVE  # the same scores: no doubt while both are trusted
    _untrusted(base if side == "baseline" else cand)
    result = _compare(base, cand)
    assert result.verdict == verdicts.INCONCLUSIVE
    assert result.doubts == (f"The {side}'s scores are not trusted: t: {REASON}.",)
    assert not any("not trusted" in note for note in result.notes)  # a doubt, said once


def test_a_regression_stays_a_regression_and_the_cli_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_run(tmp_path / "a", {"t": _docs([1] * 200)})
    cand = write_run(tmp_path / "b", {"t": _docs([0] * 200)})
    _untrusted(cand)
    assert _compare(base, cand).verdict == verdicts.REGRESSED  # worse news than inconclusive: kept
    same = write_run(tmp_path / "c", {"t": _docs([1] * 200)})
    _untrusted(same)
    assert main(["compare", str(base), str(same), "--strict", "--format", "json"]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == verdicts.INCONCLUSIVE and any(REASON in doubt for doubt in report["doubts"])


def test_the_runners_status_names_the_untrusted_run_not_too_few_documents(tmp_path: Path) -> None:
    from assay.runner.results import versus_baseline

    hits = [i % 2 for i in range(200)]
    base, cand = write_run(tmp_path / "a", {"t": _docs(hits)}), write_run(tmp_path / "b", {"t": _docs(hits)})
    _untrusted(cand)
    status = versus_baseline.as_status(_compare(base, cand), label="base-eval", strict=True)
    assert status["verdict"] == "inconclusive"
    assert status["message"] == (
        f"Inconclusive against base-eval (the gate is strict: this fails it): "
        f"The candidate's scores are not trusted: t: {REASON}."
    )
    assert status["notes"][0].startswith("Doubt: The candidate's scores are not trusted")
