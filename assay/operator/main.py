"""`assay operator`: run the kopf operator with its Prometheus endpoint.

    assay operator [--namespace NS ... | --all-namespaces] [--metrics-port P] [--metrics-secure]
                   [--metrics-https] [--metrics-cert-dir DIR] [--standalone]

With neither --namespace nor --all-namespaces, ASSAY_NAMESPACES (comma-separated)
decides; unset means all namespaces. kopf runs standalone (no peering objects); with
--leader-election LEASE, replicas elect one leader through that Lease in their own
namespace and the others stand by (`assay.operator.runtime.leader`). The Helm chart does so.

With --metrics-secure (the chart's default), /metrics answers only bearer tokens the API
server authenticates and allows to get /metrics (`metrics_auth`); --metrics-cert-dir serves
it over HTTPS with a mounted certificate, --metrics-https (the chart's default too) with that
or else a self-signed certificate made at start (`metrics_tls`).

The cluster admin's policy (allowed runner images, remote and unsafe code, online runners,
GPU and node caps) comes from ASSAY_POLICY, the JSON of the chart's `policy` values; see
`assay.operator.admission.policy`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from assay.errors import UsageError, UserError
from assay.extras import require_installed
from assay.operator import settings as operator_settings
from assay.operator.admission.policy import HF_TOKEN_RE
from assay.operator.settings import OperatorSettings

if TYPE_CHECKING:
    from assay.operator.runtime.metrics import EvaluationMetrics
    from assay.operator.runtime.metrics_tls import TlsFiles


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


# kopf's debug line "Creation is in progress: {the whole object}" would copy what the user
# wrote (a refused literal token, kubectl's last-applied annotation) into the log.
_BODY_DUMP = re.compile(r"^(\w[\w ]* is in progress): [{].*", re.DOTALL)


class EvaluationPrefixFormatter(logging.Formatter):
    """Prefixes `[namespace/name]` to the lines kopf logs about one object; logs no object bodies.

    kopf's per-object logger carries the object in the record (`k8s_ref`) and leaves the
    prefix to its own formatter, which a root logging config replaces; without this, the
    handler lines of 300 Evaluations would not say which one they are about.
    """

    def format(self, record: logging.LogRecord) -> str:
        msg = str(record.msg)
        dump = _BODY_DUMP.match(msg)
        if dump:
            msg = f"{dump.group(1)} (the object is not logged: it may hold secrets)."
        ref = getattr(record, "k8s_ref", None)
        if isinstance(ref, dict) and ref.get("name"):
            prefix = f"[{ref['namespace']}/{ref['name']}]" if ref.get("namespace") else f"[{ref['name']}]"
            msg = f"{prefix} {msg}"
        if msg != record.msg:
            record = logging.makeLogRecord({**record.__dict__, "msg": msg})
        return HF_TOKEN_RE.sub("hf_<redacted>", super().format(record))


_ROUTINE_SUCCESS = re.compile(r"^(Indexer '\w+'|Handler '(evaluation_changed|mirror_job|mirror_pod)') succeeded\.$")


class RoutineSuccessFilter(logging.Filter):
    """Leaves out kopf's "succeeded" line of the handlers that run on every watch event.

    They only keep memory and mirror status; a line for each was most of the operator's log
    (about 20 lines per Evaluation) and a share of its CPU under a burst. Their failures, and
    every line of the reconcile handler, stay. `--verbose` shows them all.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.INFO and _ROUTINE_SUCCESS.match(str(record.msg)))


def build_parser(settings: OperatorSettings) -> argparse.ArgumentParser:
    """The flags, each defaulting to what the environment (`settings`) says."""
    parser = argparse.ArgumentParser(
        prog="assay operator",
        description="Run the Assay operator.",
        epilog="The admin's policy (allowed images, remote/unsafe code, online runners, GPU and node caps) "
        "is read from $ASSAY_POLICY, the JSON of the Helm chart's `policy` values.",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        metavar="NS",
        help="Watch this namespace (repeatable; globs as in kopf).",
    )
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="Watch every namespace.")
    _add_endpoint_flags(parser, settings)
    _add_run_flags(parser, settings)
    return parser


