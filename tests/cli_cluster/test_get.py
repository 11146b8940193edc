"""`assay get`: Evaluations as kubectl lists them, from a real API client over real HTTP."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import pytest
import yaml

from assay.cli_cluster import ages
from tests.cli_cluster.conftest import ClusterCli, write_kubeconfig
from tests.operator.local_apiserver import status

HOURS = datetime.timedelta(hours=3, minutes=30, seconds=20)


def _ago(seconds: float) -> str:
    moment = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=seconds)
    return moment.isoformat().replace("+00:00", "Z")


def _regressed(status: str, reason: str, verdict: str | None) -> dict[str, object]:
    condition = {
        "type": "Regressed",
        "status": status,
        "reason": reason,
        "message": "m",
        "lastTransitionTime": "2024-01-01T00:00:00Z",
    }
    return {"conditions": [condition], **({"comparison": {"verdict": verdict}} if verdict else {})}


@pytest.fixture
def three(kube: ClusterCli) -> ClusterCli:
    kube.evaluation(
        "base",
        status={
            "phase": "Succeeded",
            "reason": "JobComplete",
            "model": "gpt2",
            "progress": {"summary": "40/40 (100%)"},
        },
        age=HOURS,
    )
    kube.evaluation(
        "cand",
        labels={"assay.dev/suite": "nightly"},
        status={
            "phase": "Succeeded",
            "reason": "JobComplete",
            "progress": {"summary": "40/40 (100%)"},
            **_regressed("True", "Regressed", "regressed"),
        },
    )
    kube.evaluation(
        "later",
        spec={"model": "dummy", "tasks": ["arc_easy", "lambada_openai"]},
        status={
            "phase": "Running",
            "reason": "PodsRunning",
            "message": "1 runner pod(s) running.",
            # 12 of 40 answered in the 60 s since the first request: the reader's ETA, 140 s from `updated`.
            "progress": {"requestsDone": 12, "requestsTotal": 40, "summary": "12/40 (30%)", "updated": _ago(0)},
            "timing": {"requestsStarted": _ago(60)},
        },
        age=datetime.timedelta(minutes=45, seconds=10),
    )
    kube.evaluation("elsewhere", namespace="other", status={"phase": "Failed", "reason": "OOMKilled"})
    return kube


def _rows(out: str) -> list[list[str]]:
    """The table's lines split at its column starts (cells may be empty)."""
    header, *lines = out.splitlines()
    starts = [i for i, char in enumerate(header) if char != " " and (i == 0 or header[i - 1] == " ")]
    bounds = list(zip(starts, [*starts[1:], None], strict=False))
    return [[line[a:b].strip() for a, b in bounds] for line in [header, *lines]]


def test_get_lists_the_context_namespace_as_kubectl_would(three: ClusterCli) -> None:
    code, out, err = three.run("get")
    assert code == 0 and err == ""
    assert _rows(out) == [
        ["NAME", "MODEL", "TASKS", "PHASE", "REASON", "PROGRESS", "REGRESSED", "AGE"],
        ["base", "gpt2", "arc_easy", "Succeeded", "JobComplete", "40/40 (100%)", "", "3h30m"],
        ["cand", "gpt2", "arc_easy", "Succeeded", "JobComplete", "40/40 (100%)", "True (regressed)", "20m"],
        ["later", "dummy", "arc_easy,lambada_openai", "Running", "PodsRunning", _rows(out)[3][5], "", "45m"],
    ]
    assert re.fullmatch(r"12/40 \(30%\) ETA 2m(1\d|20)s", _rows(out)[3][5])  # 140 s, less the time since
    # kubectl's tabwriter: columns three spaces apart.
    assert out.splitlines()[0].startswith("NAME    MODEL   TASKS")


def test_get_by_namespace_selector_name_and_across_namespaces(three: ClusterCli) -> None:
    assert [r[0] for r in _rows(three.run("get", "-n", "other")[1])] == ["NAME", "elsewhere"]
    assert [r[0] for r in _rows(three.run("get", "-l", "assay.dev/suite=nightly")[1])] == ["NAME", "cand"]
    assert [r[0] for r in _rows(three.run("get", "later")[1])] == ["NAME", "later"]
    rows = _rows(three.run("get", "-A")[1])
    assert rows[0][:2] == ["NAMESPACE", "NAME"]
    assert [r[:2] for r in rows[1:]] == [["other", "elsewhere"], ["team", "base"], ["team", "cand"], ["team", "later"]]
    wide = _rows(three.run("get", "-o", "wide")[1])
    assert wide[0][-1] == "MESSAGE" and wide[3][-1] == "1 runner pod(s) running."


def test_get_shows_the_regressed_condition_with_its_verdict_or_reason(kube: ClusterCli) -> None:
    kube.evaluation("a", status={"phase": "Succeeded", **_regressed("False", "NoRegression", "equivalent")})
    kube.evaluation("b", status={"phase": "Succeeded", **_regressed("Unknown", "BaselineUnavailable", None)})
    kube.evaluation(
        "c", status={"phase": "Succeeded", "comparison": {"verdict": "improved"}}
    )  # the operator has not read it yet
    cells = {row[0]: row[6] for row in _rows(kube.run("get")[1])[1:]}
    assert cells == {"a": "False (equivalent)", "b": "Unknown (BaselineUnavailable)", "c": "improved"}


