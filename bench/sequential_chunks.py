"""What looking more often costs: a sequential run's wall time by chunk schedule, on a real model.

    python bench/sequential_chunks.py [--documents 600] [--model DIR] [--repeats 2]

A confidence sequence holds at every look, so more looks cost no validity; what they cost is
per-chunk work: each chunk is one model call per request type (its last batch part-filled,
its sort and shared-prefix grouping over fewer requests), a gather to rank 0 and a look of
the gate. This scores every document of a two-choice task (ARC-Easy's questions, their first
two choices) with the gate asked for a precision it never reaches (`target_ci` 1e-6), so each
schedule scores the same documents and only the number of chunks differs; an ordinary run
(no gate, one call) is the floor. The model is a tiny random GPT-2 built here (2 layers, 64
wide, the real GPT-2 tokenizer from the shared data), where the model's own work is smallest
and the per-chunk share largest, unless `--model` names another.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from assay.batch_size import BatchSize
from assay.errors import UserError
from assay.run_options import EvalOptions, SequentialSettings
from assay.runner import evaluator
from assay.runner.sequential import order as chunk_order
from assay.runner.tasks.index import TaskManager

YAML = """task: chunk_bench
dataset_path: json
dataset_kwargs: {data_files: {"test": "@FILE@"}}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{q}}\\nAnswer:"
doc_to_choice: "{{choices}}"
doc_to_target: "{{label}}"
metric_list:
  - {metric: acc, aggregation: mean, higher_is_better: true}
metadata: {version: 1.0}
"""


def tiny_model(folder: Path, tokenizer: Path) -> Path:
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(tokenizer))
    config = transformers.GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=64, n_layer=2, n_head=2)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).eval().save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


def write_task(folder: Path, data: Path, documents: int) -> Path:
    rows = []
    for line in (data / "arc/ARC-Easy-Test.jsonl").read_text().splitlines()[:documents]:
        question = json.loads(line)["question"]
        rows.append({"q": question["stem"], "choices": [c["text"] for c in question["choices"][:2]], "label": 0})
    (folder / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "chunk_bench.yaml").write_text(YAML.replace("@FILE@", str(folder / "rows.jsonl")))
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=600)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    data = Path(os.environ.get("ASSAY_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    work = Path(tempfile.mkdtemp(prefix="chunk-bench-"))
    model = args.model or tiny_model(work / "model", data / "gpt2_tokenizer")
    tasks = write_task(work, data, args.documents)
    n = args.documents
    base = EvalOptions(
        model="hf",
        model_args=f"pretrained={model},dtype=float32,device={args.device}",
        parsed_model_args={"pretrained": str(model), "dtype": "float32", "device": args.device},
        tasks=("chunk_bench",),
        batch_size=BatchSize.parse(str(args.batch_size), source="--batch-size", error=UserError),
        log_samples=False,
        bootstrap_iters=0,
    )
    lm = evaluator.build_lm(base)
    manager = TaskManager(str(tasks))
    schedules: list[tuple[str, SequentialSettings | None, int]] = [("ordinary run (no gate)", None, 1)]
    for label, size in (
        ("one chunk (N)", n),
        ("N/20 each", max(1, n // 20)),
        ("N/40 each", max(1, n // 40)),
        ("default: every N/20 (at least 64) and 64, 128, ...", None),
        ("16 each", 16),
    ):
        looks = len(chunk_order.chunk_sizes(n, size))
        schedules.append((label, SequentialSettings(target_half_width=1e-6, chunk_size=size), looks))
    seconds: dict[str, list[float]] = {label: [] for label, _, _ in schedules}
    evaluator.run_results(base, lm=lm, task_manager=manager)  # warm: tokenizer, caches, first-call costs
    for _ in range(args.repeats):  # interleaved, so that load on the machine falls on every schedule alike
        for label, settings, _ in schedules:
            started = time.perf_counter()
            done = evaluator.run_results(dataclasses.replace(base, sequential=settings), lm=lm, task_manager=manager)
            seconds[label].append(time.perf_counter() - started)
            assert done is not None
    floor = statistics.median(seconds[schedules[0][0]])
    print(f"{n} documents ({2 * n} requests), batch size {args.batch_size}, {args.device}, median of {args.repeats}\n")
    print("| schedule | looks | wall (s) | over the ordinary run | per look (ms) |")
    print("|---|---:|---:|---:|---:|")
    for label, _, looks in schedules:
        wall = statistics.median(seconds[label])
        per_look = "—" if label == schedules[0][0] else f"{1000 * (wall - floor) / looks:.0f}"
        print(f"| {label} | {looks} | {wall:.2f} | {wall / floor - 1:+.1%} | {per_look} |")
    lm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
