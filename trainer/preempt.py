"""SIGTERM (preemption): checkpoint at the end of the step and exit, within seconds even when data stalls.

A preempted machine gets SIGTERM and, some seconds later, SIGKILL (30 s on GCE
spot VMs and by default on Kubernetes). The loop asks ``requested`` after each
step; when it is set, the loop checkpoints and exits. A step whose data never
comes (a stalled object store, a shard read that hangs) would hold that up
until the SIGKILL, so the loop takes every batch (evaluation's too) through
``next``: when SIGTERM is ``grace_s`` old (``SHARDFORGE_SIGTERM_GRACE_S``,
10 s) and the loop is still waiting for data, the wait is abandoned with
``Preempted``. ``Preemption`` then ends the loop with one warning: no checkpoint
is written for a step that never ended, and the run resumes from its last one.
Compute is never cut short: a step that is computing when the grace runs out
still ends and checkpoints.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Iterator
from typing import Any, TypeVar

log = logging.getLogger("shardforge.train")
T = TypeVar("T")
GRACE_ENV = "SHARDFORGE_SIGTERM_GRACE_S"
DEFAULT_GRACE_S = 10.0
RECHECK_S = 0.5  # after the grace, how often the timer looks whether the loop now waits for data


class Preempted(BaseException):
    """A data wait abandoned after SIGTERM. A BaseException, like KeyboardInterrupt: no ``except
    Exception`` on its way out (a shard reader's, a retry's) may take it for a failure of its own."""


def grace_seconds() -> float:
    """The grace a data wait gets after SIGTERM (``SHARDFORGE_SIGTERM_GRACE_S``; 10 s)."""
    try:
        return max(0.1, float(os.environ.get(GRACE_ENV, DEFAULT_GRACE_S)))
    except ValueError:
        return DEFAULT_GRACE_S


class Preemption:
    """SIGTERM sets ``requested``; a data wait still running ``grace_s`` later raises ``Preempted``.

    Used as a context manager around the loop (the main thread's signal
    handlers are installed on entry and put back on exit); on exit it ends a
    ``Preempted`` loop quietly and records it in ``abandoned``.
    """

    def __init__(self, grace_s: float | None = None) -> None:
        self.requested = False
        self.abandoned = False  # the loop ended in a data wait after SIGTERM: no checkpoint of its step
        self.grace_s = grace_seconds() if grace_s is None else grace_s
        self._waiting = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> Preemption:
        with contextlib.suppress(ValueError):  # not the main thread: no handlers (nor a grace)
            self._old[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._handle)
            self._old[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._timer)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if not self.requested:
            self.requested = True
            signal.setitimer(signal.ITIMER_REAL, self.grace_s)

    def _timer(self, signum: int, frame: Any) -> None:
        if self._waiting:
            raise Preempted(f"SIGTERM {self.grace_s:g} s ago and still waiting for data")
        signal.setitimer(signal.ITIMER_REAL, RECHECK_S)  # computing: look again, the next wait may hang

    def next(self, it: Iterator[T]) -> T:
        """``next(it)``, abandoned (``Preempted``) when SIGTERM is ``grace_s`` old and it still waits."""
        with self.waiting():
            return next(it)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """A stretch of the loop that only waits for data: SIGTERM's grace applies to it."""
        outer, self._waiting = self._waiting, True
        try:
            yield
        finally:
            self._waiting = outer

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if self._old:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for sig, old in self._old.items():
                signal.signal(sig, old)
        if exc_type is not None and issubclass(exc_type, Preempted):
            self.abandoned = True
            log.warning("SIGTERM: still waiting for data %g s later; exiting without a checkpoint of this "
                        "step (the run resumes from its last checkpoint)", self.grace_s)
            return True
        return False
