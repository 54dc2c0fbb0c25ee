"""The persistent, append-only dedupe index: Parquet parts of Sketches, lookups that read only what can match."""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipelines.dedupe.bloom import Bloom, BloomWire, bloom_shape
from pipelines.dedupe.sketch import COUNTERS, Sketch, node_part, old_node
from pipelines.intermediates import INDEX_META, PartCount, WriteParts, write_row_groups
from schemas.config import DedupeConfig
from schemas.errors import UserError
from shardforge.storage import (
    exists,
    expand_glob,
    is_within,
    join,
    open_read,
    read_text,
    redact_url,
    relative_url,
    resolve_url,
    unless_swept,
    write_text_atomic,
)

log = logging.getLogger("shardforge.dedupe")

INDEX_VERSION = 1
# Index part files hold at most this many entries, and about this many bytes of arrays (an entry's
# shingles are about the size of its text): the worker writing a part holds all of it at once.
INDEX_ENTRIES_PER_PART = 50_000
INDEX_PART_BYTES = 32_000_000
INDEX_ROW_GROUP = 2_000  # entries per Parquet row group of an index part (the unit a lookup reads)


def index_schema():
    """Arrow schema of the signature index's Parquet parts."""
    import pyarrow as pa

    return pa.schema([
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("exact_hash", pa.string(), nullable=False),
        pa.field("signature", pa.list_(pa.uint32()), nullable=False),
        pa.field("band_keys", pa.list_(pa.int64()), nullable=False),
        pa.field("shingles", pa.large_list(pa.uint32()), nullable=False),
        # Shingle-set size, so the LSH step can screen containment without reading shingles.
        # Absent from parts written before it; readers fall back to the shingles column.
        pa.field("num_shingles", pa.int32(), nullable=False),
    ], metadata={"shardforge.schema": f"dedupe-index/{INDEX_VERSION}"})


def index_params(cfg: DedupeConfig) -> dict[str, Any]:
    """What must match for an index to be comparable with this config."""
    return {"version": INDEX_VERSION, "ngram": cfg.ngram, "bands": cfg.bands, "rows": cfg.rows,
            "seed": cfg.seed, "near": cfg.near, "anchor_every": cfg.anchor_every}


# Parameters an index may differ in: it stays usable, with less recall (said in a warning).
SOFT_PARAMS = ("near", "anchor_every")


# One index entry as it crosses a shuffle: (doc_id, source, exact_hash, signature,
# band_keys, shingles), the arrays as the raw bytes of uint32 / int64 / uint32 values
# (Beam's native coder writes this tuple without pickle).
IndexRow = tuple[str, str, str, bytes, bytes, bytes]
INDEX_WRITE_OPTIONS: dict[str, Any] = {"compression": "zstd", "use_dictionary": ["source"]}  # see _index_rows_to_parquet


def index_row(s: Sketch) -> IndexRow:
    """The index entry of a (new) document's sketch."""
    return (s.doc_id, s.source, s.exact_hash, s.signature.tobytes(), s.band_keys.tobytes(), s.shingles.tobytes())


def _row_doc_id(row: IndexRow) -> str:
    return row[0]


def _row_bytes(row: IndexRow) -> int:
    """Bytes of an index entry's arrays (what a part's size adds up)."""
    return len(row[3]) + len(row[4]) + len(row[5])


def _sketch_bytes(s: Sketch) -> int:
    """``_row_bytes`` of the sketch's index entry, without building the entry."""
    return s.signature.nbytes + s.band_keys.nbytes + s.shingles.nbytes


