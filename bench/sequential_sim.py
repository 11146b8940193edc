"""Proof by simulation: the sequential gate's error rates, its agreement with full runs, its savings.

    python bench/sequential_sim.py [--runs 2000] [--max-drop 0.02] [--alpha 0.05]
        [--pair BASELINE_SCORES CANDIDATE_SCORES [--metric acc]] [--granularity] [--jobs N]

Each simulated run is one task of N documents scored in a random order, in the runner's
chunks (a look after every N/20 documents, at least 64, and after 64, 128, 256, ... documents),
checked by the gate (`assay.compare.sequential_runs`, held equal to `SequentialGate` by
tests/compare/test_sequential_runs.py) after every chunk.
A paired 0/1 metric's documents are lost (baseline right, candidate wrong), gained or
unchanged, so a stream is fixed by its discordance (lost + gained) and its true difference
(gained − lost); documents are drawn independently from that (the superpopulation the
fixed-sample tests infer about, as here). Per point, 2,000 runs (seeded):

- false pass: the share of runs stopped `non_inferior` at a true difference of exactly −maxDrop;
- false regression: the share stopped `regressed` at a true difference of 0;
- agreement: among runs whose full N documents give a decisive fixed-sample verdict (`assay
  compare`'s McNemar row: regressed, or unchanged/improved, i.e. non-inferior), the share whose
  sequential verdict (the stop's reason; the full verdict where it ran out) says the same, over
  the true differences 0, −maxDrop and −0.05;
- the median share of the documents scored, at true differences 0 and −0.05.

Rates carry a 95% Wilson interval. `--pair` adds rows from two real runs' `scores_<task>_*.jsonl`
(or samples) files: the real documents, in 2,000 random orders (what the runner's seeded shuffle
does), and the same size and discordance at the three true differences. `--granularity` adds
the table of how the chunk schedule sets the savings at MMLU's size.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from assay.compare import outputs, pairing, sequential_runs, statistics, verdicts

SIZES = (1000, 2000, 5000, 14042)
DISCORDANCE = (0.05, 0.10, 0.20, 0.30)
BLOCK = 250
"""Runs simulated at once: a (14,042 × 250) array of float64 is 28 MB, a few of them at a time."""


def wilson(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95% Wilson score interval of a binomial proportion."""
    if trials == 0:
        return math.nan, math.nan
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def draw(rng: np.random.Generator, documents: int, runs: int, *, lost: float, gained: float) -> np.ndarray:
    """(documents, runs) paired 0/1 differences: −1 with probability `lost`, +1 with `gained`."""
    u = rng.random((documents, runs))
    return np.where(u < lost, -1.0, np.where(u < lost + gained, 1.0, 0.0))


def full_verdict(differences: np.ndarray, *, alpha: float, max_drop: float) -> str:
    """`assay compare`'s verdict on all of a run's documents (exact McNemar, its t interval)."""
    baseline, candidate = (differences < 0).astype(float), (differences > 0).astype(float)
    test = statistics.mcnemar(baseline, candidate, alpha=alpha)
    return verdicts.verdict(test, higher_is_better=True, alpha=alpha, max_drop=max_drop, margin=None)


CALLED = {sequential_runs.REGRESSED: verdicts.REGRESSED, sequential_runs.NON_INFERIOR: "non-inferior"}


def _call(full: str) -> str:
    """A full run's decisive verdict as the gate would say it: unchanged and improved are non-inferior."""
    return "non-inferior" if full in (verdicts.UNCHANGED, verdicts.IMPROVED) else full


def simulate(
    streams: Any, documents: int, runs: int, *, alpha: float, max_drop: float, chunk: int | None, verdict: bool = True
) -> dict[str, Any]:
    """Stops of `runs` runs, BLOCK at a time; `streams(count)` gives a (documents, count) array."""
    used, reasons, agree, decisive = [], [], 0, 0
    for start in range(0, runs, BLOCK):
        differences = streams(min(BLOCK, runs - start))
        stops = sequential_runs.stops(differences, width=1.0, max_drop=max_drop, alpha=alpha, chunk=chunk)
        used.append(stops.documents / documents)
        reasons.append(stops.reasons)
        if not verdict:
            continue
        for run in range(differences.shape[1]):
            full = full_verdict(differences[:, run], alpha=alpha, max_drop=max_drop)
            if full == verdicts.INCONCLUSIVE:
                continue
            decisive += 1
            said = CALLED.get(int(stops.reasons[run]), _call(full))  # ran out: the full run's verdict
            agree += said == _call(full)
    reason = np.concatenate(reasons)
    return {
        "runs": runs,
        "median_used": float(np.median(np.concatenate(used))),
        "non_inferior": int(np.sum(reason == sequential_runs.NON_INFERIOR)),
        "regressed": int(np.sum(reason == sequential_runs.REGRESSED)),
        "agree": agree,
        "decisive": decisive,
    }


