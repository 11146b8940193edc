"""Response filters: the post-processing steps between a model's answers and the metrics.

A task's `filter_list` names pipelines; each pipeline runs its steps in order over the
responses of every instance of the task, and the result lands in
`instance.filtered_resps[pipeline_name]`. Metrics are then computed once per pipeline, so
the filter name becomes the `,<filter>` suffix of every metric key. Each filter here keeps
lm-eval 0.4.13's name, keyword arguments and output, quirks included, because the
extracted strings decide the scores.

Unlike lm-eval, filters are built once when the pipeline is built (a bad keyword fails at
task load, not after generation), and every step returns a list rather than an iterator.
"""

from __future__ import annotations

import collections
import functools
import re
import sys
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from assay.errors import UserError
from assay.runner.models.instance import Instance
from assay.runner.registry import Registry
from assay.runner.scoring.bounded_regex import RegexTooSlow, regex_bound

Docs = Sequence[Mapping[str, Any]]


class Filter(Protocol):
    """One step of a pipeline: one output per instance, in the input order."""

    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]: ...


#: name in a task YAML's `function:` key → a factory taking the step's other keys.
FILTERS: Registry[Callable[..., Filter]] = Registry("filter")


def _first_group(match: Any, fallback: Any) -> Any:
    """findall returns tuples when the pattern has several groups: keep the first non-empty."""
    if isinstance(match, tuple):
        non_empty = [group for group in match if group]
        return non_empty[0] if non_empty else fallback
    return match


class RegexFilter:
    """Extract an answer with `re.findall`; the `group_select`-th match wins.

    The default pattern is GSM8K's `#### <number>`; no match gives `fallback`.
    """

    def __init__(
        self,
        regex_pattern: str = r"#### (\-?[0-9\.\,]+)",
        group_select: int = 0,
        fallback: str = "[invalid]",
    ) -> None:
        self.regex_pattern = regex_pattern
        self.regex = re.compile(regex_pattern)
        self.group_select = group_select
        self.fallback = fallback

    def _extract(self, resp: Any) -> Any:
        # lm-eval quirk: a non-string response is matched as "" (so it yields the fallback).
        with regex_bound(self.regex_pattern):
            matches = self.regex.findall(resp if isinstance(resp, str) else "")
        if not matches:
            return self.fallback
        # lm-eval quirk: a tuple with no non-empty group falls back, and is stripped too.
        return _first_group(matches[self.group_select], self.fallback).strip()

    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]:
        # Iterating each entry means a plain string (e.g. after take_first) is read
        # character by character, exactly as lm-eval does.
        return [[self._extract(resp) for resp in inst] for inst in resps]


_POS_TUPLE = re.compile(r"\('([^']*)', '([^']*)'\)")


class PosFilter:
    """Part-of-speech tags from responses shaped like "[('word', 'TAG'), ...]"."""

    def __init__(
        self,
        regex_pattern: str = r"\['(.*?)'\]",
        group_select: int = 0,
        fallback: Any = None,
    ) -> None:
        # lm-eval quirk: regex_pattern and group_select are stored but never used; the
        # tuple pattern above is hard-wired.
        self.regex_pattern = regex_pattern
        self.group_select = group_select
        self.fallback = ["invalid"] if fallback is None else fallback

    def _tags(self, resp: Any) -> Any:
        pairs = _POS_TUPLE.findall(resp) if isinstance(resp, str) else resp
        return [tag for _, tag in pairs] or self.fallback

    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]:
        return [[self._tags(resp) for resp in inst] for inst in resps]


class WhitespaceFilter:
    """Strip leading and trailing whitespace."""

    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]:
        return [[resp.strip() for resp in inst] for inst in resps]


@functools.cache
def _unicode_punctuation() -> dict[int, None]:
    """str.translate table deleting every Unicode punctuation (category P*) character.

    Built once per process; lm-eval rebuilds it on every call.
    """
    # range(sys.maxunicode) (not + 1) as lm-eval does; U+10FFFF is no punctuation anyway.
    return dict.fromkeys(i for i in range(sys.maxunicode) if unicodedata.category(chr(i)).startswith("P"))


