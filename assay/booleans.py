"""One reading of a boolean that may arrive as text: model_args, spec flags, CLI words.

A flag such as `trust_remote_code` reaches the engine from `--model_args` text, from an
Evaluation's `modelArgs` (any JSON value) and from Python callers. Read with `bool(value)`,
every non-empty string is true, `"no"` and `"off"` included, so a gate that reads the
same value another way (`in ("true", "1", "yes")`) lets through what the backend then
treats as consent. Every reader of such a flag uses `strict_bool`: the operator's
admission, `assay run`'s flags and each model backend, so they agree on every value.

Accepted: real booleans; the integers 0 and 1 (lm-eval's `--model_args` parsing turns
`1` into an int); and, in any case and with surrounding blanks, the words lm-eval reads as
booleans (`true`/`false`) plus `1`/`0` and `yes`/`no`. Anything else (`on`, `y`,
`enabled`, `2`, a list) is refused with one sentence naming the argument.
"""

from __future__ import annotations

from assay.errors import UserError

TRUE_WORDS = frozenset({"true", "1", "yes"})
FALSE_WORDS = frozenset({"false", "0", "no"})
SPELLINGS = "true or false (also 1/0 or yes/no, in any case)"
"""The accepted spellings, as refusals name them."""


def strict_bool(value: object, *, name: str, error: type[UserError] = UserError) -> bool:
    """`value` as a boolean; `error` (one sentence naming `name` and the spellings) if it is not one.

    The refusal never repeats a long value: `name` may be a tenant's field, and its
    value goes to status and logs only as far as a word's length.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise error(f"{name} must be {SPELLINGS}, not {_shown(value)}.")


def optional_bool(value: object, *, name: str, error: type[UserError] = UserError) -> bool | None:
    """`strict_bool`, with None kept as None (lm-eval's "not set" for several flags)."""
    return None if value is None else strict_bool(value, name=name, error=error)


def _shown(value: object) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) <= 20 else f"a {len(value)}-character string"
    if isinstance(value, (int, float)):
        return repr(value)
    return f"a {type(value).__name__}"