def crafted_point(
    documents: int,
    discordance: float,
    truth: float,
    *,
    runs: int,
    alpha: float,
    max_drop: float,
    seed: int,
    chunk: int | None,
) -> dict[str, Any]:
    lost, gained = (discordance - truth) / 2, (discordance + truth) / 2
    rng = np.random.default_rng(seed)
    return simulate(
        lambda count: draw(rng, documents, count, lost=lost, gained=gained),
        documents,
        runs,
        alpha=alpha,
        max_drop=max_drop,
        chunk=chunk,
    )


HEADER = (
    "| documents | discordant | false pass at −maxDrop [95% CI] | false regression at 0 [95% CI] "
    "| agreement where the full run is decisive | median used, true 0 | median used, true −0.05 |",
    "|---:|---:|---|---|---|---:|---:|",
)


def rate(point: dict[str, Any], key: str) -> str:
    low, high = wilson(point[key], point["runs"])
    return f"{point[key] / point['runs']:.3f} [{low:.3f}, {high:.3f}]"


def table(args: argparse.Namespace, pairs: list[tuple[str, int, float]], *, crafted: bool = True) -> list[str]:
    """The main table: one row per size and discordance (crafted), and per real pair."""
    rows = list(HEADER)
    points = [(size, disc, "") for size in SIZES for disc in DISCORDANCE if crafted] + [
        (n, d, name) for name, n, d in pairs
    ]
    jobs = {
        (number, truth): (size, disc, truth, 1000 * number + k)
        for number, (size, disc, _) in enumerate(points)
        for k, truth in enumerate((0.0, -args.max_drop, -0.05))
        if truth + disc >= 0  # lost ≤ discordant
    }
    done = dict(zip(jobs, _map(args, list(jobs.values())), strict=True))
    for number, (size, disc, name) in enumerate(points):
        got = {truth: point for (at, truth), point in done.items() if at == number}
        agree = sum(p["agree"] for p in got.values())
        decisive = sum(p["decisive"] for p in got.values())
        low, high = wilson(agree, decisive)
        label = f"{size:,}" + (f" ({name})" if name else "")
        minus = got.get(-0.05)
        rows.append(
            f"| {label} | {disc:.0%} | {rate(got[-args.max_drop], 'non_inferior')} | {rate(got[0.0], 'regressed')} "
            f"| {agree / decisive:.3f} [{low:.3f}, {high:.3f}] of {decisive:,} | {got[0.0]['median_used']:.0%} "
            f"| {'—' if minus is None else format(minus['median_used'], '.0%')} |"
        )
        print(rows[-1], flush=True)
    return rows


def _point(args: argparse.Namespace, job: tuple[int, float, float, int | None, int]) -> dict[str, Any]:
    size, disc, truth, chunk, seed = job
    return crafted_point(
        size, disc, truth, runs=args.runs, alpha=args.alpha, max_drop=args.max_drop, seed=seed, chunk=chunk
    )


def _map(args: argparse.Namespace, jobs: list[tuple[int, float, float, int]], chunk: int | None = None) -> list[Any]:
    """crafted_point over (size, discordance, truth, seed) jobs, in `--jobs` processes (each job
    seeded on its own, so the numbers do not depend on how many)."""
    full = [(size, disc, truth, chunk, seed) for size, disc, truth, seed in jobs]
    if args.jobs <= 1:
        return [_point(args, job) for job in full]
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        return list(pool.map(functools.partial(_point, args), full))


