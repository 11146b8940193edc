"""Assay vs lm-eval, same model, same tasks, same data, one process tree.

    python bench/bench_vs_lmeval.py [--layers 6] [--width 256] [--limit 120] [--batch_size 8] [--device cpu]
    python bench/bench_vs_lmeval.py --quick        # the CI smoke run: tiny model, few documents
    python bench/bench_vs_lmeval.py --gpu          # on a GPU: a ~0.5B model in bf16, 500 documents
    python bench/bench_vs_lmeval.py --startup      # start-up: `run ... --tasks arc_easy --limit 1`, both CLIs
    python bench/bench_vs_lmeval.py --tasks arc_easy:400,gsm8k:24:2,wikitext:20 --startup --repeat 3

A row is `task`, `task:limit` or `task:limit:shots` (else --limit and the task's own shots).
`--repeat N` runs every row N times, the two sides' children interleaved, and prints per side
the run of median wall time and the median "of floor"; `--startup` adds the start-up row.

Builds a randomly initialised GPT-2 (real GPT-2 tokenizer from ASSAY_SHARED_DATA) so the
run needs no network, converts the shared benchmark files into an ASSAY_DATASETS_DIR, and
runs each harness, each task in its own child process (so peak RSS is per side and task):
multiple choice (arc_easy, 5 random shots; an MMLU subject, whose 5 shots every document
shares), loglikelihood (lambada_openai), rolling (wikitext) and
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

`--startup` times each tool's own command line on a one-document run against the floor of
importing torch and transformers' model module and one forward pass (`startup_row.py`).

FLOPs are counted by hooks on the linear layers (2·rows·in·out per call, LM head included),
not the attention score products: a lower bound. Timings on a shared machine are noisy;
ratios are the comparable numbers. No thresholds: it reports, it never fails on speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import prefix_floor  # noqa: E402 - bench/, this script's own folder, is on sys.path
import startup_row  # noqa: E402

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

    def count_blocked_head(self) -> None:
        """Assay's head products a vocabulary block at a time bypass the head's forward (and
        its hook): count them where they run."""
        from assay.runner.models.hf.head_logprobs import HeadLogprobs

        real = HeadLogprobs._logits

        def counted(scorer: Any, hidden: Any) -> Any:
            self.flops += 2 * hidden.shape[0] * hidden.shape[1] * scorer.head.out_features
            return real(scorer, hidden)

        HeadLogprobs._logits = counted  # type: ignore[method-assign]

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
    fewshot = int(args.fewshot)
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
        counters.count_blocked_head()
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


def _child(args: argparse.Namespace, side: str, row: Row, model: Path, datasets: Path) -> dict[str, Any]:
    task = row.task
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
        str(row.limit),
        "--batch_size",
        str(args.batch_size),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
        "--fewshot",
        str(row.shots),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{side} on {task} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def lmeval_cli(datasets: str, argv: list[str]) -> int:
    """lm-eval's own command line, served the same local files (it has no offline directory option)."""
    patch_hub(Path(datasets))
    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["lm_eval", *argv]
    cli_evaluate()
    return 0


def _agree(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    def same(a: Any, b: Any) -> bool:
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))
        return bool(a == b)

    return set(ours) == set(theirs) and all(same(ours[k], v) for k, v in theirs.items())


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the table: a task, its document limit and its few-shot count."""

    task: str
    limit: int
    shots: int

    @classmethod
    def parse(cls, text: str, limit: int) -> Row:
        """`task`, `task:limit` or `task:limit:shots`."""
        task, *rest = text.split(":")
        if task not in TASKS or len(rest) > 2:
            raise SystemExit(f"bench row {text!r}: want task[:limit[:shots]] with a task of {', '.join(TASKS)}")
        return cls(task, int(rest[0]) if rest else limit, int(rest[1]) if len(rest) > 1 else TASKS[task][0])


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median wall time (the lower middle one of an even count), with the median
    "of floor" of all the runs."""
    wall = statistics.median_low(run["wall"] for run in runs)
    chosen = dict(next(run for run in runs if run["wall"] == wall))
    floors = [run["floor"]["floor_s"] / run["floor"]["lm_s"] for run in runs if run.get("floor")]
    chosen["of_floor"] = statistics.median(floors) if floors else None
    return chosen


