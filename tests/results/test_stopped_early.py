"""What a sequential run's results say about its stops: the table's footnote, status and saved work."""

from __future__ import annotations

from assay.run_results import RunResults
from assay.runner.results import condensed, stopped_early
from assay.runner.results.table import make_table

SEQUENTIAL = {
    "seed": 3,
    "chunk_size": None,
    "alpha": 0.05,
    "baseline": "runs/v1",
    "target_ci_half_width": None,
    "tasks": {
        "arc_easy": {
            "documents": 128,
            "total": 2376,
            "stopped": "regressed",
            "looks": 1,
            "seconds_per_document": 0.5,
            "saved_documents": 2248,
            "saved_seconds": 1124.0,
            "interval": [{"metric": "acc,none", "n": 128, "mean_difference": -0.31, "lower": -1.0, "upper": -0.2}],
        },
        "lambada_openai": {
            "documents": 500,
            "total": 500,
            "stopped": "exhausted",
            "looks": 1,
            "seconds_per_document": 0.1,
            "saved_documents": 0,
            "saved_seconds": 0.0,
            "note": "no per-document metric of a known range to decide on: every document scored",
        },
    },
}


def _run(sequential: dict | None = SEQUENTIAL) -> RunResults:
    results = {
        "results": {
            "arc_easy": {"alias": "arc_easy", "acc,none": 0.41, "acc_stderr,none": 0.04},
            "lambada_openai": {"alias": "lambada_openai", "perplexity,none": 30.5, "perplexity_stderr,none": 1.2},
        },
        "n-samples": {"arc_easy": {"original": 2376, "effective": 128}},
    }
    return RunResults.from_lmeval_dict({**results, **({"sequential": sequential} if sequential else {})})


def test_the_table_says_each_tasks_documents_why_it_stopped_and_the_interval() -> None:
    table = make_table(_run())
    assert table.splitlines()[-3:] == [
        "⏹ sequential run (document order seed 3):",
        "⏹ arc_easy: 128 of 2376 documents, stopped regressed; acc,none -0.3100 [-1.0000, -0.2000].",
        "⏹ lambada_openai: 500 of 500 documents, every document scored "
        "(no per-document metric of a known range to decide on: every document scored).",
    ]
    assert "⏹" not in make_table(_run(None))


def test_status_carries_the_stops_and_the_work_saved() -> None:
    assert stopped_early.status_block(_run()) == {
        "seed": 3,
        "tasks": [
            {
                "task": "arc_easy",
                "documents": 128,
                "total": 2376,
                "stopped": "regressed",
                "metric": "acc,none",
                "lower": -1.0,
                "upper": -0.2,
            },
            {"task": "lambada_openai", "documents": 500, "total": 500, "stopped": "exhausted"},
        ],
        "tasksOmitted": 0,
    }
    status = condensed.condense_results(_run())
    assert status["savedWork"] == {"documents": 2248, "ofDocuments": 2876, "modelSeconds": 1124.0}
    assert "savedWork" not in condensed.condense_results(_run(None))
    assert stopped_early.status_block(_run(None)) is None


POOLED = {
    **SEQUENTIAL,
    "tasks": {
        "mmlu_anatomy": {
            "documents": 9,
            "total": 135,
            "stopped": "regressed",
            "group": "mmlu",
            "looks": 4,
            "seconds_per_document": 0.5,
            "saved_documents": 126,
            "saved_seconds": 63.0,
        },
        "mmlu_virology": {
            "documents": 14,
            "total": 166,
            "stopped": "regressed",
            "group": "mmlu",
            "looks": 4,
            "seconds_per_document": 0.5,
            "saved_documents": 152,
            "saved_seconds": 76.0,
        },
        "lambada_openai": SEQUENTIAL["tasks"]["lambada_openai"],  # type: ignore[index]
    },
    "groups": {
        "mmlu": {
            "documents": 23,
            "total": 301,
            "stopped": "regressed",
            "looks": 4,
            "seconds_per_document": 0.5,
            "saved_documents": 278,
            "saved_seconds": 139.0,
            "tasks": ["mmlu_anatomy", "mmlu_virology"],
            "interval": [{"metric": "acc,none", "n": 23, "mean_difference": -0.4, "lower": -1.0, "upper": -0.1}],
        }
    },
}


def test_a_group_gated_as_one_is_one_status_row_and_its_tasks_saved_work_counts_once() -> None:
    run = _run(POOLED)
    assert stopped_early.status_block(run) == {
        "seed": 3,
        "tasks": [
            {
                "task": "mmlu",
                "documents": 23,
                "total": 301,
                "stopped": "regressed",
                "subtasks": 2,
                "metric": "acc,none",
                "lower": -1.0,
                "upper": -0.1,
            },
            {"task": "lambada_openai", "documents": 500, "total": 500, "stopped": "exhausted"},
        ],
        "tasksOmitted": 0,
    }
    assert stopped_early.saved_work(run) == {"documents": 278, "ofDocuments": 801, "modelSeconds": 139.0}
    lines = stopped_early.footnote(run, {"mmlu_anatomy", "lambada_openai"})
    assert lines[1] == (
        "⏹ mmlu (its 2 tasks as one): 23 of 301 documents, stopped regressed; acc,none -0.4000 [-1.0000, -0.1000]."
    )
    assert lines[2:] == [
        "⏹ lambada_openai: 500 of 500 documents, every document scored "
        "(no per-document metric of a known range to decide on: every document scored)."
    ]
