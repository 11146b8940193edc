"""torchrun for runner pods, exiting with a worker's own exit code.

    python -m assay.runner.launch <torchrun's arguments> -m assay.runner

torchrun exits 1 whatever its workers exited with, but the Job's podFailurePolicy decides by
the pod's exit code: 78 (the spec cannot run) fails the Job at once, 75 (this rank stopped
because a peer reported its own failure) is ignored so that one fault costs one retry of
backoffLimit. This runs torchrun's own launcher in-process and, when workers fail, exits
with the code of the one that failed for a reason of its own.

A retried pod can start while the failed attempt's rank 0 is still ending: it then reaches that
attempt's rendezvous, already closed, and torchrun gives up at once; or it finds no rendezvous
at all until rank 0's replacement is up (the Job starts that pod only after a back-off), and
torchrun gives up after its 60-second connect timeout, having resolved rank 0's name while it
still pointed at the old pod. Neither is a fault of this run, so the launcher joins again
(every few seconds, for a bounded time) until rank 0's replacement hosts a fresh rendezvous;
were it to fail instead, a second pod failure would spend the Job's retry on the same fault.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from assay import spec as spec_module


class WorkerFailure(Protocol):
    """What this module reads of torch.distributed.elastic's ProcessFailure."""

    exitcode: int
    timestamp: int


def pod_exit_code(failures: Mapping[int, WorkerFailure]) -> int:
    """The exit code that tells the pod's story, from each failed worker's (local rank → failure).

    First by time, a worker that failed for its own reason; else one that stopped for a
    peer (75); a negative code is a signal (the launcher stopping the rest, or the kernel),
    given as a shell would (128 + signal).
    """
    ordered = sorted(failures.values(), key=lambda failure: failure.timestamp)
    own = [f.exitcode for f in ordered if f.exitcode > 0 and f.exitcode != spec_module.PEER_FAILED_EXIT_CODE]
    peer = [f.exitcode for f in ordered if f.exitcode == spec_module.PEER_FAILED_EXIT_CODE]
    signalled = [128 - f.exitcode for f in ordered if f.exitcode < 0]
    return next(iter(own or peer or signalled), 1)


REJOIN_EVERY_S = 5.0
REJOIN_FOR_S = 300.0
"""How long an unmet rendezvous is retried: a failed attempt's pods end within seconds, and
the Job's replacement for rank 0 starts, after its back-off, from an image the node already has."""


def main(argv: Sequence[str] | None = None, *, rejoin_for_s: float = REJOIN_FOR_S) -> int:
    # torch's launcher is untyped: reached through Any.
    torchrun: Any = importlib.import_module("torch.distributed.run")
    errors: Any = importlib.import_module("torch.distributed.elastic.multiprocessing.errors")
    rendezvous: Any = importlib.import_module("torch.distributed.elastic.rendezvous.api")
    args = torchrun.parse_args(list(sys.argv[1:] if argv is None else argv))
    give_up_at = time.monotonic() + rejoin_for_s
    while True:
        try:
            torchrun.run(args)
        except errors.ChildFailedError as failed:
            print(failed.format_msg(), file=sys.stderr)  # torchrun's summary: which rank, which code
            return pod_exit_code(failed.failures)
        except (rendezvous.RendezvousClosedError, rendezvous.RendezvousConnectionError) as unmet:
            if time.monotonic() + REJOIN_EVERY_S > give_up_at:
                raise
            found = "is closed" if isinstance(unmet, rendezvous.RendezvousClosedError) else "cannot be reached"
            print(
                f"assay launcher: the rendezvous at {args.rdzv_endpoint} {found} (a previous attempt's"
                f" pods are still ending, or rank 0's pod is not up yet); joining again in {REJOIN_EVERY_S:g} s",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(REJOIN_EVERY_S)
            continue
        return 0


if __name__ == "__main__":
    sys.exit(main())
