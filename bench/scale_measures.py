"""What bench/operator_scale.py measures beyond latency, and its table (with the small helpers it
reads processes, the audit log and /metrics through).

- the API server's CPU over a window (its process's /proc counters), per Evaluation of a burst
  and per in-flight run (progress writes alone, less the idle control plane's);
- the seconds the operator waited on its own token bucket (its
  `assay_operator_rate_limit_wait_seconds_total`, scraped before and after);
- a resync storm (`--storm ROUNDS`): every Evaluation of the burst asked to run again, ROUNDS
  times, 2 s apart (the rerun annotation), which costs the operator a dozen requests each; the
  audit log's requests of the operator a second show whether its bucket caps the rate.
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import re
import statistics
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

RATE_LIMIT_WAIT = "assay_operator_rate_limit_wait_seconds_total"
RERUN_ANNOTATION = "evaluations.assay.dev/rerun"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_over(pid: int, seconds: float) -> float:
    """CPU-seconds the process used over the next `seconds`."""
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return cpu_seconds(pid) - before


def scrape_counter(port: int, name: str = RATE_LIMIT_WAIT) -> float:
    """One sample of the operator's /metrics (nan when absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.search(rf"^{re.escape(name)} ([0-9.eE+-]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else float("nan")


def when(event: dict[str, Any]) -> float:
    """An audit event's receipt as a Unix time."""
    stamp = event.get("requestReceivedTimestamp") or event.get("stageTimestamp") or ""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def per_second(events: list[dict[str, Any]], start: float, end: float) -> list[int]:
    """Requests received in each whole second from `start` to `end`."""
    counts = collections.Counter(int(when(e) - start) for e in events if start <= when(e) < end)
    return [counts.get(second, 0) for second in range(max(1, int(end - start) + 1))]


def storm(custom: Any, namespace: str, names: list[str], rounds: int, workers: int) -> float:
    """Ask every Evaluation of `names` to run again, `rounds` times 2 s apart; the Unix time it began."""
    began = time.time()

    def annotate(name: str, token: str) -> None:
        body = {"metadata": {"annotations": {RERUN_ANNOTATION: token}}}
        custom.patch_namespaced_custom_object("assay.dev", "v1alpha1", namespace, "evaluations", name, body)

    with ThreadPoolExecutor(workers) as pool:
        for k in range(rounds):
            list(pool.map(lambda name: annotate(name, f"storm-{k}"), names))  # noqa: B023 - called within this iteration
            time.sleep(2)
    return began


def settle(custom: Any, namespace: str, names: list[str], token: str, timeout: float = 600) -> float:
    """Seconds until every Evaluation of `names` has decided the run of `token` (its status.rerunToken)."""
    started, wanted = time.monotonic(), set(names)
    while time.monotonic() - started < timeout:
        listed = custom.list_namespaced_custom_object("assay.dev", "v1alpha1", namespace, "evaluations")["items"]
        done = {i["metadata"]["name"] for i in listed if (i.get("status") or {}).get("rerunToken") == token}
        if wanted <= done:
            break
        time.sleep(1)
    return time.monotonic() - started


