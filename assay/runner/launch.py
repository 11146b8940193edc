"""torchrun for runner pods, exiting with a worker's own exit code.

    python -m assay.runner.launch <torchrun's arguments> -m assay.runner

torchrun exits 1 whatever its workers exited with, but the Job's podFailurePolicy decides by
the pod's exit code: 78 (the spec cannot run) fails the Job at once, 75 (this rank stopped
because a peer reported its own failure) is ignored so that one fault costs one retry of
backoffLimit. This runs torchrun's own launcher in-process and, when workers fail, exits
with the code of the one that failed for a reason of its own.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Mapping, Protocol, Sequence

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


def main(argv: Sequence[str] | None = None) -> int:
    # torch's launcher is untyped: reached through Any.
    torchrun: Any = importlib.import_module("torch.distributed.run")
    errors: Any = importlib.import_module("torch.distributed.elastic.multiprocessing.errors")
    args = torchrun.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        torchrun.run(args)
    except errors.ChildFailedError as failed:
        print(failed.format_msg(), file=sys.stderr)  # torchrun's summary: which rank, which code
        return pod_exit_code(failed.failures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
