"""Which way is better for each metric compared: the results JSON, the task's config, lm-eval's registry.

lm-eval writes `higher_is_better` per task into its results JSON, and a verdict turns on
it: read the wrong way, a perplexity that rose reads `improved`. A results file without
it (hand-made, trimmed, from another tool) still says which metrics each task scored in
its config's `metric_list`, whose entries may carry `higher_is_better`; past that, lm-eval
registers a direction with every built-in metric (`REGISTERED`, the same as the engine's
`assay/runner/scoring/metrics.py`; tests/compare checks that both agree). A metric none of
these names is refused with a note: guessing "higher" would turn a regression around.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REGISTERED: Mapping[str, bool] = {
    "acc": True,
    "acc_all": True,
    "acc_bytes": True,
    "acc_mutual_info": True,
    "acc_norm": True,
    "bits_per_byte": False,
    "bleu": True,
    "brier_score": False,
    "bypass": True,
    "byte_perplexity": False,
    "chrf": True,
    "chrf++": True,
    "exact_match": True,
    "f1": True,
    "likelihood": True,
    "mcc": True,
    "perplexity": False,
    "ter": False,
    "word_perplexity": False,
}
"""lm-eval's registered `higher_is_better` of each built-in metric."""


def resolve(stated: Mapping[str, Any], configs: tuple[Mapping[str, Any], ...]) -> dict[str, bool]:
    """metric → higher_is_better from the results JSONs' `stated` directions, else the task
    configs' metric_list, else the registry; a metric none of them names is absent."""
    directions = {metric: bool(value) for metric, value in REGISTERED.items()}
    for config in reversed(configs):  # the first config (the baseline's) wins
        for entry in config.get("metric_list") or []:
            if isinstance(entry, Mapping) and isinstance(entry.get("higher_is_better"), bool):
                directions[str(entry.get("metric"))] = entry["higher_is_better"]
    directions.update({metric: value for metric, value in stated.items() if isinstance(value, bool)})
    return directions


def refused_note(task: str, metric: str, filter_name: str) -> str:
    return (
        f"{task} {metric} ({filter_name}): left out, neither results file says whether higher is better "
        "(higher_is_better) and lm-eval registers no direction for it."
    )
