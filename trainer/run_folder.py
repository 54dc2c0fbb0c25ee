"""A run folder read without torch: its checkpoints (by name) and its metrics.jsonl records.

The names are schemas/run_folder.py's. ``shardforge status RUN`` and ``shardforge plot RUN`` read a run
through this module, so neither imports torch.
"""

from __future__ import annotations

import json
from typing import Any

from schemas.run_folder import CKPT_DIR, CKPT_NAME, METRICS_FILE
from shardforge.storage import join, list_names, read_text


def checkpoint_dir(run: str) -> str:
    return join(run, CKPT_DIR)


def list_checkpoints(run: str) -> list[tuple[int, str]]:
    """(step, url) of the complete checkpoints of a run, oldest first."""
    found = []
    for name in list_names(checkpoint_dir(run)):
        m = CKPT_NAME.search(name)
        if m:
            found.append((int(m.group(1)), join(checkpoint_dir(run), name)))
    return sorted(found)


def read_records(run: str) -> tuple[list[dict[str, Any]], int]:
    """The step records of a run's metrics.jsonl in file order, and how many non-blank lines are not one
    (a line torn by a killed writer, or a record appended onto it): those are skipped.
    FileNotFoundError when the run has no metrics.jsonl."""
    rows: list[dict[str, Any]] = []
    torn = 0
    for line in read_text(join(run, METRICS_FILE)).splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and isinstance(rec.get("step"), int):
            rows.append(rec)
        else:
            torn += 1
    return rows, torn
