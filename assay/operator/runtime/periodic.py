"""A sweep on a clock, in its own thread: what the operator's two sweeps share.

Plain threads, not kopf timers: kopf timers put a finalizer on every Evaluation, which
would make deletions wait for a running operator. A sweep posts its Events straight to
the API (kopf's poster lives only inside kopf's handlers).

A sweep cannot die: whatever a pass raises (the API server answering 500, a connection
reset) is counted in `assay_sweep_errors_total{sweep,kind}` and the thread goes on to its
next pass. Each kind of failure is logged once, not once a pass: an outage of a minute at
a 30 s interval logs one line per kind, and one more when a pass goes through clean.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from assay.kube import api_errors

logger = logging.getLogger(__name__)

OnError = Callable[[str, str], None]
"""(sweep, kind) → counts one failure (`metrics.EvaluationMetrics.record_sweep_error`)."""


def error_kind(error: BaseException) -> str:
    """A failure's kind, as a metric label: `http_<status>` for an API error, else its class."""
    return f"http_{error.code}" if isinstance(error, api_errors.ApiError) else type(error).__name__


class SweepErrors:
    """One sweep's failures: each counted; each kind logged once until a pass goes clean.

    Only the sweep's own thread calls it."""

    def __init__(self, sweep: str, *, on_error: OnError) -> None:
        self.sweep = sweep
        self._on_error = on_error
        self._logged: dict[str, int] = {}  # kind → failures since it was logged
        self._failed_this_pass = False

    def failed(self, error: BaseException, *, what: str) -> None:
        kind = error_kind(error)
        self._on_error(self.sweep, kind)
        self._failed_this_pass = True
        if kind not in self._logged:
            logger.warning(
                "The %s sweep failed (%s) on %s: %s; it goes on, and logs this kind again only after a clean pass.",
                self.sweep,
                kind,
                what,
                error,
            )
        self._logged[kind] = self._logged.get(kind, 0) + 1

    def pass_over(self) -> None:
        """A pass ended: if nothing in it failed, say once that the sweep has recovered."""
        if not self._failed_this_pass and self._logged:
            counts = ", ".join(f"{n} {kind}" for kind, n in sorted(self._logged.items()))
            logger.info("The %s sweep recovered after %s.", self.sweep, counts)
            self._logged.clear()
        self._failed_this_pass = False

    @property
    def failing(self) -> bool:
        """Whether a kind of failure was logged and no clean pass has come since."""
        return bool(self._logged)


class PeriodicSweep:
    """Calls `sweep()` every `interval` seconds until `stop()`; subclasses say what a sweep does."""

    def __init__(
        self,
        *,
        interval: float,
        name: str,
        label: str | None = None,
        on_error: OnError = lambda sweep, kind: None,
        stop: threading.Event | None = None,
    ) -> None:
        """`stop`: an event that ends this sweep when set (the operator's `OperatorState.stopping`
        ends them all); its own one by default."""
        self.interval = interval
        self.errors = SweepErrors(label or name, on_error=on_error)
        self._stop = stop if stop is not None else threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def sweep(self) -> None:
        raise NotImplementedError

    def run_once(self) -> None:
        """One pass; what it raises is counted and logged (`SweepErrors`), never the end of the thread."""
        try:
            self.sweep()
        except Exception as error:
            self.errors.failed(error, what="a pass")
        self.errors.pass_over()

    @contextlib.contextmanager
    def guarded(self, what: str) -> Iterator[None]:
        """One item of a pass (an Evaluation, a namespace): its failure is counted and the pass goes on."""
        try:
            yield
        except Exception as error:
            self.errors.failed(error, what=what)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.run_once()
