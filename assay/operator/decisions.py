"""When an Evaluation's run must be decided, and deciding it one at a time per Evaluation, with retries.

Why not kopf's create/update/resume handlers: kopf keeps each object's last handled spec
and its handler progress in annotations. Under a burst that was one more PATCH per
Evaluation (and one more watch event to process), and on every watch event of every
Evaluation a deep copy of its whole body to compare with: a fifth of the operator's CPU
(py-spy, 300 Evaluations in one burst). The status already records what was decided —
`observedGeneration` and `rerunToken` name the spec and the token of the current run — so
the trigger is a level, read from the newest body the watches showed:

- its generation differs from `status.observedGeneration` (new, or its spec changed), or
- its `evaluations.assay.dev/rerun` annotation differs from `status.rerunToken`, or
- the operator sees it for the first time since it started and its run is unfinished (what
  kopf's resume handler was for: a child lost while no operator ran is made again).

A decision that raised is tried again after a back-off (`RETRY_DELAYS`) for as long as the
run is unfinished: plans are idempotent, so a retry after a partial success creates only
what is missing. Decisions of one Evaluation never overlap; those of different Evaluations
run in parallel on the handler threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Any, Callable, Mapping

from assay.operator import conditions
from assay.operator.build import builders

logger = logging.getLogger(__name__)

Body = Mapping[str, Any]
Key = tuple[str, str]
RETRY_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Seconds before each retry of a decision that raised; the last one repeats."""


def key_of(body: Body) -> Key:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


def finished(body: Body) -> bool:
    """Whether the run its spec and token ask for has ended (succeeded, failed, or was refused)."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    return (
        status.get("observedGeneration") == int(meta.get("generation", 1))
        and status.get("phase") in conditions.TERMINAL_PHASES
        and status.get("rerunToken") == builders.rerun_token(body)
    )


def needs_decision(body: Body, *, first_sight: bool) -> bool:
    """Whether the newest `body` asks for a run decision (see the module's docstring)."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    status = body.get("status") or {}
    if status.get("observedGeneration") != int(meta.get("generation", 1)):
        return True
    # rerun_token falls back to the status's token: a removed annotation asks for nothing.
    if builders.rerun_token(body) != status.get("rerunToken"):
        return True
    return first_sight and not finished(body)


class RunDecisions:
    """Calls `decide(body)` (blocking: API calls) in `executor` when an Evaluation needs it.

    `latest(key)` gives the newest body the operator knows, its own status writes
    included, so an event that arrives after a decision (and predates its write) does not
    ask for the same decision again. `on_error(key, error)` hears of each failed attempt.
    """

    def __init__(self, *, decide: Callable[[Body], None], latest: Callable[[Key], Body | None],
                 on_error: Callable[[Key, BaseException], None],
                 executor: concurrent.futures.Executor | None = None,
                 delays: tuple[float, ...] = RETRY_DELAYS) -> None:  # fmt: skip
        self._decide, self._latest, self._on_error = decide, latest, on_error
        self._executor, self._delays = executor, delays
        self._seen: set[Key] = set()
        self._locks: dict[Key, asyncio.Lock] = {}
        self._attempts: dict[Key, int] = {}
        self._retries: dict[Key, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._asked = 0  # decisions asked for and not done (waiting for the lock or a thread, or running)

    async def observe(self, body: Body, *, deleted: bool = False) -> None:
        """One watch event of an Evaluation (in kopf's event loop)."""
        key = key_of(body)
        if deleted:
            self._forget(key)
            return
        first_sight = key not in self._seen
        self._seen.add(key)
        if needs_decision(body, first_sight=first_sight):
            await self._run(key, wanted=lambda newest: needs_decision(newest, first_sight=first_sight))

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
            try:
                await asyncio.get_running_loop().run_in_executor(self._executor, self._decide, body)
            except Exception as error:  # noqa: BLE001 - reported, then tried again
                self._on_error(key, error)
                self._schedule_retry(key)
            else:
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
        task = asyncio.ensure_future(self._run(key, wanted=_unfinished))
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


def _unfinished(body: Body) -> bool:
    return not (body.get("metadata") or {}).get("deletionTimestamp") and not finished(body)
