"""Every worker process of a local build (``--direct_num_workers N``) is told to end as soon as the
run ends, before the runner waits for any of them: a Ctrl-C during that wait leaves none running. And a
worker whose control stream closes under a bundle (a run cut short) says nothing of that bundle.

FnApiRunner's run ends, however it ends, with ``WorkerHandlerManager.close_all``, which closes the
worker handlers one after another: each pushes the end marker into its worker's control stream, then
waits for the worker to close the stream (``ControlConnection.close`` joins the stream's reader) and
for its process to exit (``SubprocessSdkWorkerHandler.stop_worker`` joins the thread that waits for
it). A Ctrl-C during one of those waits left ``close_all`` there, and the workers after it were never
told to end. They ignore SIGINT (``pipelines.options.WORKER_COMMAND``), so each went on waiting for
work, and the driver's thread that waits for each worker process (Beam's ``run_worker``, not a daemon
thread) kept the build from exiting: it printed "interrupted" and hung, one worker process left (5 of
8 Ctrl-Cs sent at a stage's end of a two-worker build of 2.4 MB hung so).

Beam's ``ControlConnection.close`` also pushes the marker only into a stream a worker has connected
to; for a worker whose process is still starting it marks the connection closed and goes on to wait
for the process, which, once connected, waits for work: a run that failed (a Ctrl-C) in the second or
so after it started its workers waited in ``close_all`` forever.

``install`` wraps ``close_all``: it first pushes the end marker into every worker's control stream (a
queue put each; ``Control`` returns at the first marker it reads, and a worker that has not connected
yet ends as soon as it does), then runs Beam's ``close_all``, which closes, waits and stops the gRPC
server as before. The workers end together rather than one after another.

A run cut short closes the control streams while a worker may still be running a bundle. The worker's
``SdkHarness.run`` then shuts its bundle processors down under that bundle, which fails (most often a
``KeyError`` of ``bundle_processor_cache.release``), and ``SdkHarness._execute`` printed the failure's
traceback twice, ~36 lines before the build's "interrupted", to answer a runner that no longer
listens. ``install`` also wraps ``_execute``: an instruction that fails once the harness's control
stream has ended (its ``_alive`` is false from then on) answers with a one-line error instead, and
prints nothing. A failure while the stream is open is Beam's as before.

The wrapped ``_execute`` also counts the instructions running (``still_running``). When the control
stream ends under a bundle, ``SdkHarness.run`` returns while that bundle's thread still runs, and the
worker's interpreter, finalizing around it, sometimes aborted in gRPC's C++ code ("terminate called
without an active exception", exit -6: the driver then printed its ``run_worker`` thread's
``RuntimeError``, in 2 of 18 timed Ctrl-Cs). ``pipelines.localrunner.sdkworker`` ends such a worker
with ``os._exit(0)`` once its streams are flushed: nothing it could still do reaches the runner. A
worker whose run ended with nothing running exits as before. ``uninstall``: Beam's.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any

_close_alls: list[Callable[[Any], None]] = []
_executes: list[Callable[[Any, Callable[[], Any], Any], None]] = []
CLOSED_UNDER_IT = "the runner closed the control stream while this instruction ran"
_running = [0]  # instructions in the wrapped _execute now
_running_lock = threading.Lock()


def still_running() -> int:
    """How many instructions this process's harness is running now."""
    with _running_lock:
        return _running[0]


def tell_to_end(handlers: Iterable[Any]) -> int:
    """Push the end marker into the control stream of each gRPC worker handler of ``handlers``, waiting
    for none of them: how many were told."""
    from apache_beam.runners.portability.fn_api_runner.worker_handlers import (
        BeamFnControlServicer,
        GrpcWorkerHandler,
    )

    told = 0
    for handler in set(handlers):
        if isinstance(handler, GrpcWorkerHandler):
            handler.control_conn.push(BeamFnControlServicer._DONE_MARKER)
            told += 1
    return told


def tell_every_worker_to_end(manager: Any) -> int:
    """``tell_to_end`` every worker handler ``manager`` (a ``WorkerHandlerManager``) started."""
    return tell_to_end(h for handlers in list(manager._cached_handlers.values()) for h in handlers)


def _told_first(close_all: Callable[[Any], None]) -> Callable[[Any], None]:
    @functools.wraps(close_all)
    def close_all_told_first(self: Any) -> None:
        try:
            tell_every_worker_to_end(self)
        finally:
            close_all(self)

    close_all_told_first.wrapped_by_shardforge = True  # type: ignore[attr-defined]
    return close_all_told_first


def _quiet_once_closed(execute: Callable[[Any, Callable[[], Any], Any], None]) -> Callable[[Any, Callable[[], Any], Any], None]:
    @functools.wraps(execute)
    def execute_quiet_once_closed(self: Any, task: Callable[[], Any], request: Any) -> None:
        def task_or_closed() -> Any:
            try:
                return task()
            except Exception:
                if getattr(self, "_alive", True):
                    raise
                from apache_beam.portability.api import beam_fn_api_pb2

                return beam_fn_api_pb2.InstructionResponse(instruction_id=request.instruction_id,
                                                           error=CLOSED_UNDER_IT)

        with _running_lock:
            _running[0] += 1
        try:
            execute(self, task_or_closed, request)
        finally:
            with _running_lock:
                _running[0] -= 1

    execute_quiet_once_closed.wrapped_by_shardforge = True  # type: ignore[attr-defined]
    return execute_quiet_once_closed


def install() -> None:
    """Make every ``WorkerHandlerManager.close_all`` tell all its workers to end before it waits, and
    ``SdkHarness._execute`` quiet about an instruction that fails once its control stream has ended."""
    from apache_beam.runners.portability.fn_api_runner.worker_handlers import WorkerHandlerManager
    from apache_beam.runners.worker.sdk_worker import SdkHarness

    if not getattr(WorkerHandlerManager.close_all, "wrapped_by_shardforge", False):
        _close_alls.append(WorkerHandlerManager.close_all)
        WorkerHandlerManager.close_all = _told_first(WorkerHandlerManager.close_all)
    if not getattr(SdkHarness._execute, "wrapped_by_shardforge", False):
        _executes.append(SdkHarness._execute)
        SdkHarness._execute = _quiet_once_closed(SdkHarness._execute)


def uninstall() -> None:
    """Beam's ``close_all`` and ``_execute`` back."""
    from apache_beam.runners.portability.fn_api_runner.worker_handlers import WorkerHandlerManager
    from apache_beam.runners.worker.sdk_worker import SdkHarness

    if _close_alls:
        WorkerHandlerManager.close_all = _close_alls.pop()
    if _executes:
        SdkHarness._execute = _executes.pop()
