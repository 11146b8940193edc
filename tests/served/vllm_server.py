"""A real vLLM OpenAI-compatible server (CPU build) on loopback, for the served-model tests.

The venv comes from `.ci/vllm_venv.sh` (built once, cached under ~/.cache/assay). The
server runs in its own process group and is stopped by its pid: SIGTERM, then SIGKILL
after 20 s. Readiness is /health, then /v1/models (ready in ~30 s on two cores).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.conftest import REPO_ROOT, shared_data_dir

VENV_SCRIPT = REPO_ROOT / ".ci" / "vllm_venv.sh"
CHAT_TEMPLATE = shared_data_dir().parent / "recipes" / "plain-chat-template.jinja"


def vllm_python() -> Path:
    """The vLLM venv's python, building the venv the first time (minutes)."""
    done = subprocess.run([str(VENV_SCRIPT)], check=True, capture_output=True, text=True, timeout=1800)
    return Path(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class VLLMServer:
    def __init__(self, model_dir: Path, log_path: Path, *, max_model_len: int, host: str = "127.0.0.1") -> None:
        self.model_dir = model_dir
        self.host = host
        self.port = free_port()
        self.log_path = log_path
        self.max_model_len = max_model_len
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 300) -> None:
        python = vllm_python()
        command = [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--dtype",
            "float32",
            "--enforce-eager",
            "--max-model-len",
            str(self.max_model_len),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--chat-template",
            str(CHAT_TEMPLATE),
        ]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        env.pop("PYTHONPATH", None)  # the venv must not see the project's packages
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.process.returncode}:\n{self.log_tail()}")
            if self._ok("/health") and self._ok("/v1/models"):
                return
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"vLLM was not ready within {timeout:.0f} s:\n{self.log_tail()}")

    def _ok(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(self.base + path, timeout=5) as response:
                if path == "/v1/models":
                    return bool(json.loads(response.read()).get("data"))
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        pgid = self.process.pid  # start_new_session: the server leads its own group
        os.killpg(pgid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
