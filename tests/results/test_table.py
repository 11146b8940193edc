"""The results table equals lm-eval's `make_table` on the same results dict (read as a `RunResults`).

lm-eval renders with pytablewriter; the reference needs pytablewriter >= 1.0 (what
`pip install lm-eval` resolves to). pytablewriter 0.38 ignores `headers` and prints
A..I instead, which is not what lm-eval users see.
"""

from __future__ import annotations

import random

import pytablewriter
import pytest
from lm_eval.utils import make_table as lm_make_table

from assay.run_results import RunResults
from assay.runner.results import table


def make_table(results: dict, column: str = "results", sort_results: bool = False) -> str:
    """Assay's table of lm-eval's dict, read as the record the table takes."""
    return table.make_table(RunResults.from_lmeval_dict(results), column, sort_results)


render_markdown = table.render_markdown

assert int(pytablewriter.__version__.split(".")[0]) >= 1, (
    f"pytablewriter {pytablewriter.__version__} is too old to be lm-eval's reference; pip install 'pytablewriter>=1.0'"
)


def _value(rnd: random.Random):
    roll = rnd.random()
    if roll < 0.5:
        return round(rnd.random() * rnd.choice([1, 1, 10, 1000, 1e6]), rnd.choice([1, 2, 4, 6, 8]))
    if roll < 0.6:
        return rnd.choice([0, 1, 5, 120])
    if roll < 0.65:
        return rnd.choice([1.0, 0.0, 2.0])
    if roll < 0.7:
        return rnd.choice([[1, 2], "abc", None, True, {"a": 1}, float("nan"), float("inf"), "0.5", "12", "N/A"])
    return rnd.random()


def random_results(seed: int) -> dict:
    rnd = random.Random(seed)
    tasks = [f"t{i}" for i in range(rnd.randint(1, 4))]
    results = {}
    for task in tasks:
        entry = {
            "alias": rnd.choice([task, "A | b", "ＷＩＤＥ", "名前", task + "_long_name"]),
            "name": task,
            "sample_len": 3,
        }
        for metric in rnd.sample(["acc", "acc_norm", "exact_match", "perplexity", "bleu", "f1"], rnd.randint(1, 3)):
            for filt in rnd.sample(["none", "strict-match", "flexible-extract"], rnd.randint(1, 2)):
                entry[f"{metric},{filt}"] = _value(rnd)
                roll = rnd.random()
                if roll < 0.5:
                    entry[f"{metric}_stderr,{filt}"] = rnd.random() / rnd.choice([1, 10, 100])
                elif roll < 0.7:
                    entry[f"{metric}_stderr,{filt}"] = "N/A"
                elif roll < 0.75:
                    entry[f"{metric}_stderr,{filt}"] = rnd.choice([0, 1, 0.0])
        results[task] = entry
    out = {
        "results": results,
        "versions": {t: rnd.choice([1.0, 2, "2", 0.5, 3.1, None, "v1"]) for t in tasks if rnd.random() < 0.8},
        "n-shot": {t: rnd.choice([0, 5, 25]) for t in tasks if rnd.random() < 0.8},
        "higher_is_better": {t: {"acc": True, "perplexity": False, "bleu": None} for t in tasks},
    }
    if len(tasks) > 2 and rnd.random() < 0.5:
        out["group_subtasks"] = {tasks[0]: tasks[1:]}
    return out


def test_typical_results_match_lm_eval():
    results = {
        "results": {
            "hellaswag": {
                "alias": "hellaswag",
                "acc,none": 0.28914,
                "acc_stderr,none": 0.0045,
                "acc_norm,none": 0.3093,
                "acc_norm_stderr,none": 0.0046,
            },
            "wikitext": {
                "alias": "wikitext",
                "word_perplexity,none": 37.37,
                "word_perplexity_stderr,none": "N/A",
                "bits_per_byte,none": 0.9731,
            },
        },
        "versions": {"hellaswag": 1.0, "wikitext": 2.0},
        "n-shot": {"hellaswag": 0, "wikitext": 0},
        "higher_is_better": {"hellaswag": {"acc": True, "acc_norm": True}, "wikitext": {"word_perplexity": False}},
    }
    assert make_table(results) == lm_make_table(results)


def test_groups_table_matches_lm_eval():
    results = {
        "results": {
            "mmlu": {"alias": "mmlu", "acc,none": 0.25, "acc_stderr,none": 0.01},
            "mmlu_stem": {"alias": " - stem", "acc,none": 0.5, "acc_stderr,none": 0.02},
            "mmlu_anatomy": {"alias": "  - anatomy", "acc,none": 0.75, "acc_stderr,none": 0.03},
        },
        "groups": {"mmlu": {"alias": "mmlu", "acc,none": 0.25, "acc_stderr,none": 0.01}},
        "group_subtasks": {"mmlu": ["mmlu_stem"], "mmlu_stem": ["mmlu_anatomy"]},
        "versions": {"mmlu": 2, "mmlu_stem": 2, "mmlu_anatomy": 1.0},
        "n-shot": {"mmlu_anatomy": 5},
        "higher_is_better": {"mmlu": {"acc": True}},
    }
    assert make_table(results) == lm_make_table(results)
    assert make_table(results, "groups") == lm_make_table(results, "groups")
    assert make_table(results, sort_results=True) == lm_make_table(results, sort_results=True)


@pytest.mark.parametrize("seed", range(200))
def test_random_results_match_lm_eval(seed):
    results = random_results(seed)
    assert make_table(results) == lm_make_table(results)


@pytest.mark.parametrize(
    "headers,rows",
    [
        (["Group", "Config Location"], [["mmlu", "tasks/mmlu/_mmlu.yaml"], ["bbh", "---"]]),
        (["Tag"], [["ai2_arc"], ["123"], ["0.5"]]),
        (
            ["Task", "Config Location", "Output Type"],
            [["arc_easy", "tasks/arc/arc_easy.yaml", "multiple_choice"], ["x", "/a|b.yaml", ""]],
        ),
    ],
)
def test_listing_tables_match_pytablewriter(headers, rows):
    writer = pytablewriter.MarkdownTableWriter()
    writer.headers = headers
    writer.value_matrix = rows
    assert render_markdown(headers, rows) == writer.dumps()
