"""The bench's start-up row: what a user waits for on the smallest run, against its floor.

Each tool's own command line, `run --model hf --model_args pretrained=<model> --tasks arc_easy
--limit 1 --device <device>`, as a fresh process, with that process's peak RSS (its own
rusage). Beside them, interleaved in the same run, the floor: a process that imports torch and
transformers' GPT-2 module, loads the model and tokenizer and runs one forward pass, which no
harness on transformers can go below. "x floor" is Assay's time over the floor's ("of floor"
the inverse, as the other rows give it); each side's median of the runs counts.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# what any harness on transformers pays before its first document
STARTUP_FLOOR = """
import torch
from transformers import AutoTokenizer
from transformers.models.gpt2 import modeling_gpt2
model = modeling_gpt2.GPT2LMHeadModel.from_pretrained({model!r}).to({device!r}).eval()
ids = AutoTokenizer.from_pretrained({model!r})("Question: one forward pass", return_tensors="pt").input_ids
with torch.no_grad():
    model(ids.to({device!r}))
"""


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one child process, read from its own rusage."""
    start = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = child.stderr.read() if child.stderr else b""
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{stderr.decode(errors='replace')[-4000:]}")
    return wall, usage.ru_maxrss / 1024


def measure(
    *, repo: Path, lmeval_cli: list[str], model: Path, datasets: Path, device: str, repeat: int
) -> dict[str, tuple[float, float]]:
    """Per side (assay, lm-eval, floor): the median wall seconds of `repeat` runs and its peak RSS."""
    run = ["run", "--model", "hf", "--model_args", f"pretrained={model}", "--tasks", "arc_easy"]
    run += ["--limit", "1", "--device", device]
    env = {**os.environ, "ASSAY_DATASETS_DIR": str(datasets), "PYTHONPATH": str(repo)}
    sides = {
        "assay": [sys.executable, "-m", "assay", *run],
        "lm-eval": [*lmeval_cli, str(datasets), *run],
        "floor": [sys.executable, "-c", STARTUP_FLOOR.format(model=str(model), device=device)],
    }
    runs: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
    for _ in range(repeat):
        for side, cmd in sides.items():
            runs[side].append(_timed(cmd, repo, env))
    return {side: _median_run(found) for side, found in runs.items()}


def _median_run(runs: list[tuple[float, float]]) -> tuple[float, float]:
    """The run whose wall time is the median (the lower middle one of an even count)."""
    wall = statistics.median_low(w for w, _ in runs)
    return next(run for run in runs if run[0] == wall)


HEADER = (
    f"{'row':<24}{'assay s':>8}{'lm-eval s':>10}{'ratio':>7}{'floor s':>8}{'x floor':>8}{'of floor':>9}"
    f"{'RSS MB':>8}{'lm-eval MB':>11}{'floor MB':>9}"
)


def line(found: dict[str, tuple[float, float]]) -> str:
    (ours, our_rss), (theirs, their_rss), (floor, floor_rss) = found["assay"], found["lm-eval"], found["floor"]
    return (
        f"{'start-up, --limit 1':<24}{ours:>8.2f}{theirs:>10.2f}{theirs / ours:>7.2f}{floor:>8.2f}"
        f"{ours / floor:>8.2f}{floor / ours:>9.2f}{our_rss:>8.0f}{their_rss:>11.0f}{floor_rss:>9.0f}"
    )
