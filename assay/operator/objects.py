"""The Kubernetes objects the operator reads, as the API server sends them: TypedDicts of raw JSON.

Only the fields the operator reads (the API server sends more; a TypedDict does not mind).
Every field is optional (`total=False`): a Job without status, a pod not yet scheduled, an
Event of the older core/v1 shape all lack some, so a reader says what it does when one is
missing. The runtime casts what comes off the wire or from kopf to these types once, at
the boundary; decide/ reads them typed. Pure types: below every role of the operator.
"""

from __future__ import annotations

from typing import Any, TypedDict

from assay.spec import status as status_schema

# -- shared --------------------------------------------------------------------------------


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]


class Condition(TypedDict, total=False):
    """A status condition: an Evaluation's (metav1.Condition), a Job's or a pod's."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str
    lastProbeTime: str
    observedGeneration: int


class ObjectReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    namespace: str
    uid: str


# -- Evaluation (assay.dev/v1alpha1; deploy/crds/evaluations.assay.dev.yaml) ---------------


# The status is the runner's and the operator's both: typed below them, in assay.spec.status.
Progress = status_schema.Progress
OutputFiles = status_schema.OutputFiles
Comparison = status_schema.Comparison
RunTiming = status_schema.RunTiming
TaskSource = status_schema.TaskSource
EvaluationStatus = status_schema.EvaluationStatus


class Evaluation(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    """The user's spec, read through `assay.spec` (typed there), not here."""
    status: EvaluationStatus


# -- Job and pod (the subsets the operator reads) ------------------------------------------


class JobStatus(TypedDict, total=False):
    active: int
    ready: int
    succeeded: int
    failed: int
    startTime: str
    completionTime: str
    conditions: list[Condition]


class Job(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: JobStatus


class ContainerStateWaiting(TypedDict, total=False):
    reason: str
    message: str


class ContainerStateRunning(TypedDict, total=False):
    startedAt: str


class ContainerStateTerminated(TypedDict, total=False):
    exitCode: int
    signal: int
    reason: str
    message: str
    startedAt: str
    finishedAt: str


class ContainerState(TypedDict, total=False):
    waiting: ContainerStateWaiting
    running: ContainerStateRunning
    terminated: ContainerStateTerminated


class ContainerStatus(TypedDict, total=False):
    name: str
    image: str
    imageID: str
    ready: bool
    started: bool
    restartCount: int
    state: ContainerState
    lastState: ContainerState


class PodStatus(TypedDict, total=False):
    phase: str
    reason: str
    message: str
    startTime: str
    conditions: list[Condition]
    containerStatuses: list[ContainerStatus]
    initContainerStatuses: list[ContainerStatus]


class Pod(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: PodStatus


# -- Event (core/v1) -----------------------------------------------------------------------


class EventSource(TypedDict, total=False):
    component: str
    host: str


class EventSeries(TypedDict, total=False):
    count: int
    lastObservedTime: str


class Event(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    involvedObject: ObjectReference
    type: str
    reason: str
    message: str
    count: int
    firstTimestamp: str | None
    lastTimestamp: str | None
    eventTime: str | None
    series: EventSeries
    source: EventSource
    reportingComponent: str
    reportingInstance: str


# -- Lease (coordination.k8s.io/v1) --------------------------------------------------------


class LeaseSpec(TypedDict, total=False):
    holderIdentity: str | None
    leaseDurationSeconds: int
    acquireTime: str
    renewTime: str
    leaseTransitions: int


class Lease(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: LeaseSpec
