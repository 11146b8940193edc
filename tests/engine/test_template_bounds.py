"""A task template renders within bounds (output, size, time), and a tenant's template failure
is one fixed sentence that carries neither the document nor the exception's text.

Real Jinja and real `datasets` loading throughout; the library's own templates render exactly
as plain Jinja's sandbox renders them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import jinja2.sandbox
import pytest
import yaml

from assay.errors import UserError
from assay.runner.tasks import bounded_jinja, templates
from assay.runner.tasks.index import TaskManager
from assay.runner.tasks.index_entries import builtin_tasks_dir

DOC = {"question": "Is water wet?", "text": "OPENAI_API_KEY=sk-test-0123456789abcdef"}
BOUND = "make the template's loops and repetitions finite and small"


@pytest.mark.parametrize(
    ("template", "said"),
    [
        (
            "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
            "ran past {bound} s on one document",
        ),
        ("{% for c in question * 5000 %}{% for d in question * 5000 %}{% endfor %}{% endfor %}", "ran past {bound} s"),
        ("{% for i in range(99999) %}{{ question * 100 }}{% endfor %}", "more than 4,000,000 characters (its output)"),
        ("{{ 'x' * 10**9 }}", "(a `*` repetition)"),
        ("{{ [question] * 10**8 }}", "(a `*` repetition)"),
        ("{{ 7 ** 99999999 }}", "(a `**` power)"),
        (
            "{% set ns = namespace(x=3) %}{% for i in range(64) %}{% set ns.x = ns.x * ns.x %}{% endfor %}{{ ns.x }}",
            "(a `*` product)",
        ),
        ("{{ question.ljust(10**9) }}", "(a width)"),
        ("{{ question | center(10**9) }}", "(a width)"),
        ("{{ question | indent(width=10**9) }}", "(a width)"),
        ("{{ range(10**9) | list }}", "a range of more than the sandbox's 100,000 items"),
    ],
    ids=[
        "nested-range",
        "nested-repeat",
        "output",
        "repeat",
        "list-repeat",
        "power",
        "squaring",
        "ljust",
        "center",
        "indent",
        "range",
    ],
)
def test_a_template_bomb_is_refused_within_bounded_time(
    template: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A loop that runs out of time is refused the same at a tenth of the bound (the tenant corpus,
    # tests/trust, meets the real 5 s through `assay run` and the runner pod); the other bombs hit
    # bounds of size, some of them after seconds of work, so they keep the real time bound.
    assert bounded_jinja.TEMPLATE_SECONDS == 5.0
    if "{bound}" in said:
        monkeypatch.setattr(bounded_jinja, "TEMPLATE_SECONDS", 0.5)
    started = time.monotonic()
    with pytest.raises(UserError) as error:
        templates.render(template, DOC)
    assert time.monotonic() - started < 60  # a loaded machine gets room
    assert said.format(bound="0.5") in str(error.value) and BOUND in str(error.value)


def test_output_up_to_the_bound_renders_whole() -> None:
    size = bounded_jinja.MAX_RENDERED_CHARS
    assert len(templates.render("{{ 'x' * n }}", {"n": size})) == size
    loops = "{% for i in range(1000) %}{% for j in range(1000) %}{{ 'xxxx' }}{% endfor %}{% endfor %}"
    assert len(templates.render(loops, {})) == size


def _tenant_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, template: str, *, tenant: bool) -> Any:
    """A task over a real JSON Lines file (in ASSAY_DATASETS_DIR) whose document holds a secret."""
    (tmp_path / "datasets" / "docs").mkdir(parents=True)
    (tmp_path / "datasets" / "docs" / "test.jsonl").write_text(json.dumps(DOC) + "\n")
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(tmp_path / "datasets"))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.yaml").write_text(
        f"task: t\ndataset_path: '{tmp_path / 'datasets' / 'docs'}'\ntest_split: test\noutput_type: generate_until\n"
        f"doc_to_text: {json.dumps(template)}\ndoc_to_target: question\nmetric_list:\n  - metric: exact_match\n"
    )
    manager = TaskManager(str(tmp_path / "tasks"), include_code=not tenant, include_may_shadow=not tenant)
    assert manager.tenant == tenant
    return manager


@pytest.mark.parametrize(
    "template", ["{{ {}[text] }}", "{{ question[text] }}", "{{ text.__class__ }}", "{{ text ~ (1 / 0) }}"]
)
def test_a_tenants_template_error_is_one_fixed_sentence_without_the_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, template: str
) -> None:
    manager = _tenant_task(tmp_path, monkeypatch, template, tenant=True)
    with pytest.raises(UserError) as error:
        manager.load(["t"])  # the first document's prompt is rendered when the task is built
    message = str(error.value)
    assert "sk-test" not in message and "OPENAI_API_KEY" not in message
    assert message in (
        "Task 't': doc_to_text failed to render on a document; check the template.",
        "Task 't': doc_to_text reaches past the document: use the document's fields and filters only, "
        "or put the logic in a `!function` the admin allows.",
    )


def test_a_tenants_template_bomb_names_the_task_and_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = _tenant_task(tmp_path, monkeypatch, "{{ text * 10**8 }}", tenant=True)
    with pytest.raises(UserError, match=r"^Task 't': doc_to_text would produce more than 4,000,000 characters"):
        manager.load(["t"])


def test_on_a_users_own_machine_the_error_keeps_jinjas_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`assay run --include_path`: lm-eval's trust model, the user's own documents."""
    manager = _tenant_task(tmp_path, monkeypatch, "{{ {}[text] }}", tenant=False)
    with pytest.raises(jinja2.UndefinedError, match="OPENAI_API_KEY"):
        manager.load(["t"])


def _library_templates() -> list[str]:
    found: set[str] = set()
    for path in builtin_tasks_dir().rglob("*.yaml"):
        config = yaml.load(path.read_text(), Loader=_AnyTagLoader)
        for key in ("doc_to_text", "doc_to_target", "doc_to_choice", "description", "gen_prefix"):
            value = config.get(key) if isinstance(config, dict) else None
            if isinstance(value, str) and "{" in value:
                found.add(value)
    return sorted(found)


class _AnyTagLoader(yaml.SafeLoader):
    pass


_AnyTagLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _doc_for(template: str, variant: int) -> dict[str, Any]:
    """A document with every variable the template reads, in one of two shapes lm-eval's datasets have."""
    names = jinja2.meta.find_undeclared_variables(bounded_jinja.ENV.parse(template))
    choices = {"text": ["red", "blue"], "label": ["A", "B"]}
    shape: dict[str, Any] = {
        "choices": choices if variant else ["red", "blue"],
        "answerKey": "B",
        "label": 1,
        "gold": 0,
    }
    return {name: shape.get(name, f" {name} value, with  spaces ") for name in names}


@pytest.mark.parametrize("template", _library_templates())
def test_library_templates_render_exactly_as_plain_jinja_renders_them(template: str) -> None:
    plain = jinja2.sandbox.ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined, keep_trailing_newline=True
    )
    plain.filters["regex_replace"] = bounded_jinja.ENV.filters["regex_replace"]
    for variant in (0, 1):
        doc = _doc_for(template, variant)
        try:
            expected: Any = plain.from_string(template).render(**doc)
        except Exception as error:
            expected = type(error)
        try:
            got: Any = templates.render(template, doc)
        except Exception as error:
            got = type(error)
        assert got == expected