class MultiChoiceRegexFilter(RegexFilter):
    """Letter answers "(A)", "(B)", ... for multiple-choice questions asked as generation.

    Tries, per response: the main regex; then the choice texts themselves (longest first,
    after the ignore options), mapped to their letter; then ":" followed by a bare letter.
    Each doc needs a "choices" list.
    """

    def __init__(
        self,
        regex_pattern: str = r"#### (\-?[0-9\.\,]+)",
        group_select: int = 0,
        fallback: str = "[invalid]",
        ignore_case: bool = False,
        ignore_punctuation: bool = False,
        regexes_to_ignore: list[str] | None = None,
    ) -> None:
        super().__init__(regex_pattern, group_select, fallback)
        self.ignore_case = ignore_case
        self.ignore_punctuation = ignore_punctuation
        self.regexes_to_ignore = regexes_to_ignore

    def _normalise(self, text: str) -> str:
        for pattern in self.regexes_to_ignore or ():
            with regex_bound(pattern):
                text = re.sub(pattern, "", text)
        if self.ignore_case:
            text = text.lower()
        if self.ignore_punctuation:
            text = text.translate(_unicode_punctuation())
        return text

    def _find(self, regex: re.Pattern[str], resp: Any, convert: Mapping[str, str]) -> Any:
        """The selected match (converted when known), "" for empty groups, [] for none."""
        with regex_bound(regex.pattern):
            matches = regex.findall(resp if isinstance(resp, str) else "")
        if not matches:
            return matches
        match = _first_group(matches[self.group_select], "")
        match = match.strip()
        return convert.get(match, match) if match else match

    def _filter_doc(self, inst: Sequence[Any], doc: Mapping[str, Any]) -> list[Any]:
        letters = [chr(ord("A") + i) for i in range(len(doc["choices"]))]
        texts = [self._normalise(choice.strip()) for choice in doc["choices"]]
        text_to_letter = {text: f"({letter})" for text, letter in zip(texts, letters, strict=False)}
        # Longest first, so a choice that prefixes another cannot shadow it (stable sort,
        # by escaped length, as lm-eval).
        by_text = re.compile("|".join(sorted((re.escape(t) for t in texts), key=len, reverse=True)))
        by_letter = re.compile(rf":[\s]*({'|'.join(letters)})")
        letter_to_target = {letter: f"({letter})" for letter in letters}

        out: list[Any] = []
        for resp in inst:
            match = self._find(self.regex, resp, {})
            if not match:
                # lm-eval normalises the raw response here, before the non-string check.
                match = self._find(by_text, self._normalise(resp), text_to_letter)
                if not match:
                    match = self._find(by_letter, resp, letter_to_target)
            out.append(match if match else self.fallback)
        return out

    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]:
        if len(resps) != len(docs):
            raise ValueError(f"multi_choice_regex got {len(resps)} responses for {len(docs)} docs")
        return [self._filter_doc(inst, doc) for inst, doc in zip(resps, docs, strict=False)]


class TakeFirstFilter:
    """Keep the first response of each instance (drops `repeats`); the result is unwrapped."""

    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]:
        return [inst[0] for inst in resps]


class TakeFirstKFilter:
    """Keep the first `k` responses of each instance."""

    def __init__(self, k: int, **_ignored: Any) -> None:
        # Extra keys are accepted and ignored, as lm-eval's base Filter does.
        self.k = k

    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]:
        resps = list(resps)
        # lm-eval checks only the first instance.
        if resps and len(resps[0]) < self.k:
            raise UserError(
                f"take_first_k needs at least {self.k} responses per doc but got {len(resps[0])};"
                " raise the task's `repeats`."
            )
        return [inst[: self.k] for inst in resps]


class MajorityVoteFilter:
    """The most frequent response, as a one-element list; ties go to the earliest seen."""

    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]:
        return [[collections.Counter(inst).most_common(1)[0][0]] for inst in resps]


class LowercaseFilter:
    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]:
        return [[resp.lower() for resp in inst] for inst in resps]


class UppercaseFilter:
    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]:
        return [[resp.upper() for resp in inst] for inst in resps]


class MapFilter:
    """Replace each response by `mapping_dict[response]`, else `default_value`."""

    def __init__(self, mapping_dict: dict[Any, Any] | None = None, default_value: Any = None) -> None:
        if mapping_dict is None:
            mapping_dict = {}
        if not isinstance(mapping_dict, dict):
            raise UserError(f"map filter: mapping_dict must be a mapping, got {type(mapping_dict).__name__}.")
        self.mapping_dict = mapping_dict
        self.default_value = default_value

    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]:
        return [[self.mapping_dict.get(resp, self.default_value) for resp in inst] for inst in resps]


