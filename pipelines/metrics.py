"""Beam counters by name, made once per process.

``Metrics.counter(namespace, name)`` builds and validates a metric name and a delegating counter on
every call; the per-document steps (read, clean) called it for every document, some several times.
A delegating counter holds no count itself (each ``inc`` goes to the metrics container of the step
that is running), so one per name serves every bundle and thread.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from apache_beam.metrics import Metrics


@lru_cache(maxsize=4096)
def counter(namespace: str, name: str) -> Any:
    """The counter ``namespace``/``name`` (``Metrics.counter``), cached."""
    return Metrics.counter(namespace, name)
