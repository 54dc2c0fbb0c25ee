"""A script that runs a module as ``python -m MODULE ARGS`` would and then says which modules it had loaded.

Its last line is ``probe: <loaded?> ... <exit code>``, one True/False per module asked about, in order:
how the CLI tests prove that --help and flag mistakes are answered before Beam or torch is imported.
"""

from __future__ import annotations


def import_probe(*modules: str) -> str:
    """The probe's source, for ``python -c SOURCE MODULE ARGS...``."""
    loaded = ", ".join(f"{m!r} in sys.modules" for m in modules)
    return f"""
import runpy, sys
module, sys.argv = sys.argv[1], sys.argv[1:]
code = 0
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
print("probe:", {loaded}, code)
sys.exit(code)
"""