def storm_summary(rates: list[int], *, waited: float, qps: float, burst: int) -> dict[str, Any]:
    """The storm's requests a second: all, the busiest second, and the mean once the burst was spent."""
    total, spent, after = sum(rates), 0, []
    for count in rates:
        if spent >= burst:
            after.append(count)
        spent += count
    return {
        "requests": total,
        "seconds": len(rates),
        "peak_per_s": max(rates, default=0),
        "mean_per_s": total / max(len(rates), 1),
        "after_burst_per_s": sum(after) / len(after) if after else float("nan"),
        "waited_s": waited,
        "qps": qps,
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def peak_rss_mb(pid: int, field: str = "VmHWM") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def scrape_ms(port: int) -> float:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            response.read()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.mean(times)


def operator_events(audit_log: Path, offset: int, user: str) -> list[dict[str, Any]]:
    """`user`'s requests in the audit log from byte `offset` on."""
    with open(audit_log, "rb") as audit:
        audit.seek(offset)
        events = [json.loads(line) for line in audit if line.strip()]
    return [e for e in events if e.get("user", {}).get("username") == user]


def run_storm(
    admin_kubeconfig: Path, namespace: str, n: int, rounds: int, workers: int, metrics_port: int
) -> tuple[float, float, float]:
    """--storm: every ev-* asked to run again, `rounds` times; (began, ended, seconds waited on the bucket)."""
    from kubernetes import client, config

    custom = client.CustomObjectsApi(config.new_client_from_config(config_file=str(admin_kubeconfig)))
    names = [f"ev-{i:04d}" for i in range(n)]
    waited_before = scrape_counter(metrics_port)
    began = storm(custom, namespace, names, rounds, workers)
    took = settle(custom, namespace, names, f"storm-{rounds - 1}")
    time.sleep(5)  # the last decisions' Events and status writes
    print(f"N={n}: the storm's last decision {took:.1f} s after its last round", flush=True)
    return began, time.time(), scrape_counter(metrics_port) - waited_before


def print_table(rows: list[dict[str, Any]], cpus: int | None) -> None:
    print(
        f"{'N':>5} {'M':>4} {'Jobs':>5} {'p50 s':>7} {'p99 s':>7} {'RSS MB':>7} {'now MB':>7} {'req/eval':>9} "
        f"{'dup':>4} {'status/s':>9} {'writes/s':>9} {'API CPU s':>10} {'API ms/eval':>12} {'API ms/run/min':>15} "
        f"{'bucket wait s':>14} {'scrape ms':>10}"
    )
    for r in rows:
        print(
            f"{r['n']:>5} {r['in_flight']:>4} {r['jobs']:>5} {r['p50']:>7.2f} {r['p99']:>7.2f} {r['rss_mb']:>7.0f} "
            f"{r['settled_rss_mb']:>7.0f} {r['requests_per_eval']:>9.1f} {r['duplicates']:>4} "
            f"{r['status_writes_per_s']:>9.1f} {r['writes_per_s']:>9.1f} {r['cpu']['kube-apiserver']:>10.1f} "
            f"{1000 * r['cpu']['kube-apiserver'] / r['n']:>12.1f} {_per_run(r):>15} "
            f"{r['bucket_wait_s']:>14.2f} {r['scrape_ms']:>10.1f}"
        )
    for r in rows:
        usage = ", ".join(f"{name} {used:.1f} s" for name, used in r["cpu"].items())
        print(
            f"N={r['n']} M={r['in_flight']}: the last Job {r['seconds']:.1f} s after the burst began; CPU used "
            f"meanwhile: {usage} (all {sum(r['cpu'].values()):.1f} s on {cpus} cores)"
        )
        if r["in_flight"]:
            print(f"  in flight: {r['writer']}; {r['in_flight_cpu']}")
        if r.get("storm"):
            s = r["storm"]
            print(
                f"  resync storm: {s['requests']} requests of the operator in {s['seconds']} s: busiest second "
                f"{s['peak_per_s']}, mean {s['mean_per_s']:.0f}/s, {s['after_burst_per_s']:.0f}/s once its bucket's "
                f"burst was spent (its rate: {s['qps']:g}/s); it waited {s['waited_s']:.1f} s on the bucket"
            )
    for r in rows:
        print(f"API requests per Evaluation at N={r['n']} M={r['in_flight']}, by verb and resource:")
        for kind, per_eval in r["by_kind"].items():
            print(f"  {per_eval:6.2f}  {kind}")
        for uri, count in r["other"]:
            print(f"  {count / r['n']:6.2f}  {uri}")


def _per_run(r: dict[str, Any]) -> str:
    value = r.get("api_ms_per_run_min")
    return f"{value:.1f}" if value is not None else "-"


def in_flight_cpu(apiserver: int, m: int, idle: float, writing: float, seconds: float) -> tuple[float | None, str]:
    """API-server CPU ms a minute per in-flight run: its CPU with the writer going, less idle, over M."""
    if not m:
        return None, ""
    extra = max(0.0, writing - idle)
    per_run = 1000 * extra / seconds * 60 / m
    return per_run, (
        f"kube-apiserver {writing:.2f} CPU-s over {seconds:g} s of progress writes alone, {idle:.2f} idle: "
        f"{per_run:.1f} ms a minute per run in flight"
    )


Hook = Callable[[], None]
