"""Bounded memory for Beam's local runner: stage data spilled to disk and streamed through bundles.

Beam's in-process ``FnApiRunner`` keeps every PCollection that crosses a fused-stage boundary in
the launching process until the stages that read it have run, and it moves data in whole-stage
lumps: a stage's entire input is written into the in-memory data channel before the bundle starts
(one concatenated copy), the stage's entire output piles up in the channel until the bundle ends,
and a GroupByKey's input is decoded into a Python dict of every key and value. A one-shot build
therefore grew ~14 MB of RSS per input MB before tokenizer training (issue #16, item 5).

``install`` changes where that data lives, not what the runner does with it (same stages, same
bundles, same elements, in the same order within each buffer):

* **Buffers spill.** A runner buffer (``ListBuffer``: a PCollection between stages;
  ``GroupingBuffer``: a GroupByKey's input) keeps its first ``buffer_bytes`` of encoded data in
  memory and appends the rest to an unlinked temporary file. A spilled GroupByKey writes each
  ``(encoded key, value)`` to one of 64 bucket files by a CRC of the key, and groups one bucket at a
  time when the consuming stage asks for it (a key's values keep their arrival order); its grouped
  output goes to disk too, in chunks.
* **Input streams in.** The in-memory data channel receives a stage's input as a lazy reference and
  reads one chunk at a time while the bundle consumes it (no concatenated copy).
* **Output streams out.** What a bundle writes goes into the runner's buffers as the SDK flushes it
  (every ~10 MB), not after the bundle ends, and a finished bundle's output streams are dropped:
  the runner caches every stage's bundle processor, which otherwise kept the last stream of each
  output with its C buffer (up to 16 MB) for the rest of the run (~70 MB at 6 MB of input).
  Worker processes (``--direct_num_workers N``) drop theirs too (``release_finished_streams``).
* **On disk when a step needs the memory.** ``to_disk`` moves what the buffers keep in memory to
  spill files at once (tokenizer training calls it: SentencePiece needs ~20 bytes per sample byte
  while the PCollections of later stages wait).

Files live under ``directory`` (default: the system temporary folder) and vanish when their
buffer is dropped (or the process ends: they are unlinked at creation). Spilled bytes are
encoded already (the runner's coders), so a spill is a write and a read of bytes; a spilled
GroupByKey pays one extra encode and decode of its values, which the runner mostly sees as
length-prefixed bytes (``BytesCoder``).

Patches Beam 2.77 internals (``apache_beam.runners.portability.fn_api_runner``, the in-memory data
channel); ``tests/test_spill.py`` runs real pipelines with everything spilled and fails if a Beam
upgrade moves these internals. Installed by ``pipelines.options.make_pipeline`` for local runs.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import threading
import weakref
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pipelines.localrunner.heap import release_free_memory

DEFAULT_BUFFER_MB = 32
_BUCKETS = 64  # files of a spilled GroupByKey; grouping holds one at a time
_BUCKET_WRITE = 64 << 10  # bytes a bucket gathers before it is appended to its file
_CHUNK = 8 << 20  # bytes of grouped output per chunk handed to a bundle
_TRIM_AFTER = 16 << 20  # bytes a bundle moved (in + out) past which the C heap's free pages are returned


@dataclass(frozen=True)
class SpillSettings:
    """``buffer_bytes``: encoded bytes a runner buffer keeps in memory before the rest goes to disk
    (0: everything spills); ``directory``: where spill files go (None: the system temporary folder)."""

    buffer_bytes: int = DEFAULT_BUFFER_MB << 20
    directory: str | None = None


_settings: SpillSettings | None = None
_lock = threading.Lock()
_written = {"bytes": 0, "chunks": 0}  # what went to spill files in this process (``spilled``)
_originals: list[tuple[Any, str, Any]] = []
_local = threading.local()  # .bundle: (bundle context manager, expected outputs) of the running bundle
_in_memory: weakref.WeakSet = weakref.WeakSet()  # buffers holding encoded data in memory (``to_disk``)


def settings() -> SpillSettings | None:
    """The active settings (None: not installed)."""
    return _settings


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


# ------------------------------------------------------------------ ListBuffer


def _spill_or_keep(buf: Any, data: bytes) -> Any:
    """What a buffer stores for ``data``: the bytes while it holds less than the limit, else a chunk."""
    s = _settings
    if s is None:
        return data
    held = buf.__dict__.get("_sf_held", 0) + len(data)
    if held <= s.buffer_bytes:
        buf._sf_held = held
        _in_memory.add(buf)
        return data
    file = buf.__dict__.get("_sf_file")
    if file is None:
        file = buf._sf_file = SpillFile(s.directory)
    return file.append(data)


def _list_append(self: Any, element: bytes) -> None:
    if self.cleared:
        raise RuntimeError("Trying to append to a cleared ListBuffer.")
    if self._grouped_output:
        raise RuntimeError("ListBuffer append after read.")
    self._inputs.append(_spill_or_keep(self, element))


def _list_iter(self: Any) -> Iterator[bytes]:
    if self.cleared:
        raise RuntimeError("Trying to iterate through a cleared ListBuffer.")
    return (resolve(x) for x in self._inputs)


def _wrap_list_partition(original):
    def partition(self: Any, n: int) -> list[list[Any]]:
        if len(self._inputs) < n and any(type(x) is Chunk for x in self._inputs):
            # Fewer chunks than parts: Beam re-encodes element by element, from the bytes.
            self._inputs = [resolve(x) for x in self._inputs]
        return original(self, n)  # slices of the items: a chunk is read where it is sent
    return partition


def _wrap_list_extend(original):
    def extend(self: Any, extra: Any) -> None:
        original(self, extra)
        self._sf_held = self.__dict__.get("_sf_held", 0) + extra.__dict__.get("_sf_held", 0)
    return extend


def _wrap_list_copy(original):
    def copy(self: Any) -> Any:
        new = original(self)  # shares the items: bytes and chunks alike
        new._sf_held = self.__dict__.get("_sf_held", 0)
        return new
    return copy


def _wrap_list_clear(original):
    def clear(self: Any) -> None:
        original(self)
        self._sf_held = 0
        self._sf_file = None
    return clear


# ------------------------------------------------------------------ GroupingBuffer


class _Buckets:
    """A spilled GroupByKey input: ``(encoded key, value)`` records in bucket files by a CRC of the key."""

    def __init__(self, value_coder_impl: Any, directory: str | None):
        from apache_beam.coders.coder_impl import create_OutputStream

        self._new_stream = create_OutputStream
        self._value = value_coder_impl
        self._directory = directory
        self._files: list[SpillFile | None] = [None] * _BUCKETS
        self._chunks: list[list[Chunk]] = [[] for _ in range(_BUCKETS)]
        self._pending = [create_OutputStream() for _ in range(_BUCKETS)]

    def add(self, key: bytes, value: Any) -> None:
        b = zlib.crc32(key) % _BUCKETS
        out = self._pending[b]
        out.write_var_int64(len(key))
        out.write(key)
        self._value.encode_to_stream(value, out, True)
        if out.size() >= _BUCKET_WRITE:
            self._flush(b)

    def _flush(self, b: int) -> None:
        file = self._files[b]
        if file is None:
            file = self._files[b] = SpillFile(self._directory)
        self._chunks[b].append(file.append(self._pending[b].get()))
        self._pending[b] = self._new_stream()

    def entries(self) -> Iterator[tuple[bytes, Any]]:
        """Every record, bucket by bucket, in arrival order within a bucket (the files stay)."""
        for table in self.tables(release=False):
            for key, values in table.items():
                for v in values:
                    yield key, v

    def tables(self, release: bool = True) -> Iterator[dict[bytes, list[Any]]]:
        """One bucket at a time: encoded key -> its values in arrival order; with ``release``, a
        bucket's files are dropped once it has been read."""
        from apache_beam.coders.coder_impl import create_InputStream

        for b in range(_BUCKETS):
            parts = [c.read() for c in self._chunks[b]] + [self._pending[b].get()]
            if release:
                self._chunks[b], self._files[b], self._pending[b] = [], None, self._new_stream()
            table: dict[bytes, list[Any]] = {}
            for data in parts:
                stream = create_InputStream(data)
                while stream.size() > 0:
                    key = stream.read(stream.read_var_int64())
                    value = self._value.decode_from_stream(stream, True)
                    values = table.get(key)
                    if values is None:
                        table[key] = [value]
                    else:
                        values.append(value)
            if table:
                yield table