def _list_column(chunks: list[bytes], dtype: type, large: bool = False):
    """A list<dtype> Arrow column from the raw bytes of each row's array: one concatenation, no per-row objects."""
    import pyarrow as pa

    width = np.dtype(dtype).itemsize
    lens = np.fromiter((len(c) // width for c in chunks), dtype=np.int64, count=len(chunks))
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64 if large else np.int32)
    values = pa.array(np.frombuffer(b"".join(chunks), dtype=dtype))
    return (pa.LargeListArray if large else pa.ListArray).from_arrays(pa.array(offsets), values)


def sketches_to_parquet(rows: Sequence[Sketch]) -> bytes:
    """One index part file of sketches (tests and tools; the pipeline writes ``IndexRow`` tuples)."""
    return _index_rows_to_parquet([index_row(s) if isinstance(s, Sketch) else s for s in rows])


def _index_rows_to_parquet(rows: Sequence[IndexRow], out: Any = None) -> bytes | None:
    """One index part file, its bytes (or written into ``out``, a file). The array columns are built
    from offsets and one buffer each (a list of numpy arrays made pyarrow allocate ~1 GB for the
    shingles column at 10 MB of text), one row group at a time: a writer holds one group's columns,
    and the same bytes as one table written with ``row_group_size=INDEX_ROW_GROUP``."""
    buf = io.BytesIO() if out is None else None
    schema = index_schema()
    # Small row groups: a lookup reads the probe columns of every group but the
    # full rows (shingles) only of the groups holding a match. Dictionary encoding only for the
    # source: ids, hashes, signatures and shingles are (nearly) all distinct, and building their
    # dictionaries until Parquet gives up made the write 4.7x slower and the file 16 % larger
    # (6,204 entries of real prose: 0.31 -> 0.07 CPU-s, 18.7 -> 16.1 MB).
    write_row_groups(buf if out is None else out, schema,
                     (_index_table(rows[start:start + INDEX_ROW_GROUP], schema)
                      for start in range(0, max(1, len(rows)), INDEX_ROW_GROUP)), **INDEX_WRITE_OPTIONS)
    return buf.getvalue() if buf is not None else None


def _index_table(rows: Sequence[IndexRow], schema):
    import pyarrow as pa

    doc_id, source, exact_hash, signature, band_keys, shingles = (list(c) for c in zip(*rows, strict=True)) \
        if rows else ([], [], [], [], [], [])
    cols = {
        "doc_id": pa.array(doc_id, pa.string()),
        "source": pa.array(source, pa.string()),
        "exact_hash": pa.array(exact_hash, pa.string()),
        "signature": _list_column(signature, np.uint32),
        "band_keys": _list_column(band_keys, np.int64),
        "shingles": _list_column(shingles, np.uint32, large=True),
        "num_shingles": pa.array([len(c) // 4 for c in shingles], pa.int32()),
    }
    return pa.table(cols, schema=schema)


def read_index_part(url: str, part: int = 0) -> Iterator[Sketch]:
    """Sketches (as old documents) of one index part file; ``part``: its number in the index's list,
    which their nodes name (``old_node``)."""
    import pyarrow.parquet as pq

    with open_read(url) as f:
        table = pq.read_table(f)
    yield from _table_sketches(table, part)


def _table_sketches(table, part: int) -> Iterator[Sketch]:
    cols = {name: table.column(name) for name in table.column_names}
    for i in range(table.num_rows):
        yield Sketch(
            old_node(cols["doc_id"][i].as_py(), part),
            cols["source"][i].as_py(),
            cols["exact_hash"][i].as_py(),
            cols["signature"][i].values.to_numpy(zero_copy_only=False).astype(np.uint32),
            cols["band_keys"][i].values.to_numpy(zero_copy_only=False).astype(np.int64),
            cols["shingles"][i].values.to_numpy(zero_copy_only=False).astype(np.uint32),
        )


# What a lookup probes an index part with: the exact set (sorted unique int64 keys, or a set of exact
# hashes), or a filter of it (``Bloom``: a superset, so a read may include an entry the later join by key
# drops; never one missing).
KeyProbe = np.ndarray | Bloom
HashProbe = set[str] | Bloom


def _members(probe: KeyProbe, values: np.ndarray) -> np.ndarray:
    """bool per int64 value: is it in the probe (or, for a filter, maybe)."""
    if isinstance(probe, Bloom):
        return probe.contains(values)
    if values.size == 0 or probe.size == 0:
        return np.zeros(values.size, dtype=bool)
    pos = np.minimum(np.searchsorted(probe, values), probe.size - 1)
    return probe[pos] == values


def _row_hits(lists, probe: KeyProbe) -> np.ndarray:
    """bool[rows]: which rows of a list<int64> column hold at least one key of ``probe``."""
    lengths = lists.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = lists.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    hit = np.concatenate([[0], np.cumsum(_members(probe, values))])
    ends = np.cumsum(lengths)
    return (hit[ends] - hit[ends - lengths]) > 0


_MASK64 = (1 << 64) - 1


def _halves(h: str) -> tuple[int, int]:
    """An exact hash as two 64-bit halves: a hex digest's (blake2b-128), or another string's blake2b."""
    try:
        x = int(h, 16)
    except ValueError:
        x = int.from_bytes(hashlib.blake2b(h.encode("utf-8"), digest_size=16).digest(), "big")
    return (x >> 64) & _MASK64, x & _MASK64


def _mixed(z: np.ndarray) -> np.ndarray:
    """uint64 values through splitmix64's finalizer."""
    with np.errstate(over="ignore"):
        z = z ^ (z >> np.uint64(30))
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


def _keys_of(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    return _mixed(_mixed(high) ^ low).view(np.int64)


def exact_keys(hashes: Sequence[str]) -> np.ndarray:
    """int64 keys of exact hashes (what a filter of them holds): both 64-bit halves of the digest (any
    other string: of its blake2b), mixed (splitmix64's finalizer) so that every bit counts and the
    filter's probes stay independent even for hashes that are not uniform (a filter assumes they are)."""
    halves = [_halves(h) for h in hashes]
    high = np.fromiter((a for a, _ in halves), dtype=np.uint64, count=len(halves))
    low = np.fromiter((b for _, b in halves), dtype=np.uint64, count=len(halves))
    return _keys_of(high, low)


_NIBBLE = np.full(256, 255, dtype=np.uint8)  # ASCII byte -> its hex digit's value (255: not a hex digit)
_NIBBLE[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16)
_NIBBLE[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16)


def column_exact_keys(column) -> np.ndarray:
    """``exact_keys`` of a string column: vectorized where every value is 32 hex digits (what the
    index holds), else value by value."""
    import pyarrow as pa

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(arr)
    if n and arr.null_count == 0 and pa.types.is_string(arr.type):
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset:arr.offset + n + 1]
        if offsets[-1] - offsets[0] == 32 * n and (np.diff(offsets) == 32).all():
            digits = _NIBBLE[np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]].reshape(n, 32)
            if not (digits == 255).any():
                high, low = np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.uint64)
                for j in range(16):
                    shift = np.uint64(4 * (15 - j))
                    high |= digits[:, j].astype(np.uint64) << shift
                    low |= digits[:, 16 + j].astype(np.uint64) << shift
                return _keys_of(high, low)
    return exact_keys(arr.to_pylist())


def _string_hits(column, wanted: HashProbe) -> np.ndarray:
    if isinstance(wanted, Bloom):
        return wanted.contains(column_exact_keys(column))
    values = column.to_pylist()
    return np.fromiter((v in wanted for v in values), bool, len(values))


def read_index_matches(url: str, *, hashes: HashProbe | None = None, band_keys: KeyProbe | None = None,
                       doc_ids: set[str] | None = None, part: int = 0) -> Iterator[Sketch]:
    """The entries of one index part that can matter to a batch of new documents, as old Sketches
    (``part``: as in ``read_index_part``).

    An entry is read if its exact hash is in ``hashes``, it shares a band key
    with ``band_keys`` (sorted unique int64, or a filter of them) or its doc_id is in ``doc_ids``.
    Only the probe columns of every row group are read, and the full rows of
    the groups holding a match. Memory: one row group at a time.
    """
    import pyarrow.parquet as pq

    probe = ((["exact_hash"] if hashes is not None else []) + (["band_keys"] if band_keys is not None else [])
             + (["doc_id"] if doc_ids is not None else []))
    with open_read(url) as f:
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=probe)
            mask = np.zeros(t.num_rows, dtype=bool)
            if hashes is not None:
                mask |= _string_hits(t.column("exact_hash"), hashes)
            if band_keys is not None:
                mask |= _row_hits(t.column("band_keys").combine_chunks(), band_keys)
            if doc_ids is not None:
                mask |= _string_hits(t.column("doc_id"), doc_ids)
            rows = np.flatnonzero(mask)
            if rows.size:
                yield from _table_sketches(pf.read_row_group(g).take(rows), part)


