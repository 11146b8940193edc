"""Every attempt of the tenant corpus (tenant_attempts.py), through every surface it names: refused,
in bounded time, with one sentence naming the input, and no secret text in any message.

The operator's surface is its one admission (`admission.admit`), as a decision calls it, with the
chart's default policy; the runner's is the runner pod's entry point (`job.main`), which takes a
ConfigMap's tasks as a tenant's, over a real datasets directory; `assay run` is the command line.
A benign tenant task passes all three, so a refusal here is the attempt's, not the harness's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from assay import cli
from assay.errors import UserError
from assay.operator.admission import admit
from assay.operator.admission.policy import AdminPolicy
from assay.runner import job
from tests.trust.tenant_attempts import ATTEMPTS, OPERATOR, RUN, RUNNER, RUNNER_IMAGES, SECRET, Attempt, _task

pytest.importorskip("datasets")

BOUND_S = 60.0
"""Each refusal well within this (the template bound is 5 s, the regex bound 2 s): nothing hangs."""
CHART_DEFAULTS = AdminPolicy(allowed_image_prefixes=RUNNER_IMAGES)
ANSWER = "a" * 40 + "b"  # what `(a+)+$` backtracks on without end


@pytest.fixture()
def pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A runner pod's world: a datasets directory with the corpus's documents (one holds the
    secret), a secret file beside it, the secret in the environment, its own working directory."""
    data = tmp_path / "datasets" / "corpus"
    data.mkdir(parents=True)
    docs = [{"question": "Is water wet?", "answer": ANSWER, "text": SECRET}] * 2
    (data / "test.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    (tmp_path / "secret.env").write_text(SECRET + "\n")
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(tmp_path / "datasets"))
    monkeypatch.setenv("CORPUS_SECRET", SECRET)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _suite(root: Path, attempt: Attempt) -> Path:
    folder = root / "suite"
    folder.mkdir(exist_ok=True)
    for name, text in attempt.files.items():
        (folder / name).write_text(text)
    return folder


def _refused(call: Callable[[], str], attempt: Attempt) -> str:
    """The one sentence a surface refused with, checked: in time, naming the input, no secret."""
    started = time.monotonic()
    message = call()
    assert time.monotonic() - started < BOUND_S, f"{attempt.id}: refused after {time.monotonic() - started:.0f} s"
    assert attempt.said in message, f"{attempt.id}: {message!r}"
    assert "sk-test" not in message and "Traceback" not in message
    return message


def _operator(attempt: Attempt, root: Path) -> str:
    raw: dict[str, Any] = {"model": "hf", "tasks": list(attempt.tasks), **attempt.spec}
    config_maps: dict[str, dict[str, Any]] = {}
    if attempt.files:
        raw["taskSources"] = [{"configMap": "suite"}]
        config_maps["suite"] = {"metadata": {"name": "suite", "resourceVersion": "1"}, "data": attempt.files}
    with pytest.raises(UserError) as refused:
        admit.admit(
            raw, namespace="team-a", admin=CHART_DEFAULTS, secret_metadata=lambda _: None, config_map=config_maps.get
        )
    return str(refused.value)


def _runner(attempt: Attempt, root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    status = root / "status.json"
    monkeypatch.setenv("ASSAY_STATUS_FILE", str(status))
    spec = root / "spec.json"
    spec.write_text(json.dumps({"model": "dummy", "tasks": list(attempt.tasks), "limit": 2}))
    code = job.main(["--spec", str(spec), "--include_path", str(_suite(root, attempt))])
    printed = capsys.readouterr()
    assert code != 0, f"{attempt.id}: the runner ran it"
    message = json.loads(status.read_text())["message"]
    assert "sk-test" not in printed.out + printed.err and "Traceback" not in printed.err
    return str(message)


def _run(attempt: Attempt, root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    # On a user's own machine a task's relative data_files are read from the working directory.
    monkeypatch.chdir(root / "datasets")
    argv = ["run", "--tasks", ",".join(attempt.tasks), "--limit", "2", "--output_path", str(root / "out")]
    if attempt.model_args:
        model = "local-completions" if "base_url" in attempt.model_args else "hf"
        # A local folder for `pretrained`: the hub id would be refused first, offline, for its own reason.
        argv += ["--model", model, "--model_args", attempt.model_args.replace("pretrained=x", f"pretrained={root}")]
    else:
        argv += ["--model", "dummy"]
    if attempt.files:
        argv += ["--include_path", str(_suite(root, attempt))]
    code = cli.main(argv)
    printed = capsys.readouterr()
    assert code != 0, f"{attempt.id}: assay run ran it"
    assert "sk-test" not in printed.out
    return printed.err


def _cases(surface: str) -> list[Any]:
    return [pytest.param(a, id=a.id) for a in ATTEMPTS if surface in a.refused_by]


@pytest.mark.parametrize("attempt", _cases(OPERATOR))
def test_the_operator_refuses(attempt: Attempt, pod: Path) -> None:
    _refused(lambda: _operator(attempt, pod), attempt)


@pytest.mark.parametrize("attempt", _cases(RUNNER))
def test_the_runner_pod_refuses(
    attempt: Attempt, pod: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _refused(lambda: _runner(attempt, pod, capsys, monkeypatch), attempt)


@pytest.mark.parametrize("attempt", _cases(RUN))
def test_assay_run_refuses(
    attempt: Attempt, pod: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _refused(lambda: _run(attempt, pod, capsys, monkeypatch), attempt)


def test_a_benign_tenant_task_passes_every_surface(
    pod: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    benign = Attempt("benign", "an evaluation", (), files={"mine.yaml": _task("mine")})
    admitted = admit.admit(
        {"model": "hf", "tasks": ["mine"], "taskSources": [{"configMap": "suite"}]},
        namespace="team-a",
        admin=CHART_DEFAULTS,
        secret_metadata=lambda _: None,
        config_map={"suite": {"metadata": {"name": "suite", "resourceVersion": "1"}, "data": benign.files}}.get,
    )
    assert admitted.task_sources == [{"configMap": "suite", "resourceVersion": "1", "tasks": ["mine"]}]
    monkeypatch.setenv("ASSAY_STATUS_FILE", str(pod / "status.json"))
    (pod / "spec.json").write_text(json.dumps({"model": "dummy", "tasks": ["mine"], "limit": 2}))
    assert job.main(["--spec", str(pod / "spec.json"), "--include_path", str(_suite(pod, benign))]) == 0
    monkeypatch.chdir(pod / "datasets")
    argv = ["run", "--model", "dummy", "--tasks", "mine", "--include_path", str(pod / "suite"), "--limit", "2"]
    assert cli.main([*argv, "--output_path", str(pod / "out")]) == 0
    assert "sk-test" not in capsys.readouterr().out


def test_the_corpus_counts() -> None:
    """Every attempt is refused somewhere, and the closing count is the corpus's own."""
    assert all(attempt.refused_by for attempt in ATTEMPTS)
    assert len({attempt.id for attempt in ATTEMPTS}) == len(ATTEMPTS)
