"""The Jinja environment task templates render in: sandboxed, and bounded in output, size and time.

Task files are data: a template may read the document and call non-mutating methods of its
values (`.strip()`, `.index(...)`), never reach Python's internals (`lipsum.__globals__`,
`__class__.__mro__`), which a plain Environment allows. lm-eval's templates need nothing more.

A template is also tenant text, so one rendering is bounded: at most `MAX_RENDERED_CHARS`
characters out (counted as the parts are produced, so a loop stops at the bound, not after
it), no `*` repetition or `**` power whose result would pass that size, no width-taking
filter or method (`center`, `ljust`, ...) asked for more, ranges of at most the sandbox's
100,000 items, and `TEMPLATE_SECONDS` of time (`assay.runner.deadline`: nested loops over a
document stop too). Within these bounds a rendering is exactly Jinja's `Template.render`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import jinja2
import jinja2.sandbox
from jinja2.runtime import Context

from assay.errors import UserError
from assay.runner.deadline import DeadlineExceeded, deadline

MAX_RENDERED_CHARS = 4_000_000
"""Per rendering: 1M-token contexts, the longest models take, are about 4M characters."""
TEMPLATE_SECONDS = 5.0
"""Per rendering: lm-eval's templates render in microseconds; this allows for a loaded machine."""
_MAX_INT_BITS = MAX_RENDERED_CHARS * 4
"""An integer of more bits than this has more than MAX_RENDERED_CHARS decimal digits (log2(10) < 4)."""
_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})


_BOUND_FIX = "make the template's loops and repetitions finite and small (a prompt is text for one model call)"
_SANDBOX_FIX = "use the document's fields and filters only, or put the logic in a `!function` the admin allows"


class TemplateRefused(UserError):
    """A rendering that broke a bound or reached past the sandbox.

    `reason` and `fix` never hold the document's text; `detail` (Jinja's own words) may, so a
    tenant's task is told `reason` and `fix` only."""

    def __init__(self, reason: str, fix: str, detail: str = "") -> None:
        super().__init__(f"{reason}{detail}: {fix}.")
        self.reason, self.fix, self.detail = reason, fix, detail


def _too_big(what: str) -> TemplateRefused:
    return TemplateRefused(f"would produce more than {MAX_RENDERED_CHARS:,} characters ({what})", _BOUND_FIX)


def _checked_repeat(left: Any, right: Any) -> None:
    if isinstance(left, int) and isinstance(right, int):  # one C call, uninterruptible: squaring in a loop
        if left.bit_length() + right.bit_length() > _MAX_INT_BITS:
            raise _too_big("a `*` product")
        return
    for seq, times in ((left, right), (right, left)):
        if (
            isinstance(seq, (str, list, tuple, bytes))
            and isinstance(times, int)
            and len(seq) * times > MAX_RENDERED_CHARS
        ):
            raise _too_big("a `*` repetition")


def _checked_power(left: Any, right: Any) -> None:
    if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
        if right * left.bit_length() > _MAX_INT_BITS:
            raise _too_big("a `**` power")


def _checked_width(*args: Any, **kwargs: Any) -> None:
    if any(isinstance(value, int) and value > MAX_RENDERED_CHARS for value in (*args, *kwargs.values())):
        raise _too_big("a width")


class BoundedSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """The sandbox, with the size bounds checked before the work that would pass them."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        (_checked_repeat if operator == "*" else _checked_power)(left, right)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(__obj, "__name__", None) in _WIDTH_METHODS and isinstance(getattr(__obj, "__self__", None), str):
            _checked_width(*args, **kwargs)
        return super().call(__context, __obj, *args, **kwargs)


def _width_checked(jinja_filter: Callable[..., Any]) -> Callable[..., Any]:
    def checked(value: Any, *args: Any, **kwargs: Any) -> Any:
        _checked_width(*args, **kwargs)
        return jinja_filter(value, *args, **kwargs)

    return checked


def _regex_replace(text: str, pattern: str, replacement: str, count: int = 0) -> str:
    return re.sub(pattern, replacement, text, count=count)


ENV = BoundedSandbox(loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
ENV.filters["regex_replace"] = _regex_replace
for _name in ("center", "indent"):
    ENV.filters[_name] = _width_checked(ENV.filters[_name])
_COMPILED: dict[str, jinja2.Template] = {}


def render(template: str, doc: Mapping[str, Any]) -> str:
    """`template` rendered on `doc`, as Jinja's `Template.render`; TemplateRefused past a bound or the sandbox."""
    compiled = _COMPILED.get(template)
    if compiled is None:
        compiled = _COMPILED[template] = ENV.from_string(template)
    try:
        with deadline(TEMPLATE_SECONDS):
            return _joined(compiled, doc)
    except DeadlineExceeded:
        raise TemplateRefused(f"ran past {TEMPLATE_SECONDS:g} s on one document", _BOUND_FIX) from None
    except jinja2.exceptions.SecurityError as error:
        raise TemplateRefused(
            "reaches past the document", _SANDBOX_FIX, f" ({error}), which task templates may not do"
        ) from None
    except OverflowError as error:
        if "Range too big" not in str(error):
            raise
        raise TemplateRefused("asks for a range of more than the sandbox's 100,000 items", _BOUND_FIX) from None


def _joined(compiled: jinja2.Template, doc: Mapping[str, Any]) -> str:
    """Template.render's own steps, with the output counted part by part."""
    context = compiled.new_context(dict(doc))
    parts: list[str] = []
    size = 0
    try:
        for part in compiled.root_render_func(context):
            size += len(part)
            if size > MAX_RENDERED_CHARS:
                raise _too_big("its output")
            parts.append(part)
    except TemplateRefused:
        raise
    except Exception:
        compiled.environment.handle_exception()
    return "".join(parts)