# Order matters: substitutions run in sequence, as in lm-eval.
_SPAN_LABELS = {
    "person": "PER",
    "location": "LOC",
    "organization": "ORG",
    "counties": "LOC",
    "places": "LOC",
    "people": "PER",
    "persons": "PER",
    "company": "ORG",
    "country": "LOC",
    "continent": "LOC",
    "time": "DATE",
    "date": "DATE",
    "per": "PER",
    "loc": "LOC",
    "org": "ORG",
}
_SPAN_ENTITY = re.compile(r"\b(PER|LOC|ORG|DATE):\s*([^$]+)")


class SpanFilter:
    """Named-entity answers normalised to "label: entity $ label: entity" (lower-case labels)."""

    @staticmethod
    def _canonical_labels(text: str) -> str:
        text = text.lower()
        for word, label in _SPAN_LABELS.items():
            # Only a label (the word before a ":") is rewritten, never entity text.
            text = re.sub(rf"\b{re.escape(word)}\s*:", f"{label}:", text)
        return text.replace("$$", "$").rstrip("$")

    @staticmethod
    def _entities(text: str) -> str:
        text = text.replace("\n", "$").strip()
        found = []
        for label, values in _SPAN_ENTITY.findall(text):
            for entity in (value.strip() for value in values.split(",")):
                if entity.lower() != "none":
                    found.append(f"{label.lower()}: {entity}")
        return " $ ".join(found)

    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]:
        return [[self._entities(self._canonical_labels(resp.lower())) for resp in inst] for inst in resps]


class CustomFilter:
    """A user function `filter_fn(resps, docs)` (from `!function` in the YAML)."""

    def __init__(self, filter_fn: Callable[[Sequence[Any], Docs], Any], **_ignored: Any) -> None:
        if not callable(filter_fn):
            raise UserError(f"custom filter: filter_fn must be a function, got {filter_fn!r}.")
        self.filter_fn = filter_fn

    def apply(self, resps: Sequence[Any], docs: Docs) -> list[Any]:
        return list(self.filter_fn(resps, docs))


# Registered here, once each, under lm-eval's names.
FILTERS.register("regex")(RegexFilter)
FILTERS.register("regex_pos")(PosFilter)
FILTERS.register("remove_whitespace")(WhitespaceFilter)
FILTERS.register("multi_choice_regex")(MultiChoiceRegexFilter)
FILTERS.register("take_first")(TakeFirstFilter)
FILTERS.register("take_first_k")(TakeFirstKFilter)
FILTERS.register("majority_vote")(MajorityVoteFilter)
FILTERS.register("lowercase")(LowercaseFilter)
FILTERS.register("uppercase")(UppercaseFilter)
FILTERS.register("map")(MapFilter)
FILTERS.register("format_span")(SpanFilter)
FILTERS.register("custom")(CustomFilter)


class FilterEnsemble:
    """A named pipeline of filters; its name keys `Instance.filtered_resps`."""

    def __init__(self, name: str, filters: Sequence[Filter]) -> None:
        self.name = name
        self.filters = list(filters)

    def apply(self, instances: Sequence[Instance]) -> None:
        """Run the steps in order over all instances; store one result per instance."""
        if not instances:
            return
        resps: list[Any] = [inst.resps for inst in instances]
        docs = [inst.doc for inst in instances]
        try:
            for step in self.filters:
                resps = step.apply(resps, docs)
        except RegexTooSlow as slow:
            raise RegexTooSlow(slow.pattern, f"Task {instances[0].task_name!r}, filter {self.name!r}: ") from None
        # zip, as lm-eval: a step returning fewer items leaves later instances unset.
        for inst, resp in zip(instances, resps, strict=False):
            inst.filtered_resps[self.name] = resp


def build_filter(step: Mapping[str, Any]) -> Filter:
    """One step `{"function": name, **kwargs}` → a filter, with readable errors."""
    if "function" not in step:
        raise UserError(f"Filter step {dict(step)!r} has no 'function' key.")
    name = step["function"]
    factory = FILTERS.get(name)
    kwargs = {key: value for key, value in step.items() if key != "function"}
    try:
        return factory(**kwargs)
    except TypeError as err:
        raise UserError(f"Filter {name!r}: bad arguments {sorted(kwargs)}: {err}.") from None


def build_filter_ensemble(name: str, steps: Sequence[Mapping[str, Any]]) -> FilterEnsemble:
    """The pipeline `name` from a task YAML's `filter:` list (`!function`s already resolved)."""
    return FilterEnsemble(name, [build_filter(step) for step in steps])


def default_filter_ensemble() -> FilterEnsemble:
    """What a task without `filter_list` gets: pipeline "none" = [take_first]."""
    return FilterEnsemble("none", [TakeFirstFilter()])
