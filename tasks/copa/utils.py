"""COPA prompt: "<premise without its final period> because|therefore <choice>".

Each choice is lower-cased at its first character only and carries its own leading space,
exactly like lm-eval's super_glue/copa helpers.
"""

from __future__ import annotations

_CONNECTORS = {"cause": "because", "effect": "therefore"}


def _continuation(choice: str) -> str:
    return " " + choice[0].lower() + choice[1:]


def doc_to_text(doc: dict) -> str:
    # The premise always ends with a period, which is cut before the connector.
    return doc["premise"].strip()[:-1] + " " + _CONNECTORS[doc["question"]]


def doc_to_choice(doc: dict) -> list[str]:
    return [_continuation(doc["choice1"]), _continuation(doc["choice2"])]


def doc_to_target(doc: dict) -> str:
    return doc_to_choice(doc)[doc["label"]]
