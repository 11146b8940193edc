"""`spec.gate.sequential` and `spec.stopAt`: parsed into the run's sequential settings, written back alike."""

from __future__ import annotations

import pytest

from assay.errors import UserError
from assay.run_options import SequentialSettings
from assay.spec import parse_spec

BASE = {"model": "hf", "tasks": ["arc_easy"], "modelArgs": {"pretrained": "m"}}


def test_a_sequential_gate_makes_a_sequential_run_with_the_gates_tolerances() -> None:
    spec = parse_spec(
        {
            **BASE,
            "seed": 5,
            "baseline": {"evaluation": "v1"},
            "gate": {"sequential": True, "maxDrop": 0.02, "maxDropFor": {"mmlu*:acc": 0.05}, "alpha": 0.1},
        }
    )
    assert spec.run_options().sequential == SequentialSettings(
        max_drop=0.02, max_drop_for={"mmlu*:acc": 0.05}, alpha=0.1, seed=5
    )
    assert parse_spec(spec.to_dict()) == spec


def test_stop_at_alone_stops_at_a_precision() -> None:
    spec = parse_spec({**BASE, "stopAt": {"ciHalfWidth": 0.02}})
    assert spec.run_options().sequential == SequentialSettings(target_half_width=0.02)
    assert spec.to_dict()["stopAt"] == {"ciHalfWidth": 0.02}
    assert parse_spec(spec.to_dict()) == spec


def test_a_gate_without_sequential_is_an_ordinary_run() -> None:
    spec = parse_spec({**BASE, "baseline": {"evaluation": "v1"}, "gate": {"maxDrop": 0.02}})
    assert spec.run_options().sequential is None
    assert "sequential" not in spec.to_dict()["gate"]


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"stopAt": {"ciHalfWidth": 0}}, "spec.stopAt.ciHalfWidth must be a half-width above 0 and below 1, not 0."),
        ({"stopAt": {}}, "spec.stopAt.ciHalfWidth must be a half-width above 0 and below 1, not None."),
        ({"gate": {"sequential": True}}, "spec.gate needs spec.baseline: name the run to compare with."),
    ],
)
def test_bad_values_are_refused_in_one_sentence(fields: dict, message: str) -> None:
    with pytest.raises(UserError) as refused:
        parse_spec({**BASE, **fields})
    assert str(refused.value) == message
