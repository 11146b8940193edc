"""The sequential gate's decisions, its state across a restart, and the arguments it refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest

from assay.compare.sequential import GateDecision, MetricBounds, SequentialGate, known_bounds

ACC = {"acc": MetricBounds(0.0, 1.0)}


def paired_differences(n: int, *, true_difference: float, discordant: float, seed: int) -> np.ndarray:
    """Per-document 0/1 differences: a `discordant` share of documents flips, lost or gained."""
    lost, gained = (discordant - true_difference) / 2, (discordant + true_difference) / 2
    u = np.random.default_rng(seed).random(n)
    return np.where(u < lost, -1.0, np.where(u < lost + gained, 1.0, 0.0))


def run_in_chunks(gate: SequentialGate, values: dict[str, np.ndarray], chunk: int) -> GateDecision:
    n = len(next(iter(values.values())))
    for start in range(0, n, chunk):
        gate.observe({name: v[start : start + chunk] for name, v in values.items()})
        decision = gate.decide(exhausted=start + chunk >= n)
        if decision.stop:
            return decision
    raise AssertionError("the last chunk is exhausted, so the loop returns")


def test_a_clear_regression_stops_at_the_first_look_with_its_interval_below_the_drop() -> None:
    gate = SequentialGate(ACC, max_drop=0.02)
    decision = run_in_chunks(gate, {"acc": paired_differences(5000, true_difference=-0.3, discordant=0.4, seed=1)}, 250)
    assert (decision.reason, gate.documents) == ("regressed", 250)
    (look,) = decision.looks
    assert look.upper <= -0.02 and look.lower < look.mean_difference < look.upper
    assert look.n == 250


def test_the_same_model_against_itself_stops_non_inferior() -> None:
    gate = SequentialGate(ACC, max_drop=0.02)
    decision = run_in_chunks(gate, {"acc": np.zeros(5000)}, 250)
    assert decision.reason == "non_inferior" and gate.documents < 5000
    assert decision.looks[0].lower >= -0.02


def test_with_no_drop_tolerated_identical_runs_never_prove_non_inferiority() -> None:
    """Margin 0 needs evidence that the candidate is better; identical scores give none."""
    gate = SequentialGate(ACC, max_drop=0.0)
    assert run_in_chunks(gate, {"acc": np.zeros(2000)}, 250).reason == "exhausted"


def test_a_difference_at_the_boundary_runs_out_of_documents() -> None:
    gate = SequentialGate(ACC, max_drop=0.02)
    values = paired_differences(3000, true_difference=-0.02, discordant=0.1, seed=3)
    decision = run_in_chunks(gate, {"acc": values}, 150)
    assert decision.reason == "exhausted" and gate.documents == 3000
    assert decision.looks[0].lower < -0.02 < decision.looks[0].upper


def test_a_lower_is_better_metric_is_turned_so_that_positive_is_better() -> None:
    """Perplexity-like: the candidate's values rose, so its turned difference is negative."""
    gate = SequentialGate({"loss": MetricBounds(0.0, 2.0, higher_is_better=False)}, max_drop=0.05)
    gate.observe({"loss": np.full(400, 0.6)})
    decision = gate.decide()
    assert decision.reason == "regressed"
    assert decision.looks[0].mean_difference == pytest.approx(-0.6)


def test_one_regressed_metric_stops_the_task_and_all_must_pass_for_non_inferior() -> None:
    metrics = {"acc": MetricBounds(0, 1), "acc_norm": MetricBounds(0, 1)}
    gate = SequentialGate(metrics, max_drop=0.02)
    gate.observe(
        {"acc": np.zeros(1500), "acc_norm": paired_differences(1500, true_difference=0, discordant=0.6, seed=4)}
    )
    first = gate.decide()
    assert first.reason == "continue"  # acc is clear, acc_norm's noise is not yet
    assert first.looks[0].lower >= -0.02 > first.looks[1].lower
    gate.observe({"acc": np.zeros(300), "acc_norm": np.full(300, -1.0)})
    assert gate.decide().reason == "regressed"