def real_pair(baseline: Path, candidate: Path, metric: str) -> np.ndarray:
    """The paired per-document differences of `metric` in two runs: two scores (or samples) files,
    or two output folders, whose tasks' documents (every task both ran: MMLU's 57) make one stream."""
    if baseline.is_dir():
        tasks = [_per_task(baseline), _per_task(candidate)]
        shared = sorted(set(tasks[0]) & set(tasks[1]))
        return np.concatenate([real_pair(tasks[0][task], tasks[1][task], metric) for task in shared])
    sides = [
        outputs.read_samples(path, label=label) for path, label in ((baseline, "baseline"), (candidate, "candidate"))
    ]
    paired = pairing.pair_task("task", sides[0], sides[1], configs=({}, {}), higher_is_better={metric: True})
    (pairs,) = [m for m in paired.metrics if m.metric == metric and m.filter == "none"]
    differences: np.ndarray = np.asarray(pairs.candidate, dtype=float) - np.asarray(pairs.baseline, dtype=float)
    return differences


def _per_task(folder: Path) -> dict[str, Path]:
    """task → its newest scores_ (else samples_) file anywhere under `folder`."""
    found: dict[str, Path] = {}
    for kind in ("samples", "scores"):  # scores_ files, where both exist, win
        for path in sorted(folder.rglob(f"{kind}_*.jsonl")):
            found[path.name[len(kind) + 1 :].rsplit("_", 1)[0]] = path
    return found


def shuffled_real(args: argparse.Namespace, differences: np.ndarray, name: str) -> str:
    """The real documents in `runs` random orders: how often the gate calls what the full run calls."""
    rng = np.random.default_rng(7)
    n = len(differences)
    full = full_verdict(differences, alpha=args.alpha, max_drop=args.max_drop)
    point = simulate(
        lambda count: differences[np.argsort(rng.random((n, count)), axis=0)],
        n,
        args.runs,
        alpha=args.alpha,
        max_drop=args.max_drop,
        chunk=None,
        verdict=False,
    )
    return (
        f"| {name} | {n:,} | {np.mean(differences != 0):.1%} | {differences.mean():+.4f} | {full} "
        f"| {point['non_inferior'] / args.runs:.3f} | {point['regressed'] / args.runs:.3f} "
        f"| {point['median_used']:.0%} |"
    )


SCHEDULES: tuple[tuple[str, int | None], ...] = (
    ("702 each (N/20)", 702),
    ("351 each (N/40)", 351),
    ("703 each and after 64, 128, ..., 8,192 (the default)", None),
    ("64 each", 64),
    ("1 each (every document)", 1),
)


def granularity(args: argparse.Namespace) -> list[str]:
    """How the chunk schedule sets the savings at MMLU's size and 10% discordance."""
    rows = [
        "| chunks (documents) | looks | median used, true 0 | median used, true −0.05 |",
        "|---|---:|---:|---:|",
    ]
    print("\n".join(rows))
    for label, chunk in SCHEDULES:
        got = _map(args, [(14042, 0.10, truth, 99 + k) for k, truth in enumerate((0.0, -0.05))], chunk)
        looks = len(sequential_runs.look_ends(14042, chunk))
        rows.append(f"| {label} | {looks:,} | {got[0]['median_used']:.1%} | {got[1]['median_used']:.1%} |")
        print(rows[-1], flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--max-drop", type=float, default=0.02)
    parser.add_argument("--pair", nargs=2, type=Path, action="append", default=[], metavar=("BASELINE", "CANDIDATE"))
    parser.add_argument("--metric", default="acc")
    parser.add_argument("--granularity", action="store_true")
    parser.add_argument("--jobs", type=int, default=1, help="processes to simulate points in (the same numbers)")
    parser.add_argument("--no-table", action="store_true", help="leave out the table of crafted sizes")
    args = parser.parse_args()
    started = time.perf_counter()
    real = [(f"{b.name} vs {c.name}", real_pair(b, c, args.metric)) for b, c in args.pair]
    print(f"α = {args.alpha}, maxDrop = {args.max_drop}, {args.runs:,} runs per point\n")
    print("\n".join(HEADER))
    table(args, [(name, len(d), float(np.mean(d != 0))) for name, d in real], crafted=not args.no_table)
    if real:
        print(
            "\n| real pair | documents | discordant | difference | full verdict | non_inferior | regressed | median used |"
        )
        print("|---|---:|---:|---:|---|---:|---:|---:|")
        for name, differences in real:
            print(shuffled_real(args, differences, name), flush=True)
    if args.granularity:
        print()
        granularity(args)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
