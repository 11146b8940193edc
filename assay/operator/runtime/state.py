"""What the operator's handlers share, typed: one frozen record, kept by kopf as `memo.state`.

kopf hands every handler its `memo`, an untyped namespace; read with getattr and a default
at each use, every field's type and default lived in its readers. `main` makes the state
from its flags and the admin's policy; the startup handler (`handlers.configure`) replaces
it once with the pieces that run (the watches' cache, the thread pools, the decisions'
queue, the Event poster); every handler takes `memo.state` once and passes it on.

A bare `OperatorState()` is an operator without those pieces: no watches (every read goes
to the API), Events posted at once, the safe policy. Unit tests use one.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
from typing import TYPE_CHECKING

from assay.operator.admission.policy import AdminPolicy
from assay.operator.build.runner_settings import RunnerSettings
from assay.operator.decide import diagnosis
from assay.operator.runtime.metrics import EvaluationMetrics

if TYPE_CHECKING:  # the modules that take the state as an argument
    from assay.operator.runtime.converge import UnfinishedRuns
    from assay.operator.runtime.decisions import RunDecisions
    from assay.operator.runtime.events import EventPoster
    from assay.operator.runtime.observe import PendingEvaluations
    from assay.operator.runtime.watched import Watched


@dataclasses.dataclass(frozen=True)
class OperatorState:
    policy: AdminPolicy = AdminPolicy()
    """The admin's policy (ASSAY_POLICY), read once by `main`."""
    metrics: EvaluationMetrics = dataclasses.field(default_factory=EvaluationMetrics)
    """The Prometheus series, the controller's own included."""
    runner: RunnerSettings = RunnerSettings()
    """What runner pods get from the operator's settings (images, GPU resource, memory, egress), read once by `main`."""
    image_pull_timeout: float = diagnosis.DEFAULT_IMAGE_PULL_TIMEOUT
    """Seconds a runner image may fail to pull before its Evaluation fails."""
    watched: Watched | None = None
    """The newest bodies the watches showed (kopf's index handlers fill it); None: read from the API."""
    events: EventPoster | None = None
    """The Event poster thread; None: each Event is posted at once, on the calling thread."""
    pending: PendingEvaluations | None = None
    """The Evaluations last seen Pending, which the pending sweep looks at again."""
    unfinished: UnfinishedRuns | None = None
    """The unfinished runs, whose Jobs the lost-Job sweep looks for."""
    decisions: RunDecisions | None = None
    """The queue of run decisions; None: no run is decided."""
    executor: concurrent.futures.Executor | None = None
    """kopf's handler threads, which decide runs and make lost Jobs again."""
    mirror_executor: concurrent.futures.Executor | None = None
    """The threads mirroring runner Jobs and pods into status."""
    stopping: threading.Event = dataclasses.field(default_factory=threading.Event)
    """Set when the operator stops: the sweeps made with this state end (`periodic`)."""