def test_get_json_is_kubectls_shape(three: ClusterCli) -> None:
    code, out, _ = three.run("get", "-o", "json")
    listed = json.loads(out)
    assert code == 0 and listed["kind"] == "List" and listed["apiVersion"] == "v1"
    assert [item["metadata"]["name"] for item in listed["items"]] == ["base", "cand", "later"]
    assert listed["items"][1]["status"]["comparison"]["verdict"] == "regressed"
    one = json.loads(three.run("get", "base", "-o", "json")[1])
    assert one["kind"] == "Evaluation" and one["metadata"]["name"] == "base"


def test_get_of_an_empty_namespace_says_so_on_stderr(kube: ClusterCli) -> None:
    code, out, err = kube.run("get", "-n", "empty")
    assert (code, out, err) == (0, "", "No Evaluations found in namespace empty.\n")


def test_a_missing_evaluation_is_one_sentence_with_the_names_that_come_close(three: ClusterCli) -> None:
    for command in (["get", "bsae"], ["results", "bsae"], ["logs", "bsae"], ["describe", "bsae"]):
        code, out, err = three.run(*command)
        assert (code, out) == (1, "")
        assert err == 'assay: error: Evaluation "bsae" not found in namespace "team". Did you mean base?\n'


def test_the_namespace_defaults_to_default_without_one_in_the_context(
    kube: ClusterCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = f"http://127.0.0.1:{kube.server.httpd.server_address[1]}"
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "plain", server=server, namespace=None)))
    kube.evaluation("mine", namespace="default")
    assert [r[0] for r in _rows(kube.run("get")[1])] == ["NAME", "mine"]
    # --kubeconfig wins over $KUBECONFIG, as for kubectl.
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert kube.run("get", "--kubeconfig", str(tmp_path / "plain"))[0] == 0


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            status(
                403,
                "Forbidden",
                'evaluations.assay.dev is forbidden: User "tester" cannot list resource "evaluations" in '
                'API group "assay.dev" in the namespace "team"',
            ),
            'assay: error: Forbidden: evaluations.assay.dev is forbidden: User "tester" cannot list resource "evaluations" in '
            'API group "assay.dev" in the namespace "team"; ask your cluster admin for that permission.\n',
        ),
        (
            status(404, "NotFound", "the server could not find the requested resource"),
            "assay: error: The cluster at {server} has no Evaluation resource (evaluations.assay.dev); install Assay's CRD "
            "with its Helm chart (deploy/helm/assay).\n",
        ),
        (
            status(401, "Unauthorized", "Unauthorized"),
            "assay: error: The API server at {server} refused the kubeconfig's credentials (401 Unauthorized); log in again "
            "or pick another context.\n",
        ),
    ],
)
def test_refusals_are_one_sentence(kube: ClusterCli, answer: tuple[int, dict[str, object]], said: str) -> None:
    kube.server.failing = answer
    code, out, err = kube.run("get")
    assert (code, out) == (1, "")
    assert err == said.format(server=f"http://127.0.0.1:{kube.server.httpd.server_address[1]}")


def test_no_kubeconfig_and_no_server_are_one_sentence(
    kube: ClusterCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))
    code, out, err = kube.run("get")
    assert (code, out) == (1, "")
    assert err == (
        f"assay: error: No Kubernetes configuration found: {tmp_path / 'nowhere'} does not exist; set KUBECONFIG "
        "or write ~/.kube/config as for kubectl (or pass --kubeconfig).\n"
    )
    kube.server.close()  # nothing listens there any more
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    code, out, err = kube.run("get")
    server = f"http://127.0.0.1:{kube.server.httpd.server_address[1]}"
    assert (code, out, err) == (1, "", f"assay: error: Cannot reach the API server at {server}: Connection refused.\n")


def test_a_broken_kubeconfig_is_one_sentence(kube: ClusterCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "broken"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    monkeypatch.setenv("KUBECONFIG", str(broken))
    code, _, err = kube.run("get")
    assert (
        code == 1 and err.startswith(f"assay: error: The kubeconfig {broken} cannot be used: ") and err.count("\n") == 1
    )


def test_name_and_all_namespaces_do_not_go_together(kube: ClusterCli) -> None:
    code, _, err = kube.run("get", "x", "-A")
    assert code == 2 and "a name is looked up in one namespace" in err


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (200, "3m20s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 30 * 60, "3h30m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (50 * 3600, "2d2h"),
        (8 * 86400, "8d"),
        (800 * 86400, "2y70d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_ages_read_as_kubectls(seconds: int, shown: str) -> None:
    assert ages.human_duration(seconds) == shown


def test_context_picks_another_context_and_its_namespace(three: ClusterCli) -> None:
    """--context as kubectl reads it: that context's cluster, user and namespace, not the current one's."""
    config = yaml.safe_load(three.kubeconfig.read_text())
    config["contexts"].append(
        {"name": "elsewhere", "context": {"cluster": "local", "user": "tester", "namespace": "other"}}
    )
    three.kubeconfig.write_text(yaml.safe_dump(config))
    assert [r[0] for r in _rows(three.run("get", "--context", "elsewhere")[1])] == ["NAME", "elsewhere"]
    assert [r[0] for r in _rows(three.run("get")[1])] == ["NAME", "base", "cand", "later"]
    code, out, err = three.run("get", "--context", "nope")
    assert (code, out) == (1, "")
    assert err == (
        f"assay: error: The kubeconfig {three.kubeconfig} cannot be used: kubeconfig {three.kubeconfig} has no "
        "'nope' (context 'nope', its cluster).\n"
    )
