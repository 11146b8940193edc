"""WinoGrande partial scoring, as lm-eval does it.

The roles of text and choices are swapped: the *choices* are the two contexts (sentence up
to the blank, with each option filled in) and the shared *target* is the text after the
blank. doc_to_text therefore returns the gold index, which tells the harness that this is
a multiple-input task.
"""

from __future__ import annotations


def _blank(doc: dict) -> int:
    return doc["sentence"].index("_")


def doc_to_text(doc: dict) -> int:
    # answer is the string "1" or "2" in the HF dataset.
    return int(doc["answer"]) - 1


def doc_to_target(doc: dict) -> str:
    return doc["sentence"][_blank(doc) + 1 :].strip()


def doc_to_choice(doc: dict) -> list[str]:
    prefix = doc["sentence"][: _blank(doc)]
    return [prefix + doc["option1"], prefix + doc["option2"]]
