"""Bounded memory for Beam's local runner: stage data spilled to disk and streamed through bundles.

Beam's in-process ``FnApiRunner`` keeps every PCollection that crosses a fused-stage boundary in
the launching process until the stages that read it have run, and it moves data in whole-stage
lumps: a stage's entire input is written into the in-memory data channel before the bundle starts
(one concatenated copy), the stage's entire output piles up in the channel until the bundle ends,
and a GroupByKey's input is decoded into a Python dict of every key and value. A one-shot build
therefore grew ~14 MB of RSS per input MB before tokenizer training.

``install`` changes where that data lives, not what the runner does with it (same stages, same
bundles, same elements, in the same order within each buffer):

* **Buffers spill** (``pipelines.localrunner.spill_buffers``). A runner buffer (``ListBuffer``: a
  PCollection between stages; ``GroupingBuffer``: a GroupByKey's input) keeps its first
  ``buffer_bytes`` of encoded data in memory and appends the rest to an unlinked temporary file. A
  spilled GroupByKey writes each ``(encoded key, value)`` to one of 64 bucket files by a CRC of the
  key, and groups one bucket at a time when the consuming stage asks for it (a key's values keep
  their arrival order); its grouped output goes to disk too, in chunks.
* **Input streams in** (``pipelines.localrunner.spill_channel``). The in-memory data channel
  receives a stage's input as a lazy reference and reads one chunk at a time while the bundle
  consumes it (no concatenated copy).
* **Output streams out** (``pipelines.localrunner.spill_channel``). What a bundle writes goes into
  the runner's buffers as the SDK flushes it (every ~10 MB), not after the bundle ends, and a
  finished bundle's output streams are dropped: the runner caches every stage's bundle processor,
  which otherwise kept the last stream of each output with its C buffer (up to 16 MB) for the rest
  of the run (~70 MB at 6 MB of input). Worker processes (``--direct_num_workers N``) drop theirs
  too (``release_finished_streams``).
* **On disk when a step needs the memory.** ``to_disk`` moves what the buffers keep in memory to
  spill files at once (tokenizer training calls it: SentencePiece needs ~20 bytes per sample byte
  while the PCollections of later stages wait).

Files live under ``directory`` (default: the system temporary folder) and vanish when their
buffer is dropped (or the process ends: they are unlinked at creation;
``pipelines.localrunner.spill_files``). Spilled bytes are encoded already (the runner's coders), so
a spill is a write and a read of bytes; a spilled GroupByKey pays one extra encode and decode of
its values, which the runner mostly sees as length-prefixed bytes (``BytesCoder``).

Patches apache-beam 2.77.0 internals (``apache_beam.runners.portability.fn_api_runner.execution``
``ListBuffer`` / ``GroupingBuffer``, ``fn_runner.BundleManager``,
``apache_beam.runners.worker.data_plane.InMemoryDataChannel``,
``apache_beam.runners.worker.bundle_processor.DataOutputOperation``; ``README.md`` of this folder
lists them). ``tests/test_spill.py`` runs real pipelines with everything spilled and
``tests/test_localrunner_internals.py`` checks each patched method's signature: both fail if a Beam
upgrade moves these internals. Installed by ``pipelines.options.make_pipeline`` for local runs
(``--spill_mb -1``: not installed).
"""

from __future__ import annotations

import threading
from typing import Any

from pipelines.localrunner import spill_buffers, spill_channel
from pipelines.localrunner.spill_buffers import NO_SPILL, in_memory, list_buffer_file, start_spill
from pipelines.localrunner.spill_files import (
    DEFAULT_BUFFER_MB,
    Chunk,
    SpillFile,
    SpillSettings,
    resolve,
    set_settings,
    settings,
    spilled,
)

__all__ = ["DEFAULT_BUFFER_MB", "Chunk", "SpillFile", "SpillSettings", "install", "release_finished_streams",
           "resolve", "settings", "spilled", "to_disk", "uninstall"]

_NO_SPILL = NO_SPILL  # (the name tests/test_spill.py reads: a GroupingBuffer that stays in memory)
_lock = threading.Lock()
_originals: list[tuple[Any, str, Any]] = []


def to_disk() -> int:
    """Move what the runner's buffers hold in memory (each up to ``buffer_bytes``) to spill files,
    except the buffers a stage has started to read; returns the bytes moved. For a step that is about
    to need memory of its own (tokenizer training: SentencePiece holds ~20 bytes per sample byte):
    the PCollections waiting for later stages wait on disk meanwhile. The same elements in the same
    order; later appends to a buffer spill past its limit as before. Does nothing where the runner's
    buffers are not in this process (a worker process) or spilling is off (``--spill_mb -1``)."""
    if settings() is None:
        return 0
    from apache_beam.runners.portability.fn_api_runner.fn_runner import BundleManager

    moved = 0
    with BundleManager._lock:  # the runner appends a running bundle's outputs under this lock
        for buf in list(in_memory):
            if getattr(buf, "_grouped_output", None) or getattr(buf, "cleared", False):
                continue  # being read (its parts are out), or done
            if hasattr(buf, "_table"):  # a GroupingBuffer: its table goes to bucket files
                if buf.__dict__.get("_sf_spill") is None and buf._table:
                    held = buf.__dict__.get("_sf_held", 0)
                    if start_spill(buf) is not NO_SPILL:  # (no value coder found: it stays in memory)
                        moved += held
            else:
                items = buf._inputs
                for i, item in enumerate(items):
                    if type(item) is bytes and item:
                        items[i] = list_buffer_file(buf).append(item)
                        moved += len(item)
            in_memory.discard(buf)
    return moved


def _targets() -> list[tuple[Any, str, Any]]:
    """(class, method, replacement) of every patch; AttributeError or KeyError on a Beam without these
    classes or methods."""
    return spill_buffers.targets() + spill_channel.targets()


def install(settings: SpillSettings | None = None) -> None:
    """Spill and stream the local runner's data with ``settings`` (the defaults when None).

    Idempotent; a second call changes the settings. Process-wide: every FnApiRunner of this
    process runs with it until ``uninstall``.
    """
    with _lock:
        if not _originals:
            for owner, name, replacement in _targets():
                _originals.append((owner, name, owner.__dict__[name]))
                setattr(owner, name, replacement)
        set_settings(settings or SpillSettings())


def uninstall() -> None:
    """Put Beam's own methods back. Between runs only: a buffer that holds chunks needs the patches."""
    with _lock:
        set_settings(None)
        while _originals:
            owner, name, original = _originals.pop()
            setattr(owner, name, original)


def release_finished_streams() -> None:
    """In an SDK worker process (``--direct_num_workers N``, ``pipelines.localrunner.sdkworker``), where the
    runner's buffers do not live: only drop each finished bundle's output streams, for the
    process's life. Idempotent."""
    from apache_beam.runners.worker.bundle_processor import DataOutputOperation

    with _lock:
        current = DataOutputOperation.__dict__["finish"]
        if not getattr(current, "drops_stream", False):
            DataOutputOperation.finish = spill_channel.wrap_output_finish(current)
