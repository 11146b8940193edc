"""Assay vs lm-eval, same model, same tasks, same data, one process tree.

    python bench/bench_vs_lmeval.py [--layers 6] [--width 256] [--limit 120] [--batch_size 8] [--device cpu]
    python bench/bench_vs_lmeval.py --quick        # the CI smoke run: tiny model, few documents
    python bench/bench_vs_lmeval.py --gpu          # on a GPU: a ~0.5B model in bf16, 500 documents
    python bench/bench_vs_lmeval.py --startup      # start-up: `run ... --tasks arc_easy --limit 1`, both CLIs

Builds a randomly initialised GPT-2 (real GPT-2 tokenizer from ASSAY_SHARED_DATA) so the
run needs no network, converts the shared benchmark files into an ASSAY_DATASETS_DIR, and
runs each harness, each task in its own child process (so peak RSS is per side and task):
multiple choice (arc_easy, 5-shot; an MMLU subject, whose 5 shots every document shares), loglikelihood (lambada_openai), rolling (wikitext) and
generation (gsm8k, 5-shot, its regex filters; gsm8k_cot, the fixed 8-shot prompt every
document shares). Per row it prints wall seconds both sides, requests/s and model tokens/s
(Assay's), peak RSS both sides, the ratio lm-eval / Assay (above 1: Assay is faster),
whether every metric matched to 1e-6 relative (for generation, every generated text too),
and Assay's achieved FLOP/s against a matmul peak measured in the same run. For the
loglikelihood-type rows, "of floor" sets an ideal prefix cache's time (the distinct tokens of
all the row's requests, priced per token by forwards timed right after Assay's run) against
the time Assay spent answering those requests (`prefix_floor.py`); for generation rows the
distinct prompt tokens and the generated ones at the same prices against the time inside
generate_until (`generation_floor.py`).

`--startup` times instead what a user waits for on the smallest run: each tool's own command
line, `run --model hf --model_args pretrained=<model> --tasks arc_easy --limit 1 --device <device>`,
as a fresh process (best of `--repeats`), with that process's peak RSS; for so small a run
that is the import floor, the tokenizer and the model load, and one document. Beside them,
interleaved, the floor: a process that imports torch and transformers' GPT-2 module, loads
the model and tokenizer and runs one forward pass; "of floor" is its time over Assay's.

FLOPs are counted by hooks on the linear layers (2·rows·in·out per call, LM head
included), not the attention score products: a lower bound. Timings on a shared machine
are noisy; ratios from one run are the comparable numbers. No thresholds: the bench
reports, it never fails on speed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import prefix_floor  # noqa: E402 - bench/, this script's own folder, is on sys.path

# task → (few-shot, kind shown in the table)
TASKS = {
    "arc_easy": (5, "multiple choice"),
    "lambada_openai": (0, "loglikelihood"),
    "wikitext": (0, "rolling"),
    "gsm8k": (5, "generate_until"),
    # the same generation with the fixed 8-shot chain-of-thought prompt: every prompt shares its shots
    "gsm8k_cot": (8, "generate, fixed"),
    # multiple choice whose shots are the subject's first five (first_n): one few-shot prefix per subject
    "mmlu_high_school_psychology": (5, "MC, fixed shots"),
}


def build_model(directory: Path, tokenizer_dir: Path, layers: int, width: int) -> Path:
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=1024, n_embd=width, n_layer=layers, n_head=max(width // 64, 1)
    )
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


def add_train_splits(datasets_dir: Path) -> None:
    """Few-shot tasks draw shots from `train`; where the offline copy has none, both sides get
    the first split there is (validation before test), as the same file."""
    for folder in {p.parent for p in datasets_dir.rglob("*.jsonl")}:
        splits = {p.stem: p for p in folder.glob("*.jsonl")}
        if "train" not in splits:
            source = splits.get("validation") or splits.get("test") or next(iter(splits.values()))
            (folder / "train.jsonl").write_bytes(source.read_bytes())


def matmul_peak(device: str, dtype: str = "float32", size: int = 1024, repeats: int = 8) -> float:
    """Best FLOP/s of a square matmul in `dtype` on this device, now (4096² on a GPU, 1024² else)."""
    import torch

    size = 4096 if device.startswith("cuda") else size
    kind = getattr(torch, dtype)
    a, b = torch.randn(size, size, device=device, dtype=kind), torch.randn(size, size, device=device, dtype=kind)
    best = 0.0
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        torch.mm(a, b)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = max(best, 2 * size**3 / (time.perf_counter() - start))
    return best


class Counters:
    """Requests asked of the LM, tokens fed to the model, FLOPs of its linear layers."""

    def __init__(self, lm: Any) -> None:
        import torch
        from transformers.pytorch_utils import Conv1D

        self.requests = self.tokens = self.flops = 0
        for method in ("loglikelihood", "loglikelihood_rolling", "generate_until"):
            self._wrap(lm, method)
        model = lm.model

        def count_tokens(_m: Any, args: Any, kwargs: Any) -> None:
            ids = args[0] if args else kwargs.get("input_ids")
            if ids is not None:
                self.tokens += int(ids.numel())

        def count_flops(module: Any, args: Any, _out: Any) -> None:
            x = args[0]
            fan_in, fan_out = (
                (module.in_features, module.out_features)
                if isinstance(module, torch.nn.Linear)
                else module.weight.shape
            )
            self.flops += 2 * (x.numel() // fan_in) * fan_in * fan_out

        # on the body, which every path calls once per forward (Assay's rolling path calls it directly)
        getattr(model, model.base_model_prefix).register_forward_pre_hook(count_tokens, with_kwargs=True)
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, Conv1D)):
                module.register_forward_hook(count_flops)

    def _wrap(self, lm: Any, method: str) -> None:
        real = getattr(lm, method)

        def counted(requests: Any, *args: Any, **kwargs: Any) -> Any:
            self.requests += len(requests)
            return real(requests, *args, **kwargs)

        setattr(lm, method, counted)


def worker(args: argparse.Namespace) -> int:
    """One harness on one task, in this process: prints one JSON line."""
    os.environ["ASSAY_DATASETS_DIR"] = args.datasets
    patch_hub(Path(args.datasets))
    fewshot, _ = TASKS[args.task]
    kwargs: dict[str, Any] = dict(
        tasks=[args.task], limit=args.limit, bootstrap_iters=1000, num_fewshot=fewshot, gen_kwargs="max_gen_toks=32"
    )
    generates = TASKS[args.task][1].startswith("generate")
    kwargs["log_samples"] = generates  # to compare the generations themselves, not only their scores
    model_args = dict(pretrained=args.model, dtype=args.dtype, device=args.device, batch_size=int(args.batch_size))
    start = time.perf_counter()
    if args.side == "assay":
        from assay.runner.evaluator import simple_evaluate
        from assay.runner.models.hf.model import HFLM

        lm: Any = HFLM(**model_args)
        counters = Counters(lm)
        recorder = prefix_floor.Recorder(lm)
        out = simple_evaluate(lm, **kwargs)
    else:
        import lm_eval
        from lm_eval.models.huggingface import HFLM as LmEvalHFLM

        lm = LmEvalHFLM(**model_args)
        counters = Counters(lm)
        out = lm_eval.simple_evaluate(model=lm, **kwargs)
    wall = time.perf_counter() - start
    metrics = {k: v for k, v in out["results"][args.task].items() if "," in k}
    if generates:  # every generated text, before the filters, stands with the metrics for the match
        texts = sorted((s["doc_id"], json.dumps(s["resps"])) for s in out["samples"][args.task])
        metrics["generations sha256"] = hashlib.sha256(json.dumps(texts).encode()).hexdigest()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "wall": wall,
        "rss_mb": rss_mb,
        "requests": counters.requests,
        "tokens": counters.tokens,
        "flops": counters.flops,
        "metrics": metrics,
        "config": out.get("config", {}).get("shared_context"),
    }
    if args.side == "assay":  # after the counters are read: the floor's own forwards are not the run's
        result["floor"] = prefix_floor.measure(lm, recorder, int(args.batch_size))
    print(json.dumps(result))
    return 0


def _child(args: argparse.Namespace, side: str, task: str, model: Path, datasets: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        side,
        "--task",
        task,
        "--model",
        str(model),
        "--datasets",
        str(datasets),
        "--limit",
        str(args.limit),
        "--batch_size",
        str(args.batch_size),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{side} on {task} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one child process, read from its own rusage."""
    start = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = child.stderr.read() if child.stderr else b""
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{stderr.decode(errors='replace')[-4000:]}")
    return wall, usage.ru_maxrss / 1024


