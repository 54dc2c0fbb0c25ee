"""``python -m pipelines.build``: the build command. Its code is ``pipelines.jobs.build``; this entry point answers
``--help`` and sets up a local build's process (``pipelines.localrunner.preflight``) before Beam is imported."""

import sys

from pipelines.flags import build_help
from pipelines.localrunner.preflight import before_beam, interruptible_import

if __name__ in ("__main__", "__mp_main__"):  # the command, or the main module of a process it spawned
    if build_help(sys.argv[1:]):  # --help; a mistyped flag or a missing --output: one line, before Beam
        sys.stdout.flush()
        raise SystemExit(0)
    before_beam(sys.argv[1:])

with interruptible_import(quiet=__name__ == "__mp_main__"):  # Ctrl-C while Beam is imported: one line
    from pipelines.jobs.build import main

if __name__ == "__main__":
    sys.exit(main())
