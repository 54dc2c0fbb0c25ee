"""Where the local runner's spilled bytes go: the spill settings, spill files and their chunks.

The state the spill's patches share (``pipelines.localrunner.spill`` describes the spill and installs
it): the active ``SpillSettings`` (None: not installed), the bytes written to spill files so far, and
``SpillFile`` / ``Chunk``, the encoded elements a runner buffer holds on disk instead of in memory.
A spill file is unlinked at creation: nothing shows in its folder, and its disk space is freed when
the last chunk referring to it is dropped (or the process ends). Imports nothing of Beam.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

DEFAULT_BUFFER_MB = 32


@dataclass(frozen=True)
class SpillSettings:
    """``buffer_bytes``: encoded bytes a runner buffer keeps in memory before the rest goes to disk
    (0: everything spills); ``directory``: where spill files go (None: the system temporary folder)."""

    buffer_bytes: int = DEFAULT_BUFFER_MB << 20
    directory: str | None = None


_settings: SpillSettings | None = None
_written = {"bytes": 0, "chunks": 0}  # what went to spill files in this process (``spilled``)


def settings() -> SpillSettings | None:
    """The active settings (None: not installed)."""
    return _settings


def set_settings(new: SpillSettings | None) -> None:
    """Make ``new`` the active settings (``spill.install`` / ``spill.uninstall``, under their lock)."""
    global _settings
    _settings = new


def spill_directory() -> str | None:
    """The folder of new spill files (None: the system temporary folder, also when not installed)."""
    s = _settings
    return s.directory if s is not None else None


def spilled() -> dict[str, int]:
    """Bytes and chunks written to spill files by this process so far (a run's share: the difference)."""
    return dict(_written)


class SpillFile:
    """An unlinked temporary file, appended to; its disk space is freed when the last chunk referring
    to it is dropped."""

    __slots__ = ("_file", "_fd", "size")

    def __init__(self, directory: str | None):
        self._file = tempfile.TemporaryFile(dir=directory, prefix="shardforge-spill-")
        self._fd = self._file.fileno()
        self.size = 0

    def append(self, data: bytes) -> Chunk:
        view = memoryview(data)
        start, done = self.size, 0
        while done < len(view):
            done += os.pwrite(self._fd, view[done:], start + done)
        self.size += len(view)
        _written["bytes"] += len(view)
        _written["chunks"] += 1
        return Chunk(self, start, len(view))

    def read(self, offset: int, length: int) -> bytes:
        data = os.pread(self._fd, length, offset)
        while len(data) < length:  # a short read of a regular file: read on
            more = os.pread(self._fd, length - len(data), offset + len(data))
            if not more:
                raise OSError(f"spill file truncated: {len(data)} of {length} bytes at {offset}")
            data += more
        return data


class Chunk:
    """Encoded elements in a spill file (what a buffer holds instead of the bytes)."""

    __slots__ = ("file", "offset", "length")

    def __init__(self, file: SpillFile, offset: int, length: int):
        self.file, self.offset, self.length = file, offset, length

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        return self.file.read(self.offset, self.length)


def resolve(item: Any) -> Any:
    """The bytes of a buffer item: a chunk is read back, anything else is returned as it is."""
    return item.read() if type(item) is Chunk else item
