"""What `assay apply --local` shows its reader: lm-eval's table and where the results went
(stderr), while stdout stays the status documents, YAML a script can read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from assay.operator import local
from assay.runner.data import importer

REPO = Path(__file__).resolve().parents[2]
MANIFEST = """
apiVersion: assay.dev/v1alpha1
kind: Evaluation
metadata: {name: sample-run}
spec: {model: dummy, tasks: [arc_easy], limit: 6, seed: 3, resources: {gpusPerNode: 0}}
"""


def test_apply_local_prints_the_table_and_where_the_results_were_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    datasets = tmp_path / "datasets"
    importer.import_benchmarks(REPO / "examples" / "sample-data", datasets, ["arc"])  # the repository's own sample
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(datasets))
    manifest = tmp_path / "eval.yaml"
    manifest.write_text(MANIFEST)

    assert local.main(["-f", str(manifest), "--local", "--output-dir", str(tmp_path / "out")]) == 0

    captured = capsys.readouterr()
    [document] = yaml.safe_load_all(captured.out)  # stdout: only the status document
    status = document["status"]
    assert status["phase"] == "Succeeded"
    accuracy = status["results"]["arc_easy"]["acc,none"]["value"]
    row = re.search(r"^\|arc_easy\s*\|\s*1\|none\s*\|\s*0\|acc\s*\|↑\s*\|\s*([0-9.]+)\|", captured.err, re.M)
    assert row is not None, captured.err
    assert float(row.group(1)) == pytest.approx(accuracy, abs=5e-5)  # the table shows the status's score
    written = tmp_path / "out" / "sample-run"
    assert f"sample-run: Succeeded, results written to {written}" in captured.err
    assert list(written.glob("*/results_*.json")), "the line names a folder without the results"
