"""Text from outside quoted into a status, an Event or an error message.

A model server's error body, or a runner's last word, is written by someone else: it may
be megabytes long, hold ANSI escapes that rewrite a terminal, newlines that forge log
lines, or bidirectional overrides that make `kubectl get` show other text than is stored.
What gets quoted is one line of printable characters, bounded.
"""

from __future__ import annotations

import unicodedata

BODY_CHARS = 300
"""How much of a server's answer an error message quotes."""
_ELLIPSIS = "..."


def bounded(text: str, limit: int = BODY_CHARS) -> str:
    """`text` on one line: whitespace runs become one space, other control and format
    characters (Unicode Cc, Cf) are dropped, and at most `limit` characters are kept."""
    kept = []
    for char in str(text):
        if char.isspace():
            kept.append(" ")
        elif unicodedata.category(char) not in ("Cc", "Cf", "Cs"):
            kept.append(char)
    line = " ".join("".join(kept).split())
    if len(line) <= limit:
        return line
    return line[: max(limit - len(_ELLIPSIS), 0)].rstrip() + _ELLIPSIS