def _print_row(row: Row, ours: dict[str, Any], theirs: dict[str, Any], peak: float, wide: int) -> None:
    flops = ours["flops"] / ours["wall"]
    of_floor = f"{ours['of_floor']:.2f}" if ours["of_floor"] is not None else "-"
    print(
        f"{row.task:<{wide}}{TASKS[row.task][1]:<16}{row.limit:>6}{row.shots:>6}{ours['wall']:>8.1f}{theirs['wall']:>10.1f}"
        f"{theirs['wall'] / ours['wall']:>7.2f}{ours['requests'] / ours['wall']:>8.1f}{ours['tokens'] / ours['wall']:>9.0f}"
        f"{ours['rss_mb']:>8.0f}{theirs['rss_mb']:>11.0f}{flops / 1e9:>9.2f}{flops / peak:>8.2f}{of_floor:>9}"
        f"  {_agree(ours['metrics'], theirs['metrics'])}"
    )
    print(
        f"{'':<{wide}}lm-eval: {theirs['tokens'] / theirs['wall']:.0f} tok/s, {theirs['flops'] / theirs['wall'] / 1e9:.2f} GFLOP/s; "
        f"matmul peak {peak / 1e9:.1f} GFLOP/s; assay shared_context: {ours['config']}"
    )
    if ours.get("floor"):
        print(f"{'':<{wide}}{prefix_floor.describe(ours['floor'])}")


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
        help="a ~0.5B model (24 x 1280), bf16, cuda, 500 documents, batch 32 (bf16 rounds ~1e-3: match may say False)",
    )
    parser.add_argument("--tasks", help="rows, comma-separated: task[:limit[:shots]] (default: every task)")
    parser.add_argument("--quick", action="store_true", help="tiny model, 4 documents per task (the CI smoke run)")
    parser.add_argument("--startup", action="store_true", help="the start-up row: both command lines, --limit 1")
    parser.add_argument("--repeat", "--repeats", dest="repeat", type=int, default=1, help="runs per row; the median")
    parser.add_argument("--worker", choices=["assay", "lm-eval"], help=argparse.SUPPRESS)
    for hidden in ("--task", "--model", "--datasets", "--fewshot"):
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
        args.layers, args.width, args.limit, args.batch_size = 24, 1280, 500, "32"
        args.device, args.dtype = "cuda", "bfloat16"
    # --startup alone is the start-up row alone
    names = args.tasks.split(",") if args.tasks else ([] if args.startup else list(TASKS))
    rows = [Row.parse(name, args.limit) for name in names]

    data = Path(os.environ.get("ASSAY_SHARED_DATA", REPO.parent / "shared" / "data"))
    work = Path(tempfile.mkdtemp(prefix="assay-bench-"))
    from assay.runner.data import importer as data_import

    data_import.import_benchmarks(data, work / "datasets")
    add_train_splits(work / "datasets")
    model = build_model(work / "model", data / "gpt2_tokenizer", args.layers, args.width)
    print(
        f"model: GPT-2 {args.layers} layers x {args.width}, {args.dtype}, batch {args.batch_size}, {args.device}; "
        f"median of {args.repeat} run(s) per row and side"
    )
    header = ("task", "kind", "limit", "shots", "assay s", "lm-eval s", "ratio", "req/s", "tok/s", "RSS MB")
    header += ("lm-eval MB", "GFLOP/s", "of peak", "of floor", "match")
    wide = max(15, *(len(row.task) + 1 for row in rows)) if rows else 15
    if rows:
        print(
            f"{{:<{wide}}}{{:<16}}{{:>6}}{{:>6}}{{:>8}}{{:>10}}{{:>7}}{{:>8}}{{:>9}}{{:>8}}{{:>11}}{{:>9}}{{:>8}}{{:>9}}  {{}}".format(
                *header
            )
        )
    for row in rows:
        peak = matmul_peak(args.device, args.dtype)  # per row: on a shared machine the peak moves too
        runs: dict[str, list[dict[str, Any]]] = {"assay": [], "lm-eval": []}
        for _ in range(args.repeat):  # the two sides interleaved: both meet the same load
            for side, found in runs.items():
                found.append(_child(args, side, row, model, work / "datasets"))
        _print_row(row, _median_run(runs["assay"]), _median_run(runs["lm-eval"]), peak, wide)
    if args.startup:
        found = startup_row.measure(
            repo=REPO,
            lmeval_cli=[sys.executable, __file__, "--lmeval_cli"],
            model=model,
            datasets=work / "datasets",
            device=args.device,
            repeat=args.repeat,
        )
        print(startup_row.HEADER)
        print(startup_row.line(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
