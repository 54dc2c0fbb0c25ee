"""``python -m pipelines.repack``: the repack command. Its code is ``pipelines.jobs.repack``; this entry point answers
``--help`` and sets up a local build's process (``pipelines.localrunner.preflight``) before Beam is imported."""

import sys

from pipelines.flags import exit_on_help, repack_parser
from pipelines.localrunner.preflight import before_beam

if __name__ in ("__main__", "__mp_main__"):  # the command, or the main module of a process it spawned
    exit_on_help(repack_parser, sys.argv[1:], check=True)  # a mistyped flag: one line, before Beam
    before_beam(sys.argv[1:])

from pipelines.jobs.repack import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
