"""What a process needs to know about its peers: rank, world size, and gathering to rank 0.

Works with torch.distributed when it is initialised (torchrun), and degrades to a single
process otherwise, so the evaluator has one code path.

Failing fast. A collective that waits for a peer which will never come back is the
classic multi-GPU hang (lm-eval #3143). Ranks therefore never enter a collective until
every peer has *arrived* at the same point, and they wait for that on the rendezvous store
(torchrun's TCPStore), not inside the collective. While waiting they watch three signals:

- a peer that failed posts its error to the store (`report_failure`): the others stop at
  once with "rank 1 failed: ...";
- every rank bumps a heartbeat counter from a background thread; a peer whose counter
  stops (process gone, node lost, process frozen) is reported as "rank 1 stopped
  responding" after `min(60 s, timeout)`;
- a peer that is alive but never arrives (hung) is reported after the collective timeout
  (`ASSAY_COLLECTIVE_TIMEOUT_S`, default 1800 s). It also bounds the legitimate wait for a
  straggler, so it must exceed the worst expected imbalance between ranks.

The collective itself then runs on a gloo group (also when the model runs on NCCL): the
gathered objects are pickled Python records, gloo raises a Python error on timeout or a
closed connection where NCCL would abort the process, and no GPU memory is spent on them.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

log = logging.getLogger(__name__)

TIMEOUT_ENV = "ASSAY_COLLECTIVE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 1800.0
HEARTBEAT_INTERVAL_S = 2.0
MAX_SILENCE_S = 60.0
"""A peer whose heartbeat has not moved for this long (or the timeout, if shorter) is dead."""
_POLL_S = 0.2


class PeerFailure(RuntimeError):
    """Another rank failed or stopped responding; the message names it and says where to look."""

    def __init__(self, message: str, *, ranks: Sequence[int] = (), reported: bool = False) -> None:
        super().__init__(message)
        self.ranks = tuple(ranks)
        # The peer said it failed (and its own exit counts): this rank's stop is only a consequence.
        # Not so for a peer gone silent, which may be hung and never exit.
        self.reported = reported


def _dist() -> Any:
    # No process group exists before torch.distributed is imported: a run that is not under
    # torchrun does not import it (torch.distributed alone took about 2 s of `assay run`'s start).
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


def rank_and_world() -> tuple[int, int]:
    dist = _dist()
    if dist is None:
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def timeout_from_env() -> float:
    raw = os.environ.get(TIMEOUT_ENV)
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        from assay.errors import UserError

        raise UserError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds; set it to e.g. 600.") from None
    if value <= 0:
        from assay.errors import UserError

        raise UserError(f"{TIMEOUT_ENV} must be above 0 seconds, not {raw}.")
    return value


def launched_by_torchrun(env: Any = None) -> bool:
    env = os.environ if env is None else env
    return "RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env and "MASTER_PORT" in env


def init_from_env(timeout_s: float | None = None) -> bool:
    """Join the process group torchrun describes in the environment; True when distributed.

    A no-op returning False without torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT), and returning True when a process group already exists. NCCL when CUDA
    is available (each rank on `cuda:LOCAL_RANK`), gloo otherwise; collectives time out
    after `timeout_s` (default: ASSAY_COLLECTIVE_TIMEOUT_S, else 1800 s).
    """
    global _PEERS, _OWNS_GROUP
    if _dist() is not None:
        return True
    if not launched_by_torchrun():
        return False
    import torch
    import torch.distributed as dist

    timeout = float(timeout_s) if timeout_s is not None else timeout_from_env()
    backend = "gloo"
    if torch.cuda.is_available():
        backend = "nccl"
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout))
    _OWNS_GROUP = True
    group = None
    if backend != "gloo":
        group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    _PEERS = _Peers(rank=rank, world=world, timeout=timeout, group=group)
    log.info("rank %d of %d joined (%s, timeout %.0f s)", rank, world, backend, timeout)
    return True


def shutdown() -> None:
    """Leave the process group `init_from_env` joined (not one made by others); stop the heartbeat."""
    global _PEERS, _OWNS_GROUP
    peers, _PEERS = _PEERS, None
    if peers is not None:
        peers.close()
    dist = _dist()
    if dist is not None and _OWNS_GROUP:
        dist.destroy_process_group()
    _OWNS_GROUP = False


@contextlib.contextmanager
def process_group(timeout_s: float | None = None) -> Iterator[tuple[int, int]]:
    """`with process_group() as (rank, world):` init_from_env, report_failure, shutdown.

    For `assay run` under torchrun: an exception leaving the block is posted to the
    peers (so they stop instead of waiting for this rank) and re-raised.
    """
    init_from_env(timeout_s)
    try:
        yield rank_and_world()
    except BaseException as error:
        report_failure(f"{type(error).__name__}: {error}")
        raise
    finally:
        shutdown()


def barrier(name: str = "barrier") -> None:
    """Wait until every rank reaches the barrier called `name`; PeerFailure if one cannot."""
    if _PEERS is not None:
        _PEERS.await_all(f"barrier/{name}")


def report_failure(message: str) -> None:
    """Tell the other ranks this one is failing, so they stop instead of waiting for it."""
    if _PEERS is not None:
        _PEERS.post_failure(message)


def gather_to_rank0(obj: Any) -> list[Any] | None:
    """Every rank's `obj`, in rank order, on rank 0; None elsewhere."""
    dist = _dist()
    if dist is None:
        return [obj]
    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        return [obj]
    peers = _PEERS
    group = None
    if peers is not None:
        peers.gathers += 1
        peers.await_all(f"gather/{peers.gathers}")
        group = peers.group
    received: list[Any] | None = [None] * world if rank == 0 else None
    try:
        dist.gather_object(obj, received, dst=0, group=group)
    except Exception as error:  # gloo: closed connection or timeout
        if peers is None:
            raise
        raise peers.explain(error, during="the gather to rank 0") from error
    return received


