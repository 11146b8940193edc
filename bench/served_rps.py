"""Requests per second of each backend on the same task and model: hf, local-completions
(against a real vLLM CPU server on loopback, 1 and 4 concurrent requests) and vllm in process.

    python bench/served_rps.py [--limit 40]

Uses the tests' tiny GPT-2 (2 layers, width 64, head size 32) and the p_arc parity task
(multiple choice: one loglikelihood request per choice). Server and engine start-up are
not counted: each backend is warmed with one document first. Needs the vLLM venv
(.ci/vllm_venv.sh) and ASSAY_SHARED_DATA.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ENGINE_SCRIPT = """
import json, sys, time
from assay.runner.evaluator import simple_evaluate
from assay.runner.models import get_model
from assay.runner.tasks.index import TaskManager
if __name__ == "__main__":
    model_dir, task_dir, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    lm = get_model("vllm")(pretrained=model_dir, dtype="float32", max_model_len=64, enforce_eager=True)
    tm = TaskManager(task_dir)
    simple_evaluate(lm, tasks=["p_arc"], limit=1, task_manager=tm, bootstrap_iters=0)
    start = time.perf_counter()
    out = simple_evaluate(lm, tasks=["p_arc"], limit=limit, task_manager=tm, bootstrap_iters=0, log_samples=True)
    print("RESULT " + json.dumps({"seconds": time.perf_counter() - start, "requests": sum(len(s["resps"]) for s in out["samples"]["p_arc"])}))
"""


def timed(model: str, model_args: str, task_dir: Path, limit: int) -> tuple[float, int]:
    from assay.runner.evaluator import simple_evaluate
    from assay.runner.tasks.index import TaskManager

    tm = TaskManager(str(task_dir))
    simple_evaluate(model, model_args=model_args, tasks=["p_arc"], limit=1, task_manager=tm, bootstrap_iters=0)
    start = time.perf_counter()
    out = simple_evaluate(
        model, model_args=model_args, tasks=["p_arc"], limit=limit, task_manager=tm, bootstrap_iters=0, log_samples=True
    )
    return time.perf_counter() - start, sum(len(s["resps"]) for s in out["samples"]["p_arc"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=40)
    limit = parser.parse_args().limit
    from tests.conftest import shared_data_dir
    from tests.helpers import write_parity_tasks
    from tests.model_fixtures import N_POSITIONS, tiny_gpt2
    from tests.served.vllm_server import VLLMServer, vllm_python

    data = shared_data_dir()
    work = Path(tempfile.mkdtemp(prefix="served_rps_"))
    model = tiny_gpt2(work / "model", data / "gpt2_tokenizer")
    tasks = write_parity_tasks(work / "tasks", data, work / "data")
    rows = []
    seconds, n = timed("hf", f"pretrained={model},dtype=float32,device=cpu", tasks, limit)
    rows.append(("hf (batch_size 1)", n, seconds))
    print(rows[-1], flush=True)
    server = VLLMServer(model, work / "server.log", max_model_len=N_POSITIONS)
    server.start()
    try:
        for concurrent in (1, 4):
            args = f"model={model},base_url={server.base}/v1/completions,max_length={N_POSITIONS},tokenizer_backend=huggingface,num_concurrent={concurrent}"
            seconds, n = timed("local-completions", args, tasks, limit)
            rows.append((f"local-completions (num_concurrent {concurrent})", n, seconds))
            print(rows[-1], flush=True)
    finally:
        server.stop()
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu"}
    script = work / "engine.py"
    script.write_text(ENGINE_SCRIPT)
    done = subprocess.run(
        [str(vllm_python()), str(script), str(model), str(tasks), str(limit)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=work,
    )
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT ") :])
    rows.append(("vllm in process", result["requests"], result["seconds"]))
    print(f"{'backend':40s} {'requests':>8s} {'seconds':>8s} {'req/s':>8s}")
    for name, n, seconds in rows:
        print(f"{name:40s} {n:8d} {seconds:8.2f} {n / seconds:8.1f}")


if __name__ == "__main__":
    main()
