"""The operator under a burst of Evaluations, on a real control plane (no node): a table.

    python bench/operator_scale.py [--n 100 300] [--workers 8] [--spec-kib K] [--in-flight M] [--storm ROUNDS]

Starts etcd, kube-apiserver and kube-controller-manager (tests/e2e/cluster, binaries built
by tests/e2e/cluster/build.sh) with an audit log, runs `assay operator` as a local
process under its own user, creates N Evaluations in one burst from `--workers` threads,
and prints per N:

- apply-to-Job p50/p99: from an Evaluation's create call returning to its Job appearing
  on a watch;
- operator peak RSS (VmHWM) and RSS after the burst settles (VmRSS); `--spec-kib K` gives
  every Evaluation a `samples` list of about K KiB, for the memory that large specs cost;
- API requests per Evaluation (the operator's user in the audit log; its watches too), and
  by verb and resource below the table;
- the API server's CPU per Evaluation (its CPU over the burst / N) and, with `--in-flight M`,
  per in-flight run (its CPU over 20 s of the runs' progress writes alone, less 10 s idle, / M);
- the seconds the operator waited on its own token bucket over the burst (its
  assay_operator_rate_limit_wait_seconds_total; `--api-qps`, `--api-burst` set the bucket);
- with `--storm ROUNDS`: after the burst, a resync storm (every Evaluation asked to run again,
  ROUNDS times; `bench/scale_measures.py`): the operator's requests a second from the audit log,
  and its wait on the bucket;
- duplicate reconciles: Evaluations whose run was decided more than once
  (the operator's own log lines, which name their Evaluation);
- status writes per second (the operator's patches of evaluations/status, over the burst);
- `/metrics` scrape time (mean of 5, after the burst);
- with `--in-flight M`: M Evaluations whose runs were decided (each has its Job) before the
  burst, whose status a writer patches as their runners would (bench/in_flight.py: progress
  and timing, each once every `--progress-interval` seconds, by default the interval the
  operator gives M runs in flight, each write a percent on) through the burst; the table
  gives M and the writes/s achieved. Latencies and requests are the burst's (the writer is
  the admin, not in the audit log); duplicates count every Evaluation, the in-flight ones too;
- the API server's CPU-seconds over the burst, and every process's on the line below the table.

A benchmark, not a test: the numbers depend on the machine (docs/performance.md's table says which).
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import in_flight  # noqa: E402
from bench import scale_measures as sm  # noqa: E402
from tests.e2e.cluster import control_plane as cp  # noqa: E402

OPERATOR_USER = "assay-operator"
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
    users: [assay-operator]
  - level: None
"""


class AuditedControlPlane(cp.ControlPlane):
    """The e2e control plane, with an operator user and an audit log of that user's requests."""

    operator_token = "operator-" + os.urandom(8).hex()

    def _spawn(self, name: str, args: list[str]) -> Any:
        if name == "kube-apiserver":
            with open(self.workdir / "tokens.csv", "a") as tokens:
                tokens.write(f'{self.operator_token},{OPERATOR_USER},{OPERATOR_USER},"system:masters"\n')
            (self.workdir / "audit-policy.yaml").write_text(AUDIT_POLICY)
            args = [
                *args,
                f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
            ]
        return super()._spawn(name, args)

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"


API_QPS: float | None = None
API_BURST: int | None = None
"""--api-qps and --api-burst: the operator's token bucket (None: its defaults)."""
SPEC_KIB = 0
"""--spec-kib: each Evaluation's spec carries a `samples` list of about this many KiB (0: none)."""


def evaluation(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": "dummy",
        "tasks": ["arc_easy"],
        "limit": 4,
        "resources": {"nodes": 1, "gpusPerNode": 0},
        "cache": {"offline": True},
        "backoffLimit": 0,
    }
    if SPEC_KIB:
        del spec["limit"]  # the CRD takes `limit` or `samples`, not both
        # 7 bytes an index, split over two tasks: the CRD takes 100,000 indices a task at most
        half = SPEC_KIB * 1024 // 14
        spec["tasks"] = ["arc_easy", "arc_challenge"]
        spec["samples"] = {task: list(range(100_000, 100_000 + half)) for task in spec["tasks"]}
    return {"apiVersion": "assay.dev/v1alpha1", "kind": "Evaluation", "metadata": {"name": name}, "spec": spec}