def index_bucket_entries(url: str, band_keys: KeyProbe, part: int = 0
                         ) -> Iterator[tuple[int, tuple[str, np.ndarray, int]]]:
    """``(band key, (old node, signature, shingle count))`` for every band key of ``band_keys`` (sorted
    unique int64, or a filter of them) an entry of one part holds (``part``: as in ``read_index_part``).

    What the LSH step needs of the old documents sharing a bucket with a new
    one: no shingles, no text (those are fetched later, only for the old
    documents that end up in a cluster).
    """
    import pyarrow.parquet as pq

    with open_read(url) as f:
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=["band_keys"])
            rows = np.flatnonzero(_row_hits(t.column("band_keys").combine_chunks(), band_keys))
            if not rows.size:
                continue
            size_col = "num_shingles" if "num_shingles" in pf.schema_arrow.names else "shingles"
            hit = pf.read_row_group(g, columns=["doc_id", "signature", size_col]).take(rows)
            nodes = [old_node(d, part) for d in hit.column("doc_id").to_pylist()]
            sizes = (hit.column(size_col).to_pylist() if size_col == "num_shingles" else
                     hit.column(size_col).combine_chunks().value_lengths().to_pylist())
            sig_col = hit.column("signature").combine_chunks()
            sigs = sig_col.flatten().to_numpy(zero_copy_only=False).astype(np.uint32)
            sig_len = sig_col.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
            sig_start = np.concatenate([[0], np.cumsum(sig_len)])
            key_col = t.column("band_keys").combine_chunks().take(rows)
            values = key_col.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
            row_of = np.repeat(np.arange(hit.num_rows), key_col.value_lengths().to_numpy(zero_copy_only=False))
            for j in np.flatnonzero(_members(band_keys, values)).tolist():
                r = int(row_of[j])
                yield int(values[j]), (nodes[r], sigs[sig_start[r]:sig_start[r + 1]].copy(), int(sizes[r]))