def test_a_drop_per_metric() -> None:
    metrics = {"acc": MetricBounds(0, 1), "exact_match": MetricBounds(0, 1)}
    gate = SequentialGate(metrics, max_drop={"acc": 0.0, "exact_match": 0.1})
    gate.observe({"acc": np.zeros(800), "exact_match": np.zeros(800)})
    looks = gate.decide().looks
    assert looks[0].lower < 0.0 and looks[1].lower >= -0.1


def test_without_a_baseline_it_stops_when_the_interval_is_as_narrow_as_asked() -> None:
    gate = SequentialGate(ACC, target_half_width=0.05)
    scores = (np.random.default_rng(5).random(20000) < 0.7).astype(float)
    decision = run_in_chunks(gate, {"acc": scores}, 200)
    assert decision.reason == "precise" and gate.documents < 20000
    (look,) = decision.looks
    assert (look.upper - look.lower) / 2 <= 0.05 and look.lower < 0.7 < look.upper
    assert look.mean_difference == pytest.approx(scores[: gate.documents].mean())


def test_a_stopped_gate_resumes_from_its_json_state_with_the_same_decisions() -> None:
    metrics = {"acc": MetricBounds(0, 1), "f1": MetricBounds(0, 1, higher_is_better=True)}
    values = {
        "acc": paired_differences(2000, true_difference=-0.01, discordant=0.2, seed=6),
        "f1": np.random.default_rng(7).uniform(-0.5, 0.5, 2000),
    }
    whole = SequentialGate(metrics, alpha=0.1, max_drop={"acc": 0.03, "f1": 0.05}, target_half_width=0.2)
    half = SequentialGate(metrics, alpha=0.1, max_drop={"acc": 0.03, "f1": 0.05}, target_half_width=0.2)
    whole.observe(values)
    half.observe({name: v[:1000] for name, v in values.items()})
    resumed = SequentialGate.from_state(json.loads(json.dumps(half.state())))
    assert resumed.decide() == half.decide()
    resumed.observe({name: v[1000:] for name, v in values.items()})
    assert resumed.decide() == whole.decide()
    assert resumed.state() == whole.state()


def test_exhausted_stops_whatever_the_sequences_say() -> None:
    gate = SequentialGate(ACC, max_drop=0.02)
    assert gate.decide() == GateDecision(False, "continue", gate.looks())
    gate.observe({"acc": np.full(500, -1.0)})
    assert gate.decide().reason == "regressed"
    assert gate.decide(exhausted=True).reason == "exhausted"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"metrics": {}}, "at least one metric"),
        ({"metrics": {"acc": MetricBounds(1, 1)}, "max_drop": 0.0}, "not a finite range"),
        ({"metrics": ACC, "max_drop": 0.0, "alpha": 1.0}, "alpha"),
        ({"metrics": ACC}, "max_drop .* or target_half_width"),
        ({"metrics": ACC, "max_drop": -0.1}, "max_drop -0.1"),
        ({"metrics": ACC, "max_drop": {"other": 0.1}}, "max_drop None"),
        ({"metrics": ACC, "target_half_width": 0.0}, "target_half_width"),
    ],
)
def test_arguments_that_void_the_guarantee_are_refused(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SequentialGate(**arguments)  # type: ignore[arg-type]


def test_values_outside_the_declared_range_are_refused() -> None:
    gate = SequentialGate(ACC, max_drop=0.02)
    with pytest.raises(ValueError, match=r"acc: value 1.5 lies outside \[-1.0, 1.0\]"):
        gate.observe({"acc": [0.0, 1.5]})
    with pytest.raises(ValueError, match="outside"):
        gate.observe({"acc": [float("nan")]})
    with pytest.raises(ValueError, match="exactly the metrics"):
        gate.observe({"f1": [0.0]})
    assert gate.documents == 0
    precise = SequentialGate(ACC, target_half_width=0.1)
    with pytest.raises(ValueError, match=r"outside \[0.0, 1.0\]"):
        precise.observe({"acc": [-0.5]})


def test_only_metrics_known_to_be_zero_or_one_have_known_bounds() -> None:
    assert known_bounds("acc") == MetricBounds(0.0, 1.0, True)
    assert known_bounds("exact_match", higher_is_better=True) == MetricBounds(0.0, 1.0)
    assert known_bounds("perplexity") is None and known_bounds("bleu") is None and known_bounds("f1") is None
