"""Label values from user strings, bounded before they reach Prometheus.

Model names, task, metric and filter names come from whoever writes an Evaluation or a task
YAML: a tenant. Unbounded, one long or odd name is a long series in every scrape, in the
TSDB and on every dashboard row, and control or bidi characters (a newline, U+202E) make a
label that reads as something else. So every label value the operator exports from user
input goes through `bounded`: control and format characters are removed, and a value over
`MAX_LENGTH` characters is cut. Whenever a value is changed, a hash of the original is
appended, so two names that differ only past the cut (or only in a removed character) stay
two series instead of merging into one.
"""

from __future__ import annotations

import hashlib
import unicodedata

MAX_LENGTH = 128
"""Characters of a label value, the hash suffix included."""
HASH_CHARS = 12
"""Hex digits of sha256 appended to a changed value: 48 bits, enough that no tenant's two
names collide by chance."""
_REMOVED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode categories removed: control, format (zero-width, bidi overrides), surrogates,
line and paragraph separators."""


def bounded(value: object) -> str:
    """`value` as a label value: printable, at most MAX_LENGTH characters, distinct for distinct inputs."""
    text = str(value)
    clean = "".join(ch for ch in text if unicodedata.category(ch) not in _REMOVED)
    if clean == text and len(text) <= MAX_LENGTH:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    return f"{clean[: MAX_LENGTH - HASH_CHARS - 1]}~{digest}"
