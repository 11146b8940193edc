"""`assay logs`: the runner pods' logs, rank 0 first, through the real client's log stream."""

from __future__ import annotations

import datetime

from tests.cli_cluster.conftest import ClusterCli

MINUTES = datetime.timedelta(minutes=1)
RUNNING = {"phase": "Running", "jobName": "ev-g1"}


def test_one_pod_prints_its_log_alone(kube: ClusterCli) -> None:
    kube.evaluation("ev", status=RUNNING)
    kube.pod("ev-g1-abcde", job="ev-g1", logs={"runner": "loading model\n|arc_easy|1|none|0|acc|0.5|\n"})
    kube.pod("other-g1-zzzzz", job="other-g1", logs={"runner": "not ours\n"})
    assert kube.run("logs", "ev") == (0, "loading model\n|arc_easy|1|none|0|acc|0.5|\n", "")


def _two_nodes(kube: ClusterCli) -> None:
    """An Indexed Job whose rank 0 failed once and was retried; rank 1's pod is the oldest."""
    kube.evaluation("ev", status=RUNNING)
    kube.pod(
        "ev-g1-1-aaaaa",
        job="ev-g1",
        rank=1,
        phase="Running",
        age=9 * MINUTES,
        logs={"runner": "rank 1 here\nrank 1 done\n"},
    )
    kube.pod("ev-g1-0-zzzzz", job="ev-g1", rank=0, phase="Failed", age=8 * MINUTES, logs={"runner": "first try\nOOM\n"})
    kube.pod("ev-g1-0-bbbbb", job="ev-g1", rank=0, phase="Running", age=2 * MINUTES, logs={"runner": "second try\n"})


def test_rank_0_first_every_attempt_oldest_first(kube: ClusterCli) -> None:
    _two_nodes(kube)
    code, out, err = kube.run("logs", "ev")
    assert (code, err) == (0, "")
    assert out == (
        "==> ev-g1-0-zzzzz (rank 0, Failed) <==\nfirst try\nOOM\n\n"
        "==> ev-g1-0-bbbbb (rank 0, Running) <==\nsecond try\n"
    )
    code, out, err = kube.run("logs", "ev", "--all-ranks")
    assert out == (
        "==> ev-g1-0-zzzzz (rank 0, Failed) <==\nfirst try\nOOM\n\n"
        "==> ev-g1-0-bbbbb (rank 0, Running) <==\nsecond try\n\n"
        "==> ev-g1-1-aaaaa (rank 1, Running) <==\nrank 1 here\nrank 1 done\n"
    )


def test_following_several_ranks_prefixes_each_line_with_its_pod(kube: ClusterCli) -> None:
    _two_nodes(kube)
    code, out, err = kube.run("logs", "ev", "--all-ranks", "-f")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert sorted(lines) == sorted(
        [
            "[ev-g1-0-zzzzz] first try",
            "[ev-g1-0-zzzzz] OOM",
            "[ev-g1-0-bbbbb] second try",
            "[ev-g1-1-aaaaa] rank 1 here",
            "[ev-g1-1-aaaaa] rank 1 done",
        ]
    )
    rank0 = [line for line in lines if line.startswith("[ev-g1-0")]  # each rank in its own order
    assert rank0 == ["[ev-g1-0-zzzzz] first try", "[ev-g1-0-zzzzz] OOM", "[ev-g1-0-bbbbb] second try"]
    # One rank followed: its log as it is.
    assert kube.run("logs", "ev", "-f")[1].endswith("==> ev-g1-0-bbbbb (rank 0, Running) <==\nsecond try\n")


def test_a_failed_check_shows_the_check_containers_log(kube: ClusterCli) -> None:
    kube.evaluation("ev", status=RUNNING)
    check = {"initContainerStatuses": [{"name": "check", "state": {"terminated": {"exitCode": 78}}}]}
    kube.pod(
        "ev-g1-abcde",
        job="ev-g1",
        phase="Failed",
        status=check,
        logs={"check": "assay: error: Unknown task 'arc_eazy'. Did you mean arc_easy?\n"},
    )
    assert kube.run("logs", "ev") == (0, "assay: error: Unknown task 'arc_eazy'. Did you mean arc_easy?\n", "")


def test_a_pod_not_started_is_said_on_stderr_and_the_others_still_print(kube: ClusterCli) -> None:
    kube.evaluation("ev", status=RUNNING)
    kube.pod("ev-g1-0-aaaaa", job="ev-g1", rank=0, logs={"runner": "done\n"}, age=5 * MINUTES)
    kube.pod("ev-g1-0-bbbbb", job="ev-g1", rank=0, phase="Pending", age=MINUTES)
    code, out, err = kube.run("logs", "ev")
    assert code == 1
    assert out == "==> ev-g1-0-aaaaa (rank 0, Succeeded) <==\ndone\n\n==> ev-g1-0-bbbbb (rank 0, Pending) <==\n"
    assert err == (
        'assay: error: pod ev-g1-0-bbbbb: container "runner" in pod "ev-g1-0-bbbbb" is waiting to start: '
        "ContainerCreating.\n"
    )


def test_no_job_or_no_pods_is_one_sentence(kube: ClusterCli) -> None:
    kube.evaluation("new", status={})
    assert kube.run("logs", "new") == (1, "", 'assay: error: Evaluation "new" has no runner Job yet (phase Pending).\n')
    kube.evaluation("gone", status={"phase": "Succeeded", "jobName": "gone-g1"})
    assert kube.run("logs", "gone") == (
        1,
        "",
        'assay: error: No runner pods of Job gone-g1 (Evaluation "gone") exist: '
        "they are not created yet, or were removed with the Job.\n",
    )
