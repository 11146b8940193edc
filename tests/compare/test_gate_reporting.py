"""What a comparison reports about the rows it could not judge: a direction from the registry or a
refusal, non-finite values as null, every row left out named, and errors as one sentence."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from assay.cli import main
from assay.compare import directions
from assay.extras import install_command
from assay.runner.scoring.metrics import METRICS
from tests.compare.crafted import write_run


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _report(capsys: pytest.CaptureFixture[str], baseline: Path, candidate: Path, *flags: str) -> tuple[int, Any]:
    code = main(["compare", str(baseline), str(candidate), "--format", "json", *flags])
    return code, _strict_json(capsys.readouterr().out)


def _samples(metric: str, values: list[Any]) -> list[dict[str, Any]]:
    return [{"doc_id": i, "doc": f"d{i}", metric: v} for i, v in enumerate(values)]


def _without_directions(results: Path) -> Path:
    data = json.loads(results.read_text())
    del data["higher_is_better"]
    results.write_text(json.dumps(data))
    return results


def test_the_registered_directions_are_the_engines() -> None:
    assert dict(directions.REGISTERED) == {name: METRICS.get(name).higher_is_better for name in METRICS.names()}


def test_a_results_file_without_directions_takes_lm_evals_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(3)
    base = _without_directions(
        write_run(tmp_path / "a", {"wiki": _samples("perplexity", list(-2.2 + rng.normal(0, 0.1, 80)))})
    )
    cand = _without_directions(
        write_run(tmp_path / "b", {"wiki": _samples("perplexity", list(-3.2 + rng.normal(0, 0.1, 80)))})
    )
    code, report = _report(capsys, base, cand)
    (row,) = report["comparisons"]
    assert row["higher_is_better"] is False and row["delta"] > 0  # perplexity rose: worse
    assert row["verdict"] == "regressed" and code == 1


def test_a_task_config_names_a_custom_metrics_direction_and_an_unknown_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = [{"doc_id": i, "doc": f"d{i}", "errors": float(i % 3), "mystery": 0.5} for i in range(20)]
    worse = [{**s, "errors": s["errors"] + 1.0} for s in samples]
    runs = []
    for folder, rows in (("a", samples), ("b", worse)):
        path = _without_directions(write_run(tmp_path / folder, {"t": rows}))
        data = json.loads(path.read_text())
        data["configs"]["t"]["metric_list"] = [{"metric": "errors", "higher_is_better": False}, {"metric": "mystery"}]
        path.write_text(json.dumps(data))
        runs.append(path)
    code, report = _report(capsys, *runs)
    assert [(r["metric"], r["higher_is_better"], r["verdict"]) for r in report["comparisons"]] == [
        ("errors", False, "regressed")
    ]
    assert any(n.startswith("t mystery (none): left out, neither results file says") for n in report["notes"])


def test_a_minus_infinite_log_likelihood_is_null_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lls = [-2.0, -2.5, -1.5, -2.2] * 5
    base = write_run(tmp_path / "a", {"wiki": _samples("perplexity", lls)}, directions={"perplexity": False})
    cand_lls = [float("-inf"), *lls[1:]]
    cand = write_run(tmp_path / "b", {"wiki": _samples("perplexity", cand_lls)}, directions={"perplexity": False})
    code, report = _report(capsys, base, cand, "--strict")
    (row,) = report["comparisons"]
    assert row["candidate"] is None and row["delta"] is None and row["p_value"] is None
    assert row["verdict"] == "inconclusive" and code == 3
    assert any("wiki perplexity (none): not finite, the candidate's is inf" in n for n in report["notes"])
    main(["compare", str(base), str(cand)])
    assert "N/A" in capsys.readouterr().out  # the table too


def test_a_nan_document_score_is_named_and_inconclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = [0.25, 0.5, 0.75, 1.0] * 5
    base = write_run(tmp_path / "a", {"t": _samples("score", values)})
    cand = write_run(tmp_path / "b", {"t": _samples("score", [float("nan"), *values[1:]])})
    code, report = _report(capsys, base, cand)
    (row,) = report["comparisons"]
    assert row["candidate"] is None and row["verdict"] == "inconclusive"
    assert any(n.startswith("t score (none): not finite, the candidate's is nan") for n in report["notes"])


def test_a_metric_in_one_run_only_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_run(tmp_path / "a", {"t": [{"doc_id": i, "doc": f"d{i}", "acc": 1, "f1x": 0.5} for i in range(6)]})
    cand = write_run(tmp_path / "b", {"t": [{"doc_id": i, "doc": f"d{i}", "acc": 1} for i in range(6)]})
    _, report = _report(capsys, base, cand)
    assert [r["metric"] for r in report["comparisons"]] == ["acc"]
    assert "t f1x (none): left out, reported by the baseline only." in report["notes"]


def test_nothing_to_compare_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_run(tmp_path / "a", {"arc": _samples("acc", [1, 0])})
    cand = write_run(tmp_path / "b", {"mmlu": _samples("acc", [1, 0])})
    assert main(["compare", str(base), str(cand)]) == 2
    err = capsys.readouterr().err
    assert "Nothing to compare: baseline and candidate: they have no task in common." in err
    assert "In one run only, left out: arc, mmlu." in err and "Traceback" not in err


def test_a_perplexity_that_overflows_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # exp(1000) overflows a float: the comparison fails, in one sentence, exit 2.
    base = write_run(tmp_path / "a", {"wiki": _samples("perplexity", [-2.0, -3.0, -2.5])})
    cand = write_run(tmp_path / "b", {"wiki": _samples("perplexity", [-1000.0, -1001.0, -999.0])})
    assert main(["compare", str(base), str(cand)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "The runs could not be compared: the statistics failed on extreme values (OverflowError); "
        "a score is probably infinite or huge (a -inf log-likelihood?)."
    )
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_bleu_without_sacrebleu_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    items = [[["the cat sat"], "the cat sat"], [["a dog ran"], "a dog"]]
    base = write_run(tmp_path / "a", {"wmt": _samples("bleu", items)})
    cand = write_run(tmp_path / "b", {"wmt": _samples("bleu", items[::-1])})
    monkeypatch.setitem(sys.modules, "sacrebleu", None)  # what an install without the extra imports
    assert main(["compare", str(base), str(cand)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"Comparing BLEU, chrF or TER needs the 'metrics' extra: {install_command('metrics')}.")
    assert "Traceback" not in err