def lmeval_cli(datasets: str, argv: list[str]) -> int:
    """lm-eval's own command line, served the same local files (it has no offline directory option)."""
    patch_hub(Path(datasets))
    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["lm_eval", *argv]
    cli_evaluate()
    return 0


# the start-up row's floor: what any harness on transformers pays before its first document
STARTUP_FLOOR = """
import torch
from transformers import AutoTokenizer
from transformers.models.gpt2 import modeling_gpt2
model = modeling_gpt2.GPT2LMHeadModel.from_pretrained({model!r}).to({device!r}).eval()
ids = AutoTokenizer.from_pretrained({model!r})("Question: one forward pass", return_tensors="pt").input_ids
with torch.no_grad():
    model(ids.to({device!r}))
"""


def startup(args: argparse.Namespace, model: Path, datasets: Path) -> None:
    """The start-up row: both command lines on a one-document run, best wall time of `args.repeats`."""
    run = [
        "run",
        "--model",
        "hf",
        "--model_args",
        f"pretrained={model}",
        "--tasks",
        "arc_easy",
        "--limit",
        "1",
        "--device",
        args.device,
    ]
    env = {**os.environ, "ASSAY_DATASETS_DIR": str(datasets), "PYTHONPATH": str(REPO)}
    sides = {
        "assay": [sys.executable, "-m", "assay", *run],
        "lm-eval": [sys.executable, __file__, "--lmeval_cli", str(datasets), *run],
        # the floor: import torch and transformers' model module, load the model and tokenizer, one forward
        "floor": [sys.executable, "-c", STARTUP_FLOOR.format(model=str(model), device=args.device)],
    }
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.repeats):
        for side, cmd in sides.items():
            wall, rss = _timed(cmd, env)
            best[side] = min(best.get(side, (wall, rss)), (wall, rss))
    (ours, our_rss), (theirs, their_rss), (floor, floor_rss) = best["assay"], best["lm-eval"], best["floor"]
    print(
        f"{'row':<24}{'assay s':>8}{'lm-eval s':>10}{'ratio':>7}{'floor s':>8}{'of floor':>9}{'RSS MB':>8}{'lm-eval MB':>11}{'floor MB':>9}"
    )
    print(
        f"{'start-up, --limit 1':<24}{ours:>8.2f}{theirs:>10.2f}{theirs / ours:>7.2f}{floor:>8.2f}{floor / ours:>9.2f}"
        f"{our_rss:>8.0f}{their_rss:>11.0f}{floor_rss:>9.0f}"
    )


