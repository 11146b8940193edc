"""One vLLM server per test session, on loopback, serving the tiny GPT-2 (head size 32)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.model_fixtures import N_POSITIONS, gpt2_dir  # noqa: F401  (fixture)
from tests.served.vllm_server import VENV_SCRIPT, VLLMServer


@pytest.fixture(scope="session")
def vllm_server(gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    if (
        not VENV_SCRIPT.is_file()
        or os.environ.get("ASSAY_SKIP_VLLM") == "1"
        and os.environ.get("CI", "").lower() != "true"
    ):
        pytest.skip("the vLLM CPU venv is not available (ASSAY_SKIP_VLLM=1)")
    server = VLLMServer(gpt2_dir, tmp_path_factory.mktemp("vllm") / "server.log", max_model_len=N_POSITIONS)
    server.start()
    try:
        yield server
    finally:
        server.stop()
