"""The order and chunks in which a sequential run scores a task's documents.

A sequential gate looks at the scores after each chunk and may stop; its guarantees assume
the documents come in a random order (a task's file is often sorted by subject or
difficulty, and its first chunk would then speak for one subject only). The order is a
permutation drawn from the run's seed and the task's (or pooled group's) name alone, so
every rank computes the same one without talking to the others, and the same command draws
it again: a stopped or interrupted run resumes over the same documents from its response cache.

By default the gate looks after every twentieth of the task (never after fewer than 64
documents: the grid of chunks of the larger of 64 and N/20) and, besides, after 64, 128,
256, 512, ... documents (doubling), except where such a look would come within 64 documents
of a look of the grid. A confidence sequence holds at every look, so the extra looks cost no
validity: they let a clear case stop after a few hundred documents instead of after a
twentieth of a large task (at 14,042 documents, 703), and, being a superset of the grid's
looks, never stop a run later than the grid alone. Their cost is per chunk (a part-filled
last batch per request type, a gather and a look: bench/sequential_chunks.py).
"""

from __future__ import annotations

import hashlib
import math
import random

MIN_CHUNK = 64
CHUNKS_PER_TASK = 20
"""Chunks never grow past a twentieth of the task, and are never smaller than 64 documents."""


def default_chunk_size(documents: int) -> int:
    """The largest chunk of the default schedule: the larger of 64 and 1/20 of the task (rounded up)."""
    return max(MIN_CHUNK, math.ceil(documents / CHUNKS_PER_TASK))


def chunk_sizes(documents: int, fixed: int | None = None) -> list[int]:
    """The sizes of a task's chunks, in order, summing to `documents`.

    `fixed` (the settings' chunk_size): every chunk that size, the last one short. None: the
    default looks (see the module's docstring)."""
    if fixed is not None and fixed < 1:
        raise ValueError(f"chunk size must be at least 1, not {fixed}")
    if documents <= 0:
        return []
    if fixed is not None:
        ends = list(range(fixed, documents, fixed))
    else:
        grid = default_chunk_size(documents)
        ends = list(range(grid, documents, grid))
        doubling = MIN_CHUNK
        while doubling < documents:
            nearest = min(doubling % grid, grid - doubling % grid, documents - doubling)
            if nearest >= MIN_CHUNK:
                ends.append(doubling)
            doubling *= 2
        ends.sort()
    ends.append(documents)
    return [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def document_order(documents: int, *, seed: int, task: str) -> list[int]:
    """A permutation of `range(documents)`, the same for the same seed and task name.

    The task's name is mixed into the seed (through sha256, not Python's salted `hash`) so that
    two tasks of one run, or one task in two runs with other tasks beside it, are not shuffled alike.
    """
    digest = hashlib.sha256(f"{seed}\0{task}".encode()).digest()
    order = list(range(documents))
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


def chunks(order: list[int], size: int | list[int]) -> list[list[int]]:
    """`order` cut into consecutive chunks: of `size` each (the last one may be shorter), or of the
    sizes listed (`chunk_sizes`)."""
    if isinstance(size, int):
        if size < 1:
            raise ValueError(f"chunk size must be at least 1, not {size}")
        return [order[start : start + size] for start in range(0, len(order), size)]
    if sum(size) != len(order) or any(part < 1 for part in size):
        raise ValueError(f"chunk sizes {size[:5]}... do not cut {len(order)} documents")
    pieces, start = [], 0
    for part in size:
        pieces.append(order[start : start + part])
        start += part
    return pieces