def _agree(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    def same(a: Any, b: Any) -> bool:
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))
        return bool(a == b)

    return set(ours) == set(theirs) and all(same(ours[k], v) for k, v in theirs.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--limit", type=int, default=120)
    parser.add_argument("--batch_size", default="8")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="the GPU comparison: a ~0.5B model (24 x 1280), bf16, cuda, "
        "500 documents, batch 32 (match at 1e-6 can read False in bf16: its rounding is ~1e-3)",
    )
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--quick", action="store_true", help="tiny model, 4 documents per task (the CI smoke run)")
    parser.add_argument("--startup", action="store_true", help="the start-up row: both command lines, --limit 1")
    parser.add_argument("--repeats", type=int, default=3, help="--startup: runs per side; the best counts")
    parser.add_argument("--worker", choices=["assay", "lm-eval"], help=argparse.SUPPRESS)
    for hidden in ("--task", "--model", "--datasets"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    if sys.argv[1:2] == ["--lmeval_cli"]:  # the rest is lm-eval's command line, not this parser's
        return lmeval_cli(sys.argv[2], sys.argv[3:])
    args = parser.parse_args()
    if args.worker:
        args.side = args.worker
        return worker(args)
    if args.quick:
        args.layers, args.width, args.limit = 2, 64, 4
    if args.gpu:  # ~0.5B parameters (24 x 1280, GPT-2 vocabulary), bf16, on the first GPU
        args.layers, args.width, args.limit, args.batch_size, args.device, args.dtype = (
            24,
            1280,
            500,
            "32",
            "cuda",
            "bfloat16",
        )

    data = Path(os.environ.get("ASSAY_SHARED_DATA", REPO.parent / "shared" / "data"))
    work = Path(tempfile.mkdtemp(prefix="assay-bench-"))
    from assay.runner.data import importer as data_import

    data_import.import_benchmarks(data, work / "datasets")
    add_train_splits(work / "datasets")
    model = build_model(work / "model", data / "gpt2_tokenizer", args.layers, args.width)
    if args.startup:
        print(f"model: GPT-2 {args.layers} layers x {args.width}, {args.device}; best of {args.repeats}")
        startup(args, model, work / "datasets")
        return 0
    print(
        f"model: GPT-2 {args.layers} layers x {args.width}, {args.dtype}, limit {args.limit}, batch {args.batch_size}, {args.device}"
    )
    header = (
        "task",
        "kind",
        "assay s",
        "lm-eval s",
        "ratio",
        "req/s",
        "tok/s",
        "RSS MB",
        "lm-eval MB",
        "GFLOP/s",
        "of peak",
        "of floor",
        "match",
    )
    wide = max(15, *(len(task) + 1 for task in args.tasks.split(",")))
    print(
        f"{{:<{wide}}}{{:<16}}{{:>8}}{{:>10}}{{:>7}}{{:>8}}{{:>9}}{{:>8}}{{:>11}}{{:>9}}{{:>8}}{{:>9}}  {{}}".format(
            *header
        )
    )
    for task in args.tasks.split(","):
        peak = matmul_peak(args.device, args.dtype)  # per row: on a shared machine the peak moves too
        ours = _child(args, "assay", task, model, work / "datasets")
        theirs = _child(args, "lm-eval", task, model, work / "datasets")
        flops = ours["flops"] / ours["wall"]
        floor = ours.get("floor")
        of_floor = f"{floor['floor_s'] / floor['lm_s']:.2f}" if floor else "-"
        print(
            f"{task:<{wide}}{TASKS[task][1]:<16}{ours['wall']:>8.1f}{theirs['wall']:>10.1f}{theirs['wall'] / ours['wall']:>7.2f}"
            f"{ours['requests'] / ours['wall']:>8.1f}{ours['tokens'] / ours['wall']:>9.0f}{ours['rss_mb']:>8.0f}"
            f"{theirs['rss_mb']:>11.0f}{flops / 1e9:>9.2f}{flops / peak:>8.2f}{of_floor:>9}  {_agree(ours['metrics'], theirs['metrics'])}"
        )
        print(
            f"{'':<{wide}}lm-eval: {theirs['tokens'] / theirs['wall']:.0f} tok/s, {theirs['flops'] / theirs['wall'] / 1e9:.2f} GFLOP/s; "
            f"matmul peak {peak / 1e9:.1f} GFLOP/s; assay shared_context: {ours['config']}"
        )
        if floor:
            print(f"{'':<{wide}}{prefix_floor.describe(floor)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
