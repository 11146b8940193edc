"""Events correlated as client-go's recorder does (`event_correlation`): repeats counted on one
Event, similar ones combined, an object over its rate dropped; on a fake clock."""

from __future__ import annotations

from typing import Any

from assay.operator.kube import kube
from assay.operator.runtime import event_correlation
from assay.operator.runtime.event_correlation import Correlated, EventCorrelator


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _evaluation(name: str = "llama.mmlu", uid: str = "u-1") -> dict[str, Any]:
    return {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
    }


def _event(
    *,
    reason: str = "BackoffLimitExceeded",
    message: str = "Job has reached the limit.",
    at: str = "T0",
    obj: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body = kube.event_body(obj or _evaluation(), type="Warning", reason=reason, message=message)
    return dict(body, firstTimestamp=at, lastTimestamp=at)


def _sent(correlated: Correlated | None) -> Correlated:
    assert correlated is not None, "dropped"
    return correlated


def test_a_repeat_within_the_window_updates_the_first_event_and_raises_its_count() -> None:
    clock = Clock()
    correlator = EventCorrelator(clock=clock)
    first = _sent(correlator.correlate(_event(at="T0")))
    assert not first.update and first.event["count"] == 1
    assert first.event["metadata"]["name"].startswith("llama.mmlu.") and "generateName" not in first.event["metadata"]
    repeats = []
    for i in range(1, 4):
        clock.now += 60
        repeats.append(_sent(correlator.correlate(_event(at=f"T{i}"))))
    assert [(r.update, r.event["count"]) for r in repeats] == [(True, 2), (True, 3), (True, 4)]
    assert {r.event["metadata"]["name"] for r in repeats} == {first.event["metadata"]["name"]}
    assert [(r.event["firstTimestamp"], r.event["lastTimestamp"]) for r in repeats] == [
        ("T0", "T1"),
        ("T0", "T2"),
        ("T0", "T3"),
    ]

    # A different message, type or object is an Event of its own.
    other = _sent(correlator.correlate(_event(message="Pod failed.", at="T4")))
    assert not other.update and other.event["metadata"]["name"] != first.event["metadata"]["name"]

    # Quiet for longer than the window: the next one is a new Event.
    clock.now += event_correlation.WINDOW_SECONDS + 1
    later = _sent(correlator.correlate(_event(at="T9")))
    assert not later.update and later.event["count"] == 1 and later.event["firstTimestamp"] == "T9"
    assert later.event["metadata"]["name"] != first.event["metadata"]["name"]


def test_an_object_gets_a_burst_of_25_then_one_event_each_5_minutes() -> None:
    clock = Clock()
    correlator = EventCorrelator(clock=clock)
    passed = [correlator.correlate(_event(reason=f"R{i % 3}", message="m")) for i in range(30)]
    assert sum(p is not None for p in passed) == 25 and passed[25:] == [None] * 5
    # Another object has its own bucket.
    assert correlator.correlate(_event(obj=_evaluation("other", uid="u-2"))) is not None
    # Repeats count against the rate too: the last one counted before the drops was the 9th of R0.
    assert max(p.event["count"] for p in passed if p is not None) == 9

    clock.now += event_correlation.REFILL_SECONDS / 2
    assert correlator.correlate(_event()) is None
    clock.now += event_correlation.REFILL_SECONDS / 2
    assert correlator.correlate(_event()) is not None
    assert correlator.correlate(_event()) is None


def test_the_10th_different_message_for_one_reason_is_combined_and_counted_on_one_event() -> None:
    clock = Clock()
    correlator = EventCorrelator(clock=clock)
    singles = [_sent(correlator.correlate(_event(message=f"pod {i} failed"))) for i in range(9)]
    assert [s.event["message"] for s in singles] == [f"pod {i} failed" for i in range(9)]
    assert len({s.event["metadata"]["name"] for s in singles}) == 9 and not any(s.update for s in singles)

    combined = [_sent(correlator.correlate(_event(message=f"pod {i} failed"))) for i in range(9, 12)]
    assert [c.event["message"] for c in combined] == [
        f"(combined from similar events): pod {i} failed" for i in range(9, 12)
    ]
    assert [(c.update, c.event["count"]) for c in combined] == [(False, 1), (True, 2), (True, 3)]
    assert len({c.event["metadata"]["name"] for c in combined}) == 1
    assert combined[0].event["metadata"]["name"] not in {s.event["metadata"]["name"] for s in singles}

    # Another reason of the same object is not combined with these.
    alone = _sent(correlator.correlate(_event(reason="Running", message="Runner pods are running.")))
    assert alone.event["message"] == "Runner pods are running."

    # After a quiet window the messages count from none again.
    clock.now += event_correlation.WINDOW_SECONDS + 1
    fresh = _sent(correlator.correlate(_event(message="pod 12 failed")))
    assert fresh.event["message"] == "pod 12 failed" and not fresh.update


def test_what_it_remembers_is_bounded_least_recently_used_first() -> None:
    correlator = EventCorrelator(clock=Clock(), cache_size=2)
    objects = [_evaluation(f"e{i}", uid=f"u{i}") for i in range(3)]
    for obj in objects:
        assert not _sent(correlator.correlate(_event(obj=obj))).update
    # e0 was pushed out by e1 and e2: its repeat is a new Event (and its rate starts anew).
    assert not _sent(correlator.correlate(_event(obj=objects[0]))).update
    # e2 is still remembered.
    assert _sent(correlator.correlate(_event(obj=objects[2]))).update