_NO_SPILL = object()  # a GroupingBuffer whose value coder could not be found: it stays in memory


def _value_coder_impl(buf: Any) -> Any:
    """The coder of the values the table holds (a windowed value when the windowing is not default)."""
    from apache_beam import coders

    kv = getattr(buf._pre_grouped_coder, "wrapped_value_coder", None)
    components = kv._get_component_coders() if kv is not None else ()
    if len(components) != 2:
        return None
    value_coder = components[1]
    if not buf._windowing.is_default():
        value_coder = coders.WindowedValueCoder(value_coder, buf._pre_grouped_coder.window_coder)
    return value_coder.get_impl()


def _start_spill(buf: Any) -> Any:
    """Turn a GroupingBuffer's in-memory table into buckets (or mark it as one that stays in memory)."""
    impl = _value_coder_impl(buf)
    if impl is None:
        buf._sf_spill = _NO_SPILL
        return _NO_SPILL
    buckets = buf._sf_spill = _Buckets(impl, _settings.directory if _settings else None)
    for key, values in buf._table.items():
        for v in values:
            buckets.add(key, v)
    buf._table.clear()
    return buckets


def _wrap_grouping_append(original):
    def append(self: Any, elements_data: bytes) -> None:
        if self._grouped_output:
            raise RuntimeError("Grouping table append after read.")
        spill = self.__dict__.get("_sf_spill")
        if spill is None:
            s = _settings
            if s is None:
                return original(self, elements_data)
            held = self.__dict__.get("_sf_held", 0) + len(elements_data)
            if held <= s.buffer_bytes:
                self._sf_held = held
                _in_memory.add(self)
                return original(self, elements_data)
            spill = _start_spill(self)
        if spill is _NO_SPILL:
            return original(self, elements_data)
        from apache_beam.coders.coder_impl import create_InputStream

        stream = create_InputStream(elements_data)
        coder_impl = self._pre_grouped_coder.get_impl()
        key_impl = self._key_coder.get_impl()
        trivial = self._windowing.is_default()
        while stream.size() > 0:  # decoded as Beam's own append decodes them, into the buckets
            wkv = coder_impl.decode_from_stream(stream, True)
            key, value = wkv.value
            spill.add(key_impl.encode(key), value if trivial else wkv.with_value(value))
    return append


