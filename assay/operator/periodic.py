"""A sweep on a clock, in its own thread: what the operator's two sweeps share.

Plain threads, not kopf timers: kopf timers put a finalizer on every Evaluation, which
would make deletions wait for a running operator. A sweep posts its Events straight to
the API (kopf's poster lives only inside kopf's handlers).
"""

from __future__ import annotations

import threading


class PeriodicSweep:
    """Calls `sweep()` every `interval` seconds until `stop()`; subclasses say what a sweep does."""

    def __init__(self, *, interval: float, name: str) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def sweep(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sweep()
