"""What a doc_to_text / doc_to_target / doc_to_choice value means, decided once per task.

lm-eval re-decides at every call whether a string is a dataset column or a Jinja template.
Here each YAML value is compiled, once the dataset's columns are known, into a function of
the document; the lm-eval rules it follows are noted where they are surprising.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Callable, Iterable, Mapping, cast

import jinja2
import jinja2.sandbox

from assay.errors import UserError

DocFn = Callable[[Mapping[str, Any]], Any]


def _regex_replace(text: str, pattern: str, replacement: str, count: int = 0) -> str:
    return re.sub(pattern, replacement, text, count=count)


# Task files are data: a template may read the document and call non-mutating methods of its
# values (`.strip()`, `.index(...)`), never reach Python's internals (`lipsum.__globals__`,
# `__class__.__mro__`), which a plain Environment allows. lm-eval's templates need nothing more.
_ENV = jinja2.sandbox.ImmutableSandboxedEnvironment(
    loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined, keep_trailing_newline=True
)
_ENV.filters["regex_replace"] = _regex_replace
_TEMPLATE_CACHE: dict[str, jinja2.Template] = {}


def render(template: str, doc: Mapping[str, Any]) -> str:
    compiled = _TEMPLATE_CACHE.get(template)
    if compiled is None:
        compiled = _TEMPLATE_CACHE[template] = _ENV.from_string(template)
    try:
        return compiled.render(**doc)
    except jinja2.exceptions.SecurityError as error:
        shown = template if len(template) <= 80 else template[:77] + "..."
        raise UserError(
            f"Task template {shown!r} reaches past the document ({error}), which task templates may not do: "
            "use the document's fields and filters only, or put the logic in a `!function` the admin allows."
        ) from None


def syntax_error(template: str) -> str | None:
    """What Jinja says is wrong with `template` (and on which of its lines), or None if it compiles."""
    try:
        _ENV.parse(template)
    except jinja2.TemplateSyntaxError as error:
        return f"{(error.message or 'syntax error').rstrip('.')} (line {error.lineno} of the template)"
    return None


def compile_text(spec: Any, features: Iterable[str], *, has_choices: bool) -> DocFn:
    """doc_to_text: int constant, column, template (all-digit result → int with choices), callable."""
    if isinstance(spec, int):
        return lambda doc: spec
    if isinstance(spec, str):
        if spec in set(features):
            return lambda doc: doc[spec]

        def text_from_template(doc: Mapping[str, Any]) -> Any:
            text = render(spec, doc)
            return ast.literal_eval(text) if has_choices and text.isdigit() else text

        return text_from_template
    if callable(spec):
        return cast(DocFn, spec)
    raise TypeError(f"doc_to_text of type {type(spec).__name__} is not supported")


def compile_target(spec: Any, features: Iterable[str], *, has_choices: bool) -> DocFn:
    """doc_to_target: like doc_to_text, plus a rendered `[...]` becomes a Python list."""
    if isinstance(spec, (int, list)):
        return lambda doc: spec
    if isinstance(spec, str):
        if spec in set(features):
            return lambda doc: doc[spec]

        def target_from_template(doc: Mapping[str, Any]) -> Any:
            text = render(spec, doc)
            if has_choices and text.isdigit():
                return ast.literal_eval(text)
            if len(text) >= 2 and text[0] == "[" and text[-1] == "]":
                try:
                    return ast.literal_eval(text)
                except (SyntaxError, ValueError):
                    return text
            return text

        return target_from_template
    if callable(spec):
        return cast(DocFn, spec)
    raise TypeError(f"doc_to_target of type {type(spec).__name__} is not supported")


def compile_choice(spec: Any, features: Iterable[str]) -> DocFn:
    """doc_to_choice: column, template rendering a list literal, YAML list, dict (values), callable."""
    if isinstance(spec, str):
        if spec in set(features):
            return lambda doc: doc[spec]
        return lambda doc: ast.literal_eval(render(spec, doc))
    if isinstance(spec, list):
        return lambda doc: spec
    if isinstance(spec, dict):
        values = list(spec.values())
        return lambda doc: values
    if callable(spec):
        return cast(DocFn, spec)
    raise TypeError(f"doc_to_choice of type {type(spec).__name__} is not supported")


def compile_field(spec: str | None, features: Iterable[str]) -> Callable[[Mapping[str, Any]], str | None]:
    """description / gen_prefix: a column name or a template; None stays None."""
    if spec is None:
        return lambda doc: None
    if not spec:
        return lambda doc: spec
    if spec in set(features):
        return lambda doc: doc[spec]
    return lambda doc: render(spec, doc)
