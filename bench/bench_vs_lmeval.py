"""Assay vs lm-eval, same model, same tasks, same data, one process tree: wall time ratios.

    python bench/bench_vs_lmeval.py [--layers 4] [--width 256] [--limit 200] [--device cpu]

Builds a randomly initialised GPT-2 (real GPT-2 tokenizer from ASSAY_SHARED_DATA) so the
run needs no network, converts the shared benchmark files into an ASSAY_DATASETS_DIR, and
runs each harness on multiple choice (arc_easy), loglikelihood (lambada_openai), rolling
(wikitext) and generation (gsm8k, 0-shot) with the same batch size. Prints per-task
seconds and the ratio lm-eval / Assay (above 1 means Assay is faster), and checks the two
harnesses agree on every metric.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build_model(directory: Path, tokenizer_dir: Path, layers: int, width: int) -> Path:
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=1024, n_embd=width, n_layer=layers, n_head=max(width // 64, 1))
    GPT2LMHeadModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def patch_hub(datasets_dir: Path) -> None:
    """lm-eval has no offline directory option: serve the same converted files to it."""
    import datasets

    from assay.runner.data import local as datasets_local

    real = datasets.load_dataset

    def load_dataset(path: str | None = None, name: str | None = None, **kwargs: Any) -> Any:
        files = datasets_local.find_local_files(path, name, roots=[datasets_dir])
        if files is None:
            return real(path, name, **kwargs)
        loaded = real("json", data_files={split: str(file) for split, file in files.items()})
        for split in ("train", "validation", "test"):
            if split not in loaded:
                loaded[split] = next(iter(loaded.values()))
        return loaded

    datasets.load_dataset = load_dataset


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--batch_size", default="16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tasks", default="arc_easy,lambada_openai,wikitext,gsm8k")
    args = parser.parse_args()

    data = Path(os.environ.get("ASSAY_SHARED_DATA", REPO.parent / "shared" / "data"))
    work = Path(tempfile.mkdtemp(prefix="assay-bench-"))
    from assay.runner.data import importer as data_import

    data_import.import_benchmarks(data, work / "datasets")
    os.environ["ASSAY_DATASETS_DIR"] = str(work / "datasets")
    patch_hub(work / "datasets")
    model = build_model(work / "model", data / "gpt2_tokenizer", args.layers, args.width)
    model_args = f"pretrained={model},dtype=float32,device={args.device}"

    import lm_eval
    import lm_eval.tasks

    from assay.runner.evaluator import simple_evaluate

    lmeval_tasks = Path(lm_eval.__file__).parent / "tasks"
    print(f"model: GPT-2 {args.layers} layers x {args.width}, limit {args.limit}, batch {args.batch_size}, {args.device}")
    print(f"{'task':<16}{'assay s':>10}{'lm-eval s':>11}{'ratio':>8}  metrics agree")
    total_ours = total_theirs = 0.0
    for task in args.tasks.split(","):
        kwargs = dict(tasks=[task], limit=args.limit, batch_size=args.batch_size, bootstrap_iters=1000, num_fewshot=0,
                      gen_kwargs="max_gen_toks=32", log_samples=False)
        start = time.perf_counter()
        ours = simple_evaluate("hf", model_args=model_args, **kwargs)
        ours_s = time.perf_counter() - start
        manager = lm_eval.tasks.TaskManager(include_path=[str(p) for p in lmeval_tasks.iterdir() if p.is_dir()][:0] or None)
        start = time.perf_counter()
        theirs = lm_eval.simple_evaluate(model="hf", model_args=model_args, task_manager=manager, **kwargs)
        theirs_s = time.perf_counter() - start
        agree = all(
            (isinstance(v, str) and v == ours["results"][task].get(k)) or
            (isinstance(v, (int, float)) and math.isclose(v, ours["results"][task][k], rel_tol=1e-4, abs_tol=1e-6))
            for k, v in theirs["results"][task].items() if "," in k
        )
        total_ours += ours_s
        total_theirs += theirs_s
        print(f"{task:<16}{ours_s:>10.1f}{theirs_s:>11.1f}{theirs_s / ours_s:>8.2f}  {agree}")
    print(f"{'total':<16}{total_ours:>10.1f}{total_theirs:>11.1f}{total_theirs / total_ours:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