def index_exact_matches(url: str, hashes: HashProbe, part: int = 0) -> Iterator[tuple[str, str]]:
    """``(exact_hash, doc_id)`` of the entries of one part whose hash is in ``hashes`` (a set, or a filter
    of their ``exact_keys``; two columns read; ``part`` is not needed: the pairs name doc ids, not nodes)."""
    import pyarrow.parquet as pq

    with open_read(url) as f:
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=["exact_hash", "doc_id"])
            rows = np.flatnonzero(_string_hits(t.column("exact_hash"), hashes))
            if rows.size:
                hit = t.take(rows)
                yield from zip(hit.column("exact_hash").to_pylist(), hit.column("doc_id").to_pylist(), strict=True)


# Bits of a lookup's filter per new key (a power of two: 20 to 40). The false positive rate is then
# 7e-5 or less a key, so an indexed document (~57 keys for 3 KB of text: 28 bands and ~10 anchors a
# KB) is read for nothing about once in 250 runs at most; the filter is 2.5 to 5 bytes a key, where
# the keys themselves (int64, then sorted unique) held 8, and more while being sorted.
PROBE_BITS_PER_KEY = 20
_ADD_CHUNK = 1 << 16  # keys added to the filter at a time (its temporaries: ~40 bytes a key)


def _raw_keys(chunk: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(chunk), dtype=np.int64)


