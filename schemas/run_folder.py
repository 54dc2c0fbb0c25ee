"""The names inside a training run folder (the trainer's ``--output``), for every tool that reads one.

    {run}/checkpoints/ckpt-{step:08d}.pt   (+ .sha256 beside each)
    {run}/metrics.jsonl                    one JSON record per logged step
    {run}/tb/                              TensorBoard, where the folder is local

The trainer writes them; ``shardforge status``, ``plot`` and ``export`` read them, and a command
given the wrong kind of folder names what it was given (shardforge/storage/contract.py).
"""

from __future__ import annotations

import re

CKPT_DIR = "checkpoints"
DIGEST_SUFFIX = ".sha256"  # ckpt-N.pt.sha256: the sha256 (hex) of ckpt-N.pt's bytes
METRICS_FILE = "metrics.jsonl"
CKPT_NAME = re.compile(r"ckpt-(\d{8})\.pt$")
