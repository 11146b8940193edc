"""JSON conversion shared by hashes, results and samples files (lm-eval's rules)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np


def json_default(value: Any) -> Any:
    """How lm-eval serialises what json cannot: numpy ints → int, sets → list, else str()."""
    if isinstance(value, (np.int64, np.int32)):
        return int(value)
    if isinstance(value, set):
        return list(value)
    return str(value)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
