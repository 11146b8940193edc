"""The operator's settings from its environment, read once at start into one frozen record.

The chart sets the operator's environment (values.yaml → the Deployment's env); `main` reads
`os.environ` once, through `from_env`, and passes the record on: the flags' defaults, the
admin's policy, what runner pods get (`build.runner_settings.RunnerSettings`, kept in
`OperatorState.runner`), the metrics' bounds, the API client's rate limit, the leader's
identity. No other module of the operator reads the environment (the Kubernetes client's
own discovery of its credentials, $KUBECONFIG and the in-cluster service variables, aside),
and build/ and admission/ read none at all (tests/operator/test_operator_settings.py). A bad
value is named in one sentence before the operator talks to the API server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from assay.errors import UserError
from assay.operator.admission.policy import AdminPolicy
from assay.operator.build import runner_settings
from assay.operator.build.runner_settings import RunnerSettings
from assay.operator.decide.diagnosis import DEFAULT_IMAGE_PULL_TIMEOUT
from assay.operator.kube import rate_limit

NAMESPACES_ENV = "ASSAY_NAMESPACES"
"""Comma-separated namespaces to watch when the command line names none; unset: all."""
IMAGE_PULL_TIMEOUT_ENV = "ASSAY_IMAGE_PULL_TIMEOUT"
"""Seconds a runner image may fail to pull before its Evaluation fails (default 300)."""
SCORE_SERIES_ENV = "ASSAY_SCORE_SERIES"
MAX_SERIES_ENV = "ASSAY_MAX_SERIES_PER_EVALUATION"
DEFAULT_MAX_SERIES = 500
"""Per-metric series (scores, their stderr and interval, deltas) one Evaluation may have
(the chart's metrics.maxSeriesPerEvaluation)."""
METRICS_PORT_ENV = "ASSAY_METRICS_PORT"
METRICS_SECURE_ENV = "ASSAY_METRICS_SECURE"
METRICS_CERT_DIR_ENV = "ASSAY_METRICS_CERT_DIR"
HEALTH_PORT_ENV = "ASSAY_HEALTH_PORT"
DEFAULT_METRICS_PORT = 9090
DEFAULT_HEALTH_PORT = 8080
POD_NAMESPACE_ENV = "POD_NAMESPACE"
POD_NAME_ENV = "POD_NAME"


@dataclasses.dataclass(frozen=True)
class OperatorSettings:
    """Everything the operator's environment says; `OperatorSettings()` is an empty environment."""

    runner: RunnerSettings = RunnerSettings()
    """What runner pods get by default; its `policy` is the admin's (ASSAY_POLICY)."""
    namespaces: tuple[str, ...] = ()
    image_pull_timeout: float = DEFAULT_IMAGE_PULL_TIMEOUT
    score_series: str = "all"
    max_series_per_evaluation: int = DEFAULT_MAX_SERIES
    api_qps: float = rate_limit.DEFAULT_QPS
    """Requests a second to the API server; 0 or less: no limit."""
    api_burst: int = rate_limit.DEFAULT_BURST
    metrics_port: int = DEFAULT_METRICS_PORT
    metrics_secure: bool = False
    metrics_cert_dir: str | None = None
    health_port: int = DEFAULT_HEALTH_PORT
    pod_namespace: str | None = None
    """The operator's own namespace (the chart sets POD_NAMESPACE), where its Lease lives."""
    pod_name: str | None = None
    """The operator's pod (POD_NAME): its identity as a leader."""

    @property
    def policy(self) -> AdminPolicy:
        return self.runner.policy

    def api_limiter(self) -> rate_limit.TokenBucket | None:
        """A fresh token bucket of this rate; None (no limit) when the rate is 0 or less."""
        return rate_limit.TokenBucket(qps=self.api_qps, burst=self.api_burst) if self.api_qps > 0 else None


def from_env(env: Mapping[str, str]) -> OperatorSettings:
    """The settings `env` (the operator's `os.environ`) gives; UserError naming a bad value and its fix."""
    policy = AdminPolicy.from_env(env)
    qps, burst = rate_limit.rate_of(env)
    return OperatorSettings(
        runner=runner_settings.from_env(env, policy=policy),
        namespaces=tuple(ns.strip() for ns in env.get(NAMESPACES_ENV, "").split(",") if ns.strip()),
        image_pull_timeout=image_pull_timeout(env.get(IMAGE_PULL_TIMEOUT_ENV, "")),
        score_series=env.get(SCORE_SERIES_ENV, "").strip() or "all",
        max_series_per_evaluation=max_series(env.get(MAX_SERIES_ENV, "")),
        api_qps=qps,
        api_burst=burst,
        metrics_port=_port(env, METRICS_PORT_ENV, DEFAULT_METRICS_PORT),
        metrics_secure=_flag(env.get(METRICS_SECURE_ENV, "")),
        metrics_cert_dir=env.get(METRICS_CERT_DIR_ENV) or None,
        health_port=_port(env, HEALTH_PORT_ENV, DEFAULT_HEALTH_PORT),
        pod_namespace=env.get(POD_NAMESPACE_ENV) or None,
        pod_name=env.get(POD_NAME_ENV) or None,
    )


def image_pull_timeout(raw: str) -> float:
    raw = raw.strip()
    if not raw:
        return DEFAULT_IMAGE_PULL_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise UserError(f"{IMAGE_PULL_TIMEOUT_ENV}={raw!r} is not a positive number of seconds; unset it for 300.")
    return value


def max_series(raw: str) -> int:
    """$ASSAY_MAX_SERIES_PER_EVALUATION (the chart's metrics.maxSeriesPerEvaluation), else DEFAULT_MAX_SERIES."""
    raw = raw.strip()
    if not raw:
        return DEFAULT_MAX_SERIES
    try:
        return int(raw)
    except ValueError:
        raise UserError(
            f"{MAX_SERIES_ENV}={raw!r} is not a whole number of series; unset it for {DEFAULT_MAX_SERIES}."
        ) from None


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise UserError(f"{name}={raw!r} is not a port number; unset it for {default}.") from None


def _flag(raw: str) -> bool:
    if raw.strip().lower() in ("", "0", "false", "no"):
        return False
    if raw.strip().lower() in ("1", "true", "yes"):
        return True
    raise UserError(f"{METRICS_SECURE_ENV}={raw!r} is neither true nor false.")
