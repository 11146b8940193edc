"""The forest plot in docs/images/forest.svg, from crafted runs (regenerate it with this script).

    python bench/forest_example.py [OUT.svg]

Writes two runs in lm-eval's output layout (a results JSON and samples JSONL per task) whose
per-document scores are drawn from a seeded generator, then runs `assay compare --plot`. The
candidate is built to show each verdict: a drop beyond the tolerance (regressed), a gain
(improved), a small change inside it (unchanged), a run too small to tell (inconclusive), and
a perplexity that rose (regressed, lower is better).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from assay.cli import main

DATE = "2026-01-02T03-04-05.000001"
OUT = Path(__file__).resolve().parents[1] / "docs" / "images" / "forest.svg"


def _binary(rng: np.random.Generator, n: int, p_base: float, p_cand: float) -> tuple[list[int], list[int]]:
    """0/1 scores, paired: the candidate loses 15% of the baseline's right answers and gains
    enough of its wrong ones to be right p_cand of the time."""
    base = rng.random(n) < p_base
    lose = 0.15
    gain = (p_cand - p_base * (1 - lose)) / (1 - p_base)
    cand = np.where(base, rng.random(n) >= lose, rng.random(n) < gain)
    return [int(v) for v in base], [int(v) for v in cand]


def _tasks(rng: np.random.Generator) -> tuple[dict[str, Any], dict[str, Any]]:
    base: dict[str, Any] = {}
    cand: dict[str, Any] = {}
    for task, metric, n, p_base, p_cand in (
        ("arc_easy", "acc", 2000, 0.62, 0.615),
        ("hellaswag", "acc_norm", 2000, 0.55, 0.49),
        ("piqa", "acc", 1800, 0.70, 0.75),
        ("winogrande", "acc", 60, 0.58, 0.55),
    ):
        base[task], cand[task] = ({metric: values} for values in _binary(rng, n, p_base, p_cand))
    noise = rng.normal(0.0, 0.8, 500)
    base["lambada_openai"] = {"perplexity": list(-math.log(9.2) + noise)}
    cand["lambada_openai"] = {"perplexity": list(-math.log(12.5) + noise + rng.normal(0.0, 0.3, 500))}
    return base, cand


def _write(folder: Path, tasks: dict[str, dict[str, list[Any]]]) -> Path:
    model = folder / "model"
    model.mkdir(parents=True)
    results: dict[str, Any] = {"results": {}, "configs": {}, "n-shot": {}, "higher_is_better": {}}
    for task, metrics in tasks.items():
        ((metric, values),) = metrics.items()
        results["results"][task] = {"alias": task, f"{metric},none": float(np.mean(values))}
        results["configs"][task] = {"task": task, "metric_list": [{"metric": metric}]}
        results["n-shot"][task] = 0
        results["higher_is_better"][task] = {metric: metric != "perplexity"}
        with open(model / f"samples_{task}_{DATE}.jsonl", "w") as handle:
            for doc_id, value in enumerate(values):
                doc = {"task": task, "id": doc_id}
                digest = hashlib.sha256(json.dumps(doc).encode()).hexdigest()
                line = {"doc_id": doc_id, "doc": doc, "filter": "none", "metrics": [metric], "doc_hash": digest}
                handle.write(json.dumps({**line, "prompt_hash": digest, metric: value}) + "\n")
    path = model / f"results_{DATE}.json"
    path.write_text(json.dumps(results))
    return path


def run(out: Path) -> int:
    rng = np.random.default_rng(2026)
    base, cand = _tasks(rng)
    with tempfile.TemporaryDirectory() as tmp:
        paths = [_write(Path(tmp) / side, tasks) for side, tasks in (("baseline", base), ("candidate", cand))]
        flags = ["--max-drop", "0.02", "--max-drop", "lambada_openai:perplexity=0.5", "--plot", str(out)]
        return main(["compare", *map(str, paths), *flags])


if __name__ == "__main__":
    code = run(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
    print(f"exit code {code}", file=sys.stderr)
