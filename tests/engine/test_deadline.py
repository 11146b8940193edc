"""The time bound on tenant text's work (templates, regexes): it stops the work, leaves the
process's own alarm handling as it found it, and bounds nothing off the main thread."""

from __future__ import annotations

import re
import signal
import threading
import time
from types import FrameType

import pytest

from assay.runner.deadline import DeadlineExceeded, deadline


def _spin() -> None:
    while True:
        pass


def test_a_backtracking_regex_and_a_python_loop_stop_at_the_bound() -> None:
    for work in (lambda: re.match(r"(a+)+$", "a" * 40 + "b"), _spin):
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded), deadline(0.2):
            work()
        assert time.monotonic() - started < 30


def test_another_handler_and_its_timer_are_given_back() -> None:
    fired: list[int] = []

    def theirs(signum: int, frame: FrameType | None) -> None:
        fired.append(signum)

    previous = signal.signal(signal.SIGALRM, theirs)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with deadline(5):
            pass
        assert signal.getsignal(signal.SIGALRM) is theirs
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 0.5
        deadline_at = time.monotonic() + 30
        while not fired and time.monotonic() < deadline_at:
            time.sleep(0.05)
        assert fired == [signal.SIGALRM]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_inner_bound_leaves_the_outer_one_in_charge() -> None:
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded), deadline(0.2):
        with deadline(60):
            pass
        with deadline(60):
            _spin()
    assert time.monotonic() - started < 30


def test_off_the_main_thread_the_work_runs_unbounded() -> None:
    done: list[bool] = []

    def work() -> None:
        with deadline(0.01):
            time.sleep(0.2)
        done.append(True)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(30)
    assert done == [True]
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
