"""WikiText helpers: undo the Moses-style tokenisation of the raw pages, count units.

The rewrite rules are applied in a fixed order, and that order matters (for example the
quote rules run after the punctuation rules); it reproduces lm-eval's
`wikitext_detokenizer`, including its no-op rule for "/' [0-9]/" (a regex that can only
match a literal slash), kept so that results stay comparable.
"""

from __future__ import annotations

import re

# (old, new) literal replacements, in the order they are applied.
_SPACING = [
    ("s '", "s'"),
]
_NUMBER_SEPARATORS = [(" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", ".")]
_PUNCTUATION = [(" : ", ": "), (" ; ", "; "), (" . ", ". "), (" ! ", "! "), (" ? ", "? "), (" , ", ", ")]
_BRACKETS = [
    (re.compile(r"\(\s*([^\)]*?)\s*\)"), r"(\1)"),
    (re.compile(r"\[\s*([^\]]*?)\s*\]"), r"[\1]"),
    (re.compile(r"{\s*([^}]*?)\s*}"), r"{\1}"),
    (re.compile(r"\"\s*([^\"]*?)\s*\""), r'"\1"'),
    (re.compile(r"'\s*([^']*?)\s*'"), r"'\1'"),
]
_MISC = [
    ("= = = =", "===="),
    ("= = =", "==="),
    ("= =", "=="),
    (" \N{DEGREE SIGN} ", "\N{DEGREE SIGN}"),
    (" \n", "\n"),
    ("\n ", "\n"),
    (" N ", " 1 "),
    (" 's", "'s"),
]


def _replace_all(text: str, pairs: list[tuple[str, str]]) -> str:
    for old, new in pairs:
        text = text.replace(old, new)
    return text


def wikitext_detokenizer(doc: dict) -> str:
    text = _replace_all(doc["page"], _SPACING)
    text = re.sub(r"/' [0-9]/", r"/'[0-9]/", text)  # lm-eval quirk, see module docstring
    text = _replace_all(text, _NUMBER_SEPARATORS)
    text = _replace_all(text, _PUNCTUATION)
    for pattern, repl in _BRACKETS:
        text = pattern.sub(repl, text)
    return _replace_all(text, _MISC)


def process_results(doc: dict, results: list[float]) -> dict[str, tuple[float, int]]:
    (loglikelihood,) = results
    page = doc["page"]
    words = len(re.split(r"\s+", page))
    n_bytes = len(page.encode("utf-8"))
    return {
        "word_perplexity": (loglikelihood, words),
        "byte_perplexity": (loglikelihood, n_bytes),
        "bits_per_byte": (loglikelihood, n_bytes),
    }
