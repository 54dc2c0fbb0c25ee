"""Source readers: every layout, every compression, and bad input that must never crash.

Each input record gives exactly one Document or Reject; an unreadable file gives one Reject.
"""

from __future__ import annotations

import bz2
import collections
import gzip
import io
import json
import lzma
import os
import tarfile
import time
import tracemalloc

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline  # pytest collects names Test*
from apache_beam.testing.util import assert_that, equal_to
from forkserver import run_python

from pipelines.intermediates import WriteParts, rejects_to_jsonl
from pipelines.records import Document, Reject, make_doc_id
from pipelines.sources import ReadSource, read_file
from pipelines.sources.listing import list_inputs
from pipelines.sources.naming import id_name
from pipelines.sources.readers import Tally, read_stream
from pipelines.sources.streams import iter_json_array, iter_lines
from schemas.config import SourceConfig

COMPRESS = {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress,
            ".zst": lambda b: zstandard.ZstdCompressor().compress(b)}


def src(path, name: str = "ccnews", **kw) -> SourceConfig:
    return SourceConfig(name=name, input=str(path), **kw)


def read(path, **kw) -> list[Document | Reject]:
    return list(read_file(str(path), src(path, **kw)))


def outcome(recs) -> list[str]:
    return [("doc" if isinstance(r, Document) else f"{r.bucket}:{r.reason}") for r in recs]


def article(i: int) -> str:
    return f"Article number {i} tells a story about the town. It has several sentences. The end."


