"""The data job's intermediates: their names and Arrow schemas, and how their part files are written.

``clean/part-*.parquet``: documents after cleaning and dedupe (re-tokenize from here).
``tokenized/part-*.parquet``: one row per document, sentences as token-id lists
(repack starts here: new packing rules never redo cleaning, dedupe or tokenizing).
``rejects/part-*.jsonl``: every filtered, rejected and duplicate record with its reason.
``dedupe/index/``: the dedupe index (``index.json`` naming its Parquet parts: ``pipelines.dedupe.index``).

Part files are deterministic side outputs written through fsspec: records are routed to a fixed
set of part files by a content hash, sorted by doc_id inside each part, and written atomically, so
reruns produce the same files whatever Beam's bundling. (Beam's own file sinks name and order output
by bundle, and need runner-specific filesystems for s3://.)
"""


from __future__ import annotations

import dataclasses
import io
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa

from pipelines.coders import (
    TokenizedDocumentCoder,  # noqa: F401  (registers the coder)
    decode_document,
    encode_document,
)
from pipelines.metrics import SumPerBundle
from pipelines.records import Reject, TokenizedDocument, origin_key, position_text, stable_hash
from shardforge.console.redact import redact_text
from shardforge.storage import join, redact_url, unless_swept, write_bytes_atomic, write_stream_atomic

CLEAN_DIR = "clean"
TOKENIZED_DIR = "tokenized"
REJECTS_DIR = "rejects"
DEDUPE_INDEX_DIR = "dedupe/index"
INDEX_META = "index.json"  # the dedupe index's table of contents (its parts, its parameters)

