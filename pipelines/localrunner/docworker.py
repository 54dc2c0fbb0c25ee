"""A document process of ``pipelines.localrunner.docpool``: runs the tasks it reads on stdin, answers on stdout.

Each task is a frame of ``(function, args)``; the answer, under the same task id, ``(True,
result)`` or ``(False, traceback text)`` (also when the task cannot be unpickled). The frames'
stream is the process's original stdout, and file descriptor 1 then points at stderr, so a
stray print cannot corrupt it. It ends when its stdin closes. Imports only what its tasks name
(no Beam).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback

from pipelines.localrunner.docpool import read_frame, write_frame
from pipelines.localrunner.preflight import local_build_process
from shardforge.console.run import stacks_on_sigusr1


def main() -> None:
    # Ctrl-C reaches the whole process group: the build's process handles it (its pool closes this
    # process's stdin, and it ends); a traceback from every document process would only be noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stacks_on_sigusr1()  # kill -USR1 PID: this process's stacks on stderr, as the build's own
    local_build_process()  # the allocator settings of the build's own process
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    inp = sys.stdin.buffer
    from pipelines.localrunner.heap import tune_collector

    tuned = False
    while True:
        try:
            task_id, body = read_frame(inp)
        except EOFError:
            break
        try:
            fn, args = pickle.loads(body)
            del body
            answer = (True, fn(*args))
        except BaseException:  # reported to the step that handed the task over, which raises it
            answer = (False, traceback.format_exc())
        write_frame(out, task_id, answer)
        fn = args = answer = None  # nothing of the task stays alive (nor frozen, below)
        if not tuned:  # the first task imported its modules: freeze them out of the collector
            tune_collector()
            tuned = True
    out.close()


if __name__ == "__main__":
    main()
