"""A running Evaluation's ETA, computed by whoever reads its status (`assay get`, the metrics).

The runner writes no ETA: it writes its progress only when the share done changes by a whole
percent, and at most once per interval (`progress_budget`), so an ETA it wrote would be stale
between writes and cost a write to keep current. A reader has what it needs: when the first
requests went to the model (`status.timing.requestsStarted`, after the model was loaded), the
share done and when that was true (`status.progress.updated`). At the mean rate since the
first request (the length-sorted batches make later requests shorter, so it errs long), the
rest takes `elapsed × (total − done) / done` from `updated`, less the time since.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from assay.operator.decide.conditions import RUNNING


def eta_seconds(status: Mapping[str, Any] | None, *, now: datetime.datetime) -> float | None:
    """Seconds left of a running run; None until it is known (no request answered yet, no start
    time) and once the run is not running. Never below 0."""
    status = status or {}
    progress = status.get("progress") or {}
    done, total = _count(progress.get("requestsDone")), _count(progress.get("requestsTotal"))
    if status.get("phase") != RUNNING or done is None or total is None or not 0 < done < total:
        return None
    started = _parse((status.get("timing") or {}).get("requestsStarted"))
    at = _parse(progress.get("updated")) or now
    if started is None or at <= started:
        return None
    left = (at - started).total_seconds() * (total - done) / done
    return max(0.0, left - max(0.0, (now - at).total_seconds()))


def summary(status: Mapping[str, Any] | None, *, now: datetime.datetime) -> str:
    """The Progress column with the ETA: "1234/2940 (41%) ETA 3m20s" ("" without progress)."""
    status = status or {}
    text = str((status.get("progress") or {}).get("summary") or "")
    eta = eta_seconds(status, now=now)
    return f"{text} ETA {duration(int(eta))}" if text and eta is not None else text


def duration(seconds: int) -> str:
    """`3m20s`, `1h05m`, `42s`."""
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _parse(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)
