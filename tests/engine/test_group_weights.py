"""A group's `weight_by_size` is read as every other boolean: a quoted "false" weighs its tasks
equally (bool("false") would have weighed them by size, and pooled them in a sequential run),
and a value that is no boolean is refused naming the group."""

from __future__ import annotations

import pytest

from assay.errors import UserError
from assay.runner.tasks.groups import AggregateMetric


@pytest.mark.parametrize(
    ("written", "read"), [(True, True), (False, False), ("false", False), ("no", False), ("yes", True)]
)
def test_weight_by_size_reads_true_and_false_in_their_spellings(written: object, read: bool) -> None:
    entry = AggregateMetric.from_yaml({"metric": "acc", "weight_by_size": written}, "mmlu")
    assert entry.weight_by_size is read


def test_weight_by_size_defaults_to_true() -> None:
    assert AggregateMetric.from_yaml({"metric": "acc"}, "mmlu").weight_by_size is True


def test_a_weight_by_size_that_is_no_boolean_is_refused_naming_the_group() -> None:
    with pytest.raises(UserError, match="mmlu"):
        AggregateMetric.from_yaml({"metric": "acc", "weight_by_size": "sometimes"}, "mmlu")
