"""The cluster commands' arguments (kubectl's names: -n, -l, -A, -o, -f) and what each runs.

Only the arguments are defined at import: `assay.cli` imports this for every command, and
the views (with the operator's names and the runner's table) load when one of these runs.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import textwrap
from typing import TYPE_CHECKING, Any

from assay import echoed_text
from assay.errors import UsageError
from assay.spec import status as schema

if TYPE_CHECKING:
    from assay.cli_cluster import cluster_api

COMMANDS = ("get", "results", "logs", "describe")
RESULTS_FORMATS = ("table", "json", "markdown")
_CONNECTION = textwrap.dedent("""
    The cluster is found as kubectl finds it: --kubeconfig, else $KUBECONFIG, else
    ~/.kube/config, else the pod's service account; the namespace is -n, else the
    current context's, else default.
""")


def add_parsers(sub: Any) -> None:
    """`get`, `results`, `logs` and `describe` under `assay`'s subcommands."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", default=None, help="Namespace (default: the current context's)")
    common.add_argument(
        "--kubeconfig", default=None, metavar="FILE", help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    common.add_argument("--context", default=None, help="Kubeconfig context (default: its current-context)")

    def command(name: str, text: str, description: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(
            name,
            parents=[common],
            help=text,
            description=description,
            epilog=_CONNECTION,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        return parser

    get = command(
        "get",
        "List Evaluations on the cluster: phase, progress, regression",
        "List Evaluations like `kubectl get evals`: phase, reason, progress, the verdict against the baseline, age.",
    )
    get.add_argument("name", nargs="?", metavar="NAME", help="One Evaluation (default: all in the namespace)")
    get.add_argument("-l", "--selector", default=None, help="Label selector, e.g. assay.dev/suite=nightly")
    get.add_argument("-A", "--all-namespaces", action="store_true", help="Evaluations of every namespace")
    get.add_argument("-o", "--output", choices=["wide", "json"], default=None, help="wide (adds the message) or json")

    results = command(
        "results",
        "Print an Evaluation's scores as lm-eval's results table",
        "Print the scores in an Evaluation's status as lm-eval's results table (or its results JSON), "
        "and the comparison with the baseline when there is one.",
    )
    results.add_argument("name", metavar="NAME")
    results.add_argument("--format", choices=RESULTS_FORMATS, default="table", help="table (default), json or markdown")

    logs = command(
        "logs",
        "Print the runner pods' logs (rank 0 first)",
        "Print the logs of an Evaluation's runner pods: rank 0's by default, every attempt oldest first.",
    )
    logs.add_argument("name", metavar="NAME")
    logs.add_argument("--all-ranks", action="store_true", help="Every rank's pods too, in rank order")
    logs.add_argument("-f", "--follow", action="store_true", help="Keep streaming until the runner ends")

    about = command(
        "describe",
        "Say what happened to an Evaluation, why, and what to do",
        "An Evaluation in plain words: what happened, why and what to do; its conditions and recent Events.",
    )
    about.add_argument("name", metavar="NAME")


def run(args: argparse.Namespace) -> int:
    from assay.cli_cluster import cluster_api, pod_logs, results_view

    target = cluster_api.find_target(kubeconfig=args.kubeconfig, context=args.context)
    cluster = cluster_api.Cluster(target)
    namespace = args.namespace or target.namespace
    now = datetime.datetime.now(datetime.timezone.utc)
    if args.command == "get":
        return _get(cluster, args, namespace=namespace, now=now)
    evaluation = cluster.evaluation(namespace=namespace, name=args.name)
    if args.command == "results":
        status = schema.of(evaluation)
        if status.get("results") is None:
            raise cluster_api.ClusterError(
                f'Evaluation "{args.name}" has no results in its status yet ({_state(status)}).'
            )
        sys.stdout.write(results_view.render(evaluation, args.format))
        return 0
    if args.command == "logs":
        return pod_logs.show(cluster, evaluation, all_ranks=args.all_ranks, follow=args.follow)
    sys.stdout.write(_describe(cluster, evaluation, namespace=namespace, now=now))
    return 0


def _get(cluster: cluster_api.Cluster, args: argparse.Namespace, *, namespace: str, now: datetime.datetime) -> int:
    from assay.cli_cluster import listing

    if args.name and args.all_namespaces:
        raise UsageError("NAME and --all-namespaces do not go together: a name is looked up in one namespace.")
    if args.name:
        found = [cluster.evaluation(namespace=namespace, name=args.name)]
    else:
        found = cluster.evaluations(namespace=None if args.all_namespaces else namespace, selector=args.selector)
    if args.output == "json":
        print(listing.as_json(found, single=bool(args.name)))
    elif not found:
        where = "any namespace" if args.all_namespaces else f"namespace {namespace}"
        print(
            f"No Evaluations found in {where}{' matching ' + args.selector if args.selector else ''}.", file=sys.stderr
        )
    else:
        sys.stdout.write(listing.table(found, now=now, all_namespaces=args.all_namespaces, wide=args.output == "wide"))
    return 0


def _state(status: schema.EvaluationStatus) -> str:
    state = f"phase {status.get('phase') or 'Pending'}"
    detail = (
        (status.get("progress") or {}).get("summary") if status.get("phase") == "Running" else status.get("message")
    )
    return f"{state}: {echoed_text.bounded(str(detail), 300)}" if detail else state


def _describe(
    cluster: cluster_api.Cluster, evaluation: dict[str, Any], *, namespace: str, now: datetime.datetime
) -> str:
    from assay.cli_cluster import cluster_api, describe, pod_logs

    job = schema.of(evaluation).get("jobName")
    try:
        pods = cluster.pods(namespace=namespace, selector=pod_logs.selector(job)) if job else []
        events = cluster.events(namespace=namespace)
    except cluster_api.ClusterError as error:  # a role may read Evaluations and not pods or Events
        return describe.render(evaluation, pods=[], events=None, now=now, unread=str(error))
    return describe.render(evaluation, pods=pods, events=events, now=now)
