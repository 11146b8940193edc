"""Text from elsewhere (a server's error body, a runner's last word) reaches status and Events
on one line of printable characters, bounded (`assay.echoed_text`)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from assay import echoed_text
from assay.operator.decide import conditions as c
from assay.operator.decide import job_status
from assay.runner.results.status_sink import MAX_MESSAGE_CHARS, FileStatusSink

T0 = datetime.datetime(2025, 5, 1, 12, 0, tzinfo=datetime.timezone.utc)
T1 = T0 + datetime.timedelta(minutes=30)
# ANSI escapes that clear a terminal, a forged log line, a right-to-left override, a NUL.
HOSTILE = "\x1b[2J\x1b[Hdone\r\n2025-05-01 INFO forged line\u202eevil\x00 " + "y" * 5000


def test_bounded_keeps_one_printable_line() -> None:
    line = echoed_text.bounded(HOSTILE)
    assert line.startswith("[2J[Hdone 2025-05-01 INFO forged lineevil y")
    assert len(line) == echoed_text.BODY_CHARS and line.endswith("...")
    assert not [ch for ch in line if not ch.isprintable()]
    assert echoed_text.bounded("  short\ttext \n") == "short text"
    assert echoed_text.bounded("é ü 中文") == "é ü 中文"  # letters of any script stay


def test_the_runners_failure_message_is_bounded_in_status(tmp_path: Path) -> None:
    sink = FileStatusSink(tmp_path / "status.json")
    sink.failed(HOSTILE)
    written = json.loads((tmp_path / "status.json").read_text())
    assert written["message"] == written["runnerMessage"]
    assert len(written["message"]) == MAX_MESSAGE_CHARS and "\n" not in written["message"]
    assert "\x1b" not in written["message"] and "\u202e" not in written["message"]


def test_the_operator_repeats_a_runners_message_bounded() -> None:
    # A runner image that skips its own bound (or writes status by other means) is bounded again.
    status = c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True)
    status["runnerMessage"] = HOSTILE
    job = {
        "metadata": {"name": "ev-g1"},
        "spec": {"suspend": False},
        "status": {
            "active": 0,
            "startTime": "2025-05-01T12:00:10Z",
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": "exit 78",
                    "lastTransitionTime": "2025-05-01T12:30:00Z",
                }
            ],
        },
    }
    message = job_status.from_job(status, job, generation=1, now=T1)["message"]
    note = message.split("Runner: ", 1)[1]
    assert note == echoed_text.bounded(HOSTILE, job_status.RUNNER_MESSAGE_CHARS)
    assert not [ch for ch in message if not ch.isprintable()]