def _grouped_key_values(buf: Any):
    """Beam's ``GroupingBuffer.partition`` rule for one key's output: (key, values) -> windowed KVs."""
    from apache_beam.transforms import trigger
    from apache_beam.transforms.window import GlobalWindow, GlobalWindows
    from apache_beam.utils import windowed_value

    if buf._windowing.is_default():
        globally_window = GlobalWindows.windowed_value(
            None, timestamp=GlobalWindow().max_timestamp(),
            pane_info=windowed_value.PaneInfo(is_first=True, is_last=True,
                                              timing=windowed_value.PaneInfoTiming.ON_TIME,
                                              index=0, nonspeculative_index=0)).with_value
        return lambda key, values: [globally_window((key, values))]
    return trigger.create_trigger_driver(buf._windowing, True).process_entire_key


def _wrap_grouping_partition(original):
    def partition(self: Any, n: int) -> list[list[Any]]:
        spill = self.__dict__.get("_sf_spill")
        if not _spilled(spill) or self._grouped_output:
            return original(self, n)
        from apache_beam.coders.coder_impl import create_OutputStream

        windowed_key_values = _grouped_key_values(self)
        coder_impl = self._post_grouped_coder.get_impl()
        key_impl = self._key_coder.get_impl()
        out_file = SpillFile(_settings.directory if _settings else None)
        parts: list[list[Any]] = [[] for _ in range(n)]
        count = 0
        out = create_OutputStream()
        for table in spill.tables():
            for key, values in table.items():
                for wkvs in windowed_key_values(key_impl.decode(key), values):
                    coder_impl.encode_to_stream(wkvs, out, True)
                if out.size() >= _CHUNK:
                    parts[count % n].append(out_file.append(out.get()))
                    count += 1
                    out = create_OutputStream()
        if out.size():
            parts[count % n].append(out_file.append(out.get()))
        self._grouped_output = parts
        return parts
    return partition