CLEAN_SCHEMA = pa.schema([
    pa.field("doc_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("text", pa.large_string(), nullable=False),
    pa.field("url", pa.string()),
    pa.field("title", pa.string()),
    pa.field("date", pa.string()),
    # Added in clean/2 (additive): the language the clean stage detected and its score in [0, 1].
    pa.field("language", pa.string()),
    pa.field("language_score", pa.float64()),
], metadata={"shardforge.schema": "clean/2"})

TOKENIZED_SCHEMA = pa.schema([
    pa.field("doc_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("sentences", pa.list_(pa.list_(pa.int32())), nullable=False),
    pa.field("num_tokens", pa.int64(), nullable=False),
], metadata={"shardforge.schema": "tokenized/1"})


def part_name(index: int, ext: str) -> str:
    return f"part-{index:05d}.{ext}"


class ParquetSink:
    """A write-only file for ``pyarrow.parquet.ParquetWriter`` over another writer (an atomic
    upload's stream): pyarrow closes its sink when it finishes, the stream's owner closes it."""

    def __init__(self, f: Any):
        self._f, self._n, self.closed = f, 0, False

    def write(self, data: Any) -> int:
        self._f.write(data)
        self._n += len(data)
        return len(data)

    def tell(self) -> int:
        return self._n

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False


def size_runs(sizes: Iterable[int], limit: int, max_count: int | None = None) -> list[tuple[int, int]]:
    """Cut a sequence of records into consecutive runs ``[start, end)`` whose sizes sum to at most
    ``limit`` and that hold at most ``max_count`` records each; a record larger than the limit is a
    run of its own (every run holds at least one record). Shards of samples, row groups of parts."""
    runs: list[tuple[int, int]] = []
    start = total = 0
    i = -1
    for i, size in enumerate(sizes):
        full = (total + size > limit) or (max_count is not None and i - start >= max_count)
        if i > start and full:
            runs.append((start, i))
            start, total = i, 0
        total += size
    if i >= start:
        runs.append((start, i + 1))
    return runs


def write_row_groups(out: Any, schema, tables: Iterable[Any], **options: Any) -> None:
    """One Parquet file into the writable file ``out`` (zstd unless ``options`` say otherwise: pyarrow's
    ``ParquetWriter`` options): each of ``tables`` one row group.

    pyarrow's writer holds a row group's encoded columns until the group closes (a dictionary-encoded
    column its indices too), so a tokenized part written as one row group cost its worker ~25 bytes
    per token id on top of the records (~6.5 in row groups): row groups bounded in size bound that.
    An empty ``tables`` writes one empty row group (what ``write_table`` of an empty table writes)."""
    import pyarrow.parquet as pq

    with pq.ParquetWriter(ParquetSink(out), schema, **{"compression": "zstd", **options}) as writer:
        wrote = False
        for table in tables:
            writer.write_table(table, row_group_size=max(1, table.num_rows))
            wrote = True
        if not wrote:
            writer.write_table(schema.empty_table())


def parquet_bytes(rows: list[dict[str, Any]], schema) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows, schema=schema)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def jsonl_bytes(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def parts_for(count: int, per_part: int) -> int:
    """How many part files keep each at most ``per_part`` records (at least one)."""
    if per_part < 1:
        raise ValueError(f"per_part must be >= 1, got {per_part}")
    return max(1, math.ceil(count / per_part))


class PartCount(beam.PTransform):
    """Records -> a singleton PCollection: the fewest parts that keep every part within its limits:
    at most ``per_part`` records, and with ``size``, at most ``size_per_part`` of ``sum(size(record))``
    (text characters, bytes of arrays, ...). ``per_part=None`` limits the size only.

    A part file is written by one worker holding all of its records, so a
    fixed number of parts lets that worker's memory grow with the corpus;
    deriving the count from the totals bounds it by the limits.
    """

    def __init__(self, per_part: int | None = None, *, size: Callable[[Any], int] | None = None,
                 size_per_part: int | None = None):
        super().__init__()
        if per_part is None and size is None:
            raise ValueError("PartCount needs per_part, size, or both")
        if (size is None) != (size_per_part is None):
            raise ValueError("PartCount: size and size_per_part go together")
        for limit in (per_part, size_per_part):  # validate early, at pipeline construction
            if limit is not None:
                parts_for(0, limit)
        self.per_part, self.size, self.size_per_part = per_part, size, size_per_part

    def expand(self, records):
        per_part, size, size_per_part = self.per_part, self.size, self.size_per_part
        if size is None:
            count = records | "Count" >> beam.combiners.Count.Globally()
            return count | "Parts" >> beam.Map(lambda n: parts_for(n, per_part))

        def parts(totals: tuple[int, int]) -> int:
            n, total = totals
            by_size = parts_for(total, size_per_part)
            return by_size if per_part is None else max(by_size, parts_for(n, per_part))

        return (records
                | "Size" >> beam.ParDo(BundleTotals(size))
                | "Total" >> beam.CombineGlobally(sum_pairs)
                | "Parts" >> beam.Map(parts))


def BundleTotals(size: Callable[[Any], int]) -> SumPerBundle:
    """``(records, sum(size(record)))`` of a bundle's records: one pair per bundle, made when it ends.

    A pair per record went through two more steps per document (the pair, the global combine's
    key), each an element of Beam's; the sum is the same (``sum_pairs`` adds the bundles' pairs).
    Bundles with no records add nothing (the global combine's default is ``(0, 0)``)."""
    return SumPerBundle(lambda record: (None, (1, size(record))), keyed=False)


def sum_pairs(pairs: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """Element-wise sum of (records, size) pairs."""
    n = total = 0
    for a, b in pairs:
        n += a
        total += b
    return n, total


def _doc_id_attr(rec: Any) -> str:
    return rec.doc_id


class WriteParts(beam.PTransform):
    """Write records to `{prefix}/part-NNNNN.{ext}`: `parts` files, each sorted by doc_id.

    `parts` may be an int or a singleton side input (PCollection) holding one.
    `doc_id` gets a record's doc_id (default: its `.doc_id`; records that are
    plain tuples cross the shuffle with Beam's native coder). ``record_type``: the
    records' type, so the shuffle uses its registered coder (``pipelines.coders``)
    instead of pickle. ``stream``: ``to_bytes(records, file)`` writes the part into
    the file itself (instead of returning its bytes). ``codec``: ``(encode, decode)`` of a record
    and bytes: the records cross the shuffle as those bytes, decoded where the part is written (the
    local runner's grouping buffer decodes and encodes what it groups again: bytes cost it a copy).
    Emits the written file names.
    """

    def __init__(self, prefix: str, ext: str, to_bytes: Callable[..., Any], parts: Any,
                 doc_id: Callable[[Any], str] | None = None, record_type: Any = None, stream: bool = False,
                 codec: tuple[Callable[[Any], bytes], Callable[[bytes], Any]] | None = None):
        super().__init__()
        self.prefix, self.ext, self.to_bytes, self.parts = prefix, ext, to_bytes, parts
        self.doc_id = doc_id if doc_id is not None else _doc_id_attr
        self.record_type = record_type
        self.stream = stream
        self.codec = codec

    def expand(self, records):
        prefix, ext, to_bytes, doc_id, codec = self.prefix, self.ext, self.to_bytes, self.doc_id, self.codec

        def key(rec: Any, parts: int) -> tuple[int, Any]:
            return stable_hash("part", doc_id(rec)) % parts, rec if codec is None else codec[0](rec)

        stream = self.stream

        def write(kv: tuple[int, Iterable[Any]]) -> str:
            index, recs = kv
            if codec is not None:
                recs = map(codec[1], recs)
            ordered = sorted(recs, key=doc_id)
            del recs
            name = part_name(index, ext)
            url = join(prefix, name)
            if stream:  # to_bytes(records, file) streams the part out: no copy of it in memory
                unless_swept(lambda: write_stream_atomic(url, lambda f: to_bytes(ordered, f), create=True), f"part {name}")
            else:
                unless_swept(lambda: write_bytes_atomic(url, to_bytes(ordered), create=True), f"part {name}")
            return name

        parts = self.parts
        if isinstance(parts, int):
            route = beam.Map(key, parts)
        else:
            route = beam.Map(key, beam.pvalue.AsSingleton(parts))
        if codec is not None:
            route = route.with_output_types(beam.typehints.Tuple[int, bytes])
        elif self.record_type is not None:
            route = route.with_output_types(beam.typehints.Tuple[int, self.record_type])
        keyed = records | "Route" >> route
        return keyed | "Group" >> beam.GroupByKey() | "Write" >> beam.Map(write)


# Row groups of the Parquet intermediates, bounded in size (``write_row_groups``). A few percent
# larger files than one row group per part (a dictionary and statistics per group), and a writer
# that holds one group: ~1 MB of text or ~0.5M token ids, not a whole part (8M characters, or a
# packing group of up to ``PackingConfig.group_tokens`` ids: 75 MB at the default 4M).
CLEAN_ROW_GROUP_CHARS = 1 << 20
TOKENIZED_ROW_GROUP_IDS = 1 << 19
# Dictionary encoding only where values repeat: the text of every document is distinct, and a
# writer builds a dictionary of a column until Parquet gives up on it (half the clean write's CPU).
CLEAN_DICTIONARY_COLUMNS = ["source", "language"]


def write_documents_parquet(docs: list[Any], out: Any) -> None:
    """One clean part file, sorted documents in, written into the file ``out``, built column by column
    (no per-document dict copies of the text), in row groups of ~``CLEAN_ROW_GROUP_CHARS``."""
    import pyarrow as pa

    from pipelines.intermediates import CLEAN_SCHEMA

    def table(a: int, b: int):
        part = docs[a:b]
        return pa.Table.from_arrays([pa.array([getattr(d, f.name) for d in part], f.type) for f in CLEAN_SCHEMA],
                                    schema=CLEAN_SCHEMA)

    runs = size_runs((len(d.text) for d in docs), CLEAN_ROW_GROUP_CHARS)
    write_row_groups(out, CLEAN_SCHEMA, (table(a, b) for a, b in runs), use_dictionary=CLEAN_DICTIONARY_COLUMNS)


def _tokenized_table(docs: Sequence[TokenizedDocument]):
    """Tokenized documents as one Arrow table: the id lists go straight into flat int32 Arrow buffers
    (row dicts of Python lists, ``Table.from_pylist``, cost ~45 bytes per token on top of the documents)."""
    import numpy as np
    import pyarrow as pa

    from pipelines.intermediates import TOKENIZED_SCHEMA

    per_doc = np.fromiter((len(d.sentences) for d in docs), dtype=np.int64, count=len(docs))
    per_sent = np.fromiter((len(s) for d in docs for s in d.sentences), dtype=np.int64, count=int(per_doc.sum()))
    total = int(per_sent.sum())
    if total >= 2**31:  # list<int32> offsets are 32-bit (from_pylist failed here too)
        raise ValueError(f"a tokenized row group holds {total} tokens, more than 2**31")
    sents = [s for d in docs for s in d.sentences]
    if all(s.typecode == "H" for s in sents):  # the usual case: one join of the raw uint16 buffers
        ids = np.frombuffer(b"".join(sents), dtype=np.uint16).astype(np.int32)
    else:
        ids = np.fromiter(itertools.chain.from_iterable(sents), dtype=np.int32, count=total)
    doc_offsets = np.concatenate([[0], np.cumsum(per_doc)]).astype(np.int32)
    sent_offsets = np.concatenate([[0], np.cumsum(per_sent)]).astype(np.int32)
    sentences = pa.ListArray.from_arrays(pa.array(doc_offsets),
                                         pa.ListArray.from_arrays(pa.array(sent_offsets), pa.array(ids)))
    return pa.Table.from_arrays([
        pa.array([d.doc_id for d in docs], pa.string()),
        pa.array([d.source for d in docs], pa.string()),
        sentences.cast(TOKENIZED_SCHEMA.field("sentences").type),
        pa.array([d.num_tokens for d in docs], pa.int64()),
    ], schema=TOKENIZED_SCHEMA)


def write_tokenized_parquet(docs: Sequence[TokenizedDocument], out: Any) -> None:
    """One tokenized part file, sorted documents in, written into the file ``out`` in row groups of
    ~``TOKENIZED_ROW_GROUP_IDS`` token ids (a part holds a whole packing group)."""
    from pipelines.intermediates import TOKENIZED_SCHEMA

    runs = size_runs((sum(map(len, d.sentences)) for d in docs), TOKENIZED_ROW_GROUP_IDS)
    write_row_groups(out, TOKENIZED_SCHEMA, (_tokenized_table(docs[a:b]) for a, b in runs))


def reject_row(r: Any, origins: Mapping[str, tuple[str, str]] | None = None) -> dict[str, Any]:
    """One reject-log entry (a Reject or a Duplicate) as JSON data, with the input file and the
    record's place in it (``file``, ``position``): the Reject's own, else found from its doc id in
    ``origins`` (``path_key`` -> (path, unit), what the readers read). URLs lose their credentials."""
    row = dataclasses.asdict(r)
    if row.get("language", "") is None:  # only language rejects carry a code
        del row["language"]
    if row.get("similarity", "") is None:  # only near duplicates carry a verified similarity
        del row["similarity"]
    if row.get("dup_of_index") is False:  # said only of a duplicate of an indexed (earlier) document
        del row["dup_of_index"]
    if not isinstance(r, Reject):
        row["bucket"] = "duplicate"
    file, position = row.pop("file", None), row.pop("position", None)
    if file is not None:  # the reader's words about a file (an error, a URL): no credentials in them
        row["snippet"] = redact_text(row["snippet"])
    elif origins is not None:
        key = origin_key(r.doc_id)
        origin = origins.get(key[0]) if key is not None else None
        if origin is not None:
            file, position = origin[0], position_text(origin[1], key[1])  # type: ignore[index]
    if file is not None:
        row["file"], row["position"] = redact_url(file), position
    return row


def rejects_to_jsonl(rejects: list[Any], origins: Mapping[str, tuple[str, str]] | None = None) -> bytes:
    """Reject-log lines (``reject_row``), in the order given."""
    return jsonl_bytes([reject_row(r, origins) for r in rejects])


def _row_doc_id(row: dict[str, Any]) -> str:
    return row["doc_id"]


def read_tokenized_parquet(url: str) -> list[TokenizedDocument]:
    """Rows of one tokenized part file."""
    import pyarrow.parquet as pq

    from shardforge.storage import open_read

    with open_read(url) as f:
        table = pq.read_table(f)
    out = []
    for row in table.to_pylist():
        sents = tuple(tuple(s) for s in row["sentences"])
        out.append(TokenizedDocument(row["doc_id"], row["source"], sents, int(row["num_tokens"])))
    return out


# What one intermediate part holds at most: its worker holds the part's records decoded, sorted and
# converted to Arrow at once (~4x the text of a clean part), so parts follow the corpus's size.
CLEAN_PART_CHARS = 8_000_000  # characters of text per clean part


def _text_chars(doc: Any) -> int:
    return len(doc.text)


# Records per reject-log part file: a part is written by one worker holding all of its records
# (~1.4 KB each while its JSONL is built, snippet included), so the part count grows with the
# rejects instead of being fixed: a worker holds ~140 MB, whatever the corpus size.
REJECTS_PER_PART = 100_000


class WriteRejectLog(beam.PTransform):
    """Rejects and duplicates -> ``{prefix}/part-NNNNN.jsonl`` (as many parts as ``per_part`` needs).

    origins: the readers' ``(path_key, (path, unit))`` pairs (``ReadSources``' ``origins``): every
    entry then names its input file and the record's place in it (``reject_row``). One pair per
    file read (and per nested archive member read as a stream): a side input the size of the listing.
    """

    def __init__(self, prefix: str, per_part: int = REJECTS_PER_PART, origins: Any = None):
        super().__init__()
        self.prefix, self.per_part, self.origins = prefix, per_part, origins

    def expand(self, records):
        if self.origins is None:
            parts = records | "RejectParts" >> PartCount(self.per_part)
            return records | "Write" >> WriteParts(self.prefix, "jsonl", rejects_to_jsonl, parts)
        rows = records | "Trace" >> beam.Map(reject_row, beam.pvalue.AsDict(self.origins))
        parts = rows | "RejectParts" >> PartCount(self.per_part)
        return rows | "Write" >> WriteParts(self.prefix, "jsonl", jsonl_bytes, parts, doc_id=_row_doc_id)


class WriteClean(beam.PTransform):
    """Kept documents -> the clean Parquet parts under ``output``, at most ``CLEAN_PART_CHARS`` characters of
    text a part (the worker writing one holds a bounded amount whatever the corpus size). Returns the
    written names (to wait on). The tokenized intermediate is written by the packing step, one part
    per packing group (``pipelines.corpus.shards.WriteCorpus``).

    ``sized_by``: the documents the part count is taken from (default: the kept documents). The build
    passes the clean documents before dedupe: a count that is ready before the kept documents are
    known lets the routing run in the stage that produces them, where a count of the kept documents
    themselves made the runner store every kept document until it was done. Parts then
    hold at most the target, fewer characters where many documents were duplicates.
    """

    def __init__(self, output: str, sized_by: Any = None):
        super().__init__()
        self.output, self.sized_by = output, sized_by

    def expand(self, kept):
        from pipelines.intermediates import CLEAN_DIR

        basis = kept if self.sized_by is None else self.sized_by
        parts = basis | "CleanParts" >> PartCount(size=_text_chars, size_per_part=CLEAN_PART_CHARS)
        return kept | "Write" >> WriteParts(join(self.output, CLEAN_DIR), "parquet", write_documents_parquet, parts,
                                             stream=True, codec=(encode_document, decode_document))
