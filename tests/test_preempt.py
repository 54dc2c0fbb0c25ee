"""SIGTERM's grace (trainer/preempt.py): a data wait still running after it is abandoned, compute never is.

The trainer's own runs (a stalled store, a manifest's claim) are in tests/test_train.py; here the
rule itself, in-process with real signals, in well under a second.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

from trainer.preempt import RECHECK_S, Preemption


def stalled() -> Iterator[int]:
    time.sleep(30)  # a read that does not return (in time)
    yield 1


def test_a_data_wait_after_the_grace_is_abandoned_but_compute_runs_on() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with Preemption(grace_s=0.3) as p:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.6)  # computing past the grace: never cut short
        assert p.requested and not p.abandoned
        assert p.next(iter([7])) == 7  # a wait that gets its data goes on
        t = time.monotonic()
        p.next(stalled())  # a wait that does not: abandoned at the timer's next look
        raise AssertionError("the stalled wait was not abandoned")
    assert p.abandoned and time.monotonic() - t < RECHECK_S + 1.0
    assert signal.getsignal(signal.SIGTERM) is before  # handlers put back


def test_without_sigterm_nothing_is_abandoned() -> None:
    with Preemption(grace_s=0.1) as p:
        assert p.next(iter([1, 2])) == 1
        time.sleep(0.2)
    assert not p.requested and not p.abandoned
