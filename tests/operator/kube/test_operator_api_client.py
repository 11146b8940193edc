"""The operator's one API client (`api_client`) over real HTTP (tests/operator/local_apiserver.py):
errors read by their Status, Retry-After waited out (bounded), the rate limit's token bucket,
and leader election's Lease calls on the same session."""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest

from assay.errors import UserError
from assay.kube import api_errors
from assay.kube import client as kube_client
from assay.operator.kube import api_client, kube, leases, rate_limit
from tests.operator.helm_chart import needs_helm
from tests.operator.local_apiserver import (
    LocalApiServer,
    api,  # noqa: F401  (fixture)
    status,
)

CONFIG_MAPS = "/api/v1/namespaces/ns/configmaps"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
NOW = datetime.datetime(2025, 5, 1, 12, 0, 0, 250000, tzinfo=datetime.timezone.utc)


def _config_map(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"}, "data": {"k": "v"}}


class Clock:
    """A monotonic clock that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


# -- errors by the Status object ----------------------------------------------------------


def test_an_error_carries_the_status_code_reason_message_and_details(api: LocalApiServer) -> None:
    assert kube.create(_config_map("a")) is True
    with pytest.raises(api_errors.ApiError) as raised:
        api_client.request("POST", CONFIG_MAPS, body=_config_map("a"))
    error = raised.value
    assert (error.code, error.reason) == (409, api_errors.ALREADY_EXISTS)
    assert error.message == "configmaps 'a' already exists" and str(error).startswith("409 AlreadyExists: ")
    assert kube.create(_config_map("a")) is False  # AlreadyExists: made already, which is success too

    with pytest.raises(api_errors.ApiError) as raised:
        api_client.request("GET", f"{CONFIG_MAPS}/none")
    assert (raised.value.code, raised.value.reason) == (404, api_errors.NOT_FOUND)

    terminating = {
        **status(403, "Forbidden", "unable to create new content in namespace ns because it is being terminated")[1],
        "details": {
            "name": "b",
            "kind": "configmaps",
            "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}],
        },
    }
    api.refuse = lambda path, body: (403, terminating)
    with pytest.raises(api_errors.ApiError) as raised:
        api_client.request("POST", CONFIG_MAPS, body=_config_map("b"))
    assert raised.value.reason == api_errors.FORBIDDEN and raised.value.details["name"] == "b"
    assert raised.value.has_cause(api_errors.NAMESPACE_TERMINATING)
    assert kube.create(_config_map("b")) is False  # decided on the cause's reason, not on the words


def test_an_answer_that_is_no_status_gets_its_codes_reason() -> None:
    proxy = api_errors.from_answer(503, b"<html>Service Unavailable</html>")
    assert (proxy.code, proxy.reason, proxy.message) == (503, api_errors.SERVICE_UNAVAILABLE, "")
    assert proxy.body == "<html>Service Unavailable</html>"
    blank = api_errors.from_answer(409, b'{"kind": "Status", "reason": "", "message": "m"}')
    assert (blank.reason, blank.message) == (api_errors.CONFLICT, "m")
    assert api_errors.from_answer(418, b"").reason == ""


# -- Retry-After --------------------------------------------------------------------------


def test_a_429_with_retry_after_is_waited_out_and_asked_again(api: LocalApiServer) -> None:
    kube.create(_config_map("a"))
    api.requests.clear()
    api.overloaded = [(429, "1")]
    assert kube.get("ConfigMap", "v1", namespace="ns", name="a") is not None
    assert api.sleeps == [1.0]  # recorded, not slept
    assert api.requests == [("GET", f"{CONFIG_MAPS}/a")] * 2

    api.overloaded = [(503, "2"), (429, "0")]
    assert kube.create(_config_map("b")) is True
    assert api.sleeps == [1.0, 2.0, 0.0]


def test_retry_after_is_bounded_in_length_and_in_tries(api: LocalApiServer) -> None:
    api.overloaded = [(429, "3600")] * (kube_client.RETRY_AFTER_ATTEMPTS + 1)
    with pytest.raises(api_errors.ApiError) as raised:
        kube.get("ConfigMap", "v1", namespace="ns", name="a")
    assert (raised.value.code, raised.value.reason, raised.value.retry_after) == (429, "TooManyRequests", "3600")
    assert api.sleeps == [kube_client.MAX_RETRY_AFTER_SECONDS] * kube_client.RETRY_AFTER_ATTEMPTS
    assert len(api.requests) == kube_client.RETRY_AFTER_ATTEMPTS + 1


def test_an_error_without_retry_after_is_not_retried(api: LocalApiServer) -> None:
    api.failing = status(429, "TooManyRequests", "storage is (re)initializing")
    with pytest.raises(api_errors.ApiError):
        kube.get("ConfigMap", "v1", namespace="ns", name="a")
    api.failing = status(500, "InternalError", "etcdserver: leader changed")
    with pytest.raises(api_errors.ApiError):
        kube.get("ConfigMap", "v1", namespace="ns", name="a")
    assert api.failed_answers == 2 and api.sleeps == []


# -- the rate limit -----------------------------------------------------------------------


def test_the_token_bucket_lets_a_burst_through_then_spaces_requests_out() -> None:
    clock = Clock()
    bucket = rate_limit.TokenBucket(qps=2, burst=3, clock=clock, sleep=clock.sleep)
    waits = [bucket.wait() for _ in range(6)]
    assert waits == [0.0, 0.0, 0.0, 0.5, 0.5, 0.5] and clock.slept == [0.5, 0.5, 0.5]
    clock.now += 10  # idle: the bucket fills up to its burst, no more
    assert [bucket.wait() for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]


def test_the_default_bucket_passes_a_thousand_evaluations_and_holds_a_loop_to_its_rate() -> None:
    """A nightly suite of 1,000 Evaluations at four requests each never waits; a loop past the
    burst is held to 100 requests a second, and the bucket counts every second it held one."""
    clock = Clock()
    default = rate_limit.from_env({})
    assert default is not None
    bucket = rate_limit.TokenBucket(qps=default.qps, burst=default.burst, clock=clock, sleep=clock.sleep)
    assert sum(bucket.wait() for _ in range(1_000 * 4)) == 0.0 and bucket.waited_seconds == 0.0
    started = clock.now
    for _ in range(11_000):  # a runaway loop, right after the burst: 1,000 tokens left
        bucket.wait()
    seconds = clock.now - started
    assert seconds == pytest.approx(100.0)  # the 10,000 past the burst, at 100 a second
    assert bucket.waited_seconds == pytest.approx(sum(clock.slept)) and len(clock.slept) == 10_000


def test_take_turns_a_caller_away_at_once_past_its_longest_wait() -> None:
    clock = Clock()
    bucket = rate_limit.TokenBucket(qps=2, burst=2, clock=clock, sleep=clock.sleep)
    assert [bucket.take(0.2) for _ in range(3)] == [True, True, False] and clock.slept == []
    assert bucket.take(0.5) is True and clock.slept == [0.5]  # a half-second wait is within its bound
    clock.now += 0.5
    assert [bucket.take(0) for _ in range(2)] == [True, False]  # a refusal took nothing


def test_every_request_waits_for_a_token_and_a_lease_call_does_not(api: LocalApiServer) -> None:
    clock = Clock()
    limited = kube_client.ApiClient(
        api.session, limiter=rate_limit.TokenBucket(qps=4, burst=2, clock=clock, sleep=clock.sleep)
    )
    for name in "abcd":
        limited.request("POST", CONFIG_MAPS, body=_config_map(name))
    assert clock.slept == [0.25, 0.25]
    lease_calls = leases.Leases(lambda: limited)
    lease_calls.create(leases.new_lease(namespace="ns", name="l", identity="a", lease_seconds=15, now=NOW), timeout=5.0)
    for _ in range(5):
        lease_calls.get(namespace="ns", name="l", timeout=5.0)
    assert clock.slept == [0.25, 0.25]  # leader election is never held by the operator's own burst


def test_the_rate_limit_comes_from_the_environment() -> None:
    default = rate_limit.from_env({})
    assert default is not None and (default.qps, default.burst) == (100.0, 5000)
    given = rate_limit.from_env({"ASSAY_API_QPS": " 200 ", "ASSAY_API_BURST": "400"})
    assert given is not None and (given.qps, given.burst) == (200.0, 400)
    assert rate_limit.from_env({"ASSAY_API_QPS": "0"}) is None  # no limit
    with pytest.raises(UserError, match="ASSAY_API_QPS='fast' is not a number"):
        rate_limit.from_env({"ASSAY_API_QPS": "fast"})
    with pytest.raises(UserError, match="ASSAY_API_BURST=0 must be at least 1"):
        rate_limit.from_env({"ASSAY_API_BURST": "0"})


@needs_helm
def test_the_chart_gives_the_operator_its_rate_limit() -> None:
    from tests.operator.helm_chart import operator_container, render_values

    defaults = {e["name"]: e.get("value") for e in operator_container(render_values())["env"]}
    assert (defaults["ASSAY_API_QPS"], defaults["ASSAY_API_BURST"]) == ("100", "5000")
    given = rate_limit.from_env(
        {
            e["name"]: e.get("value") or ""
            for e in operator_container(render_values("operator.apiQPS=12.5", "operator.apiBurst=30"))["env"]
        }
    )
    assert given is not None and (given.qps, given.burst) == (12.5, 30)


# -- the Lease ----------------------------------------------------------------------------


@pytest.fixture
def lease_calls(api: LocalApiServer) -> Iterator[leases.Leases]:
    yield leases.Leases(lambda: api.client)


def test_a_lease_is_created_read_and_updated_on_its_resource_version(
    api: LocalApiServer, lease_calls: leases.Leases
) -> None:
    created = lease_calls.create(
        leases.new_lease(namespace="ns", name="l", identity="a", lease_seconds=15, now=NOW), timeout=5.0
    )
    assert created["spec"] == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2025-05-01T12:00:00.250000Z",
        "renewTime": "2025-05-01T12:00:00.250000Z",
        "leaseTransitions": 0,
    }
    assert api.requests[-1] == ("POST", LEASES)
    with pytest.raises(api_errors.ApiError) as raised:
        lease_calls.create(
            leases.new_lease(namespace="ns", name="l", identity="b", lease_seconds=15, now=NOW), timeout=5.0
        )
    assert raised.value.reason == api_errors.ALREADY_EXISTS

    read = lease_calls.get(namespace="ns", name="l", timeout=5.0)
    stale = lease_calls.get(namespace="ns", name="l", timeout=5.0)
    read["spec"]["holderIdentity"] = "b"
    updated = lease_calls.update(read, timeout=5.0)
    assert updated["spec"]["holderIdentity"] == "b" and api.requests[-1] == ("PUT", f"{LEASES}/l")
    stale["spec"]["holderIdentity"] = "c"
    with pytest.raises(api_errors.ApiError) as raised:
        lease_calls.update(stale, timeout=5.0)  # another replica wrote first
    assert (raised.value.code, raised.value.reason) == (409, api_errors.CONFLICT)
    assert (api.get(f"{LEASES}/l") or {})["spec"]["holderIdentity"] == "b"
    with pytest.raises(api_errors.ApiError) as raised:
        lease_calls.get(namespace="ns", name="none", timeout=5.0)
    assert raised.value.reason == api_errors.NOT_FOUND


def test_a_lease_call_is_one_attempt(api: LocalApiServer, lease_calls: leases.Leases) -> None:
    """The renew loop retries on its own clock: a Retry-After is not waited out within a call."""
    api.overloaded = [(429, "1")]
    with pytest.raises(api_errors.ApiError) as raised:
        lease_calls.get(namespace="ns", name="l", timeout=5.0)
    assert raised.value.reason == api_errors.TOO_MANY_REQUESTS and api.sleeps == [] and len(api.requests) == 1
