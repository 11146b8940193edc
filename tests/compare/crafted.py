"""Writes crafted runs in lm-eval's output layout (results JSON + samples JSONL) for tests."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DATE = "2026-01-02T03-04-05.000001"


def doc_hash(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, indent=2, ensure_ascii=False).encode()).hexdigest()


def write_run(
    folder: Path,
    tasks: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    n_shot: int = 0,
    directions: Mapping[str, bool] | None = None,
    doc_text: str = "",
) -> Path:
    """`tasks`: per task, sample dicts with doc_id, doc (hashed) and metric values (filter "none")."""
    model = folder / "model"
    model.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"results": {}, "configs": {}, "n-shot": {}, "higher_is_better": {}}
    for task, samples in tasks.items():
        metrics = [k for k in samples[0] if k not in ("doc_id", "doc", "filter")]
        results["results"][task] = {"alias": task, **{f"{m},none": 0.0 for m in metrics}}
        results["configs"][task] = {"task": task, "metric_list": [{"metric": m} for m in metrics]}
        results["n-shot"][task] = n_shot
        results["higher_is_better"][task] = {m: (directions or {}).get(m, True) for m in metrics}
        with open(model / f"samples_{task}_{DATE}.jsonl", "w") as handle:
            for sample in samples:
                doc = sample["doc"]
                record = {
                    "doc_id": sample["doc_id"],
                    "doc": {"q": doc, "text": doc_text},
                    "target": "0",
                    "arguments": {"gen_args_0": {"arg_0": doc_text, "arg_1": " A"}},
                    "resps": [],
                    "filtered_resps": [],
                    "filter": sample.get("filter", "none"),
                    "metrics": metrics,
                    "doc_hash": doc_hash({"q": doc, "text": doc_text}),
                    "prompt_hash": doc_hash(f"{n_shot}{doc}"),
                    "target_hash": "",
                    **{m: sample[m] for m in metrics},
                }
                handle.write(json.dumps(record) + "\n")
    path = model / f"results_{DATE}.json"
    path.write_text(json.dumps(results))
    return path


MMLU_LIKE_QUESTION = (
    "Which of the following best describes the structure that collects urine in the body? " * 8
)  # MMLU-like length


def write_mmlu_like_run(folder: Path, seed: int) -> Path:
    """A run of MMLU's size: 57 tasks of 246 documents, acc and acc_norm drawn at 0.6 from `seed`."""
    import numpy as np

    rng = np.random.default_rng(seed)
    tasks = {
        f"mmlu_subject_{s}": [
            {"doc_id": i, "doc": f"{s}-{i}", "acc": int(rng.random() < 0.6), "acc_norm": int(rng.random() < 0.6)}
            for i in range(246)
        ]
        for s in range(57)
    }
    return write_run(folder, tasks, doc_text=MMLU_LIKE_QUESTION)
