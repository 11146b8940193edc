"""The one reading of boolean model args and flags: the accepted spellings and the refused ones."""

from __future__ import annotations

from typing import Any

import pytest

from assay.booleans import SPELLINGS, optional_bool, strict_bool
from assay.errors import UsageError, UserError

TRUE = [True, 1, "true", "True", "TRUE", " true ", "1", "yes", "Yes", "YES"]
FALSE = [False, 0, "false", "False", "FALSE", "0", "no", "No", "NO", " no"]
# What `bool(value)` reads as true and a gate reading `in ("true", "1", "yes")` reads as false.
REFUSED = [
    "on",
    "On",
    "off",
    "y",
    "n",
    "t",
    "f",
    "enabled",
    "disabled",
    "",
    "  ",
    "truee",
    "nope",
    "2",
    2,
    -1,
    1.0,
    0.0,
    [],
    ["true"],
    {},
    {"x": 1},
]


@pytest.mark.parametrize("value", TRUE)
def test_true_spellings(value: Any) -> None:
    assert strict_bool(value, name="model_args x") is True


@pytest.mark.parametrize("value", FALSE)
def test_false_spellings(value: Any) -> None:
    assert strict_bool(value, name="model_args x") is False


@pytest.mark.parametrize("value", REFUSED)
def test_anything_else_is_one_sentence_naming_the_arg_and_the_spellings(value: Any) -> None:
    with pytest.raises(UserError) as caught:
        strict_bool(value, name="model_args trust_remote_code")
    message = str(caught.value)
    assert message.startswith("model_args trust_remote_code must be ")
    assert SPELLINGS in message and message.count(". ") == 0 and message.endswith(".")


def test_none_is_refused_unless_optional() -> None:
    with pytest.raises(UserError):
        strict_bool(None, name="x")
    assert optional_bool(None, name="x") is None
    assert optional_bool("no", name="x") is False
    with pytest.raises(UserError):
        optional_bool("on", name="x")


def test_the_error_class_is_the_callers() -> None:
    with pytest.raises(UsageError):
        strict_bool("on", name="--flag", error=UsageError)


def test_a_long_value_is_not_repeated() -> None:
    secret = "sk-" + "a" * 60
    with pytest.raises(UserError) as caught:
        strict_bool(secret, name="model_args truncation")
    assert secret not in str(caught.value) and "63-character string" in str(caught.value)
