"""The task library's names as the library tests walk them, and hand-made documents for the
datasets shared/data does not have.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


TASKS_DIR = REPO / "tasks"


# Hand-made documents for datasets that shared/data does not have, in the hub's schema.
HANDMADE: dict[tuple[str, str | None], list[dict[str, Any]]] = {
    ("allenai/sciq", None): [
        {
            "question": "What type of organism is commonly used in preparation of foods such as cheese and yogurt?",
            "distractor3": "viruses",
            "distractor1": "protozoa",
            "distractor2": "gymnosperms",
            "correct_answer": "mesophilic organisms",
            "support": " Mesophiles grow best in moderate temperature, typically between 25°C and 40°C.",
        },
        {
            "question": "What is the least dangerous radioactive decay?",
            "distractor3": "zeta decay",
            "distractor1": "beta decay",
            "distractor2": "gamma decay",
            "correct_answer": "alpha decay",
            "support": "All radioactive decay is dangerous to living things, but alpha decay is the least dangerous.",
        },
    ],
    ("cimec/lambada", None): [
        {"text": "she shook her head and looked away , refusing to meet his eyes", "domain": "Romance"},
        {"text": "the old man closed the door behind him and sat down by the fire", "domain": None},
    ],
}


def _our_index() -> dict[str, Any]:
    from lm_eval.tasks._index import TaskIndex

    return TaskIndex.build([TASKS_DIR])


OUR_TASKS = sorted(name for name, entry in _our_index().items() if entry.kind.name == "TASK")
