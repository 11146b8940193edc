"""The Event poster: Events leave the deciding thread at once and are sent later, in order;
repeats raise the count of one Event on the API server (`event_correlation`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from assay.operator.runtime import events
from tests.operator.local_apiserver import (
    LocalApiServer,
    api,  # noqa: F401  (fixture)
)

EVALUATION = {
    "apiVersion": "assay.dev/v1alpha1",
    "kind": "Evaluation",
    "metadata": {"name": "llama-3.1-8b.mmlu", "namespace": "team-a", "uid": "u-1"},
}


class SlowApi:
    """Stands in for the API server's Event endpoint: records bodies, and holds each send until let go."""

    def __init__(self) -> None:
        self.sent: list[Mapping[str, Any]] = []
        self.updates: list[bool] = []
        self.release = threading.Event()

    def send(self, event: Mapping[str, Any], *, update: bool) -> None:
        self.release.wait(10)
        if event["reason"] == "Broken":
            raise ConnectionError("connection reset")
        self.sent.append(event)
        self.updates.append(update)


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
    assert first["involvedObject"] == {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "name": "llama-3.1-8b.mmlu",
        "namespace": "team-a",
        "uid": "u-1",
    }
    assert first["metadata"]["namespace"] == "team-a" and first["metadata"]["name"].startswith("llama-3.1-8b.mmlu.")
    assert first["message"] == "JobCreated." and first["type"] == "Normal" and first["count"] == 1
    assert api.updates == [False, False, False]


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


def test_an_object_over_its_rate_has_its_events_dropped_and_counted() -> None:
    api = SlowApi()
    api.release.set()
    poster = events.EventPoster(send=api.send).start()
    for i in range(30):
        poster.post(EVALUATION, type="Warning", reason="Failing", message=f"attempt {i}")
    assert poster.close(timeout=10)
    assert poster.dropped == 30 - 25
    assert len(api.sent) == 25


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_repeats_raise_the_count_of_one_event_on_the_api_server(api: LocalApiServer) -> None:
    def stored() -> list[dict[str, Any]]:
        return [o for p, o in api.objects.items() if "/events/" in p]

    poster = events.EventPoster().start()  # kube.send_event, over HTTP to the local API server
    for _ in range(3):
        poster.post(EVALUATION, type="Warning", reason="BackoffLimitExceeded", message="Job has reached the limit.")
    poster.post(EVALUATION, type="Normal", reason="Running", message="Runner pods are running.")
    _until(lambda: len(stored()) == 2 and max(e["count"] for e in stored()) == 3)
    backoff = next(e for e in stored() if e["reason"] == "BackoffLimitExceeded")
    assert backoff["metadata"]["name"].startswith("llama-3.1-8b.mmlu.")
    assert backoff["involvedObject"]["uid"] == "u-1" and backoff["message"] == "Job has reached the limit."
    assert [m for m, p in api.requests if "/events" in p] == ["POST", "PATCH", "PATCH", "POST"]

    # The Event expired on the API server (they are kept an hour): the next repeat creates it again, counted on.
    path = f"/api/v1/namespaces/team-a/events/{backoff['metadata']['name']}"
    del api.objects[path]
    poster.post(EVALUATION, type="Warning", reason="BackoffLimitExceeded", message="Job has reached the limit.")
    assert poster.close(timeout=10)
    assert api.objects[path]["count"] == 4
    assert [m for m, p in api.requests if "/events" in p][-2:] == ["PATCH", "POST"]
