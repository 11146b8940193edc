"""Doc preparation for HellaSwag, behaviour-compatible with lm-eval's hellaswag task.

The context is `activity_label: ctx_a Ctx_b`, where ctx_b goes through str.capitalize()
(which also lower-cases the rest of ctx_b; lm-eval does this, so we do too). WikiHow
artefacts in square brackets are removed from the context and from every ending.
"""

from __future__ import annotations

import re

import datasets

_BRACKETED = re.compile(r"\[.*?\]")


def clean(text: str) -> str:
    text = text.strip()
    # " [title]" marks a WikiHow heading; it becomes a sentence break before the
    # remaining bracketed markers are dropped.
    text = text.replace(" [title]", ". ")
    text = _BRACKETED.sub("", text)
    # A single pass, not a fixpoint: triple spaces keep one double space (as lm-eval).
    return text.replace("  ", " ")


def _to_prompt_doc(doc: dict) -> dict:
    context = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
    return {
        "query": clean(doc["activity_label"] + ": " + context),
        "choices": [clean(ending) for ending in doc["endings"]],
        "gold": int(doc["label"]),
    }


def process_docs(dataset: datasets.Dataset) -> datasets.Dataset:
    return dataset.map(_to_prompt_doc)
