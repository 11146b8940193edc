"""How the hf backend sizes its batches: the parsed `batch_size`, auto detection by halving
on out-of-memory, and the out-of-memory test itself (shared by scoring and generation)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from assay.batch_size import BatchSize


@dataclasses.dataclass
class BatchPlan:
    """How the backend batches: the parsed `batch_size`, bounded by `max_batch_size`.

    `found` keeps the sizes auto detection chose, by schedule step, as lm-eval's
    `HFLM.batch_sizes` does: the results' `config.batch_sizes` reports them.
    """

    size: BatchSize
    max_batch_size: int = 64
    found: dict[int, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, size: BatchSize | None, max_batch_size: int | None) -> BatchPlan:
        return cls(size if size is not None else BatchSize(1), int(max_batch_size) if max_batch_size else 64)

    @property
    def fixed(self) -> int | None:
        return self.size.fixed

    @property
    def schedule(self) -> int:
        return self.size.schedule

    @property
    def auto(self) -> bool:
        return self.size.auto


def is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.cuda.OutOfMemoryError) or (
        isinstance(err, RuntimeError) and "out of memory" in str(err).lower()
    )


def free_memory() -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def detect_batch_size(device: torch.device, max_batch_size: int, trial: Callable[[int], None]) -> int:
    """Largest batch size, from max_batch_size down by halves, whose trial batch fits.

    On CPU (and MPS) there is no recoverable out-of-memory signal, so the bound is used as is
    — which is also what lm-eval ends with there.
    """
    if device.type != "cuda":
        return max_batch_size
    size = max_batch_size
    while size > 1:
        try:
            trial(size)
            free_memory()
            return size
        except Exception as err:
            if not is_oom(err):
                raise
            free_memory()
            size //= 2
    return 1
