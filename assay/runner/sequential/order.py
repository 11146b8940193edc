"""The order and chunks in which a sequential run scores a task's documents.

A sequential gate looks at the scores after each chunk and may stop; its guarantees assume
the documents come in a random order (a task's file is often sorted by subject or
difficulty, and its first chunk would then speak for one subject only). The order is a
permutation drawn from the run's seed and the task's name alone, so every rank computes the
same one without talking to the others, and the same command draws it again: a stopped or
interrupted run resumes over the same documents from its response cache.
"""

from __future__ import annotations

import hashlib
import math
import random

MIN_CHUNK = 64
CHUNKS_PER_TASK = 20
"""By default a task is looked at after every twentieth of it, and never after fewer than 64 documents."""


def default_chunk_size(documents: int) -> int:
    """The larger of 64 and 1/20 of the task (rounded up)."""
    return max(MIN_CHUNK, math.ceil(documents / CHUNKS_PER_TASK))


def document_order(documents: int, *, seed: int, task: str) -> list[int]:
    """A permutation of `range(documents)`, the same for the same seed and task name.

    The task's name is mixed into the seed (through sha256, not Python's salted `hash`) so that
    two tasks of one run, or one task in two runs with other tasks beside it, are not shuffled alike.
    """
    digest = hashlib.sha256(f"{seed}\0{task}".encode()).digest()
    order = list(range(documents))
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


def chunks(order: list[int], size: int) -> list[list[int]]:
    """`order` cut into consecutive chunks of `size` (the last one may be shorter)."""
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, not {size}")
    return [order[start : start + size] for start in range(0, len(order), size)]
