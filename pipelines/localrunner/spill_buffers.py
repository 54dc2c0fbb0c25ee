"""The local runner's buffers, spilled: Beam's ``ListBuffer`` and ``GroupingBuffer`` patched.

A runner buffer (``apache_beam.runners.portability.fn_api_runner.execution.ListBuffer``: a
PCollection between fused stages; ``GroupingBuffer``: a GroupByKey's input) keeps its first
``buffer_bytes`` of encoded data in memory and appends the rest to a spill file
(``pipelines.localrunner.spill_files``). A spilled GroupByKey writes each ``(encoded key, value)``
to one of 64 bucket files by a CRC of the key, and groups one bucket at a time when the consuming
stage asks for it (a key's values keep their arrival order); its grouped output goes to disk too,
in chunks. Without spilling, Beam decodes a GroupByKey's whole input into a dict of every key and
value, and a stage's output stays in memory until the stages that read it have run.

``targets()`` names every method replaced here; ``pipelines.localrunner.spill`` installs them.
What a buffer holds in memory is registered in ``in_memory`` for ``spill.to_disk``.
"""

from __future__ import annotations

import itertools
import weakref
import zlib
from collections.abc import Iterator
from typing import Any

from pipelines.localrunner.spill_files import Chunk, SpillFile, resolve, settings, spill_directory

_BUCKETS = 64  # files of a spilled GroupByKey; grouping holds one at a time
_BUCKET_WRITE = 64 << 10  # bytes a bucket gathers before it is appended to its file
_CHUNK = 8 << 20  # bytes of grouped output per chunk handed to a bundle

in_memory: weakref.WeakSet = weakref.WeakSet()  # buffers holding encoded data in memory (``spill.to_disk``)


def list_buffer_file(buf: Any) -> SpillFile:
    """The spill file of a ListBuffer, made on its first spill (``clear`` drops it)."""
    file = buf.__dict__.get("_sf_file")
    if file is None:
        file = buf._sf_file = SpillFile(spill_directory())
    return file


# ------------------------------------------------------------------ ListBuffer


def _spill_or_keep(buf: Any, data: bytes) -> Any:
    """What a buffer stores for ``data``: the bytes while it holds less than the limit, else a chunk."""
    s = settings()
    if s is None:
        return data
    held = buf.__dict__.get("_sf_held", 0) + len(data)
    if held <= s.buffer_bytes:
        buf._sf_held = held
        in_memory.add(buf)
        return data
    return list_buffer_file(buf).append(data)


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


NO_SPILL = object()  # a GroupingBuffer whose value coder could not be found: it stays in memory


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


def start_spill(buf: Any) -> Any:
    """Turn a GroupingBuffer's in-memory table into buckets (or mark it as one that stays in memory:
    ``NO_SPILL``); returns which."""
    impl = _value_coder_impl(buf)
    if impl is None:
        buf._sf_spill = NO_SPILL
        return NO_SPILL
    buckets = buf._sf_spill = _Buckets(impl, spill_directory())
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
            s = settings()
            if s is None:
                return original(self, elements_data)
            held = self.__dict__.get("_sf_held", 0) + len(elements_data)
            if held <= s.buffer_bytes:
                self._sf_held = held
                in_memory.add(self)
                return original(self, elements_data)
            spill = start_spill(self)
        if spill is NO_SPILL:
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
        out_file = SpillFile(spill_directory())
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
    return spill is not None and spill is not NO_SPILL


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
            mine = start_spill(self)
        for key, value in _entries(input_buffer):
            if mine is NO_SPILL:
                self._table[key].append(value)
            else:
                mine.add(key, value)
    return extend


# ------------------------------------------------------------------ what install replaces


def targets() -> list[tuple[Any, str, Any]]:
    """(class, method, replacement) of every buffer patch; AttributeError or KeyError on a Beam
    without these classes or methods."""
    from apache_beam.runners.portability.fn_api_runner import execution

    lb, gb = execution.ListBuffer, execution.GroupingBuffer
    return [
        (lb, "append", _list_append), (lb, "__iter__", _list_iter),
        (lb, "partition", _wrap_list_partition(lb.__dict__["partition"])),
        (lb, "extend", _wrap_list_extend(lb.__dict__["extend"])),
        (lb, "copy", _wrap_list_copy(lb.__dict__["copy"])), (lb, "clear", _wrap_list_clear(lb.__dict__["clear"])),
        (gb, "append", _wrap_grouping_append(gb.__dict__["append"])),
        (gb, "partition", _wrap_grouping_partition(gb.__dict__["partition"])),
        (gb, "__iter__", _grouping_iter), (gb, "extend", _wrap_grouping_extend(gb.__dict__["extend"])),
    ]
