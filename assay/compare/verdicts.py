"""What a comparison means: one verdict per metric, and one for the whole comparison.

Verdicts look at the *gain*, candidate − baseline turned so that positive is better (the
results JSON's `higher_is_better`), at the tolerated drop D (`--max-drop`, 0 unless set,
in the metric's own units) and at the row's Holm-adjusted p over every row compared (the
p that status and the reports show). In this order:

- `regressed`: significant (p < α) and worse, with the whole 1−α interval worse than −D;
- `equivalent` (only with `--equivalence-margin m`): the 1−2α interval inside (−m, m), TOST;
- `improved`: significant and better;
- `unchanged`: non-inferior: the one-sided test of H0 "gain ≤ −D" rejects at α, i.e. the
  one-sided 1−α lower bound of the gain (the low end of the 1−2α interval) is at least −D.
  A small minimum detectable effect is not evidence of that, and neither is a zero SE: a
  run whose few documents all flipped one way has SE 0 and an interval far below −D;
- `inconclusive`: otherwise; the run was too small to tell.

`unchanged` for the whole comparison needs every row non-inferior on its own: an
intersection-union test, which holds its level without a multiplicity correction.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from typing import TYPE_CHECKING

from assay.errors import UsageError

if TYPE_CHECKING:  # the CLI parses --max-drop with this module before numpy is needed
    from assay.compare.statistics import PairedTest

REGRESSED, EQUIVALENT, IMPROVED, UNCHANGED, INCONCLUSIVE = (
    "regressed",
    "equivalent",
    "improved",
    "unchanged",
    "inconclusive",
)


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """One `--max-drop` value: everywhere, for a task (a glob), or for a task's metric."""

    value: float
    task: str | None = None
    metric: str | None = None

    @property
    def specificity(self) -> int:
        return (self.task is not None) + (self.metric is not None)


def parse_max_drop(text: str) -> Tolerance:
    """`0.01`, `mmlu=0.01`, `mmlu*:acc=0.01` → a Tolerance; UsageError otherwise."""
    target, _, number = text.rpartition("=")
    try:
        value = float(number)
    except ValueError:
        value = math.nan
    if not value >= 0 or (_ and not target):
        raise UsageError(
            f"--max-drop {text!r} is not VALUE, TASK=VALUE or TASK:METRIC=VALUE with a VALUE of 0 or more."
        )
    if not target:
        return Tolerance(value)
    task, _, metric = target.partition(":")
    return Tolerance(value, task or "*", metric or None)


def max_drop_for(tolerances: list[Tolerance], task: str, metric: str) -> float:
    """The most specific tolerance that matches (a later one wins a tie); 0 if none does."""
    matching = [
        t
        for t in tolerances
        if (t.task is None or fnmatch.fnmatchcase(task, t.task)) and (t.metric is None or t.metric == metric)
    ]
    # max() keeps the first of equals, so look from the end: the later flag wins a tie.
    return max(reversed(matching), key=lambda t: t.specificity).value if matching else 0.0


def verdict(
    result: PairedTest,
    *,
    higher_is_better: bool,
    alpha: float,
    max_drop: float,
    margin: float | None,
    p_value: float | None = None,
) -> str:
    """One metric's verdict; `p_value` replaces the test's own (a comparison passes the row's Holm p)."""
    p = result.p_value if p_value is None else p_value
    sign = 1.0 if higher_is_better else -1.0
    gain = sign * result.delta
    low, high = sorted((sign * result.ci_low, sign * result.ci_high))
    one_sided_low = min(sign * result.tost_low, sign * result.tost_high)
    significant = not math.isnan(p) and p < alpha
    if significant and gain < 0 and high < -max_drop:
        return REGRESSED
    if margin is not None and -margin < result.tost_low and result.tost_high < margin:
        return EQUIVALENT
    if significant and gain > 0:
        return IMPROVED
    if one_sided_low >= -max_drop:  # False for NaN: an undefined interval proves nothing
        return UNCHANGED
    return INCONCLUSIVE


def non_inferiority_lower_bound(result: PairedTest, *, higher_is_better: bool) -> float:
    """The one-sided 1−α lower bound of the gain (NaN if undefined); `unchanged` needs it ≥ −D."""
    sign = 1.0 if higher_is_better else -1.0
    return min(sign * result.tost_low, sign * result.tost_high)


def overall(verdicts: list[str]) -> str:
    """The comparison's verdict: any regression, else any doubt, else the best news."""
    for worst_first in (REGRESSED, INCONCLUSIVE, IMPROVED):
        if worst_first in verdicts:
            return worst_first
    if verdicts and all(v == EQUIVALENT for v in verdicts):
        return EQUIVALENT
    return UNCHANGED


EXIT_CODES = {REGRESSED: 1, INCONCLUSIVE: 0, IMPROVED: 0, EQUIVALENT: 0, UNCHANGED: 0}
STRICT_EXIT_CODES = {**EXIT_CODES, INCONCLUSIVE: 3}
