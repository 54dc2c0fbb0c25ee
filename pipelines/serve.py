"""``python -m pipelines.serve``: the serve command. Its code is ``pipelines.jobs.serve``; this entry point answers
``--help`` and sets up a local build's process (``pipelines.localrunner.preflight``) before Beam is imported."""

import sys

from pipelines.flags import serve_help
from pipelines.localrunner.preflight import before_beam, command_main

if __name__ in ("__main__", "__mp_main__"):  # the command, or the main module of a process it spawned
    if serve_help(sys.argv[1:]):  # --help; a mistyped flag: one line, before Beam
        sys.stdout.flush()
        raise SystemExit(0)
    before_beam(sys.argv[1:])

main = command_main("pipelines.jobs.serve")  # Ctrl-C while Beam is imported: one line

if __name__ == "__main__":
    sys.exit(main())
