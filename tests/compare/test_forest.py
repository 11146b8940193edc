"""`assay compare --plot`: a forest plot, one row per compared metric, in verdict colours."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from assay.cli import main
from assay.compare import forest
from tests.compare.crafted import write_run

SVG = "{http://www.w3.org/2000/svg}"


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    right = [1] * 40 + [0] * 40
    base = {"drop": right, "same": right, "gain": [0] * 40 + [1] * 40}
    cand = {"drop": [0] * 40 + [0] * 40, "same": right, "gain": [1] * 80}
    return tuple(  # type: ignore[return-value]
        write_run(
            tmp_path / side,
            {t: [{"doc_id": i, "doc": f"d{i}", "acc": v} for i, v in enumerate(vs)] for t, vs in runs.items()},
        )
        for side, runs in (("a", base), ("b", cand))
    )


def test_the_svg_has_a_row_per_metric_in_its_verdicts_colour_and_the_tolerance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = _runs(tmp_path)
    out = tmp_path / "forest.svg"
    assert (
        main(["compare", str(base), str(cand), "--max-drop", "0.05", "--plot", str(out)]) == 1
    )  # still the verdict's code
    capsys.readouterr()
    root = ElementTree.parse(out).getroot()
    texts = [element.text or "" for element in root.iter(f"{SVG}text")]
    for task, verdict in (("drop", "regressed"), ("same", "unchanged"), ("gain", "improved")):
        assert f"{task} acc ↑ (none)" in texts
        (numbers,) = [text for text in texts if text.endswith(verdict) and "[" in text]
        colours = {e.get("fill") for e in root.iter(f"{SVG}text") if e.text == numbers}
        assert colours == {forest.COLOURS[verdict]}
    lines = list(root.iter(f"{SVG}line"))
    tolerance = [line for line in lines if line.get("stroke") == "#c0392b" and line.get("stroke-dasharray")]
    zero = [line for line in lines if line.get("stroke") == "#95a5a6"]
    assert len(tolerance) == len(zero) == 3  # each row's -max-drop and 0
    assert any("Verdict: regressed" in text for text in texts)


def test_the_interval_is_drawn_where_its_numbers_say(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cand = _runs(tmp_path)
    out = tmp_path / "forest.svg"
    main(["compare", str(base), str(cand), "--plot", str(out), "--format", "json"])
    capsys.readouterr()
    root = ElementTree.parse(out).getroot()
    dots = list(root.iter(f"{SVG}circle"))[:3]  # the rows' deltas, before the legend
    zero_x = [float(line.get("x1", "nan")) for line in root.iter(f"{SVG}line") if line.get("stroke") == "#95a5a6"]
    drop, same, gain = (float(dot.get("cx", "nan")) for dot in dots)
    assert drop < zero_x[0] and same == pytest.approx(zero_x[1]) and gain > zero_x[2]


def test_a_png_needs_matplotlib_or_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cand = _runs(tmp_path)
    out = tmp_path / "forest.png"
    code = main(["compare", str(base), str(cand), "--plot", str(out)])
    if importlib.util.find_spec("matplotlib") is None:
        assert code == 2 and not out.exists()
        assert (
            capsys.readouterr()
            .err.strip()
            .endswith(
                f"--plot {out}: a PNG needs matplotlib (pip install matplotlib); name a .svg file instead, which needs nothing."
            )
        )
    else:
        assert code == 1 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_another_suffix_is_refused_before_comparing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "a", "b", "--plot", "forest.pdf"]) == 2
    assert "'forest.pdf' is neither a .svg nor a .png file" in capsys.readouterr().err
