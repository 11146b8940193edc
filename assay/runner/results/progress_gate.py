"""Which progress reports become status writes: a visible change, at most once per interval.

Each progress write is a status patch the API server validates, stores and sends to every
watcher. The operator gives each run its interval (`ASSAY_PROGRESS_INTERVAL`) from the number
of runs in flight (`assay.operator.decide.progress_budget`), so that their writes together
stay within the API server's budget for them; a report goes out only when what `kubectl get`
shows would change (the first step, each whole percent, a new total) and that interval has
passed since the last write, or at the last step, which always goes. A run so writes at most
about a hundred times, however long it runs. No ETA is written: readers compute it from
`timing.requestsStarted`, the share done and `progress.updated`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping

from assay import spec as spec_module

logger = logging.getLogger(__name__)

DEFAULT_PROGRESS_INTERVAL = 5.0
"""Seconds between progress writes at least when the operator gave none (a runner started by hand)."""


class ProgressGate:
    """Says which (done, total) reports to write; `clock` is monotonic seconds."""

    def __init__(self, *, min_interval: float, clock: Callable[[], float]) -> None:
        self.min_interval, self.clock = min_interval, clock
        self._last: float | None = None
        self._shown: tuple[int, int] | None = None
        """(whole percent, total) of the last write: what a reader sees of it."""

    def due(self, done: int, total: int) -> bool:
        """Whether this report is to be written (and, if so, it counts as written)."""
        shown = (int(100 * done / total) if total > 0 else 0, total)
        if shown == self._shown:
            return False  # the same percent: nothing a reader sees has changed
        now = self.clock()
        if done < total and self._last is not None and now - self._last < self.min_interval:
            return False
        self._last, self._shown = now, shown
        return True


def interval_from_env(env: Mapping[str, str]) -> float:
    """The seconds between progress writes the operator gave this run; the default when it gave
    none, or none that reads as a number of seconds (logged)."""
    raw = env.get(spec_module.ENV_PROGRESS_INTERVAL, "").strip()
    if not raw:
        return DEFAULT_PROGRESS_INTERVAL
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not math.isfinite(seconds) or seconds < 0:
        logger.warning(
            "%s=%r is no number of seconds; progress is written every %g s at most.",
            spec_module.ENV_PROGRESS_INTERVAL,
            raw[:40],
            DEFAULT_PROGRESS_INTERVAL,
        )
        return DEFAULT_PROGRESS_INTERVAL
    return seconds
