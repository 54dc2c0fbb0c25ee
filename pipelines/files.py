"""Deterministic side outputs: Parquet intermediates and reject logs, written through fsspec.

Records are routed to a fixed set of part files by a content hash, sorted by
doc_id inside each part, and written atomically, so reruns produce the same
files whatever Beam's bundling. (Beam's own file sinks name and order output
by bundle, and need runner-specific filesystems for s3://.)
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable, Iterable
from typing import Any

import apache_beam as beam

from pipelines.records import Reject, TokenizedDocument, stable_hash
from schemas.storage import join, write_bytes_atomic


def part_name(index: int, ext: str) -> str:
    return f"part-{index:05d}.{ext}"


def parquet_bytes(rows: list[dict[str, Any]], schema) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows, schema=schema)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def jsonl_bytes(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


class WriteParts(beam.PTransform):
    """Write records to `{prefix}/part-NNNNN.{ext}`: `parts` files, each sorted by doc_id.

    `parts` may be an int or a singleton side input (PCollection) holding one.
    Emits the written file names.
    """

    def __init__(self, prefix: str, ext: str, to_bytes: Callable[[list[Any]], bytes], parts: Any):
        super().__init__()
        self.prefix, self.ext, self.to_bytes, self.parts = prefix, ext, to_bytes, parts

    def expand(self, records):
        prefix, ext, to_bytes = self.prefix, self.ext, self.to_bytes

        def key(rec: Any, parts: int) -> tuple[int, Any]:
            return stable_hash("part", rec.doc_id) % parts, rec

        def write(kv: tuple[int, Iterable[Any]]) -> str:
            index, recs = kv
            ordered = sorted(recs, key=lambda r: r.doc_id)
            name = part_name(index, ext)
            write_bytes_atomic(join(prefix, name), to_bytes(ordered))
            return name

        parts = self.parts
        if isinstance(parts, int):
            keyed = records | "Route" >> beam.Map(key, parts)
        else:
            keyed = records | "Route" >> beam.Map(key, beam.pvalue.AsSingleton(parts))
        return keyed | "Group" >> beam.GroupByKey() | "Write" >> beam.Map(write)


def documents_to_parquet(docs: list[Any]) -> bytes:
    from schemas.intermediate import CLEAN_SCHEMA

    return parquet_bytes([dataclasses.asdict(d) for d in docs], CLEAN_SCHEMA)


def tokenized_to_parquet(docs: list[TokenizedDocument]) -> bytes:
    from schemas.intermediate import TOKENIZED_SCHEMA

    rows = [{"doc_id": d.doc_id, "source": d.source, "sentences": [list(s) for s in d.sentences],
             "num_tokens": d.num_tokens} for d in docs]
    return parquet_bytes(rows, TOKENIZED_SCHEMA)


def rejects_to_jsonl(rejects: list[Any]) -> bytes:
    rows = []
    for r in rejects:
        row = dataclasses.asdict(r)
        if not isinstance(r, Reject):
            row["bucket"] = "duplicate"
        rows.append(row)
    return jsonl_bytes(rows)


def read_tokenized_parquet(url: str) -> list[TokenizedDocument]:
    """Rows of one tokenized part file."""
    import pyarrow.parquet as pq

    from schemas.storage import open_read

    with open_read(url) as f:
        table = pq.read_table(f)
    out = []
    for row in table.to_pylist():
        sents = tuple(tuple(s) for s in row["sentences"])
        out.append(TokenizedDocument(row["doc_id"], row["source"], sents, int(row["num_tokens"])))
    return out
