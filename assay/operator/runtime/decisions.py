"""Deciding Evaluations' runs: one at a time per Evaluation, in parallel across them, with retries.

Each watch event of an Evaluation asks `trigger.needs_decision` of the newest body the
watches showed (a level: no kopf create/update/resume handlers, see `trigger`); a run that
needs deciding is decided on the handler threads.

A decision that raised is tried again after a back-off (`RETRY_DELAYS`) for as long as the
run is unfinished: plans are idempotent, so a retry after a partial success creates only
what is missing. Only a transient error is (an API server that timed out or answered 5xx):
any other is a fault of the Evaluation's own (a RecursionError on a deeply nested spec),
which every retry would raise again, so `on_fault` ends its run once (`decision_faults`). Decisions of one Evaluation never overlap; those of different Evaluations
run in parallel on the handler threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable

from assay.operator.decide import trigger

logger = logging.getLogger(__name__)

Body = trigger.Body
Key = trigger.Key
RETRY_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Seconds before each retry of a decision that raised; the last one repeats."""


class RunDecisions:
    """Calls `decide(body)` (blocking: API calls) in `executor` when an Evaluation needs it.

    `latest(key)` gives the newest body the operator knows, its own status writes
    included, so an event that arrives after a decision (and predates its write) does not
    ask for the same decision again. `on_error(key, error)` hears of each failed attempt;
    `on_fault(body, error)` ends the run of one that `transient(error)` says no retry would
    change (without it, every error is tried again).
    """

    def __init__(
        self,
        *,
        decide: Callable[[Body], None],
        latest: Callable[[Key], Body | None],
        on_error: Callable[[Key, BaseException], None],
        on_fault: Callable[[Body, BaseException], None] | None = None,
        transient: Callable[[BaseException], bool] = lambda _: True,
        executor: concurrent.futures.Executor | None = None,
        delays: tuple[float, ...] = RETRY_DELAYS,
    ) -> None:
        self._decide, self._latest, self._on_error = decide, latest, on_error
        self._on_fault, self._transient = on_fault, transient
        self._executor, self._delays = executor, delays
        self._seen: set[Key] = set()
        self._locks: dict[Key, asyncio.Lock] = {}
        self._attempts: dict[Key, int] = {}
        self._retries: dict[Key, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._asked = 0  # decisions asked for and not done (waiting for the lock or a thread, or running)

    async def observe(self, body: Body, *, deleted: bool = False) -> None:
        """One watch event of an Evaluation (in kopf's event loop)."""
        key = trigger.key_of(body)
        if deleted:
            self._forget(key)
            return
        first_sight = key not in self._seen
        self._seen.add(key)
        if trigger.needs_decision(body, first_sight=first_sight):
            await self._run(key, wanted=lambda newest: trigger.needs_decision(newest, first_sight=first_sight))

    def pending_retries(self) -> list[Key]:
        return sorted(self._retries)

    def depth(self) -> int:
        """Decisions asked for and not done, retries due included (assay_workqueue_depth; read from any thread)."""
        return self._asked + len(self._retries)

    async def _run(self, key: Key, *, wanted: Callable[[Body], bool]) -> None:
        self._asked += 1  # only the event loop changes it
        try:
            await self._decide_once(key, wanted=wanted)
        finally:
            self._asked -= 1

    async def _decide_once(self, key: Key, *, wanted: Callable[[Body], bool]) -> None:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            body = self._latest(key)
            # Read again under the lock: a decision that ran meanwhile may have done it.
            if body is None or not wanted(body):
                return
            timer = self._retries.pop(key, None)
            if timer is not None:
                timer.cancel()
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._executor, self._decide, body)
            except Exception as error:
                self._on_error(key, error)
                if self._on_fault is None or self._transient(error):
                    self._schedule_retry(key)
                    return
                try:
                    await loop.run_in_executor(self._executor, self._on_fault, body, error)
                except Exception as recording:
                    self._on_error(key, recording)
                    self._schedule_retry(key)
                    return
            self._attempts.pop(key, None)

    def _schedule_retry(self, key: Key) -> None:
        attempt = self._attempts.get(key, 0)
        self._attempts[key] = attempt + 1
        delay = self._delays[min(attempt, len(self._delays) - 1)]
        loop = asyncio.get_running_loop()
        self._retries[key] = loop.call_later(delay, self._retry, key)

    def _retry(self, key: Key) -> None:
        self._retries.pop(key, None)
        # Forced: the status may already record the decision whose carrying-out failed.
        task = asyncio.ensure_future(self._run(key, wanted=trigger.unfinished))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _forget(self, key: Key) -> None:
        self._seen.discard(key)
        self._attempts.pop(key, None)
        timer = self._retries.pop(key, None)
        if timer is not None:
            timer.cancel()
        lock = self._locks.get(key)
        if lock is not None and not lock.locked():
            del self._locks[key]
