"""Beam counters by name, made once per process.

``Metrics.counter(namespace, name)`` builds and validates a metric name and a delegating counter on
every call; the per-document steps (read, clean) called it for every document, some several times.
A delegating counter holds no count itself (each ``inc`` goes to the metrics container of the step
that is running), so one per name serves every bundle and thread.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from apache_beam import pvalue
from apache_beam.metrics import Metrics

from pipelines.records import Reject


@lru_cache(maxsize=4096)
def counter(namespace: str, name: str) -> Any:
    """The counter ``namespace``/``name`` (``Metrics.counter``), cached."""
    return Metrics.counter(namespace, name)


def counted(namespace: str, record: Any, kept: str, rejects_tag: str = "rejects") -> Any:
    """A step's output for ``record``, counted under ``namespace``: a Reject tagged ``rejects_tag`` and
    counted by its bucket and reason, anything else as the main output, counted as ``kept``."""
    if isinstance(record, Reject):
        counter(namespace, f"{record.bucket}_{record.reason}").inc()
        return pvalue.TaggedOutput(rejects_tag, record)
    counter(namespace, kept).inc()
    return record
