"""shardforge's Apache Beam data jobs (never imports torch)."""

import logging as _logging


class _DropApitoolsWarning(_logging.Filter):
    """Drop the one warning Beam logs at import when the optional `apitools` package is absent.

    ``apache_beam.io.gcp.internal.clients.bigquery`` calls ``logging.warning("apitools not
    found …")`` on the root logger while Beam is imported, so every command (``--help``
    included) printed it. It must be filtered before Beam is imported, which is why it lives
    here: this package is imported before any of its modules imports apache_beam.
    """

    def filter(self, record: _logging.LogRecord) -> bool:
        return not (record.name == "root" and str(record.msg).startswith("apitools not found"))


if not any(isinstance(f, _DropApitoolsWarning) for f in _logging.getLogger().filters):
    _logging.getLogger().addFilter(_DropApitoolsWarning())