def broadcast_from_rank0(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (what the others pass is ignored): a sequential run's go-on or stop."""
    dist = _dist()
    if dist is None or dist.get_world_size() == 1:
        return obj
    peers = _PEERS
    group = None
    if peers is not None:
        peers.gathers += 1
        peers.await_all(f"broadcast/{peers.gathers}")
        group = peers.group
    carried = [obj if dist.get_rank() == 0 else None]
    try:
        dist.broadcast_object_list(carried, src=0, group=group)
    except Exception as error:  # gloo: closed connection or timeout
        if peers is None:
            raise
        raise peers.explain(error, during="the broadcast from rank 0") from error
    return carried[0]


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


# --- liveness through the rendezvous store ------------------------------------------------


def _connect_store(timeout: float) -> Any:
    import torch.distributed as dist

    return dist.TCPStore(  # type: ignore[attr-defined]  # exported, but not in torch's __all__
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=datetime.timedelta(seconds=min(timeout, 60.0)),
        wait_for_workers=False,
    )


class _Peers:
    """This rank's view of the others: arrivals, failures and heartbeats in the store."""

    def __init__(self, *, rank: int, world: int, timeout: float, group: Any) -> None:
        self.rank, self.world, self.timeout, self.group = rank, world, timeout, group
        self.max_silence = min(MAX_SILENCE_S, timeout)
        self.gathers = 0
        # Keys are scoped to this launch, so a restarted job never reads a previous one's.
        run = os.environ.get("TORCHELASTIC_RUN_ID", "run")
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.prefix = f"assay/{run}/{restart}/"
        self.where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        self.store = _connect_store(timeout)
        self._stop = threading.Event()
        self._beats: dict[int, tuple[int, float]] = {}
        self._thread = threading.Thread(target=self._heartbeat, name="assay-heartbeat", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=HEARTBEAT_INTERVAL_S + 1)

    def _heartbeat(self) -> None:
        # A store client of its own: the main thread's client may be inside a blocking call.
        try:
            store = _connect_store(self.timeout)
        except Exception:
            return
        key = f"{self.prefix}heartbeat/{self.rank}"
        while not self._stop.is_set():
            try:
                store.add(key, 1)
            except Exception:
                return
            self._stop.wait(HEARTBEAT_INTERVAL_S)

    # -- store access that turns a lost store into a clear error ---------------------------

    def _call(self, what: str, *args: Any) -> Any:
        try:
            return getattr(self.store, what)(*args)
        except Exception as error:
            raise PeerFailure(
                f"lost the rendezvous store at {self.where} (it lives with rank 0's node): "
                f"rank 0 stopped responding; see its log ({error})",
                ranks=(0,),
            ) from error

    def post_failure(self, message: str) -> None:
        try:
            self.store.set(f"{self.prefix}failed/{self.rank}", message[:2000])
            self.store.add(f"{self.prefix}failures", 1)
        except Exception:
            pass

    def _failed_peer(self) -> PeerFailure | None:
        if self._call("add", f"{self.prefix}failures", 0) == 0:
            return None
        for rank in range(self.world):
            key = f"{self.prefix}failed/{rank}"
            if rank != self.rank and self._call("check", [key]):
                message = self._call("get", key).decode("utf-8", "replace")
                return PeerFailure(
                    f"rank {rank} failed: {message}; see its log for details", ranks=(rank,), reported=True
                )
        return None

    def _silent(self, ranks: Sequence[int]) -> list[int]:
        """Of `ranks`, those whose heartbeat has not moved for `max_silence` seconds."""
        now = time.monotonic()
        silent = []
        for rank in ranks:
            beat = int(self._call("add", f"{self.prefix}heartbeat/{rank}", 0))
            seen = self._beats.get(rank)
            if seen is None or seen[0] != beat:
                self._beats[rank] = (beat, now)
            elif now - seen[1] > self.max_silence:
                silent.append(rank)
        return silent

    def await_all(self, point: str) -> None:
        """Mark this rank as arrived at `point`; return when all have, or raise PeerFailure."""
        key = f"{self.prefix}{point}/"
        self._call("set", f"{key}{self.rank}", "1")
        started = time.monotonic()
        missing = [r for r in range(self.world) if r != self.rank]
        while True:
            missing = [r for r in missing if not self._call("check", [f"{key}{r}"])]
            if not missing:
                return
            failure = self._failed_peer()
            if failure is not None:
                raise failure
            silent = self._silent(missing)
            if silent:
                raise PeerFailure(
                    f"{_ranks(silent)} stopped responding (no heartbeat for {self.max_silence:.0f} s) "
                    f"before {point.split('/')[0]}; see {'its' if len(silent) == 1 else 'their'} log",
                    ranks=silent,
                )
            if time.monotonic() - started > self.timeout:
                raise PeerFailure(
                    f"{_ranks(missing)} stopped responding: not at {point.split('/')[0]} after "
                    f"{self.timeout:.0f} s ({TIMEOUT_ENV}); see {'its' if len(missing) == 1 else 'their'} log",
                    ranks=missing,
                )
            time.sleep(_POLL_S)

    def explain(self, error: Exception, *, during: str) -> PeerFailure:
        """After a failed collective: name the peer that failed or went silent, if one did."""
        try:
            failure = self._failed_peer()
            if failure is not None:
                return failure
            # A dead process's heartbeat stops; watch long enough to see which one stopped.
            others = [r for r in range(self.world) if r != self.rank]
            self._beats.clear()
            self._silent(others)
            deadline = time.monotonic() + 3 * HEARTBEAT_INTERVAL_S
            while time.monotonic() < deadline:
                time.sleep(_POLL_S * 2)
                moved = {
                    r for r in others if int(self._call("add", f"{self.prefix}heartbeat/{r}", 0)) != self._beats[r][0]
                }
                if moved == set(others):
                    break
            dead = [r for r in others if int(self._call("add", f"{self.prefix}heartbeat/{r}", 0)) == self._beats[r][0]]
        except PeerFailure as lost:
            return lost
        if dead:
            return PeerFailure(
                f"{_ranks(dead)} stopped responding during {during}; see {'its' if len(dead) == 1 else 'their'} log ({error})",
                ranks=dead,
            )
        return PeerFailure(f"{during} failed: {error}")


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


_PEERS: _Peers | None = None
_OWNS_GROUP = False
