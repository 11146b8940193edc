"""Documents pair on doc_hash; what cannot be paired is counted, and bad input is one sentence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.cli import main
from tests.compare.crafted import write_run


def _samples(values: list[int], *, ids: list[int] | None = None, docs: list[str] | None = None) -> list[dict]:
    ids = ids if ids is not None else list(range(len(values)))
    docs = docs if docs is not None else [f"d{i}" for i in range(len(values))]
    return [{"doc_id": i, "doc": d, "acc": v} for i, d, v in zip(ids, docs, values, strict=False)]


def _report(capsys: pytest.CaptureFixture[str], baseline: Path, candidate: Path, *flags: str) -> tuple[int, dict]:
    code = main(["compare", str(baseline), str(candidate), "--format", "json", *flags])
    return code, json.loads(capsys.readouterr().out)


def test_documents_pair_on_doc_hash_whatever_their_doc_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_run(tmp_path / "a", {"t": _samples([1, 0, 1, 1], docs=["w", "x", "y", "z"])})
    # The candidate saw the same documents in reverse order, and got exactly the same scores.
    cand = write_run(tmp_path / "b", {"t": _samples([1, 1, 0, 1], docs=["z", "y", "x", "w"])})
    code, report = _report(capsys, base, cand)
    row = report["comparisons"][0]
    assert (row["n"], row["delta"], row["p_value"], row["flips"]) == (4, 0.0, 1.0, {"gained": 0, "lost": 0})
    assert report["tasks"][0]["doc_id_mismatches"] == 4 and code == 0


def test_documents_in_one_run_only_are_counted_and_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_run(tmp_path / "a", {"t": _samples([1, 1, 1, 0], docs=["a", "b", "c", "only-base"])})
    cand = write_run(tmp_path / "b", {"t": _samples([1, 0, 1, 1, 1], docs=["a", "b", "c", "n1", "n2"])})
    _, report = _report(capsys, base, cand)
    assert report["tasks"][0] | {"task": "t"} == {
        "task": "t",
        "paired": 3,
        "only_baseline": 1,
        "only_candidate": 2,
        "doc_id_mismatches": 0,
        "prompt_differences": 0,
    }
    assert report["comparisons"][0]["n"] == 3 and report["comparisons"][0]["flips"] == {"gained": 0, "lost": 1}
    assert any("left out 1 in the baseline only and 2 in the candidate only" in note for note in report["notes"])


def test_duplicate_documents_pair_occurrence_by_occurrence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_run(tmp_path / "a", {"t": _samples([1, 0, 1], docs=["same", "same", "other"])})
    cand = write_run(tmp_path / "b", {"t": _samples([1, 1, 1], docs=["same", "same", "other"])})
    _, report = _report(capsys, base, cand)
    assert report["comparisons"][0]["n"] == 3 and report["comparisons"][0]["flips"]["gained"] == 1


def test_a_results_json_can_stand_for_its_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_run(tmp_path / "a", {"t": _samples([1, 0, 1])})
    code, report = _report(capsys, base, base.parent.parent)
    assert code == 0 and report["comparisons"][0]["p_value"] == 1.0


def test_one_document_is_inconclusive_not_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_run(tmp_path / "a", {"t": [{"doc_id": 0, "doc": "x", "score": 0.25}]})
    cand = write_run(tmp_path / "b", {"t": [{"doc_id": 0, "doc": "x", "score": 0.75}]})
    code, report = _report(capsys, base, cand, "--strict")
    row = report["comparisons"][0]
    assert (row["test"], row["n"], row["delta"], row["se"], row["p_value"], row["verdict"]) == (
        "paired-t",
        1,
        0.5,
        None,
        None,
        "inconclusive",
    )
    assert code == 3


@pytest.mark.parametrize(
    "make",
    [
        lambda tmp: (
            write_run(tmp / "a", {"t": _samples([1, 0])}),
            write_run(tmp / "b", {"t": _samples([1, 0], docs=["p", "q"])}),
        ),
        lambda tmp: (write_run(tmp / "a", {"t": _samples([1, 0])}), write_run(tmp / "b", {"u": _samples([1, 0])})),
        lambda tmp: (write_run(tmp / "a", {"t": _samples([1, 0])}), tmp / "missing"),
        lambda tmp: (write_run(tmp / "a", {"t": _samples([1, 0])}), (tmp / "empty").mkdir() or tmp / "empty"),
        lambda tmp: (
            write_run(tmp / "a", {"t": _samples([1, 0])}),
            (tmp / "x.json").write_text("[1") and tmp / "x.json",
        ),
    ],
)
def test_bad_input_is_exit_2_with_one_sentence(make, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline, candidate = make(tmp_path)
    assert main(["compare", str(baseline), str(candidate)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("assay: error: ") and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "only-one"],
        ["compare", "--plan", "a", "b"],
        ["compare", "a", "b", "--max-drop", "acc=x"],
        ["compare", "a", "b", "--alpha", "0.7"],
    ],
)
def test_bad_flags_are_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_assay_help_lists_compare() -> None:
    from assay.cli import build_parser

    assert "Compare two runs" in build_parser().format_help()
