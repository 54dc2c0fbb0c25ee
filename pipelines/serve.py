"""``python -m pipelines.serve``: the serve command. Its code is ``pipelines.jobs.serve``; this entry point answers
``--help`` and sets up a local build's process (``pipelines.localrunner.preflight``) before Beam is imported."""

import sys

from pipelines.flags import serve_help
from pipelines.localrunner.preflight import before_beam, interruptible_import

if __name__ in ("__main__", "__mp_main__"):  # the command, or the main module of a process it spawned
    if serve_help(sys.argv[1:]):  # --help; a mistyped flag: one line, before Beam
        sys.stdout.flush()
        raise SystemExit(0)
    before_beam(sys.argv[1:])

with interruptible_import(quiet=__name__ == "__mp_main__"):  # Ctrl-C while Beam is imported: one line
    from pipelines.jobs.serve import main

if __name__ == "__main__":
    sys.exit(main())
