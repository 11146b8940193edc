"""What a doc_to_text / doc_to_target / doc_to_choice value means, decided once per task.

lm-eval re-decides at every call whether a string is a dataset column or a Jinja template.
Here each YAML value is compiled, once the dataset's columns are known, into a function of
the document; the lm-eval rules it follows are noted where they are surprising.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import jinja2

from assay.errors import UserError
from assay.runner.tasks import bounded_jinja

DocFn = Callable[[Mapping[str, Any]], Any]


def render(template: str, doc: Mapping[str, Any]) -> str:
    """`template` rendered on `doc` in the bounded sandbox (`bounded_jinja`); TemplateRefused names the template."""
    try:
        return bounded_jinja.render(template, doc)
    except bounded_jinja.TemplateRefused as refused:
        shown = template if len(template) <= 80 else template[:77] + "..."
        refused.args = (f"Task template {shown!r} {refused}",)
        raise refused from None


def guarded(fn: DocFn, *, task: str, field: str, tenant: bool) -> DocFn:
    """`fn` (a compiled doc_to_* field) whose failures name the task and the field.

    A refused rendering says which bound or rule, never the document. A tenant's task says
    nothing more for any other failure either: an exception's text may be the document's
    (`{{ {}[text] }}` puts a document's text into a KeyError), and the document may be a
    file's content that the message would carry into the Evaluation's status."""

    def checked(doc: Mapping[str, Any]) -> Any:
        try:
            return fn(doc)
        except bounded_jinja.TemplateRefused as refused:
            detail = "" if tenant else refused.detail
            raise UserError(f"Task {task!r}: {field} {refused.reason}{detail}: {refused.fix}.") from None
        except Exception:
            if not tenant:
                raise
            raise UserError(f"Task {task!r}: {field} failed to render on a document; check the template.") from None

    return checked


def syntax_error(template: str) -> str | None:
    """What Jinja says is wrong with `template` (and on which of its lines), or None if it compiles."""
    try:
        bounded_jinja.ENV.parse(template)
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
