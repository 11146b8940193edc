"""The Event poster: Events leave the deciding thread at once and are sent later, in order."""

from __future__ import annotations

import threading
from typing import Any, Mapping

from assay.operator import events

EVALUATION = {"apiVersion": "assay.dev/v1alpha1", "kind": "Evaluation",
              "metadata": {"name": "llama-3.1-8b.mmlu", "namespace": "team-a", "uid": "u-1"}}  # fmt: skip


class SlowApi:
    """Stands in for the API server's Event endpoint: records bodies, and holds each send until let go."""

    def __init__(self) -> None:
        self.sent: list[Mapping[str, Any]] = []
        self.release = threading.Event()

    def send(self, event: Mapping[str, Any]) -> None:
        self.release.wait(10)
        if event["reason"] == "Broken":
            raise ConnectionError("connection reset")
        self.sent.append(event)


def test_post_returns_before_the_event_is_sent_and_events_go_in_order() -> None:
    api = SlowApi()
    poster = events.EventPoster(send=api.send).start()
    for reason in ("JobCreated", "Broken", "Running", "Succeeded"):
        poster.post(EVALUATION, type="Normal", reason=reason, message=f"{reason}.")
    assert api.sent == []  # the caller was not held by the API
    api.release.set()
    assert poster.close(timeout=10)
    # A failed send is logged and the rest still go.
    assert [e["reason"] for e in api.sent] == ["JobCreated", "Running", "Succeeded"]
    first = api.sent[0]
    assert first["involvedObject"] == {"apiVersion": "assay.dev/v1alpha1", "kind": "Evaluation",
                                       "name": "llama-3.1-8b.mmlu", "namespace": "team-a", "uid": "u-1"}  # fmt: skip
    assert first["metadata"] == {"generateName": "llama-3.1-8b.mmlu.", "namespace": "team-a"}
    assert first["message"] == "JobCreated." and first["type"] == "Normal" and first["count"] == 1


def test_a_full_queue_drops_new_events_and_counts_them() -> None:
    api = SlowApi()
    poster = events.EventPoster(send=api.send, capacity=3)  # not started: nothing is taken off the queue
    for i in range(5):
        poster.post(EVALUATION, type="Normal", reason=f"R{i}", message="m")
    assert poster.dropped == 2
    api.release.set()
    poster.start()
    assert poster.close(timeout=10)
    assert [e["reason"] for e in api.sent] == ["R0", "R1", "R2"]


def test_close_gives_up_after_its_timeout_while_the_api_hangs() -> None:
    api = SlowApi()  # never released
    poster = events.EventPoster(send=api.send).start()
    poster.post(EVALUATION, type="Normal", reason="JobCreated", message="m")
    assert poster.close(timeout=0.2) is False
    api.release.set()