def key_filter(elements: Iterable[bytes | str], bits_per_key: int = PROBE_BITS_PER_KEY,
               max_bytes: int | None = None, hashes: bool = False) -> BloomWire:
    """A filter of every key of ``elements`` (iterated twice: counted, then added), sized for the
    count, at most ``max_bytes``: raw int64 keys (bytes), or with ``hashes`` exact hashes (one
    ``exact_keys`` key each, computed a chunk at a time). Holds the filter and one chunk, not the keys."""
    size = (lambda e: 1) if hashes else (lambda e: len(e) // 8)
    keys_of = exact_keys if hashes else _raw_keys
    bloom = Bloom.empty(*bloom_shape(sum(map(size, elements)), bits_per_key, max_bytes))
    chunk: list = []
    held = 0
    for e in elements:
        chunk.append(e)
        held += size(e)
        if held >= _ADD_CHUNK:
            bloom.add(keys_of(chunk))
            chunk, held = [], 0
    if chunk:
        bloom.add(keys_of(chunk))
    return bloom.to_wire()


class KeyFilter(beam.PTransform):
    """PCollection[bytes: int64 keys], or with ``hashes`` PCollection[str: exact hashes] -> one
    ``BloomWire`` filter of all their keys (nothing when there are none): what an index lookup is
    given instead of the keys. Every worker reading index parts holds it, so it is sized by bits per
    key (``PROBE_BITS_PER_KEY``), not by the keys' 8 bytes, and at most ``max_mb``
    (``dedupe.index_filter_mb``: past it, more false positives); one worker builds it from a stream
    of the keys. A lookup's hits then meet the new keys in a join by key, which drops the filter's
    false positives."""

    def __init__(self, max_mb: float | None = None, bits_per_key: int | None = None, hashes: bool = False) -> None:
        super().__init__()
        self.max_bytes = None if max_mb is None else max(1, int(max_mb * (1 << 20)))
        self.bits_per_key = PROBE_BITS_PER_KEY if bits_per_key is None else bits_per_key
        self.hashes = hashes

    def expand(self, keys: beam.PCollection) -> beam.PCollection:
        bits, max_bytes, hashes = self.bits_per_key, self.max_bytes, self.hashes
        return (keys
                | "Nonempty" >> beam.Filter(len)
                | "OneGroup" >> beam.Map(lambda k: (0, k))
                | "Gather" >> beam.GroupByKey()
                | "Build" >> beam.MapTuple(lambda _, elements: key_filter(elements, bits, max_bytes, hashes)))


def filter_probe(wire: BloomWire | None) -> Bloom | None:
    """A lookup's side input (``KeyFilter``'s output, None when it gave none) as the filter to probe."""
    return None if wire is None else Bloom.from_wire(wire)


def nodes_by_part(nodes: list[str]) -> dict[int, set[str]]:
    """Indexed documents' nodes (``old_node``) -> {part number: their doc ids}."""
    out: dict[int, set[str]] = {}
    for node in nodes:
        doc_id, part = node_part(node)
        out.setdefault(part, set()).add(doc_id)
    return out


def sketches_of_nodes(url: str, by_part: dict[int, set[str]], part: int) -> Iterator[Sketch]:
    """The Sketches of the indexed documents ``nodes_by_part`` names in part number ``part`` (a part naming
    none is not read)."""
    doc_ids = by_part.get(part)
    return read_index_matches(url, doc_ids=doc_ids, part=part) if doc_ids else iter(())


class IndexLookup(beam.DoFn):
    """``lookup(part_url, derive(side input), part number)`` for each index part (elements: ``(part number,
    url)``, the index's list enumerated), counting what it reads.

    ``derive`` turns the batch's side input (a ``KeyFilter`` of the new keys or hashes, or the old
    nodes) into the probe once per side input, not once per part. An empty side input (None, or
    an empty list) reads nothing.
    """

    def __init__(self, counter: str, derive: Any, lookup: Any) -> None:
        self.read = Metrics.counter(COUNTERS, counter)
        self.derive, self.lookup = derive, lookup
        self._side: Any = None
        self._probe: Any = None

    def process(self, part: tuple[int, str], side: Any) -> Iterator[Any]:
        if not side:
            return
        if side is not self._side:
            self._side, self._probe = side, self.derive(side)
        number, url = part
        for item in self.lookup(url, self._probe, number):
            self.read.inc()
            yield item


def index_parts(index_url: str, cfg: DedupeConfig) -> list[str]:
    """Part files of an existing index, after checking it was built with compatible parameters."""
    meta_url = join(index_url, INDEX_META)
    if not exists(meta_url):
        raise UserError(f"no dedupe index at {index_url} ({INDEX_META} missing)")
    meta = json.loads(read_text(meta_url))
    want = index_params(cfg)
    diff = {k: (meta.get(k), v) for k, v in want.items() if k not in SOFT_PARAMS and meta.get(k) != v}
    if diff:
        raise UserError(f"dedupe index {index_url} was built with other parameters (index, config): {diff}")
    if cfg.near and not meta.get("near"):
        raise UserError(f"dedupe index {index_url} has no signatures (built with near=false)")
    anchors = meta.get("anchor_every", 0)  # indexes written before anchors existed have none
    if cfg.near and anchors != cfg.anchor_every:
        log.warning("dedupe index %s was built with anchor_every %s and this build uses %s: a new document "
                    "contained in an indexed one (or the reverse) is found by the band keys only (less recall "
                    "on passages and truncated copies); set dedupe.anchor_every to %s to match it",
                    redact_url(index_url), anchors, cfg.anchor_every, anchors)
    if "parts" in meta:  # append-only index: parts of earlier indexes are listed, not copied
        return [resolve_url(index_url, ref) for ref in meta["parts"]]
    return expand_glob(join(index_url, "part-*.parquet"))


class WriteIndex(beam.PTransform):
    """Write this run's entries as new parts; index.json lists the old parts (by reference) and the new.

    The index is append-only: a run costs its own entries, not the size of the
    corpus before it. Old parts inside ``root`` (the corpus both indexes belong
    to) are referenced relative to this index's folder, so the corpus can be
    moved as a whole; parts elsewhere (another corpus's index) by full URL.
    """

    def __init__(self, url: str, cfg: DedupeConfig, old_parts: Sequence[str] = (), root: str | None = None,
                 sized_by: beam.PCollection | None = None) -> None:
        super().__init__()
        self.url, self.cfg, self.sized_by = url, cfg, sized_by
        self.old_refs = [relative_url(url, p) if root is not None and is_within(p, root) else p for p in old_parts]

    def expand(self, sketches: beam.PCollection) -> beam.PCollection:
        """``sketches``: PCollection[IndexRow], this run's entries."""
        # sized_by: every new document's Sketch (before dedupe), a count ready before the entries are
        # known, so routing runs in the stage that makes them instead of after a stored copy of them
        # (as WriteClean's sized_by); parts then hold at most the limits.
        basis, size = (sketches, _row_bytes) if self.sized_by is None else (self.sized_by, _sketch_bytes)
        parts = basis | "Parts" >> PartCount(INDEX_ENTRIES_PER_PART, size=size, size_per_part=INDEX_PART_BYTES)
        written = sketches | "WriteParts" >> WriteParts(self.url, "parquet", _index_rows_to_parquet, parts,
                                                         doc_id=_row_doc_id, stream=True)
        params, old_refs, url = index_params(self.cfg), self.old_refs, self.url

        def write_meta(names: list[str]) -> None:
            meta = {**params, "parts": old_refs + sorted(names)}
            text = json.dumps(meta, sort_keys=True) + "\n"
            unless_swept(lambda: write_text_atomic(join(url, INDEX_META), text, create=True), "dedupe index")

        # index.json is written last: an index without it is incomplete.
        return written | "AllParts" >> beam.combiners.ToList() | "WriteMeta" >> beam.Map(write_meta)
