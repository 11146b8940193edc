"""A run's progress while it runs, on the real node: the operator tells its Job how often to
write (ASSAY_PROGRESS_INTERVAL, 5 s with few runs in flight), the runner writes a report only
when the share moves a whole percent and that long after its last, with the time it was true
and no ETA; `assay get` shows the ETA it computes from them, and so does the operator's
`assay_evaluation_eta_seconds` (tests/e2e/test_dashboard.py)."""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cli_runs import assay_cli
from tests.e2e.cluster import control_plane as cp
from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import LONG_RUN, hf_spec

pytestmark = pytest.mark.e2e

NAME = "progress-live"


def _moment(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_a_running_evaluation_shows_progress_written_on_change_and_the_readers_eta(
    cluster: Cluster, tmp_path: Path
) -> None:
    # A quarter of a core: the run's ~20 s of scoring stretches over several reports.
    slow = {"nodes": 1, "gpusPerNode": 0, "cpu": "250m"}
    cluster.apply(evaluation_manifest(NAME, **hf_spec(**LONG_RUN, resources=slow)))
    (job,) = cluster.wait_for("the run's Job", lambda: cluster.items("jobs", f"assay.dev/evaluation={NAME}"))
    (runner,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in runner["env"]}
    assert env["ASSAY_PROGRESS_INTERVAL"] == "5"  # max(5 s, runs in flight / 20 a second)

    reports: list[dict[str, Any]] = []

    def two_reports_under_way() -> bool:
        status = cluster.evaluation(NAME).get("status") or {}
        progress = status.get("progress") or {}
        if status.get("phase") == "Running" and progress and (not reports or progress != reports[-1]["progress"]):
            reports.append(status)
        return len([r for r in reports if r["progress"]["requestsDone"] > 0]) >= 2

    cluster.wait_for("two progress reports of the running run", two_reports_under_way, timeout=300, interval=0.5)
    kubeconfig = cp.write_kubeconfig(
        tmp_path / "kubeconfig",
        cp.kubeconfig(
            server=cluster.plane.server,
            ca_file=cluster.plane.ca_file,
            token=cluster.plane.admin_token,
            user="admin",
            namespace=cluster.namespace,
        ),
    )
    got = assay_cli("get", NAME, kubeconfig=kubeconfig)
    cluster.kubectl("delete", "evaluation", NAME, "--wait=false")  # its end adds nothing here

    for status in reports:
        progress = status["progress"]
        assert "etaSeconds" not in progress and progress["updated"], progress
        assert re.fullmatch(r"\d+/\d+ \(\d+%\)", progress["summary"]), progress
        assert status["timing"]["requestsStarted"]
    shares = [100 * r["progress"]["requestsDone"] // r["progress"]["requestsTotal"] for r in reports]
    assert shares == sorted(set(shares)), shares  # each report a new whole percent
    moments = [_moment(r["progress"]["updated"]) for r in reports]
    # At most one write per interval (the runner's clock stamps `updated`).
    assert all((b - a).total_seconds() >= 5 for a, b in zip(moments, moments[1:], strict=False)), moments
    assert got.returncode == 0, got.stderr
    (row,) = got.stdout.splitlines()[1:]
    assert re.search(r"\d+/\d+ \(\d+%\) ETA \d+(h\d\dm|m\d\ds|s)", row), row  # computed by `assay get`