def _add_endpoint_flags(parser: argparse.ArgumentParser, settings: OperatorSettings) -> None:
    """/metrics (port, authentication, TLS) and /healthz."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=settings.metrics_port,
        help="Port of /metrics (0: none).",
    )
    parser.add_argument(
        "--metrics-secure",
        action=argparse.BooleanOptionalAction,
        default=settings.metrics_secure,
        help="Serve /metrics only to callers whose bearer token the API server authenticates and "
        "allows to get /metrics (TokenReview, SubjectAccessReview); default $ASSAY_METRICS_SECURE.",
    )
    parser.add_argument(
        "--metrics-cert-dir",
        default=settings.metrics_cert_dir,
        metavar="DIR",
        help="Serve /metrics over HTTPS with DIR/tls.crt and DIR/tls.key (a mounted kubernetes.io/tls "
        "Secret); default $ASSAY_METRICS_CERT_DIR.",
    )
    parser.add_argument(
        "--metrics-https",
        action="store_true",
        help="Serve /metrics over HTTPS: with --metrics-cert-dir's certificate, else a self-signed one "
        "made at start (made with the openssl command). Neither option: plain HTTP.",
    )
    parser.add_argument(
        "--health-port",
        type=int,
        default=settings.health_port,
        help="Port of the /healthz liveness and readiness endpoint (0: none).",
    )


def _add_run_flags(parser: argparse.ArgumentParser, settings: OperatorSettings) -> None:
    """How replicas share the work, what runner Jobs get by default, logging."""
    parser.add_argument("--standalone", action="store_true", help="Run without kopf peering (a single replica).")
    parser.add_argument(
        "--leader-election",
        metavar="LEASE",
        default=None,
        help="Elect one leader among replicas with this coordination.k8s.io Lease in the operator's "
        "namespace (POD_NAMESPACE); standbys wait and take over 15-20 s after the leader's loss.",
    )
    parser.add_argument(
        "--runner-image",
        default=settings.runner.default_image,
        help="Default image of runner Jobs whose spec sets none (spec.model vllm: "
        "$ASSAY_RUNNER_VLLM_IMAGE, else the assay-runner-vllm image).",
    )
    parser.add_argument(
        "--image-pull-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="Fail an Evaluation whose runner image has failed to pull for this long "
        "(default: $ASSAY_IMAGE_PULL_TIMEOUT, else 300).",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="Debug logging.")


def parse_args(argv: Sequence[str], settings: OperatorSettings | None = None) -> argparse.Namespace:
    """The command line; `settings` (by default this process's environment, read now) gives the defaults."""
    parser = build_parser(settings if settings is not None else operator_settings.from_env(os.environ))
    try:
        return parser.parse_args(list(argv))
    except SystemExit as exit:
        if exit.code in (0, None):
            raise
        raise UsageError("Invalid arguments of `assay operator`; see `assay operator --help`.") from None


def scope(args: argparse.Namespace, settings: OperatorSettings = OperatorSettings()) -> tuple[bool, list[str]]:
    """(clusterwide, namespaces) for kopf.run: the flags', else ASSAY_NAMESPACES' (`settings`); none: all."""
    if args.all_namespaces:
        return True, []
    namespaces = args.namespace or list(settings.namespaces)
    return (not namespaces), namespaces


DEEPEST_JSON = 12_000
"""Nesting levels of an Evaluation's JSON this process decodes and walks (see `allow_deep_json`)."""


def allow_deep_json() -> None:
    """A tenant's free-form spec fields (`metadata`, `modelArgs`, `genKwargs`) may nest as deep as
    the API server accepts: Python's JSON decoder stops at its recursion limit (1,000 levels by
    default), so one Evaluation nested 3,000 levels deep stopped kopf's watch and list of every
    Evaluation. The decoder recurses in C with small frames, so the main thread's and the
    handler threads' stacks hold this many (tested)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), DEEPEST_JSON))


def main(argv: Sequence[str]) -> int:
    # The one read of the environment: every setting, checked, before the credentials are looked at.
    settings = operator_settings.from_env(os.environ)
    args = parse_args(argv, settings)
    _configure_logging(verbose=args.verbose)
    allow_deep_json()
    # Before anything else is imported: a missing kopf or prometheus_client names the extra.
    require_installed("`assay operator`", "operator", "kopf", "prometheus_client")
    from assay.operator import handlers  # noqa: F401 - registers the handlers

    if args.image_pull_timeout is not None:
        if args.image_pull_timeout <= 0:
            raise UsageError(f"--image-pull-timeout {args.image_pull_timeout:g} is not a positive number of seconds.")
        settings = dataclasses.replace(settings, image_pull_timeout=args.image_pull_timeout)
    settings = dataclasses.replace(
        settings, runner=dataclasses.replace(settings.runner, default_image=args.runner_image or None)
    )
    metrics, tls = _metrics_settings(args, settings)
    _load_credentials(settings)
    from assay.operator.kube import api_client

    metrics.controller.watch_rate_limit(api_client.waited_seconds)
    if args.metrics_port:
        from assay.operator.runtime.metrics_auth import TokenAuthorizer

        metrics.start_server(args.metrics_port, authorizer=TokenAuthorizer() if args.metrics_secure else None, tls=tls)
    _run_kopf(args, settings=settings, metrics=metrics)
    return 0


def _configure_logging(*, verbose: bool) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(EvaluationPrefixFormatter(LOG_FORMAT))
    if not verbose:
        handler.addFilter(RoutineSuccessFilter())
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])


def _metrics_settings(
    args: argparse.Namespace, settings: OperatorSettings = OperatorSettings()
) -> tuple[EvaluationMetrics, TlsFiles | None]:
    """The metrics (score series from the environment) and /metrics' certificate, if any."""
    from assay.operator.runtime import metrics_tls
    from assay.operator.runtime.metrics import EvaluationMetrics

    metrics = EvaluationMetrics(
        score_series=settings.score_series, max_series_per_evaluation=settings.max_series_per_evaluation
    )
    if args.metrics_cert_dir:
        return metrics, metrics_tls.TlsFiles(args.metrics_cert_dir)
    return metrics, metrics_tls.self_signed() if args.metrics_https and args.metrics_port else None


def _load_credentials(settings: OperatorSettings) -> None:
    from assay.operator.kube import api_client

    try:
        api_client.load_config(limiter=settings.api_limiter())
    except Exception as error:
        raise UserError(
            f"No Kubernetes credentials ({error}): run the operator in a cluster or point KUBECONFIG at a kubeconfig."
        ) from None


def _run_kopf(args: argparse.Namespace, *, settings: OperatorSettings, metrics: EvaluationMetrics) -> None:
    """kopf's loop over the watched namespaces, as the elected leader when --leader-election says so."""
    import kopf

    from assay.operator.runtime.state import OperatorState

    clusterwide, namespaces = scope(args, settings)
    lead: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    metrics.controller.set_leader(not args.leader_election)  # a replica alone leads
    if args.leader_election:
        from assay.operator.runtime import leader

        lock = leader.LeaseLock(
            leader.own_namespace(settings.pod_namespace), args.leader_election, leader.own_identity(settings.pod_name)
        )
        lead = leader.leading(lock, health_port=args.health_port, on_change=metrics.controller.set_leader)
    with lead:
        kopf.run(
            clusterwide=clusterwide,
            namespaces=namespaces,
            # An elected leader is the only replica at work: no kopf peering either way.
            standalone=(args.standalone or bool(args.leader_election)) or None,
            liveness_endpoint=f"http://0.0.0.0:{args.health_port}/healthz" if args.health_port else None,
            memo=kopf.Memo(
                state=OperatorState(
                    policy=settings.policy,
                    metrics=metrics,
                    runner=settings.runner,
                    image_pull_timeout=settings.image_pull_timeout,
                )
            ),
        )