def _grouping_iter(self: Any) -> Iterator[bytes]:
    return (resolve(x) for x in itertools.chain(*self.partition(1)))


def _spilled(spill: Any) -> bool:
    return spill is not None and spill is not _NO_SPILL


def _entries(buf: Any) -> Iterator[tuple[bytes, Any]]:
    """A GroupingBuffer's records, wherever they are (a spilled one's table is empty); not consumed."""
    spill = buf.__dict__.get("_sf_spill")
    if _spilled(spill):
        yield from spill.entries()
    for key, values in buf._table.items():
        for v in values:
            yield key, v


def _wrap_grouping_extend(original):
    def extend(self: Any, input_buffer: Any) -> None:
        mine, theirs = self.__dict__.get("_sf_spill"), getattr(input_buffer, "_sf_spill", None)
        if not hasattr(input_buffer, "_table") or not (_spilled(mine) or _spilled(theirs)):
            return original(self, input_buffer)  # Beam's own (it ignores a ListBuffer)
        if mine is None:
            mine = _start_spill(self)
        for key, value in _entries(input_buffer):
            if mine is _NO_SPILL:
                self._table[key].append(value)
            else:
                mine.add(key, value)
    return extend


# ------------------------------------------------------------------ everything to disk, now


def to_disk() -> int:
    """Move what the runner's buffers hold in memory (each up to ``buffer_bytes``) to spill files,
    except the buffers a stage has started to read; returns the bytes moved. For a step that is about
    to need memory of its own (tokenizer training: SentencePiece holds ~20 bytes per sample byte):
    the PCollections waiting for later stages wait on disk meanwhile. The same elements in the same
    order; later appends to a buffer spill past its limit as before. Does nothing where the runner's
    buffers are not in this process (a worker process) or spilling is off (``--spill_mb -1``)."""
    if _settings is None:
        return 0
    from apache_beam.runners.portability.fn_api_runner.fn_runner import BundleManager

    moved = 0
    with BundleManager._lock:  # the runner appends a running bundle's outputs under this lock
        for buf in list(_in_memory):
            if getattr(buf, "_grouped_output", None) or getattr(buf, "cleared", False):
                continue  # being read (its parts are out), or done
            if hasattr(buf, "_table"):  # a GroupingBuffer: its table goes to bucket files
                if buf.__dict__.get("_sf_spill") is None and buf._table:
                    held = buf.__dict__.get("_sf_held", 0)
                    if _start_spill(buf) is not _NO_SPILL:  # (no value coder found: it stays in memory)
                        moved += held
            else:
                items = buf._inputs
                for i, item in enumerate(items):
                    if type(item) is bytes and item:
                        file = buf.__dict__.get("_sf_file")
                        if file is None:
                            file = buf._sf_file = SpillFile(_settings.directory)
                        items[i] = file.append(item)
                        moved += len(item)
            _in_memory.discard(buf)
    return moved


