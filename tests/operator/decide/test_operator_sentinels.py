"""The condition ScoresTrusted and a strict run's failure, from the runner's status.sentinels
(pure functions of the observed Job and status, as the other conditions)."""

from __future__ import annotations

import datetime
from typing import Any

from assay.operator.decide import conditions as c
from assay.operator.decide import job_status, trust
from assay.run_results import RunResults
from assay.runner.results.condensed import condense_results

T0 = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
T1 = T0 + datetime.timedelta(minutes=5)
DONE = {
    "metadata": {"name": "ev-g1"},
    "spec": {},
    "status": {
        "startTime": "2025-05-01T12:00:10Z",
        "completionTime": "2025-05-01T12:31:00Z",
        "conditions": [{"type": "Complete", "status": "True", "reason": "", "message": ""}],
    },
}
DEGENERATE = "100% of 24 documents scored every choice alike: the log-likelihoods do not discriminate"


def _results(trusted: bool) -> dict[str, Any]:
    """The runner's status write for a run of arc_easy, its sentinels as the run found them."""
    checks = {"degenerate": {"passed": trusted, **({} if trusted else {"reason": DEGENERATE})}}
    run = RunResults.from_lmeval_dict(
        {
            "results": {"arc_easy": {"alias": "arc_easy", "acc,none": 0.25}},
            "sentinels": {"trusted": trusted, "tasks": {"arc_easy": {"trusted": trusted, "checks": checks}}},
        }
    )
    return condense_results(run)


def _finished(status_fields: dict[str, Any], spec: dict[str, Any] | None = None) -> dict[str, Any]:
    status = c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True)
    status = {k: v for k, v in {**status, **status_fields}.items() if v is not None}
    patch = job_status.from_job(status, DONE, generation=1, now=T1, spec=spec)
    return {**status, **patch}


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((cond for cond in status["conditions"] if cond["type"] == kind), None)


def test_failed_sentinels_leave_the_run_succeeded_with_scores_trusted_false() -> None:
    fields = _results(trusted=False)
    assert fields["sentinels"] == {
        "trusted": False,
        "message": f"arc_easy: {DEGENERATE}.",
        "failures": [{"task": "arc_easy", "reason": DEGENERATE}],
    }
    status = _finished(fields)
    condition = _condition(status, trust.SCORES_TRUSTED)
    assert status["phase"] == c.SUCCEEDED
    assert condition is not None and condition["status"] == "False" and condition["reason"] == "SentinelsFailed"
    assert condition["message"] == f"arc_easy: {DEGENERATE}."


def test_passed_sentinels_are_scores_trusted_true() -> None:
    status = _finished(_results(trusted=True))
    condition = _condition(status, trust.SCORES_TRUSTED)
    assert status["phase"] == c.SUCCEEDED
    assert condition is not None and (condition["status"], condition["reason"]) == ("True", "ChecksPassed")


def test_strict_sentinels_fail_the_run_with_its_scores_kept() -> None:
    status = _finished(_results(trusted=False), spec={"sentinels": {"strict": True}})
    assert status["phase"] == c.FAILED and status["reason"] == "ScoresUntrusted"
    failed = _condition(status, "Failed")
    assert failed is not None and failed["status"] == "True" and DEGENERATE in failed["message"]
    assert status["results"]  # the scores are still there to read
    trusted = _finished(_results(trusted=True), spec={"sentinels": {"strict": True}})
    assert trusted["phase"] == c.SUCCEEDED


def test_no_findings_no_condition_and_a_new_run_clears_the_last_ones() -> None:
    fields = _results(trusted=True)
    del fields["sentinels"]
    assert _condition(_finished(fields), trust.SCORES_TRUSTED) is None
    finished = _finished(_results(trusted=False))
    rerun = c.accepted(finished, job_name="ev-g2", generation=2, now=T1, new_run=True)
    assert rerun["sentinels"] is None and _condition(rerun, trust.SCORES_TRUSTED) is None


def test_spec_sentinels_parse_round_trip_and_reach_the_run_options() -> None:
    import pytest

    from assay.errors import UserError
    from assay.spec.parsing import parse_spec

    base = {"model": "hf", "tasks": ["arc_easy"]}
    evaluation = parse_spec({**base, "sentinels": {"strict": True, "belowChanceAlpha": 0.01, "enabled": True}})
    assert evaluation.sentinels.strict and evaluation.sentinels.below_chance_alpha == 0.01
    assert evaluation.to_dict()["sentinels"] == {"strict": True, "belowChanceAlpha": 0.01}  # defaults left out
    assert parse_spec(evaluation.to_dict()) == evaluation
    assert evaluation.run_options().sentinels == evaluation.sentinels
    assert "sentinels" not in parse_spec(base).to_dict()
    for bad, said in [
        ({"strict": "yes"}, "spec.sentinels.strict must be true or false"),
        ({"emptyFraction": 2}, "spec.sentinels.emptyFraction must be a number between 0 and 1, not 2."),
        ({"alpha": 0.1}, "Unknown field 'spec.sentinels.alpha'"),
    ]:
        with pytest.raises(UserError, match=said.replace(".", r"\.")):
            parse_spec({**base, "sentinels": bad})
