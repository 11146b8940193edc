"""Which exit code a runner pod's launcher gives when its workers failed."""

from __future__ import annotations

import dataclasses

import pytest

from assay.runner.launch import pod_exit_code


@dataclasses.dataclass
class Failure:
    exitcode: int
    timestamp: int


@pytest.mark.parametrize(
    ("failures", "code"),
    [
        ({0: Failure(1, 10)}, 1),
        ({0: Failure(78, 10)}, 78),
        ({0: Failure(75, 10)}, 75),  # stopped for a peer on another node: ignored by the Job
        ({0: Failure(75, 10), 1: Failure(3, 12)}, 3),  # a local worker's own failure wins over a peer stop
        ({0: Failure(3, 12), 1: Failure(17, 10)}, 17),  # the first by time
        ({0: Failure(-15, 9), 1: Failure(1, 10)}, 1),  # the launcher stopping a worker is not a cause
        ({0: Failure(-9, 10)}, 137),  # killed by a signal: as a shell says it
    ],
)
def test_pod_exit_code(failures: dict[int, Failure], code: int) -> None:
    assert pod_exit_code(failures) == code
