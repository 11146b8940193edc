"""What a process needs to know about its peers: rank, world size, and gathering to rank 0.

Works with torch.distributed when it is initialised (torchrun), and degrades to a single
process otherwise, so the evaluator has one code path.
"""

from __future__ import annotations

from typing import Any, Sequence


def _dist() -> Any:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def rank_and_world() -> tuple[int, int]:
    dist = _dist()
    if dist is None:
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def gather_to_rank0(obj: Any) -> list[Any] | None:
    """Every rank's `obj`, in rank order, on rank 0; None elsewhere."""
    dist = _dist()
    if dist is None:
        return [obj]
    rank, world = dist.get_rank(), dist.get_world_size()
    received: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(obj, received, dst=0)
    return received


def balanced_shards(costs: Sequence[int], world_size: int) -> list[list[int]]:
    """Split item indices into `world_size` lists of about equal total cost.

    Greedy longest-first onto the least-loaded rank; ties go to the lowest rank, so every
    rank computes the same assignment without talking to the others.
    """
    import heapq

    loads = [(0, rank) for rank in range(world_size)]
    heapq.heapify(loads)
    shards: list[list[int]] = [[] for _ in range(world_size)]
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        load, rank = heapq.heappop(loads)
        shards[rank].append(index)
        heapq.heappush(loads, (load + max(int(costs[index]), 1), rank))
    return [sorted(shard) for shard in shards]
