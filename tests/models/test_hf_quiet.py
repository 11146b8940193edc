"""An hf run's terminal shows the progress bar and Assay's lines, not transformers' deprecations.

transformers 5 renamed a model output's `past_key_values` to `cache` and logs a deprecation
the first time the old name is read, which lands inside the progress bar. A real tiny GPT-2 on
imported ARC (multiple choice: the shared-context scorer that reads the cache), in a fresh
process as at a terminal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from model_fixtures import gpt2_dir  # noqa: F401  (session fixture)

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_an_hf_multiple_choice_run_logs_no_deprecation(gpt2_dir: Path, converted: Path) -> None:
    env = {**os.environ, "ASSAY_DATASETS_DIR": str(converted), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    argv = ["run", "--model", "hf", "--model_args", f"pretrained={gpt2_dir}", "--tasks", "arc_easy", "--limit", "4"]
    done = subprocess.run(
        [sys.executable, "-m", "assay", *argv, "--device", "cpu"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "|arc_easy|" in done.stdout.replace(" ", "")
    assert "deprecat" not in done.stderr.lower(), done.stderr
