"""The baseline Evaluation as the operator read it when it decided the run (ASSAY_BASELINE_EVALUATION).

A runner may read no Evaluation; its Job carries the baseline's name, phase, output volume
and results folder, and `versus_baseline.locate` finds the folder from that as it did from a
read. Real folders on a temporary output volume.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.runner.results import versus_baseline
from assay.spec import ENV_BASELINE_EVALUATION, parse_spec

SPEC = parse_spec(
    {"model": "dummy", "tasks": ["arc_easy"], "output": {"pvc": "results"}, "baseline": {"evaluation": "base"}}
)


def _env(**status: str) -> dict[str, str]:
    view = {"metadata": {"name": "base"}, "spec": {"output": {"pvc": "results"}}, "status": status}
    return {ENV_BASELINE_EVALUATION: json.dumps(view)}


def test_a_succeeded_baseline_is_found_on_the_volume(tmp_path: Path) -> None:
    (tmp_path / "base" / "g1").mkdir(parents=True)
    read = versus_baseline.decided_view(_env(phase="Succeeded", outputDir="/output/base/g1"))
    assert versus_baseline.locate(SPEC, read_evaluation=read, output_root=tmp_path) == tmp_path / "base" / "g1"


def test_a_baseline_still_running_when_the_run_was_decided_is_one_sentence(tmp_path: Path) -> None:
    read = versus_baseline.decided_view(_env(phase="Running"))
    with pytest.raises(versus_baseline.BaselineUnavailable, match=r"has not succeeded \(it is Running\)"):
        versus_baseline.locate(SPEC, read_evaluation=read, output_root=tmp_path)


@pytest.mark.parametrize("raw", ["", "not json", json.dumps({"metadata": {"name": "another"}})])
def test_a_baseline_the_operator_did_not_find_does_not_exist(tmp_path: Path, raw: str) -> None:
    read = versus_baseline.decided_view({ENV_BASELINE_EVALUATION: raw})
    with pytest.raises(
        versus_baseline.BaselineUnavailable, match="^The baseline Evaluation base cannot be used: it does not exist.$"
    ):
        versus_baseline.locate(SPEC, read_evaluation=read, output_root=tmp_path)


def test_without_the_variable_the_sink_reads_it_as_before() -> None:
    """A Job of an older operator has no such variable: its runner's own Role lets it read the baseline."""
    assert versus_baseline.decided_view({}) is None
