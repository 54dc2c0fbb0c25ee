"""Checkpoints on any fsspec URL: atomic, last-k retention, safe loading.

A checkpoint is one ``torch.save`` blob ``ckpt-{step:08d}.pt`` under
``{run}/checkpoints/``, written through a temporary name and moved into place,
so a crash mid-write never leaves a torn file under a real name. Everything in
it is tensors and plain Python containers, so it loads with
``torch.load(weights_only=True)`` — nothing is unpickled.
"""

from __future__ import annotations

import io
import logging
import re
from typing import Any

import torch

from schemas.errors import UserError
from storage import get_fs, join, list_names, read_bytes, retry, write_bytes_atomic

log = logging.getLogger(__name__)
CKPT_DIR = "checkpoints"
_NAME = re.compile(r"ckpt-(\d{8})\.pt$")


def checkpoint_dir(run: str) -> str:
    return join(run, CKPT_DIR)


def list_checkpoints(run: str) -> list[tuple[int, str]]:
    """(step, url) of the complete checkpoints of a run, oldest first."""
    found = []
    for name in list_names(checkpoint_dir(run)):
        m = _NAME.search(name)
        if m:
            found.append((int(m.group(1)), join(checkpoint_dir(run), name)))
    return sorted(found)


def save_checkpoint(run: str, step: int, state: dict[str, Any], keep_last: int = 3) -> str:
    """Write state atomically as checkpoint `step`; keep only the newest keep_last."""
    buf = io.BytesIO()
    torch.save(state, buf)
    url = join(checkpoint_dir(run), f"ckpt-{step:08d}.pt")
    write_bytes_atomic(url, buf.getvalue())
    if keep_last > 0:
        fs, _ = get_fs(url)
        for _, old in list_checkpoints(run)[:-keep_last]:
            _, p = get_fs(old)
            retry(lambda p=p: fs.rm(p), f"remove {old}")
    return url


def load_checkpoint(url: str) -> dict[str, Any]:
    """Load a checkpoint with weights_only=True (no arbitrary unpickling)."""
    try:
        data = read_bytes(url)
    except FileNotFoundError:
        raise UserError(f"checkpoint not found: {url}") from None
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - corrupt or foreign file
        raise UserError(f"{url} is not a loadable shardforge checkpoint: {e}") from None


def latest_checkpoint(run: str) -> str | None:
    found = list_checkpoints(run)
    return found[-1][1] if found else None


def load_latest_checkpoint(run: str) -> tuple[str, dict[str, Any]] | None:
    """(url, state) of the newest checkpoint of run that loads; None when the run has none.

    A newer checkpoint that does not load (truncated by a full disk, damaged in
    transit) is skipped with one warning line each, so a run resumes from the
    last good state instead of stopping. When checkpoints exist but none loads,
    that is an error: starting over silently would throw the run away.
    """
    found = list_checkpoints(run)
    skipped: list[str] = []
    for _, url in reversed(found):
        try:
            state = load_checkpoint(url)
        except UserError as e:
            why = str(e).removeprefix(f"{url} is not a loadable shardforge checkpoint: ")
            log.warning("skipping checkpoint %s: it does not load (%s)", url, why)
            skipped.append(url)
            continue
        if not isinstance(state, dict):
            log.warning("skipping checkpoint %s: it holds a %s, not a checkpoint", url, type(state).__name__)
            skipped.append(url)
            continue
        if skipped:
            log.warning("resuming from %s, the newest checkpoint that loads (%d newer skipped)", url, len(skipped))
        return url, state
    if skipped:
        raise UserError(f"none of the {len(skipped)} checkpoints in {checkpoint_dir(run)} loads; move them away "
                        "to start the run over, or train into another output")
    return None