# ------------------------------------------------------------------ the in-memory data channel


class _LazyInput:
    """A stage's input in the in-memory channel: read chunk by chunk while the bundle consumes it."""

    __slots__ = ("instruction_id", "transform_id", "items")

    def __init__(self, instruction_id: str, transform_id: str, items: Any):
        self.instruction_id, self.transform_id, self.items = instruction_id, transform_id, items

    def elements(self) -> Iterator[Any]:
        from apache_beam.portability.api import beam_fn_api_pb2

        for item in self.items or ():
            data = resolve(item)
            _count(len(data))
            if data:
                yield beam_fn_api_pb2.Elements.Data(instruction_id=self.instruction_id,
                                                    transform_id=self.transform_id, data=data)


def _wrap_send_input(original):
    def _send_input_to_worker(self: Any, process_bundle_id: str, read_transform_id: str, byte_streams: Any) -> None:
        from apache_beam.runners.worker.data_plane import InMemoryDataChannel

        conn = self._worker_handler.data_conn
        if _settings is not None and isinstance(conn, InMemoryDataChannel):
            conn.inverse()._inputs.append(_LazyInput(process_bundle_id, read_transform_id, byte_streams))
            return
        original(self, process_bundle_id, read_transform_id, (resolve(x) for x in (byte_streams or ())))
    return _send_input_to_worker


def _wrap_input_elements(original):
    def input_elements(self: Any, instruction_id: str, unused_expected_inputs: Any, abort_callback: Any = None):
        if not any(type(e) is _LazyInput for e in self._inputs):
            yield from original(self, instruction_id, unused_expected_inputs, abort_callback)
            return
        from apache_beam.portability.api import beam_fn_api_pb2

        other = []
        for element in self._inputs:
            if element.instruction_id != instruction_id:
                other.append(element)
            elif type(element) is _LazyInput:
                yield from element.elements()
            elif isinstance(element, beam_fn_api_pb2.Elements.Timers):
                if not element.is_last:
                    yield element
            elif element.data or element.is_last:
                yield element
        self._inputs = other
    return input_elements


def _wrap_output_stream(original):
    def output_stream(self: Any, instruction_id: str, transform_id: str) -> Any:
        bundle = getattr(_local, "bundle", None)
        if bundle is None or transform_id not in bundle[1]:
            return original(self, instruction_id, transform_id)
        from apache_beam.runners.portability.fn_api_runner.fn_runner import BundleManager
        from apache_beam.runners.worker.data_plane import ClosableOutputStream

        context, expected_outputs = bundle

        def into_buffer(data: bytes) -> None:  # what the runner does with each output after the bundle
            _count(len(data))
            if data:
                with BundleManager._lock:
                    context.get_buffer(expected_outputs[transform_id], transform_id).append(data)

        return ClosableOutputStream.create(into_buffer, into_buffer, self._data_buffer_time_limit_ms)
    return output_stream


def _wrap_output_finish(original):
    def finish(self: Any) -> None:
        original(self)
        # The stream has handed its bytes over; without this the cached bundle processor keeps
        # it, and its C buffer (up to 16 MB: it flushes past 10 MB and keeps its capacity), for
        # the rest of the run: one per output of every fused stage. The next bundle sets a new one.
        self.output_stream = None
    finish.drops_stream = True  # type: ignore[attr-defined]
    return finish


def release_finished_streams() -> None:
    """In an SDK worker process (``--direct_num_workers N``, ``pipelines.localrunner.sdkworker``), where the
    runner's buffers do not live: only drop each finished bundle's output streams, for the
    process's life. Idempotent."""
    from apache_beam.runners.worker.bundle_processor import DataOutputOperation

    with _lock:
        current = DataOutputOperation.__dict__["finish"]
        if not getattr(current, "drops_stream", False):
            DataOutputOperation.finish = _wrap_output_finish(current)


