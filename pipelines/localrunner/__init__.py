"""Everything that tunes or works around Beam's local runner (FnApiRunner), in one room; README.md lists
each patch, the Beam internals it touches and the test that fails when an upgrade moves them.

Light at import (no Beam here): the document processes, the SDK worker entry and the preflight run
before Beam is imported. Imports nothing of ``pipelines`` but the package itself.
"""