cpu_seconds, percentile, peak_rss_mb, scrape_ms = sm.cpu_seconds, sm.percentile, sm.peak_rss_mb, sm.scrape_ms


def start_operator(
    plane: AuditedControlPlane, namespace: str, workdir: Path
) -> tuple[subprocess.Popen[bytes], Path, int]:
    """`assay operator` as the operator user, watching `namespace`; returns once it watches."""
    kubeconfig = cp.write_kubeconfig(
        workdir / f"{namespace}.kubeconfig",
        cp.kubeconfig(server=plane.server, ca_file=plane.ca_file, token=plane.operator_token, user=OPERATOR_USER),
    )
    metrics_port = cp.free_port()
    log_path = workdir / f"{namespace}-operator.log"
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "PYTHONPATH": str(REPO),
        "ASSAY_RUNNER_IMAGE": "localhost/assay-runner:bench",
        **({"ASSAY_API_QPS": f"{API_QPS:g}"} if API_QPS is not None else {}),
        **({"ASSAY_API_BURST": str(API_BURST)} if API_BURST is not None else {}),
    }
    # At the chart's default log level (info): debug logging alone costs the operator a third more CPU.
    operator = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "assay",
            "operator",
            "--standalone",
            "-n",
            namespace,
            f"--metrics-port={metrics_port}",
            "--health-port=0",
        ],
        env=env,
        stdout=open(log_path, "wb"),
        stderr=subprocess.STDOUT,
    )
    warm_up(plane, namespace, operator, log_path)
    return operator, log_path, metrics_port