def _count(n: int) -> None:
    _local.moved = getattr(_local, "moved", 0) + n


def _wrap_process_bundle(original):
    def process_bundle(self: Any, inputs: Any, expected_outputs: Any, fired_timers: Any,
                       expected_output_timers: Any, dry_run: bool = False) -> Any:
        if _settings is None or dry_run:
            return original(self, inputs, expected_outputs, fired_timers, expected_output_timers, dry_run)
        previous = getattr(_local, "bundle", None), getattr(_local, "moved", 0)
        _local.bundle, _local.moved = (self.bundle_context_manager, expected_outputs), 0
        try:
            return original(self, inputs, expected_outputs, fired_timers, expected_output_timers, dry_run)
        finally:
            # A big bundle decodes, sorts and converts its elements, then frees them; glibc and
            # pyarrow's pool keep the freed pages resident, so without this the process's RSS is
            # the high-water mark of every stage before, not of the current one (~7 ms for a
            # 600 MB heap). No cyclic collection here: a bundle leaves few cycles (13-1,869 objects
            # at 30 MB), and a full collection after each big bundle cost 1.7 % of a 100 MB
            # build's CPU (14 of them, ~160 ms each: it scans every object alive).
            if _local.moved > _TRIM_AFTER:
                release_free_memory(collect=False)
            _local.bundle, _local.moved = previous
    return process_bundle


# ------------------------------------------------------------------ install


def _targets() -> list[tuple[Any, str, Any]]:
    """(class, method, replacement) of every patch; AttributeError on a Beam without these methods."""
    from apache_beam.runners.portability.fn_api_runner import execution, fn_runner
    from apache_beam.runners.worker import bundle_processor, data_plane

    lb, gb = execution.ListBuffer, execution.GroupingBuffer
    out = bundle_processor.DataOutputOperation
    bm, ch = fn_runner.BundleManager, data_plane.InMemoryDataChannel
    return [
        (lb, "append", _list_append), (lb, "__iter__", _list_iter),
        (lb, "partition", _wrap_list_partition(lb.__dict__["partition"])),
        (lb, "extend", _wrap_list_extend(lb.__dict__["extend"])),
        (lb, "copy", _wrap_list_copy(lb.__dict__["copy"])), (lb, "clear", _wrap_list_clear(lb.__dict__["clear"])),
        (gb, "append", _wrap_grouping_append(gb.__dict__["append"])),
        (gb, "partition", _wrap_grouping_partition(gb.__dict__["partition"])),
        (gb, "__iter__", _grouping_iter), (gb, "extend", _wrap_grouping_extend(gb.__dict__["extend"])),
        (bm, "process_bundle", _wrap_process_bundle(bm.__dict__["process_bundle"])),
        (bm, "_send_input_to_worker", _wrap_send_input(bm.__dict__["_send_input_to_worker"])),
        (ch, "input_elements", _wrap_input_elements(ch.__dict__["input_elements"])),
        (ch, "output_stream", _wrap_output_stream(ch.__dict__["output_stream"])),
        (out, "finish", _wrap_output_finish(out.__dict__["finish"])),
    ]


def install(settings: SpillSettings | None = None) -> None:
    """Spill and stream the local runner's data with ``settings`` (the defaults when None).

    Idempotent; a second call changes the settings. Process-wide: every FnApiRunner of this
    process runs with it until ``uninstall``.
    """
    global _settings
    with _lock:
        if not _originals:
            for owner, name, replacement in _targets():
                _originals.append((owner, name, owner.__dict__[name]))
                setattr(owner, name, replacement)
        _settings = settings or SpillSettings()


def uninstall() -> None:
    """Put Beam's own methods back. Between runs only: a buffer that holds chunks needs the patches."""
    global _settings
    with _lock:
        _settings = None
        while _originals:
            owner, name, original = _originals.pop()
            setattr(owner, name, original)
