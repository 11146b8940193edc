"""Times as kubectl shows them: `5s`, `3m20s`, `4h12m`, `9d` (apimachinery's HumanDuration)."""

from __future__ import annotations

import datetime
from typing import Any


def parse(value: Any) -> datetime.datetime | None:
    """An API timestamp ("2024-05-01T12:00:00Z", fractions allowed); None when absent or unreadable."""
    if not value:
        return None
    try:
        moment = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def since(value: Any, *, now: datetime.datetime) -> str:
    """How long ago an API timestamp was, as kubectl's AGE column says it ("" when unknown)."""
    moment = parse(value)
    return human_duration((now - moment).total_seconds()) if moment is not None else ""


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration, the rounding included."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes, hours = whole // 60, whole // 3600
    if minutes < 10:
        return _two(minutes, "m", whole % 60, "s")
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return _two(hours, "h", minutes % 60, "m")
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return _two(hours // 24, "d", hours % 24, "h")
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        return _two(hours // 24 // 365, "y", (hours // 24) % 365, "d")
    return f"{hours // 24 // 365}y"


def _two(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big}{big_unit}{small}{small_unit}" if small else f"{big}{big_unit}"
