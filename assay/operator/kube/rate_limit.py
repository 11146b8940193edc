"""The operator's own limit on its request rate: a token bucket, as client-go's client has.

The API server's priority and fairness protects the server (the chart's FlowSchema and
PriorityLevelConfiguration for the operator's ServiceAccount); this bounds what the operator
itself sends when something makes it loop (a resync storm, a bug), and spreads such a
flood out instead of having it refused with 429s. A real burst must pass untouched: a
platform applies a nightly suite of a thousand Evaluations at once, at four requests each
when the runner identity is per namespace (eight before), so the bucket holds 5,000
requests. It refills at 100 a second: past a burst the operator's need is its status writes
as runs move on (8 to 14 a second while a burst of 700 met 300 runs in flight,
bench/operator_scale.py), 100 a second refills a spent burst in under a minute, and a loop is
held to 6,000 requests a minute (measured with a storm of reruns of every Evaluation:
docs/performance.md). client-go's defaults (5 a second, bursts of 10) would stretch one
such burst to a quarter of an hour. ASSAY_API_QPS and ASSAY_API_BURST (the chart's
operator.apiQPS and operator.apiBurst) change them; `waited_seconds` is the time requests
spent waiting here (`assay_operator_rate_limit_wait_seconds_total`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from assay.errors import UserError

QPS_ENV, BURST_ENV = "ASSAY_API_QPS", "ASSAY_API_BURST"
DEFAULT_QPS, DEFAULT_BURST = 100.0, 5000


class TokenBucket:
    """`qps` tokens a second, at most `burst` saved up; each request takes one, waiting for it
    when none is left. Thread-safe: a waiter reserves its token, then sleeps outside the lock."""

    def __init__(
        self,
        *,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs qps above 0 and burst at least 1, not {qps:g} and {burst}")
        self.qps, self.burst = qps, burst
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()
        self._waited = 0.0

    @property
    def waited_seconds(self) -> float:
        """The seconds callers have slept for tokens so far, all threads together."""
        with self._lock:
            return self._waited

    def wait(self) -> float:
        """Take a token, sleeping until it is there; the seconds slept."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.qps) - 1
            self._at = now
            delay = -self._tokens / self.qps if self._tokens < 0 else 0.0
            self._waited += delay
        if delay > 0:
            self._sleep(delay)
        return delay

    def take(self, max_wait: float) -> bool:
        """Take a token if one is there within `max_wait` seconds (sleeping until it is); else take
        none and say False at once, so that a flood is turned away instead of queued."""
        with self._lock:
            now = self._clock()
            tokens = min(self.burst, self._tokens + (now - self._at) * self.qps) - 1
            delay = -tokens / self.qps if tokens < 0 else 0.0
            if delay > max_wait:
                return False
            self._tokens, self._at = tokens, now
            self._waited += delay
        if delay > 0:
            self._sleep(delay)
        return True


def from_env(env: Mapping[str, str]) -> TokenBucket | None:
    """The bucket ASSAY_API_QPS and ASSAY_API_BURST ask for; None (no limit) when the rate is 0 or less."""
    qps, burst = rate_of(env)
    return TokenBucket(qps=qps, burst=burst) if qps > 0 else None


def rate_of(env: Mapping[str, str]) -> tuple[float, int]:
    """(qps, burst) as ASSAY_API_QPS and ASSAY_API_BURST (in the operator's environment `env`) say; a bad one is named."""
    raw_qps, raw_burst = env.get(QPS_ENV, "").strip(), env.get(BURST_ENV, "").strip()
    try:
        qps = float(raw_qps) if raw_qps else DEFAULT_QPS
    except ValueError:
        raise UserError(
            f"{QPS_ENV}={raw_qps!r} is not a number of requests a second; unset it for {DEFAULT_QPS:g}."
        ) from None
    try:
        burst = int(raw_burst) if raw_burst else DEFAULT_BURST
    except ValueError:
        raise UserError(
            f"{BURST_ENV}={raw_burst!r} is not a whole number of requests; unset it for {DEFAULT_BURST}."
        ) from None
    if qps > 0 and burst < 1:
        raise UserError(f"{BURST_ENV}={burst} must be at least 1 while {QPS_ENV} limits the rate.")
    return qps, burst