def tar_bytes(members: dict[str, bytes] | list[tuple[str, bytes]]) -> bytes:
    """A tar of (name, bytes) members, in order (a list may name a member twice)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in (members.items() if isinstance(members, dict) else members):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# ------------------------------------------------------------------ JSONL / JSON (CC-News)

def test_jsonl_every_line_is_accounted_for(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"text": "one"}\n'
                  b"\n"  # blank: not a record
                  b'{"maintext": "two", "title": "T", "url": "https://x", "date_publish": "2020-01-02"}\n'
                  b"{broken\n"
                  b'{"title": "no text"}\n'
                  b'["not", "an", "object"]\n'
                  b'{"text": "bad \xff\xfe bytes"}\n'
                  b'{"text": "no newline at the end"}')
    recs = read(p)
    assert outcome(recs) == ["doc", "doc", "rejected:malformed_json", "rejected:missing_text_field",
                             "rejected:missing_text_field", "doc", "doc"]
    # doc ids: the file's name under its input's folder (not where that is) and the line numbers
    assert [r.doc_id for r in recs] == [make_doc_id("ccnews", "a.jsonl", i) for i in (0, 2, 3, 4, 5, 6, 7)]
    two = recs[1]
    assert (two.text, two.title, two.url, two.date) == ("two", "T", "https://x", "2020-01-02")
    # invalid UTF-8 is kept (as surrogates) for the cleaning stage to reject or repair
    assert "\udcff" in recs[5].text
    assert read(p) == recs


def test_news_please_json_object_array_and_misnamed_jsonl(tmp_path):
    obj = {"maintext": "Main text.", "title": "A title", "url": "https://n.example/1",
           "date_publish": "2019-05-01 10:00:00", "source_domain": "n.example", "language": "en", "text": None}
    (tmp_path / "one.json").write_text(json.dumps(obj, indent=4))
    recs = read(tmp_path / "one.json")
    assert outcome(recs) == ["doc"]
    assert (recs[0].text, recs[0].url, recs[0].date) == ("Main text.", "https://n.example/1", "2019-05-01 10:00:00")

    tricky = [{"text": 'brackets ] } [ { and "quotes" and \\ backslashes, commas'}, {"text": "second"}, 7,
              {"maintext": "third"}]
    (tmp_path / "arr.json").write_text(" \n" + json.dumps(tricky, indent=2))
    recs = read(tmp_path / "arr.json")
    assert outcome(recs) == ["doc", "doc", "rejected:missing_text_field", "doc"]
    assert recs[0].text == tricky[0]["text"]

    (tmp_path / "lines.json").write_text("\n".join(json.dumps({"text": f"t{i}"}) for i in range(3)))
    assert [r.text for r in read(tmp_path / "lines.json")] == ["t0", "t1", "t2"]

    (tmp_path / "cut.json").write_text('[{"text": "ok"}, {"text": "never closed')
    assert outcome(read(tmp_path / "cut.json")) == ["doc", "rejected:malformed_json"]


def test_json_array_items_split_across_read_chunks():
    items = [{"text": "x" * 5000 + '"\\' + str(i)} for i in range(300)]
    data = json.dumps(items).encode()

    class Dribble(io.BytesIO):  # short reads, like a decompressor, to cross chunk edges everywhere
        def read(self, n=-1):
            return super().read(min(n, 777) if n > 0 else 777)

    stream = Dribble(data)
    assert stream.read(1) == b"["
    got = [json.loads(raw) for raw, _ in iter_json_array(stream, cap=1 << 20)]
    assert got == items


def test_json_arrays_one_after_another_and_what_follows_an_array(tmp_path):
    a, b = [{"text": f"a{i}"} for i in range(3)], [{"text": f"b{i}"} for i in range(40)]
    (tmp_path / "cat.json").write_text(json.dumps(a) + "\n" + json.dumps(b, indent=2) + "\n\n")
    recs, n_read = count_read(tmp_path / "cat.json")
    assert [r.text for r in recs] == [d["text"] for d in a + b] and n_read == 43
    assert [r.doc_id for r in recs] == [make_doc_id("ccnews", "cat.json", i) for i in range(43)]
    # anything else after an array is one more record, rejected with what it starts with
    (tmp_path / "tail.json").write_text(json.dumps(a) + ' {"text": "tail"} garbage')
    recs, n_read = count_read(tmp_path / "tail.json")
    assert outcome(recs) == ["doc"] * 3 + ["rejected:malformed_json"] and n_read == 4
    assert recs[-1].snippet.startswith('data after the JSON array (not read): {"text": "tail"}')


def test_pretty_printed_json_objects_one_after_another_are_one_record_each(tmp_path):
    objs = [{"maintext": f"article {i}", "title": f"t{i}"} for i in range(3)]
    (tmp_path / "cat.json").write_text("\n".join(json.dumps(o, indent=4) for o in objs) + "\n")
    recs, n_read = count_read(tmp_path / "cat.json")
    assert [(r.text, r.title) for r in recs] == [(o["maintext"], o["title"]) for o in objs] and n_read == 3
    # not a run of whole values (a cut one): line by line, as before
    (tmp_path / "cut.json").write_text(json.dumps(objs[0], indent=4) + "\n{\n")
    recs, n_read = count_read(tmp_path / "cut.json")
    assert set(outcome(recs)) == {"rejected:malformed_json"} and n_read == len(recs) == 5


def test_misnamed_jsonl_whose_first_line_is_over_the_cap_reads_on(tmp_path):
    lines = [json.dumps({"text": "x" * 5000})] + [json.dumps({"text": f"t{i}"}) for i in range(50)]
    for name in ("big.json", "big.jsonl"):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
        recs, n_read = count_read(tmp_path / name, max_record_bytes=1024)
        assert outcome(recs) == ["filtered:max_doc_bytes"] + ["doc"] * 50 and n_read == 51, name
    # one pretty-printed object over the cap is still one record
    (tmp_path / "huge.json").write_text(json.dumps({"text": "x" * 5000}, indent=2))
    assert outcome(read(tmp_path / "huge.json", max_record_bytes=1024)) == ["filtered:max_doc_bytes"]


def test_language_field_filter(tmp_path):
    p = tmp_path / "cc.jsonl"
    p.write_text("\n".join(json.dumps({"maintext": f"t{i}", "language": lang})
                           for i, lang in enumerate(["en", "de", "EN", None])))
    assert outcome(read(p)) == ["doc"] * 4
    assert outcome(read(p, languages=["en"])) == ["doc", "filtered:language_field", "doc", "doc"]


def test_iter_lines_caps_long_lines():
    data = b"short\n" + b"x" * 100 + b"\nlast"
    got = list(iter_lines(io.BytesIO(data), cap=10))
    assert got == [(b"short", 5, 0), (b"x" * 10, 100, 0), (b"last", 4, 0)]


def test_iter_lines_cuts_blank_runs_in_bulk_and_joins_back():
    data = b"a\n\n \n\t\r\nb\n\n" + b"\n" * 5000 + b"c \n  "
    got = list(iter_lines(io.BytesIO(data), cap=16))
    assert got == [(b"a", 1, 0), (b"\n \n\t\r", 5, 3), (b"b", 1, 0), (b"\n" * 16, 5000, 5001),
                   (b"c ", 2, 0), (b"  ", 2, 0)]
    # Joining the items with newlines restores the input (the delimited text reader relies on it).
    uncapped = list(iter_lines(io.BytesIO(data), cap=1 << 20))
    assert b"\n".join(raw for raw, _, _ in uncapped) == data
    assert sum(max(blank, 1) for _, _, blank in uncapped) == data.count(b"\n") + 1


# ------------------------------------------------------------------ Parquet

def test_parquet_streams_record_batches(tmp_path):
    n = 1000
    table = pa.table({"text": [article(i) if i % 100 else None for i in range(n)],
                      "title": [f"t{i}" for i in range(n)], "url": [f"https://u/{i}" for i in range(n)],
                      "domain": ["u"] * n, "date": pa.array(range(n), pa.int64())})
    pq.write_table(table, tmp_path / "cc.parquet", row_group_size=300)
    recs = read(tmp_path / "cc.parquet")
    assert len(recs) == n
    assert collections.Counter(outcome(recs)) == {"doc": 990, "rejected:missing_text_field": 10}
    assert recs[5].text == article(5) and recs[5].title == "t5" and recs[5].date == "5"
    assert [r.doc_id for r in recs] == [make_doc_id("ccnews", "cc.parquet", i) for i in range(n)]


def test_parquet_without_text_column_and_corrupt_file(tmp_path):
    pq.write_table(pa.table({"body": ["a", "b"]}), tmp_path / "x.parquet")
    assert outcome(read(tmp_path / "x.parquet")) == ["rejected:missing_text_field"] * 2
    assert outcome(read(tmp_path / "x.parquet", text_field="body")) == ["doc", "doc"]
    good = (tmp_path / "x.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(good[: len(good) // 2])
    assert outcome(read(tmp_path / "cut.parquet")) == ["rejected:corrupt_parquet"]


def test_arrow_ipc_files_read_as_their_parquet_would(tmp_path):
    """A Hugging Face dataset on disk (``save_to_disk``, the datasets cache) is Arrow IPC: it was one `binary`
    document. The stream format and the file format (Feather v2) give the rows a Parquet of the same table
    gives, batch by batch; no text column, a cut file and a compressed one are named as Parquet's are."""
    import pyarrow.feather as feather
    from realtext import news_documents

    docs = news_documents(limit=50)
    table = pa.table({"title": [f"t{i}" for i in range(50)], "text": docs, "url": [f"https://n/{i}" for i in range(50)],
                      "date": ["2017-12-01"] * 50})
    pq.write_table(table, tmp_path / "cc.parquet")
    want = [(r.text, r.title, r.url, r.date) for r in read(tmp_path / "cc.parquet")]
    with pa.OSFile(str(tmp_path / "data-00000-of-00001.arrow"), "wb") as f:
        with pa.ipc.new_stream(f, table.schema) as w:
            w.write_table(table, max_chunksize=16)
    feather.write_feather(table, tmp_path / "cc.feather", chunksize=16)
    for name in ("data-00000-of-00001.arrow", "cc.feather"):
        recs = read(tmp_path / name)
        assert [(r.text, r.title, r.url, r.date) for r in recs] == want, name
        assert [r.doc_id for r in recs] == [make_doc_id("ccnews", name, i) for i in range(50)]
    with pa.OSFile(str(tmp_path / "body.arrow"), "wb") as f:
        with pa.ipc.new_stream(f, pa.schema([("body", pa.string())])) as w:
            w.write_table(pa.table({"body": ["a", "b", "c"]}), max_chunksize=2)
    assert outcome(read(tmp_path / "body.arrow")) == ["rejected:missing_text_field"] * 3
    assert [r.text for r in read(tmp_path / "body.arrow", text_field="body")] == ["a", "b", "c"]
    good = (tmp_path / "cc.feather").read_bytes()
    (tmp_path / "cut.feather").write_bytes(good[: len(good) // 2])
    assert outcome(read(tmp_path / "cut.feather")) == ["rejected:corrupt_parquet"]
    (tmp_path / "z.arrow.gz").write_bytes(gzip.compress(good))
    assert [r.snippet for r in read(tmp_path / "z.arrow.gz")] == [
        "compressed arrow files are not supported (arrow compresses internally)"]


def test_parquet_and_arrow_files_whose_names_say_nothing_are_known_by_their_magic(tmp_path):
    """A Hugging Face hub cache's blobs/ hold its Parquet files under their hashes, and Spark leaves a
    _common_metadata (a Parquet footer, no rows) beside its parts: each was one `binary` reject. Read with the
    listed fingerprint checked, as a build reads."""
    import pyarrow.feather as feather
    from realtext import news_documents

    from pipelines.sources import read_input
    from pipelines.sources.rawfiles import fingerprint, list_raw_files

    table = pa.table({"text": news_documents(limit=6)})
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    pq.write_table(table, blobs / "9f8e7d6c")
    feather.write_feather(table, blobs / "a1b2c3d4")
    pq.write_metadata(table.schema, blobs / "_common_metadata")
    (blobs / "notes").write_text("PAR1 is no Parquet file when the text goes on.\n")
    want = [r.text for r in read(blobs / "9f8e7d6c")]
    assert want == table.column("text").to_pylist()
    source = src(blobs)
    for entry in list_inputs(str(blobs)):
        (listed,) = list_raw_files(entry[0])
        recs = list(read_input(entry, source, Tally(), fingerprint(listed)))
        name = entry[0].rsplit("/", 1)[1]
        if name == "_common_metadata":
            assert outcome(recs) == ["rejected:empty_file"]
        elif name == "notes":  # a text file starting with the same four letters: still text
            assert [r.text for r in recs] == ["PAR1 is no Parquet file when the text goes on.\n"], recs
        else:
            assert [r.text for r in recs] == want, name
    (blobs / "9f8e7d6c.gz").write_bytes(gzip.compress((blobs / "9f8e7d6c").read_bytes()))
    assert outcome(read(blobs / "9f8e7d6c.gz")) == ["rejected:binary"]  # compressed: the stream is what is read


def test_parquet_text_falls_back_per_row_and_says_why_a_row_has_none(tmp_path):
    pq.write_table(pa.table({"text": [None, "t1", None], "maintext": ["m0", "m1", None]}), tmp_path / "both.parquet")
    recs = read(tmp_path / "both.parquet")  # the first non-null field wins, as in a JSON record
    assert [getattr(r, "text", None) for r in recs] == ["m0", "t1", None]
    assert recs[2].snippet == "'text' and 'maintext' null in this row"
    pq.write_table(pa.table({"text": pa.array([1, 2], pa.int64())}), tmp_path / "ints.parquet")
    assert {(r.reason, r.snippet) for r in read(tmp_path / "ints.parquet")} == {
        ("missing_text_field", "column 'text' is int64, not text")}


# ------------------------------------------------------------------ OpenWebText archives

def owt_subset(prefix: str, n: int) -> bytes:
    return lzma.compress(tar_bytes({f"{prefix}/{i:04d}-{prefix}.txt": article(i).encode() for i in range(n)}))


def test_openwebtext_subset_and_outer_archive(tmp_path):
    sub = owt_subset("s1", 5)
    (tmp_path / "urlsf_subset00-1_data.xz").write_bytes(sub)
    recs = read(tmp_path / "urlsf_subset00-1_data.xz", name="openwebtext")
    assert outcome(recs) == ["doc"] * 5
    assert [r.text for r in recs] == [article(i) for i in range(5)]

    outer = tar_bytes({"openwebtext/urlsf_subset00-1_data.xz": sub,
                       "openwebtext/urlsf_subset00-2_data.xz": owt_subset("s2", 3)})
    (tmp_path / "openwebtext.tar.xz").write_bytes(lzma.compress(outer))
    recs = read(tmp_path / "openwebtext.tar.xz", name="openwebtext")
    assert outcome(recs) == ["doc"] * 8
    ids = [r.doc_id for r in recs]
    assert len(set(ids)) == 8  # member paths keep ids unique across inner archives
    assert ids == [r.doc_id for r in read(tmp_path / "openwebtext.tar.xz", name="openwebtext")]


def test_truncated_and_corrupt_archives(tmp_path):
    sub = owt_subset("s1", 40)
    (tmp_path / "urlsf_cut.xz").write_bytes(sub[: len(sub) // 2])
    recs = read(tmp_path / "urlsf_cut.xz")
    assert outcome(recs)[-1] == "rejected:truncated_archive"
    assert all(o == "doc" for o in outcome(recs)[:-1])

    plain = tar_bytes({f"{i}.txt": article(i).encode() for i in range(3)})
    (tmp_path / "cut.tar").write_bytes(plain[:1024 + 100])  # cut inside the second member's header
    assert outcome(read(tmp_path / "cut.tar")) == ["doc", "rejected:truncated_archive"]
    (tmp_path / "whole.tar").write_bytes(plain)
    assert outcome(read(tmp_path / "whole.tar")) == ["doc"] * 3

    (tmp_path / "bin.tar").write_bytes(tar_bytes({"a.txt": b"text", "b.txt": b"\x00\x01binary\x00"}))
    assert outcome(read(tmp_path / "bin.tar")) == ["doc", "rejected:binary"]


# ------------------------------------------------------------------ Stories / plain text

def test_text_one_document_per_file_and_delimited(tmp_path):
    (tmp_path / "s.txt").write_text("\ufeffOnce upon a time.\nThe end.\n")
    assert [r.text for r in read(tmp_path / "s.txt", name="stories")] == ["Once upon a time.\nThe end.\n"]
    (tmp_path / "many.txt").write_text("first story\nline two\n<|endoftext|>\nsecond\n<|endoftext|>\n\n"
                                       "<|endoftext|>\nthird\n")
    recs = read(tmp_path / "many.txt", name="stories", delimiter="<|endoftext|>")
    assert [r.text for r in recs] == ["first story\nline two", "second", "third"]
    assert len({r.doc_id for r in recs}) == 3
    # classic Mac line ends (a lone CR) split the same way
    (tmp_path / "mac.txt").write_bytes((tmp_path / "many.txt").read_bytes().replace(b"\n", b"\r"))
    mac = read(tmp_path / "mac.txt", name="stories", delimiter="<|endoftext|>")
    assert [r.text for r in mac] == [r.text for r in recs]
    # an empty delimiter: blank lines (a run of them, or spaces on them) separate documents, as in BERT's
    # pretraining text (a sentence per line, a blank line between documents)
    (tmp_path / "bert.txt").write_text("First doc, sentence one.\nSentence two.\n\n \n\nSecond doc.\n\nThird.")
    assert [r.text for r in read(tmp_path / "bert.txt", name="stories", delimiter="")] == [
        "First doc, sentence one.\nSentence two.", "Second doc.", "Third."]


@pytest.mark.parametrize("ext", sorted(COMPRESS))
def test_compression_by_extension(tmp_path, ext):
    payload = b"".join(json.dumps({"text": article(i)}).encode() + b"\n" for i in range(50))
    p = tmp_path / f"part.jsonl{ext}"
    p.write_bytes(COMPRESS[ext](payload))
    recs = read(p)
    assert outcome(recs) == ["doc"] * 50 and recs[49].text == article(49)
    # and a story file compressed the same way
    t = tmp_path / f"story.txt{ext}"
    t.write_bytes(COMPRESS[ext](b"A story."))
    assert [r.text for r in read(t, name="stories")] == ["A story."]


@pytest.mark.parametrize("ext", [".gz", ".xz", ".zst", ".bz2"])
def test_truncated_compressed_file_gives_records_then_one_reject(tmp_path, ext):
    payload = b"".join(json.dumps({"text": article(i) * 5}).encode() + b"\n" for i in range(2000))
    data = COMPRESS[ext](payload)
    p = tmp_path / f"cut.jsonl{ext}"
    p.write_bytes(data[: len(data) // 2])
    out = outcome(read(p))
    assert out[-1] == "rejected:truncated"
    assert set(out[:-1]) <= {"doc"} and len(out) < 2000


def test_corrupt_binary_and_empty_files(tmp_path):
    (tmp_path / "junk.jsonl.gz").write_bytes(b"this is not gzip at all")
    assert outcome(read(tmp_path / "junk.jsonl.gz")) == ["rejected:corrupt_compressed"]
    (tmp_path / "junk.jsonl.xz").write_bytes(b"nor is this xz")
    assert outcome(read(tmp_path / "junk.jsonl.xz")) == ["rejected:corrupt_compressed"]
    (tmp_path / "nul.jsonl").write_bytes(b'{"text": "a"}\n' + bytes(range(256)) * 8)
    assert outcome(read(tmp_path / "nul.jsonl")) == ["rejected:binary"]
    (tmp_path / "nul.txt").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" + os.urandom(2000))
    assert outcome(read(tmp_path / "nul.txt", name="stories")) == ["rejected:binary"]
    for name in ("empty.jsonl", "empty.txt", "empty.json", "empty.jsonl.gz"):
        p = tmp_path / name
        p.write_bytes(gzip.compress(b"") if name.endswith(".gz") else b"")
        assert outcome(read(p)) == ["rejected:empty_file"], name
    (tmp_path / "blank.jsonl").write_text("\n \n\n")
    assert outcome(read(tmp_path / "blank.jsonl")) == ["rejected:empty_file"]


def test_transient_read_errors_are_raised_for_retry():
    class Flaky(io.BytesIO):
        def read(self, n=-1):
            if self.tell() > 100:
                raise ConnectionResetError("connection reset by peer")
            return super().read(min(n, 64) if n > 0 else 64)

    data = b"".join(json.dumps({"text": article(i)}).encode() + b"\n" for i in range(100))
    with pytest.raises(ConnectionResetError):
        list(read_stream(Flaky(data), "mem://x", src("x"), 1 << 20, "jsonl", None))


# ------------------------------------------------------------------ huge documents

def write_big_line(path, size: int) -> None:
    block = b"word " * 200_000  # 1 MB
    with open(path, "wb") as f:
        f.write(b'{"text": "small"}\n{"text": "')
        for _ in range(size // len(block)):
            f.write(block)
        f.write(b'"}\n{"text": "after"}\n')


def test_200mb_json_line_is_filtered_with_bounded_memory(tmp_path):
    p = tmp_path / "big.jsonl"
    write_big_line(p, 200 << 20)
    t0 = time.perf_counter()
    tracemalloc.start()
    recs = read(p, max_record_bytes=2_000_000)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert outcome(recs) == ["doc", "filtered:max_doc_bytes", "doc"]
    assert recs[2].text == "after"
    assert peak < 40 << 20, f"peak {peak / 2**20:.0f} MiB while streaming a 200 MB line"
    assert time.perf_counter() - t0 < 30


def test_200mb_text_document_read_only_up_to_cap(tmp_path):
    p = tmp_path / "huge.txt"
    with open(p, "wb") as f:
        f.truncate(200 << 20)  # sparse: 200 MB of NULs written instantly...
        f.seek(0)
        f.write(b"story " * 20_000)  # ...behind a 120 kB text head: the reader stops at the cap
    recs = read(p, name="stories", max_record_bytes=100_000)
    assert outcome(recs) == ["filtered:max_doc_bytes"]
    gz = tmp_path / "huge.txt.gz"
    with gzip.open(gz, "wb", compresslevel=1) as f:
        for _ in range(200):
            f.write(b"story " * 174_763)  # ~1 MB each
    assert outcome(read(gz, name="stories", max_record_bytes=1_000_000)) == ["filtered:max_doc_bytes"]


# ------------------------------------------------------------------ through Beam

def test_read_source_in_beam_mixed_bad_input(tmp_path):
    d = tmp_path / "raw"
    d.mkdir()
    (d / "good.jsonl").write_text("\n".join(json.dumps({"text": article(i)}) for i in range(20)) + "\n")
    (d / "bad.jsonl").write_bytes(b'{"text": "ok"}\n{oops\n{"text": "\xff"}\n{"x": 1}\n')
    data = gzip.compress(b"".join(json.dumps({"text": article(i)}).encode() + b"\n" for i in range(3000)))
    (d / "cut.jsonl.gz").write_bytes(data[: len(data) // 2])
    (d / "empty.jsonl").write_bytes(b"")
    (d / "binary.jsonl").write_bytes(b"\x00\x01\x02" * 100)
    expected_docs = 20 + 2 + sum(1 for r in read(d / "cut.jsonl.gz") if isinstance(r, Document))

    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = p | ReadSource(src(str(d / "*"), name="mixed"))
        docs = out.documents | "DocCount" >> beam.combiners.Count.Globally()
        reasons = (out.rejects | beam.Map(lambda r: (r.bucket, r.reason))
                   | beam.combiners.Count.PerElement())
        assert_that(docs, equal_to([expected_docs]), label="docs")
        assert_that(reasons, equal_to([(("rejected", "malformed_json"), 1), (("rejected", "missing_text_field"), 1),
                                       (("rejected", "truncated"), 1), (("rejected", "empty_file"), 1),
                                       (("rejected", "binary"), 1)]), label="rejects")
        _ = out.rejects | WriteParts(str(tmp_path / "rejects"), "jsonl", rejects_to_jsonl, 2)

    rows = [json.loads(line) for f in sorted((tmp_path / "rejects").glob("part-*.jsonl"))
            for line in f.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["reason"] for r in rows) == ["binary", "empty_file", "malformed_json", "missing_text_field",
                                                 "truncated"]
    by_reason = {r["reason"]: r for r in rows}
    assert by_reason["malformed_json"]["snippet"] == "{oops"
    assert by_reason["missing_text_field"]["snippet"] == '{"x": 1}'
    assert all(r["source"] == "mixed" and r["bucket"] == "rejected" and r["doc_id"] for r in rows)


@pytest.mark.parametrize(("pattern", "url", "name"), [
    ("gs://b/cc/*.jsonl", "gs://b/cc/a.jsonl", "a.jsonl"),
    ("gcs://b/cc/*.jsonl", "gs://b/cc/a.jsonl", "a.jsonl"),  # one filesystem, two schemes
    ("s3://b/cc/20*/x.jsonl", "s3://b/cc/2019/x.jsonl", "2019/x.jsonl"),  # the fixed part ends at a wildcard
    ("/d/cc/**/*.jsonl", "/d/cc/2019/01/a.jsonl", "2019/01/a.jsonl"),
    ("/d/cc", "/d/cc/sub/b.jsonl", "sub/b.jsonl"),  # a folder
    ("/d/cc/", "/d/cc/b.jsonl", "b.jsonl"),
    ("/d/cc/a.jsonl", "/d/cc/a.jsonl", "a.jsonl"),  # the one file named
    ("file:///d/cc/*.jsonl", "/d/cc/a.jsonl", "a.jsonl"),
    ("/d/owt/*.xz", "/d/owt/u.xz!0001/b.txt", "u.xz!0001/b.txt"),  # a nested member keeps its part
    ("/d/owt/u.xz", "/d/owt/u.xz!0001/b.txt", "u.xz!0001/b.txt"),
    ("/d/cc/*.jsonl", "/d/cc/a.jsonl!error", "a.jsonl!error"),
    ("memory://cc/*.jsonl", "memory://cc/a.jsonl", "a.jsonl"),
    ("/*.jsonl", "/a.jsonl", "a.jsonl"),
    ("/other/*.jsonl", "/d/cc/a.jsonl", "/d/cc/a.jsonl"),  # not under the root (an ingest batch): whole
    ("gs://b/cc/*", "/d/cc/a", "/d/cc/a"),  # another filesystem: whole
    ("simplecache::gs://b/cc/*", "gs://b/cc/a", "gs://b/cc/a"),  # chained: whole
])
def test_doc_ids_hash_a_files_name_under_its_inputs_folder(pattern, url, name):
    assert id_name(pattern, url) == name


def test_a_relative_pattern_names_files_the_same_from_any_working_folder(tmp_path, monkeypatch):
    """ReadSource pins a local pattern where the driver resolves it: a worker started in another
    folder reads the same doc ids, and a copy of the folder elsewhere gives them too."""
    for folder in ("data", "copy/of/data"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "a.jsonl").write_bytes(b'{"text": "one"}\n{"text": "two"}\n')
    monkeypatch.chdir(tmp_path)
    pinned = ReadSource(src("data/*.jsonl")).source
    assert pinned.input == str(tmp_path / "data" / "*.jsonl")
    monkeypatch.chdir(tmp_path / "copy")
    ids = [r.doc_id for r in read_file(str(tmp_path / "data" / "a.jsonl"), pinned)]
    assert ids == [make_doc_id("ccnews", "a.jsonl", i) for i in (0, 1)]
    assert [r.doc_id for r in read_file("of/data/a.jsonl", src("of/data/*.jsonl"))] == ids


def test_reads_from_object_store(gcs_bucket):
    import gcsfs

    fs = gcsfs.GCSFileSystem(token="anon")
    fs.pipe(f"{gcs_bucket}/cc/a.jsonl.gz", gzip.compress(b'{"text": "from gcs"}\n{bad\n'))
    fs.pipe(f"{gcs_bucket}/cc/b.jsonl", b'{"text": "second"}\n')
    source = src(f"{gcs_bucket}/cc/*.jsonl*")
    recs = [r for url in ReadSource(source).urls for r in read_file(url, source)]
    assert outcome(recs) == ["doc", "rejected:malformed_json", "doc"]
    assert recs[0].text == "from gcs"


# ------------------------------------------------------------------ hostile input

def count_read(path, **kw) -> tuple[list, int]:
    """Records of a file and how many records its reader counted as read."""
    tally = Tally()
    recs = list(read_file(str(path), src(path, **kw), tally))
    return recs, tally.read


BIG_INT = b"9" * 5000  # past Python's 4,300-digit int limit: json.loads raises ValueError


def test_any_exception_parsing_one_record_rejects_it_and_reading_carries_on(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"text": "one"}\n{"text": "big", "n": ' + BIG_INT + b'}\n{"text": "three"}\n')
    recs, n_read = count_read(p)
    assert outcome(recs) == ["doc", "rejected:parse_error", "doc"]
    assert "ValueError" in recs[1].snippet and recs[2].text == "three"
    assert n_read == 3
    # the same inside a JSON array, and as a whole one-object .json file
    (tmp_path / "arr.json").write_bytes(b'[{"text": "a"}, {"n": ' + BIG_INT + b'}, {"text": "c"}]')
    assert outcome(read(tmp_path / "arr.json")) == ["doc", "rejected:parse_error", "doc"]
    (tmp_path / "one.json").write_bytes(b'{\n  "text": "x",\n  "n": ' + BIG_INT + b'\n}\n')
    assert outcome(read(tmp_path / "one.json")) == ["rejected:parse_error"]


def test_kept_metadata_fields_are_valid_unicode(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_bytes(b'{"text": "t", "title": "lone \\ud800 surrogate", "url": "https://x/\xff\xfe", '
                  b'"date_publish": 20200102}\n')
    (doc,) = read(p)
    for value in (doc.title, doc.url, doc.date):
        value.encode("utf-8")  # raises on a lone surrogate
    assert doc.title == "lone \ufffd surrogate" and doc.url == "https://x/\ufffd\ufffd" and doc.date == "20200102"
    assert "\udcff" in read(tmp_path / "m.jsonl", text_field="url")[0].text  # the text itself: cleaning's call


def test_tar_members_that_are_not_files_are_counted(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, kind in (("d", tarfile.DIRTYPE), ("sym", tarfile.SYMTYPE), ("hard", tarfile.LNKTYPE),
                           ("tty", tarfile.CHRTYPE), ("disk", tarfile.BLKTYPE), ("pipe", tarfile.FIFOTYPE)):
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "a.txt" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            t.addfile(info)
        data = article(1).encode()
        info = tarfile.TarInfo("a.txt")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    (tmp_path / "m.tar").write_bytes(buf.getvalue())
    recs, n_read = count_read(tmp_path / "m.tar")
    # a directory member holds no data (`tar czf x.tar.gz folder/` makes one per folder): not a record
    assert outcome(recs) == ["rejected:not_a_file"] * 5 + ["doc"]
    assert [r.snippet for r in recs[:5]] == ["symlink: sym", "hard link: hard", "character device: tty",
                                             "block device: disk", "fifo: pipe"]
    assert n_read == 6 and len({r.doc_id for r in recs}) == 6


def test_tar_members_of_one_name_give_every_record_its_own_id(tmp_path):
    """`tar -r` appends a new copy of a member under its old name: ids must not collide (dedupe keys by id)."""
    rec = lambda t: json.dumps({"text": t}).encode() + b"\n"  # noqa: E731
    members = [("day.jsonl", rec("first") + rec("second")), ("day.jsonl", rec("third")),
               ("day.jsonl#1", rec("named like a repeat")), ("day.jsonl", rec("fourth"))]
    (tmp_path / "a.tar").write_bytes(tar_bytes(members))
    recs, n_read = count_read(tmp_path / "a.tar")
    assert [r.text for r in recs] == ["first", "second", "third", rec("named like a repeat").decode(), "fourth"]
    assert n_read == 5  # (a member named `day.jsonl#1` is no JSONL file: one text document)
    assert len({r.doc_id for r in recs}) == 5
    # the first copy keeps the ids it has alone, so appending to an archive leaves them as they were
    (tmp_path / "before").mkdir()
    (tmp_path / "before" / "a.tar").write_bytes(tar_bytes(members[:1]))
    assert [r.doc_id for r in read(tmp_path / "before" / "a.tar")] == [r.doc_id for r in recs[:2]]


def test_hidden_names_are_counted_never_read_in_both_listings(tmp_path):
    from pipelines.sources.rawfiles import list_raw_files

    d = tmp_path / "raw"
    d.mkdir()
    (d / "good.jsonl").write_text('{"text": "g"}\n')
    (d / ".good.jsonl.tmp").write_text('{"text": "half writ')
    entries = dict(list_inputs(str(d)))
    assert entries == {str(d / "good.jsonl"): None, str(d / ".good.jsonl.tmp"): "hidden_file"}
    assert dict(list_inputs(str(d / "*"))) == entries
    ledger = {f.url.split("/")[-1]: f.checksum for f in list_raw_files(str(d))}
    assert ledger == {"good.jsonl": None, ".good.jsonl.tmp": "skipped:hidden_file"}  # None: local, no checksum
    recs, n_read = count_read(d / ".good.jsonl.tmp")  # a file named by the pattern itself is read
    assert n_read == 1 and outcome(recs) == ["rejected:malformed_json"]
    assert dict(list_inputs(str(d / ".*"))) == {str(d / ".good.jsonl.tmp"): None}  # a glob asking for them


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_text_with_a_bom_is_decoded(tmp_path, encoding):
    text = "Ünïcode story: naïve café.\nSecond line.\n"
    bom = {"utf-16-be": "\ufeff"}.get(encoding, "")  # Python writes the BOM itself for utf-16 / utf-32
    data = (bom + text).encode(encoding)
    (tmp_path / "s.txt").write_bytes(data)
    assert [r.text for r in read(tmp_path / "s.txt", name="stories")] == [text]
    (tmp_path / "s.tar").write_bytes(tar_bytes({"s.txt": data}))
    assert [r.text for r in read(tmp_path / "s.tar", name="stories")] == [text]
    lines = "".join(json.dumps({"text": f"é {i}"}, ensure_ascii=False) + "\n" for i in range(3))
    (tmp_path / "u.jsonl").write_bytes((bom + lines).encode(encoding))
    assert [r.text for r in read(tmp_path / "u.jsonl")] == ["é 0", "é 1", "é 2"]
    # UTF-16 without a mark stays binary unless the source says how to read it
    (tmp_path / "nobom.txt").write_bytes(text.encode("utf-16-le"))
    assert outcome(read(tmp_path / "nobom.txt")) == ["rejected:binary"]
    assert [r.text for r in read(tmp_path / "nobom.txt", encoding="utf-16-le")] == [text]


@pytest.mark.parametrize("encoding", ["cp1252", "latin-1"])
def test_a_source_in_another_encoding_reads_as_that_encoding_in_every_layout(tmp_path, encoding):
    """Real Latin-1 news (the Lee corpus's '£' and 'é'): a text file, a delimited stories file, a tar
    member, JSONL (gzip) and a JSON array read as the text itself; without the source's encoding the
    same bytes are invalid UTF-8 (lone surrogates, for the cleaning stage's invalid_utf8 policy)."""
    from realtext import news_documents

    docs = [d for d in news_documents() if "£" in d][:1] + news_documents(limit=2) + ["Un café crème, s'il vous plaît."]
    assert len(docs) == 4 and "£" in docs[0]
    raw = {"one.txt": docs[0].encode(encoding),
           "many.txt": "\n<|endoftext|>\n".join(docs).encode(encoding),
           "a.tar": tar_bytes({"m/1.txt": docs[0].encode(encoding), "m/2.txt": docs[3].encode(encoding)}),
           "r.jsonl.gz": gzip.compress("".join(json.dumps({"text": d}, ensure_ascii=False) + "\n"
                                               for d in docs).encode(encoding)),
           "arr.json": json.dumps([{"text": d} for d in docs], ensure_ascii=False).encode(encoding)}
    want = {"one.txt": docs[:1], "many.txt": docs, "a.tar": [docs[0], docs[3]], "r.jsonl.gz": docs, "arr.json": docs}
    for name, data in raw.items():
        (tmp_path / name).write_bytes(data)
        kw = {"delimiter": "<|endoftext|>"} if name == "many.txt" else {}
        assert [r.text for r in read(tmp_path / name, name="stories", encoding=encoding, **kw)] == want[name], name
        as_utf8 = read(tmp_path / name, name="stories", **kw)
        assert outcome(as_utf8) == ["doc"] * len(want[name]), name
        assert any("\udc80" <= c <= "\udcff" for r in as_utf8 for c in r.text), name


def test_a_byte_the_declared_encoding_lacks_stays_invalid_text(tmp_path):
    """cp1252 leaves 0x81 undefined: that byte is not dropped or guessed, it reaches the cleaning stage
    as an undecodable byte (rejected as invalid_utf8, or repaired), as a bad byte of a UTF-8 file does;
    a NUL-filled member is binary under any encoding."""
    (tmp_path / "t.txt").write_bytes(b"caf\xe9 \x81 end")
    assert [r.text for r in read(tmp_path / "t.txt", encoding="cp1252")] == ["café \udc81 end"]
    (tmp_path / "b.tar").write_bytes(tar_bytes({"x.txt": b"\x00" * 64, "y.txt": b"\xa3 5"}))
    assert outcome(read(tmp_path / "b.tar", encoding="cp1252")) == ["rejected:binary", "doc"]
    assert read(tmp_path / "b.tar", encoding="cp1252")[1].text == "£ 5"


# Fast settings: a bomb is cheap to make (bz2 and xz at their defaults take seconds here).
BOMB_COMPRESS = {".gz": lambda b: gzip.compress(b, 1), ".xz": lambda b: lzma.compress(b, preset=0),
                 ".bz2": lambda b: bz2.compress(b, 1), ".zst": lambda b: zstandard.ZstdCompressor(1).compress(b)}


@pytest.mark.parametrize("ext", [".gz", ".zst", ".xz", ".bz2"])
def test_decompression_bomb_is_rejected_after_bounded_work(tmp_path, ext):
    p = tmp_path / f"bomb.jsonl{ext}"
    payload = b'{"text": "first"}\n' + b"\n" * (40 << 20)
    p.write_bytes(BOMB_COMPRESS[ext](payload))
    t0 = time.process_time()
    recs, n_read = count_read(p)
    cpu = time.process_time() - t0
    assert outcome(recs) == ["doc", "rejected:max_expansion_ratio"], outcome(recs)
    assert "max_expansion_ratio" in recs[-1].snippet and n_read == 2
    # the limit stops it near the 16 MiB grace, not at the end
    assert cpu < 1.0, f"{cpu:.2f} s CPU for a bomb"
    # with the limit off the same file is read to its end (bulk blank skipping keeps that cheap)
    recs = read(p, max_expansion_ratio=None)
    assert outcome(recs) == ["doc"]


def test_decompressed_bytes_limit_and_nested_bombs_share_one_budget(tmp_path):
    payload = b"".join(json.dumps({"text": article(i)}).encode() + b"\n" for i in range(30_000))
    (tmp_path / "big.jsonl.gz").write_bytes(gzip.compress(payload))
    recs = read(tmp_path / "big.jsonl.gz", max_decompressed_bytes=1 << 20)
    out = outcome(recs)
    assert out[-1] == "rejected:max_decompressed_bytes" and set(out[:-1]) == {"doc"} and 1 < len(out) < 30_000
    assert outcome(read(tmp_path / "big.jsonl.gz")) == ["doc"] * 30_000  # the defaults read it whole
    # an xz bomb inside an xz tar: the inner member's output counts against the outer file
    inner = lzma.compress(b"\n" * (40 << 20), preset=0)
    (tmp_path / "nested.tar.xz").write_bytes(lzma.compress(tar_bytes({"a.txt": article(1).encode(),
                                                                       "in/b.jsonl.xz": inner})))
    recs, n_read = count_read(tmp_path / "nested.tar.xz")
    assert outcome(recs) == ["doc", "rejected:max_expansion_ratio"] and n_read == 2


def test_blank_lines_are_skipped_in_bulk(tmp_path):
    p = tmp_path / "blank.jsonl"
    with open(p, "wb") as f:
        f.write(b'{"text": "a"}\n')
        for _ in range(128):
            f.write(b"\n" * (1 << 20))
        f.write(b'{"text": "b"}\n')
    t0 = time.process_time()
    recs = read(p)
    cpu = time.process_time() - t0
    assert [r.text for r in recs] == ["a", "b"]
    assert recs[1].doc_id == make_doc_id("ccnews", p.name, 1 + (128 << 20))  # line numbers still true
    # a Python step per line took ~1 us each (128 M lines: minutes); bulk runs take the read time
    assert cpu < 5.0, f"{cpu:.2f} s CPU for 128 MiB of newlines"


def test_listing_judges_directories_links_fifos_and_undecodable_names(tmp_path):
    d = tmp_path / "raw"
    d.mkdir()
    (d / "good.jsonl").write_text('{"text": "g"}\n')
    (d / "sub.jsonl").mkdir()
    (d / "sub.jsonl" / "inner.jsonl").write_text('{"text": "not listed by the glob"}\n')
    os.symlink(d / "good.jsonl", d / "link.jsonl")
    os.symlink(tmp_path / "nowhere", d / "gone.jsonl")
    os.mkfifo(d / "pipe.jsonl")
    bad = os.path.join(os.fsencode(d), b"bad\xff.jsonl")
    with open(bad, "wb") as f:
        f.write(b'{"text": "b"}\n')
    entries = dict(list_inputs(str(d / "*.jsonl")))
    assert entries[str(d / "sub.jsonl")] == "not_a_file"
    assert entries[str(d / "bad\\xff.jsonl")] == "invalid_file_name"
    assert {k: v for k, v in entries.items() if v is None} == {
        str(d / n): None for n in ("good.jsonl", "link.jsonl", "gone.jsonl", "pipe.jsonl")}

    def reasons(url):
        recs, n_read = count_read(url)
        assert n_read == len(recs) == 1
        return outcome(recs)[0]

    assert reasons(d / "link.jsonl") == "doc"  # a link to a file is read
    assert reasons(d / "gone.jsonl") == "rejected:unreadable"  # dangling
    assert reasons(d / "pipe.jsonl") == "rejected:not_a_file"  # never opened: it would block
    assert reasons(d / "sub.jsonl") == "rejected:not_a_file"


def test_parquet_string_column_with_invalid_utf8_rejects_rows_not_the_file(tmp_path):
    texts = [article(i).encode() for i in range(5)]
    texts[2] = b"bad \xff bytes"
    # pyarrow validates strings it builds, so write the bytes as binary and relabel the column
    binary = pa.array(texts, pa.binary())
    strings = pa.Array.from_buffers(pa.string(), len(binary), binary.buffers())
    pq.write_table(pa.table({"text": strings, "title": [f"t{i}" for i in range(5)]}), tmp_path / "x.parquet")
    recs, n_read = count_read(tmp_path / "x.parquet")
    assert outcome(recs) == ["doc", "doc", "rejected:parse_error", "doc", "doc"] and n_read == 5


def test_read_counts_are_counted_by_the_framers(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(b'{"text": "1"}\n\n{bad\n{"x": 2}\n')
    (tmp_path / "e.jsonl").write_bytes(b"")
    (tmp_path / "b.bin").write_bytes(b"\x00\x01")
    (tmp_path / "t.tar").write_bytes(tar_bytes({"1.txt": b"one", "2.txt": b"two"})[:1100])
    for name, expected in (("a.jsonl", 3), ("e.jsonl", 1), ("b.bin", 1), ("t.tar", 2)):
        recs, n_read = count_read(tmp_path / name)
        assert n_read == len(recs) == expected, name


# ------------------------------------------------------------------ the catalogue through the real CLI

def non_blank_lines(path) -> int:
    return sum(1 for line in open(path, "rb") if line.strip())


def hostile_folder(root, demo_corpus) -> tuple[str, int]:
    """Every hostile input kind above next to two good CC-News files; returns (glob, records read)."""
    import shutil

    raw = root / "raw"
    raw.mkdir()
    demo = os.path.dirname(demo_corpus["ccnews"])
    # good file 1, rewritten: lone surrogates / invalid bytes in every title and url, a record
    # Python's json cannot hold half way, and runs of blank lines
    lines = []
    for line in open(os.path.join(demo, "part-0.jsonl"), "rb").read().splitlines():
        try:
            ok = isinstance(json.loads(line), dict)
        except ValueError:
            ok = False
        lines.append(line[:-1] + b', "title": "T \\ud800", "url": "https://x/\xff"}' if ok else line)
    lines[len(lines) // 2:len(lines) // 2] = [b'{"text": "big", "n": ' + BIG_INT + b"}", b"", b"  ", b""]
    (raw / "part-0.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    shutil.copy(os.path.join(demo, "part-1.jsonl"), raw / "part-1.jsonl")
    (raw / "sub.jsonl").mkdir()  # a directory matching the glob
    with open(os.path.join(os.fsencode(raw), b"caf\xe9-latin1.jsonl"), "wb") as f:  # not UTF-8
        f.write(b'{"text": "never read"}\n')
    os.symlink(root / "nowhere", raw / "gone.jsonl")  # dangling: unreadable
    os.mkfifo(raw / "pipe.jsonl")  # opening it would block forever
    newline_bomb = gzip.compress(b"\n" * (40 << 20) + b'{"text": "never reached"}\n', 9)
    (raw / "bomb.jsonl.gz").write_bytes(newline_bomb)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, kind in (("d", tarfile.DIRTYPE), ("sym", tarfile.SYMTYPE), ("hard", tarfile.LNKTYPE),
                           ("tty", tarfile.CHRTYPE), ("pipe", tarfile.FIFOTYPE)):
            info = tarfile.TarInfo(name)
            info.type = kind
            t.addfile(info)
        data = article(1).encode()
        info = tarfile.TarInfo("a.txt")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    (raw / "members.tar").write_bytes(buf.getvalue())
    (raw / "story.txt").write_bytes(("Once upon a time. " * 20).encode("utf-16"))
    (raw / ".late.jsonl").write_text('{"text": "a writer\'s temporary: never read"}\n')
    # `tar -r` appends a member under a name already there: the first copy's record is an exact
    # duplicate of a document of part-1, the second's is new (both need their own doc ids)
    copied = next(line for line in open(raw / "part-1.jsonl", "rb").read().splitlines() if line.startswith(b"{"))
    (raw / "appended.tar").write_bytes(tar_bytes([("day.jsonl", copied + b"\n"),
                                                  ("day.jsonl", json.dumps({"text": article(7)}).encode())]))
    # `cat a.json b.json`: two arrays, one after the other
    (raw / "two.json").write_text(json.dumps([{"text": article(8)}, {"text": article(9)}]) + "\n"
                                  + json.dumps([{"text": article(10)}, {"text": article(11)}]) + "\n")
    good = non_blank_lines(raw / "part-0.jsonl") + non_blank_lines(raw / "part-1.jsonl")
    # + directory, bad name, dangling link, fifo, bomb (one each), 5 tar members (its directory member
    # is no record), the UTF-16 story, the hidden file, 2 records of the appended tar, 4 of the two arrays
    return str(raw / "*"), good + 5 + 5 + 1 + 1 + 2 + 4


@pytest.mark.slow
@pytest.mark.parametrize("batched", [False, True], ids=["one-shot", "batched"])
def test_cli_build_survives_the_hostile_catalogue_and_counts_every_input(tmp_path, demo_corpus, batched):
    """Both listings (the one-shot glob, and the ledger listing of --batch_mb / serve) count every match."""
    from shardforge.commands.demo import demo_build_config

    pattern, expected_input = hostile_folder(tmp_path, demo_corpus)
    cfg = demo_build_config({"ccnews": pattern, "openwebtext": demo_corpus["openwebtext"],
                             "stories": demo_corpus["stories"]}).model_dump()
    cfg["tokenizer"]["vocab_size"] = 400
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    out = tmp_path / "corpus"
    r = run_python(["-m", "pipelines.build", "--config", str(tmp_path / "cfg.json"),
                    "--output", str(out), *(["--batch_mb", "1"] if batched else [])],
                   capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    acct = json.loads((out / "manifest.json").read_text())["accounting"]["ccnews"]
    assert acct["input"] == expected_input
    assert acct["input"] == acct["kept"] + sum(acct["filtered"].values()) + sum(acct["duplicate"].values()) \
        + sum(acct["rejected"].values())
    rejected = acct["rejected"]
    assert (rejected["parse_error"], rejected["invalid_file_name"], rejected["unreadable"],
            rejected["max_expansion_ratio"], rejected["not_a_file"]) == (1, 1, 1, 1, 1 + 1 + 4)
    assert "binary" not in rejected  # the UTF-16 story was decoded
    assert rejected["hidden_file"] == 1  # in both kinds of build
    assert acct["duplicate"]["exact"] >= 1
    # kept documents carry their metadata as valid UTF-8 (WriteClean wrote it)
    clean = pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("**/clean/part-*.parquet"))])
    ours = [(t, u) for t, u in zip(clean.column("title").to_pylist(), clean.column("url").to_pylist(), strict=True)
            if u and u.startswith("https://x/")]
    assert ours and set(ours) == {("T \ufffd", "https://x/\ufffd")}
    rows = [json.loads(line) for p in sorted(out.glob("**/rejects/part-*.jsonl"))
            for line in p.read_text(encoding="utf-8").splitlines()]
    assert any(r.get("reason") == "invalid_file_name" and "caf\\xe9-latin1.jsonl" in r["snippet"] for r in rows)


@pytest.mark.slow
def test_a_reader_that_loses_records_fails_the_accounting_identity(tmp_path, demo_corpus, monkeypatch):
    """The input count is what the framers read, so records lost after reading cannot balance."""
    import pipelines.sources.transforms as sources
    from pipelines.jobs.build import run_build
    from shardforge.commands.demo import demo_build_config

    cfg = demo_build_config(demo_corpus).model_dump()
    cfg["tokenizer"]["vocab_size"] = 400
    real = sources.read_input

    def lossy(entry, source, tally, *rest):  # a defective reader: every 7th document vanishes after being read
        for i, rec in enumerate(real(entry, source, tally, *rest)):
            if i % 7 != 3:
                yield rec

    monkeypatch.setattr(sources, "read_input", lossy)
    from schemas.config import BuildConfig

    with pytest.raises(Exception, match="accounting identity failed"):
        run_build(BuildConfig.model_validate(cfg), str(tmp_path / "corpus"))
    assert not (tmp_path / "corpus" / "manifest.json").exists()


def test_parquet_whose_batches_decode_far_past_the_file_size_is_rejected(tmp_path):
    # one 100 kB string, dictionary-encoded for 2,000 rows: a ~100 kB file that decodes to 200 MB
    big = "word " * 20_000
    col = pa.DictionaryArray.from_arrays(pa.array([0] * 2000, pa.int32()), pa.array([big]))
    pq.write_table(pa.table({"text": col}), tmp_path / "bomb.parquet")
    assert os.path.getsize(tmp_path / "bomb.parquet") < 200_000
    recs, n_read = count_read(tmp_path / "bomb.parquet")
    out = outcome(recs)
    assert out[-1] == "rejected:max_expansion_ratio" and set(out[:-1]) <= {"doc"} and len(out) < 2000
    assert n_read == len(recs)


def test_a_file_the_inputs_of_two_sources_match_is_refused_before_the_build(tmp_path):
    """Overlapping patterns would read a file once per match (its records counted twice): one line, as a
    batched build says it; disjoint patterns, and one pattern on its own, pass. Every one-shot build lists
    its inputs in ``one_shot_attempt`` (the attempt tag), where the check is."""
    from pipelines.corpus.commit import one_shot_attempt
    from schemas.config import BuildConfig
    from schemas.errors import UserError

    def attempt_of(sources):
        return one_shot_attempt(BuildConfig.model_validate({"sources": [s.model_dump() for s in sources]}))

    for name in ("2023-01.jsonl", "2024-01.jsonl", "2024-02.jsonl"):
        (tmp_path / name).write_text(json.dumps({"text": "A sentence here."}) + "\n")
    every = SourceConfig(name="news", input=str(tmp_path / "*.jsonl"))
    recent = SourceConfig(name="recent", input=str(tmp_path / "2024-*.jsonl"))
    old = SourceConfig(name="old", input=str(tmp_path / "2023-*.jsonl"))
    with pytest.raises(UserError) as e:
        attempt_of([every, recent])
    assert str(e.value) == (f"{tmp_path / '2024-01.jsonl'} matches the inputs of sources news and recent: each file "
                            "must belong to one source (make the --input patterns disjoint)")
    assert sorted(attempt_of([old, recent]).fingerprints) == ["old", "recent"]
    attempt_of([every])


def test_overlapping_inputs_are_refused_before_any_file_is_hashed(tmp_path, monkeypatch):
    """A one-shot build fingerprints its local inputs (sha256 of their bytes) for the attempt tag: the
    overlap is found from the listings first, so a crawl's worth of files is not read for nothing."""
    import pipelines.sources.rawfiles as rawfiles
    from pipelines.corpus.commit import one_shot_attempt
    from schemas.config import BuildConfig
    from schemas.errors import UserError

    for name in ("2023-01.jsonl", "2024-01.jsonl"):
        (tmp_path / name).write_text(json.dumps({"text": "A sentence here."}) + "\n")
    hashed: list[str] = []
    real = rawfiles.fingerprint
    monkeypatch.setattr(rawfiles, "fingerprint", lambda f: hashed.append(f.url) or real(f))
    sources = [{"name": "news", "input": str(tmp_path / "*.jsonl")},
               {"name": "recent", "input": str(tmp_path / "2024-*.jsonl")}]
    with pytest.raises(UserError, match="matches the inputs of sources news and recent"):
        one_shot_attempt(BuildConfig.model_validate({"sources": sources}))
    assert hashed == []
    one_shot_attempt(BuildConfig.model_validate({"sources": sources[:1]}))
    assert sorted(hashed) == [str(tmp_path / "2023-01.jsonl"), str(tmp_path / "2024-01.jsonl")]


def test_c4_s_timestamp_is_the_record_s_date(tmp_path):
    """C4's JSON lines carry text, url and timestamp: the date was dropped."""
    p = tmp_path / "c4-train.00000-of-01024.json"
    p.write_bytes(b'{"text": "A page.", "timestamp": "2019-04-25T12:57:54Z", "url": "https://c4.example/a"}\n')
    (doc,) = read(p)
    assert (doc.date, doc.url) == ("2019-04-25T12:57:54Z", "https://c4.example/a")


def test_an_input_that_matches_nothing_says_what_its_folder_holds(store_url) -> None:
    """`--input 'raw/*.json'` over .jsonl files, or a glob one folder above the files, was "no files match"
    alone: the line now says what the glob's folder holds and a glob that matches it, on every store."""
    from pipelines.sources.listing import no_match
    from shardforge.storage import write_bytes_atomic as write_bytes

    for name in ("a.jsonl", "b.jsonl", "sub/c.jsonl", ".hidden"):
        write_bytes(f"{store_url}/raw/{name}", b"{}\n")
    write_bytes(f"{store_url}/mixed/a.json.gz", b"x")
    write_bytes(f"{store_url}/mixed/b.txt", b"x")
    write_bytes(f"{store_url}/mixed/README", b"x")
    said = {pattern: str(no_match("news", f"{store_url}/{pattern}")) for pattern in
            ("raw/*.json", "raw/sub/*.txt", "mixed/*.jsonl", "nothing/*.jsonl", "nothing")}
    start = f"source news: no files match '{store_url}/"
    assert all(line.startswith(start) for line in said.values()), said
    assert said["raw/*.json"].endswith(f"raw/*.json': its folder {store_url}/raw holds 2 .jsonl files, 1 folder; "
                                       f"'{store_url}/raw/*.jsonl' matches them")
    assert str(no_match("news", f"{store_url}/*.jsonl")).endswith(
        f"its folder {store_url} holds 2 folders; ** reaches the folders below it: '{store_url}/**/*.jsonl'")
    assert said["raw/sub/*.txt"].endswith(f"its folder {store_url}/raw/sub holds 1 .jsonl file; "
                                          f"'{store_url}/raw/sub/*.jsonl' matches them")
    assert said["mixed/*.jsonl"].endswith(f"its folder {store_url}/mixed holds 1 file without an extension, "
                                          "1 .json.gz file, 1 .txt file")
    assert said["nothing/*.jsonl"].endswith(f"its folder {store_url}/nothing does not exist")
    assert said["nothing"].endswith("nothing': it does not exist")