def warm_up(plane: AuditedControlPlane, namespace: str, operator: subprocess.Popen[bytes], log_path: Path) -> None:
    """One Evaluation through to its Job: the burst then meets an operator that is watching."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(plane.admin_kubeconfig))
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        "assay.dev", "v1alpha1", namespace, "evaluations", evaluation("warm-up")
    )
    batch = client.BatchV1Api(api_client)
    deadline = time.monotonic() + 90
    while not batch.list_namespaced_job(namespace, label_selector="assay.dev/evaluation=warm-up").items:
        if time.monotonic() > deadline or operator.poll() is not None:
            raise RuntimeError(f"the operator did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.2)
    time.sleep(2)  # its status writes and Events settle


def burst(plane: AuditedControlPlane, namespace: str, n: int, workers: int) -> tuple[list[float], float]:
    """Create n Evaluations from `workers` threads; (apply-to-Job latencies, seconds until the last Job)."""
    from kubernetes import client, config, watch

    api_client = config.new_client_from_config(config_file=str(plane.admin_kubeconfig))
    custom, batch = client.CustomObjectsApi(api_client), client.BatchV1Api(api_client)
    created: dict[str, float] = {}
    seen: dict[str, float] = {}

    def watch_jobs() -> None:
        stream = watch.Watch()
        for event in stream.stream(batch.list_namespaced_job, namespace, timeout_seconds=600):
            name = (event["object"].metadata.labels or {}).get("assay.dev/evaluation")
            if name and name.startswith("ev-") and name not in seen:
                seen[name] = time.monotonic()
            if len(seen) >= n:
                stream.stop()

    watcher = threading.Thread(target=watch_jobs, daemon=True)
    watcher.start()
    time.sleep(1)
    started = time.monotonic()

    created.update(create_all(custom, [f"ev-{i:04d}" for i in range(n)], namespace, workers))
    print(f"N={n}: {n} Evaluations created in {time.monotonic() - started:.1f} s", flush=True)
    watcher.join(timeout=300)
    if os.environ.get("ASSAY_BENCH_TRACE"):
        for name in sorted(created, key=created.__getitem__):
            print(f"  {name} created {created[name] - started:6.2f}  Job {seen.get(name, float('nan')) - started:6.2f}")
    return [seen[name] - created[name] for name in created if name in seen], max(
        seen.values(), default=started
    ) - started


def create_all(custom: Any, names: list[str], namespace: str, workers: int) -> dict[str, float]:
    """Create the Evaluations `names` from `workers` threads; name → when its create call returned."""

    def create(name: str) -> tuple[str, float]:
        custom.create_namespaced_custom_object("assay.dev", "v1alpha1", namespace, "evaluations", evaluation(name))
        return name, time.monotonic()

    with ThreadPoolExecutor(workers) as pool:
        return dict(pool.map(create, names))


def run_one(plane: AuditedControlPlane, n: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    m, workers, profile = args.in_flight, args.workers, args.profile
    namespace = f"scale-{n}-{m}"
    plane.kubectl("create", "namespace", namespace)
    operator, log_path, metrics_port = start_operator(plane, namespace, workdir)
    create = functools.partial(create_all, namespace=namespace, workers=workers)
    processes = {"operator": operator.pid, **{p.name: p.popen.pid for p in plane._processes}, "bench": os.getpid()}
    apiserver = processes["kube-apiserver"]
    idle: list[float] = []
    interval = args.progress_interval or in_flight.progress_interval(m)
    writer = in_flight.start(
        plane.admin_kubeconfig,
        namespace,
        m,
        interval,
        create,
        before_writes=lambda: idle.append(sm.cpu_over(apiserver, 10)),
    )
    writing = sm.cpu_over(apiserver, 20) if m else 0.0
    per_run, in_flight_note = sm.in_flight_cpu(apiserver, m, idle[0] * 2 if idle else 0.0, writing, 20)
    waited_before = sm.scrape_counter(metrics_port)
    audit_start = plane.audit_log.stat().st_size if plane.audit_log.exists() else 0
    cpu_before = {name: cpu_seconds(pid) for name, pid in processes.items()}
    profiler = None
    if profile:
        # py-spy (pip install py-spy) samples the operator through the burst: collapsed stacks.
        record = "py-spy record --format raw --nonblocking --gil --duration 15".split()
        profiler = subprocess.Popen(
            [*record, "--pid", str(operator.pid), "-o", f"{profile}.{n}.txt"], stdout=subprocess.DEVNULL
        )
        time.sleep(1)
    try:
        latencies, seconds = burst(plane, namespace, n, workers)
        writer.stop()
        cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in processes.items()}
        time.sleep(10)  # the status writes that follow the Jobs settle before counting
        scrape, rss, settled_rss = (
            scrape_ms(metrics_port),
            peak_rss_mb(operator.pid),
            peak_rss_mb(operator.pid, "VmRSS"),
        )
        waited = sm.scrape_counter(metrics_port) - waited_before
        log_size = log_path.stat().st_size  # the burst's log: a storm decides every run again
        storm = (
            sm.run_storm(plane.admin_kubeconfig, namespace, n, args.storm, args.workers, metrics_port)
            if args.storm
            else None
        )
    finally:
        writer.stop()
        if profiler is not None:
            profiler.wait(timeout=60)
        operator.terminate()
        operator.wait(timeout=30)
    ours = sm.operator_events(plane.audit_log, audit_start, OPERATOR_USER)
    if storm is not None:
        began, ended, storm_waited = storm
        rates = sm.per_second([e for e in ours if sm.when(e) >= began], began, ended)
        bucket = (API_QPS or 100.0, API_BURST or 5000)
        storm = sm.storm_summary(rates, waited=storm_waited, qps=bucket[0], burst=bucket[1])
        ours = [e for e in ours if sm.when(e) < began]  # the burst's requests alone below
    status_writes = [
        e for e in ours if e["verb"] == "patch" and (e.get("objectRef") or {}).get("subresource") == "status"
    ]
    lines = log_path.read_bytes()[:log_size].decode(errors="replace").splitlines()
    if len(latencies) < n:
        print(f"Only {len(latencies)} of {n} Jobs appeared; the operator's log ends:", *lines[-40:], sep="\n")
    handler_runs: collections.Counter[str] = collections.Counter(
        line.split(f"[{namespace}/", 1)[1].split("]", 1)[0]
        for line in lines
        if "Run decided:" in line and f"[{namespace}/" in line
    )
    for prefix, count in (("ev-", n), ("run-", m)):
        decided = sum(1 for name in handler_runs if name.startswith(prefix))
        if decided < count:
            print(f"Only {decided} of {count} {prefix}* logged 'Run decided:'; the duplicate count misses the rest.")
    kinds = collections.Counter(
        f"{e['verb']} {(e.get('objectRef') or {}).get('resource', '?')}"
        + (f"/{e['objectRef']['subresource']}" if (e.get("objectRef") or {}).get("subresource") else "")
        for e in ours
    )
    other = collections.Counter(
        e.get("requestURI", "?").split("?")[0] for e in ours if not (e.get("objectRef") or {}).get("resource")
    )
    return {
        "n": n,
        "in_flight": m,
        "writes_per_s": writer.writes_per_s,
        "writer": writer.summary(),
        "jobs": len(latencies),
        "other": other.most_common(8),
        "seconds": seconds,
        "cpu": cpu,
        "by_kind": {kind: round(count / n, 2) for kind, count in kinds.most_common()},
        "p50": statistics.median(latencies) if latencies else float("nan"),
        "p99": percentile(latencies, 0.99) if latencies else float("nan"),
        "rss_mb": rss,
        "settled_rss_mb": settled_rss,
        "requests_per_eval": len(ours) / n,
        "duplicates": sum(1 for count in handler_runs.values() if count > 1),
        "status_writes_per_s": len(status_writes) / seconds if seconds > 0 else float("nan"),
        "scrape_ms": scrape,
        "bucket_wait_s": waited,
        "api_ms_per_run_min": per_run,
        "in_flight_cpu": in_flight_note,
        "storm": storm,
        "unnamed_object_lines": sum(1 for line in lines if "kopf.objects:" in line and f"[{namespace}/" not in line),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 300])
    parser.add_argument("--workers", type=int, default=8, help="threads creating the Evaluations")
    parser.add_argument(
        "--spec-kib",
        type=int,
        default=0,
        help="give each Evaluation a `samples` list of about this many KiB (the operator's memory with large specs)",
    )
    parser.add_argument(
        "--in-flight",
        type=int,
        default=0,
        metavar="M",
        help="M Evaluations with runs in flight before each burst, their progress written through it",
    )
    parser.add_argument(
        "--progress-interval",
        type=float,
        default=None,
        help="seconds between one in-flight run's progress writes (default: the operator's for M runs in flight)",
    )
    parser.add_argument(
        "--storm",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="after each burst, ask every Evaluation to run again ROUNDS times (a resync storm)",
    )
    parser.add_argument("--api-qps", type=float, help="the operator's ASSAY_API_QPS (default: its own)")
    parser.add_argument("--api-burst", type=int, help="the operator's ASSAY_API_BURST (default: its own)")
    parser.add_argument(
        "--profile",
        metavar="PREFIX",
        help="sample the operator with py-spy during each burst into PREFIX.<N>.txt (collapsed stacks)",
    )
    args = parser.parse_args()
    global SPEC_KIB, API_QPS, API_BURST
    SPEC_KIB, API_QPS, API_BURST = args.spec_kib, args.api_qps, args.api_burst
    bin_dir = cp.cache_dir() / cp.k8s_version() / "bin"
    if not (bin_dir / ".complete").is_file():
        print(f"No Kubernetes binaries in {bin_dir}: run tests/e2e/cluster/build.sh first.", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="assay-scale-") as tmp:
        workdir = Path(tmp)
        plane = AuditedControlPlane(workdir / "k8s", bin_dir=bin_dir)
        plane.start()
        try:
            plane.kubectl("apply", "-f", str(REPO / "deploy" / "crds" / "evaluations.assay.dev.yaml"))
            plane.kubectl("wait", "--for=condition=Established", "crd/evaluations.assay.dev")
            rows = [run_one(plane, n, args, workdir) for n in args.n]
        finally:
            plane.stop()
    sm.print_table(rows, os.cpu_count())
    return 0


if __name__ == "__main__":
    sys.exit(main())
