"""What to do for one Evaluation, decided from what exists: a pure plan.

The handlers list the Evaluation's Jobs, call `plan`, and carry the plan out. Keeping the
decision here, apart from API calls, is what makes "idempotent" checkable: the same
Evaluation and the same Jobs always give the same plan, and a plan carried out twice
creates nothing twice (children have deterministic names; AlreadyExists of its own means done).

Rules:
- a run is identified by its generation and its rerun token (`evaluations.assay.dev/rerun`, recorded
  in `status.rerunToken`);
- a finished run of the current generation and token is left alone (an operator restart
  re-runs nothing); a new token asks for a fresh run of the same spec;
- a Job whose spec hash and token equal the current ones is the current run, even if made
  for an older generation: a change of `suspend` alone pauses or resumes it, not replaces it;
- a Job with a Kueue queue label is created suspended and never suspended or resumed by
  the operator: Kueue admits it by setting `suspend: false`, and preempts it by setting it back;
- otherwise the current generation gets a new Job and every other Job is deleted, with its
  headless Service and its NetworkPolicy.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from assay.operator import objects
from assay.operator.build import builders, children
from assay.operator.build.runner_settings import RunnerSettings
from assay.operator.decide import conditions
from assay.spec import Evaluation

Manifest = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Plan:
    create: tuple[Manifest, ...] = ()
    """Children to create; one that exists already is fine when it is this Evaluation's (`runtime.owned`)."""
    delete_jobs: tuple[str, ...] = ()
    """Jobs of superseded runs (deleted with their pods)."""
    delete_services: tuple[str, ...] = ()
    """Headless Services of superseded runs."""
    delete_network_policies: tuple[str, ...] = ()
    """NetworkPolicies of superseded runs: named as their Jobs are."""
    suspend_job: tuple[str, bool] | None = None
    """(Job, suspend) when the current run's Job must be paused or resumed."""
    status: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Merge patch for the Evaluation's status."""
    new_run: bool = False
    refused: str | None = None
    """Set when carried out: the API server refused a child for what it is (`refusals`), and
    the Evaluation failed with its words instead; nothing after that child was done."""

    @property
    def is_noop(self) -> bool:
        return not (
            self.create
            or self.delete_jobs
            or self.delete_services
            or self.delete_network_policies
            or self.suspend_job
            or self.status
        )

    def summary(self) -> str:
        """One line for the operator's log: what this plan does."""
        if self.refused is not None:
            return f"refused by the API server: {self.refused}"
        jobs = [str(m["metadata"]["name"]) for m in self.create if m.get("kind") == "Job"]
        parts = [f"new run, Job {', '.join(jobs)}" if self.new_run else "the current run kept"]
        if self.delete_jobs:
            parts.append(f"superseded Jobs deleted: {', '.join(self.delete_jobs)}")
        if self.suspend_job:
            parts.append(f"Job {self.suspend_job[0]} {'suspended' if self.suspend_job[1] else 'resumed'}")
        return "; ".join(parts) + "."


def plan(
    body: objects.Evaluation,
    spec: Evaluation,
    *,
    jobs: Sequence[Mapping[str, Any]],
    services: Sequence[Mapping[str, Any]] = (),
    now: datetime.datetime,
    runner: RunnerSettings = RunnerSettings(),
    baseline: Manifest | None = None,
) -> Plan:
    ref = builders.EvaluationRef.from_body(body)  # `baseline`: `children.children`'s
    status = body.get("status") or {}
    if _finished(status, ref):
        return Plan()

    wanted_hash = builders.spec_hash(spec)
    current = _current_job(jobs, wanted_hash, ref.rerun)
    new_run = current is None
    job_name = builders.job_name(ref) if current is None else current["metadata"]["name"]
    manifests = children.children(ref, spec, job_name_override=job_name, runner=runner, baseline=baseline)
    if not new_run:
        # The run exists: make sure its helpers do, but never re-create its Job, nor a
        # headless Service listed as this Evaluation's already (no request for nothing).
        listed = {s["metadata"]["name"] for s in services if not s["metadata"].get("deletionTimestamp")}
        manifests = [
            m
            for m in manifests
            if m["kind"] != "Job" and not (m["kind"] == "Service" and m["metadata"]["name"] in listed)
        ]
    suspend = None
    # A Kueue-queued Job is Kueue's to suspend and admit; flipping it would fight Kueue.
    if (
        current is not None
        and not builders.queued(spec)
        and bool((current.get("spec") or {}).get("suspend")) != spec.suspend
    ):
        suspend = (job_name, spec.suspend)

    status_patch = conditions.accepted(
        status,
        job_name=job_name,
        generation=ref.generation,
        now=now,
        new_run=new_run or status.get("jobName") != job_name,
    )
    status_patch["model"] = spec.model_label
    status_patch["rerunToken"] = ref.rerun  # None (nothing written) while no token was ever set
    if new_run:
        status_patch["outputDir"] = builders.output_dir(ref, spec)
    status_patch = {k: v for k, v in status_patch.items() if status.get(k) != v}
    superseded = tuple(_names(jobs, keep=job_name))
    return Plan(
        create=tuple(manifests),
        delete_jobs=superseded,
        delete_services=tuple(_names(services, keep=job_name)),
        delete_network_policies=superseded,
        suspend_job=suspend,
        status=status_patch,
        new_run=new_run,
    )


def rejection(body: objects.Evaluation, message: str, *, now: datetime.datetime) -> Mapping[str, Any]:
    """The status patch for a spec that cannot run; {} if already recorded."""
    ref_generation = int((body.get("metadata") or {}).get("generation", 1))
    status = body.get("status") or {}
    if (
        status.get("observedGeneration") == ref_generation
        and status.get("phase") == conditions.FAILED
        and status.get("message") == message
    ):
        return {}
    return conditions.rejected(status, message=message, generation=ref_generation, now=now)


def _finished(status: Mapping[str, Any], ref: builders.EvaluationRef) -> bool:
    """Whether the run `ref` names has finished: the current generation, the same token, a terminal phase."""
    return (
        status.get("observedGeneration") == ref.generation
        and status.get("phase") in conditions.TERMINAL_PHASES
        and status.get("rerunToken") == ref.rerun
    )


def _current_job(jobs: Sequence[Mapping[str, Any]], wanted_hash: str, rerun: str | None) -> Mapping[str, Any] | None:
    """The live Job made for this spec and token; a Job of another token is a superseded run, even for the same spec."""
    for job in jobs:
        meta = job.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        annotations = meta.get("annotations") or {}
        if (
            annotations.get(builders.ANNOTATION_SPEC_HASH) == wanted_hash
            and annotations.get(builders.ANNOTATION_RERUN) == rerun
        ):
            return job
    return None


def _names(found: Sequence[Mapping[str, Any]], *, keep: str) -> list[str]:
    return sorted(
        o["metadata"]["name"]
        for o in found
        if o["metadata"]["name"] != keep and not o["metadata"].get("deletionTimestamp")
    )
