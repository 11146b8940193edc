"""Each extra is enough for the command it names, and a missing one is one sentence.

A wheel of this checkout is built once and installed into fresh venvs (no system site
packages) with pip and the package index: the core alone (which reads a cluster for `assay
get` and the like), `data`, `api`, `operator`. `hf` (torch) and `vllm` are GPU-sized downloads, so they are checked by their
sentence where torch or vllm is absent: the core venv, and the api venv (transformers and
datasets without torch).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
# pip's output when the package index cannot be reached: then there is nothing to test here.
_OFFLINE_MARKS = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "No matching distribution found",
    "Could not find a version that satisfies",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO_ROOT)],
        check=True,
        capture_output=True,
        cwd=out,
    )
    [built] = out.glob("assay-*.whl")
    yield built
    shutil.rmtree(out, ignore_errors=True)


def _venv(wheel: Path, root: Path, extra: str | None) -> Iterator[Path]:
    """A fresh venv holding `assay[extra]` from the wheel; its bin folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    requirement = f"{wheel}[{extra}]" if extra else str(wheel)
    # This Python's pip installs into the venv (no pip of its own to bootstrap); no .pyc
    # compiling, which is most of an install's time and none of what is tested.
    install = ["--python", str(root / "bin" / "python"), "install", "-q", "--no-compile", requirement]
    pip = subprocess.run([sys.executable, "-m", "pip", *install], capture_output=True, text=True, env=_env(), cwd=root)
    if pip.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        if any(mark in pip.stderr for mark in _OFFLINE_MARKS):
            pytest.skip(f"the package index is out of reach: {pip.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"pip install {requirement} failed:\n{pip.stderr}")
    yield root / "bin"
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def core(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from _venv(wheel, tmp_path_factory.mktemp("venvs") / "core", None)


@pytest.fixture(scope="module")
def data(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from _venv(wheel, tmp_path_factory.mktemp("venvs") / "data", "data")


@pytest.fixture(scope="module")
def api(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from _venv(wheel, tmp_path_factory.mktemp("venvs") / "api", "api")


@pytest.fixture(scope="module")
def operator(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from _venv(wheel, tmp_path_factory.mktemp("venvs") / "operator", "operator")


def _env() -> dict[str, str]:
    """This environment without what would reach past the venv (the checkout on PYTHONPATH, a
    cluster's credentials), offline for the hub."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return {**env, **offline, "KUBECONFIG": "/nonexistent/kubeconfig", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _assay(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "assay"), *args], capture_output=True, text=True, env=_env(), cwd=cwd, timeout=120
    )


def _says_only(done: subprocess.CompletedProcess[str], what: str, extra: str) -> None:
    """Exit code non-zero, and stderr ends in the one sentence naming the extra, with no traceback."""
    # A wheel's install has no checkout to name by path.
    sentence = f"assay: error: {what} needs the '{extra}' extra: from the Assay checkout, pip install -e '.[{extra}]'."
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == sentence, done.stderr


@pytest.fixture
def task(tmp_path: Path) -> Path:
    """A generation task on a local JSON file whose every answer is "4"."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"q": "2+2", "a": "4"}\n{"q": "1+3", "a": "4"}\n')
    path = tmp_path / "tiny.yaml"
    path.write_text(
        f"task: tiny\ndataset_path: json\ndataset_kwargs: {{data_files: {{test: {rows}}}}}\ntest_split: test\n"
        "output_type: generate_until\ndoc_to_text: 'Q: {{q}} A:'\ndoc_to_target: a\n"
        "generation_kwargs: {until: ['Q:'], max_gen_toks: 4}\nmetric_list: [{metric: exact_match}]\n"
    )
    return path


def _exact_match(output: Path) -> float:
    [results] = output.rglob("results_*.json")
    return float(json.loads(results.read_text())["results"]["tiny"]["exact_match,none"])


def test_the_core_alone_names_the_extra_each_command_needs(core: Path, task: Path, tmp_path: Path) -> None:
    run = ("run", "--tasks", str(task), "--model")
    _says_only(_assay(core, *run, "dummy", cwd=tmp_path), "Loading a task's dataset", "data")
    _says_only(_assay(core, *run, "hf", "--model_args", "pretrained=gpt2", cwd=tmp_path), "--model hf", "hf")
    _says_only(_assay(core, *run, "vllm", "--model_args", "pretrained=gpt2", cwd=tmp_path), "--model vllm", "vllm")
    _says_only(_assay(core, *run, "dummy", "--wandb_args", "project=x", cwd=tmp_path), "--wandb_args", "wandb")
    _says_only(_assay(core, "operator", cwd=tmp_path), "`assay operator`", "operator")
    for command in ("operator", "get"):
        assert _assay(core, command, "--help", cwd=tmp_path).returncode == 0


def test_data_runs_the_dummy_model_on_a_local_json_task(data: Path, task: Path, tmp_path: Path) -> None:
    done = _assay(
        data, "run", "--model", "dummy", "--tasks", str(task), "--output_path", str(tmp_path / "out"), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "out").rglob("results_*.json"))


class _OpenAIStandIn(BaseHTTPRequestHandler):
    """Answers /v1/completions and /v1/chat/completions with "4" for every prompt."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/chat/completions"):
            answer: dict[str, Any] = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}}]}
        else:
            answer = {"choices": [{"index": i, "text": "4"} for i in range(len(body["prompt"]))]}
        raw = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _OpenAIStandIn)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_api_runs_completions_and_chat_against_a_local_server(
    api: Path, task: Path, server: str, shared_data: Path, tmp_path: Path
) -> None:
    # local-completions counts tokens with transformers' tokenizer by default: no torch needed.
    completions = f"base_url={server}/completions,model=m,tokenizer={shared_data / 'gpt2_tokenizer'}"
    chat = f"base_url={server}/chat/completions,model=m"
    for name, model, args in (
        ("completions", "local-completions", completions),
        ("chat", "local-chat-completions", chat),
    ):
        out = tmp_path / name
        done = _assay(
            api,
            "run",
            "--model",
            model,
            "--model_args",
            args,
            "--tasks",
            str(task),
            "--output_path",
            str(out),
            *(["--apply_chat_template"] if name == "chat" else []),
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        assert _exact_match(out) == 1.0
        # No torch here, and none needed: transformers' advice about it is not shown.
        assert "PyTorch was not found" not in done.stderr, done.stderr
    # transformers and datasets are here, torch is not: --model hf still names its extra.
    hf = _assay(api, "run", "--model", "hf", "--model_args", "pretrained=gpt2", "--tasks", str(task), cwd=tmp_path)
    _says_only(hf, "--model hf", "hf")


def test_operator_starts_and_says_what_it_lacks(operator: Path, tmp_path: Path) -> None:
    assert _assay(operator, "operator", "--help", cwd=tmp_path).returncode == 0
    entry = "import kopf; from assay.operator import handlers, main; print(callable(main.main))"
    imported = subprocess.run(
        [str(operator / "python"), "-c", entry], capture_output=True, text=True, env=_env(), cwd=tmp_path
    )
    assert imported.stdout.strip() == "True", imported.stderr
    # Against no cluster at all: the credentials sentence, not an import error.
    done = _assay(operator, "operator", cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr and "No Kubernetes credentials" in done.stderr, (
        done.stderr
    )


def test_the_core_reads_a_cluster_and_says_when_there_is_none(core: Path, tmp_path: Path) -> None:
    assert _assay(core, "get", "--help", cwd=tmp_path).returncode == 0
    for command in (["get"], ["results", "x"], ["describe", "x"]):
        done = _assay(core, *command, cwd=tmp_path)
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert lines[-1].startswith(
            "assay: error: No Kubernetes configuration found: /nonexistent/kubeconfig does not exist"
        )
    _says_only(_assay(core, "operator", cwd=tmp_path), "`assay operator`", "operator")
