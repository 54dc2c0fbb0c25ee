"""Readable records are kept: every record that decodes is read, the rest is one counted Reject.

A compressed file cut short, or followed by bytes that are not another member, keeps the records
before the fault (the reference: what the standard library's own incremental decoders give for
the same bytes); a NUL byte in one JSON line rejects that line, not the file; a file whose lines
end in a lone CR is read line by line; corrupt Parquet metadata is named ``corrupt_parquet``.
Every Reject of a part the reader could not read names its file and where reading stopped.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import random
import struct
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipelines.records import Document, Reject, make_doc_id
from pipelines.sources import read_file
from pipelines.sources.readers import Tally
from pipelines.sources.streams import CrLines, iter_lines, mostly_binary
from schemas.config import SourceConfig

WORDS = ("river council library harbour market festival teacher bridge museum report winter garden "
         "village station history measured described explained celebrated questioned because although "
         "while after before the a of in on with for and but many some every").split()

COMPRESS = {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress,
            ".zst": lambda b: zstandard.ZstdCompressor().compress(b)}


def sentences(rng: random.Random, n: int) -> str:
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))).capitalize() + "."
                    for _ in range(n))


def jsonl(n: int, seed: int = 0, end: bytes = b"\n") -> bytes:
    rng = random.Random(seed)
    return end.join(json.dumps({"text": sentences(rng, 6), "url": f"https://example.org/{i}"}).encode()
                    for i in range(n)) + end


def read(tmp_path, name: str, data: bytes, **kw) -> tuple[list[Document | Reject], int]:
    p = tmp_path / name
    p.write_bytes(data)
    tally = Tally()
    recs = list(read_file(str(p), SourceConfig(name="web", input=str(p), **kw), tally))
    assert tally.read == len(recs)  # every record read is one Document or one Reject
    return recs, tally.read


def docs(recs) -> list[Document]:
    return [r for r in recs if isinstance(r, Document)]


def reasons(recs) -> list[str]:
    return [r.reason for r in recs if isinstance(r, Reject)]


def decoder(ext: str):
    """The standard library's incremental decoder of one compression (the reference)."""
    if ext == ".gz":
        return zlib.decompressobj(31)
    if ext == ".xz":
        return lzma.LZMADecompressor()
    if ext == ".bz2":
        return bz2.BZ2Decompressor()
    return zstandard.ZstdDecompressor().decompressobj()


def decodable_records(ext: str, data: bytes) -> int:
    """Whole JSON lines an incremental decoder gets out of (possibly cut) compressed bytes."""
    out = decoder(ext).decompress(data)
    return sum(1 for line in out.split(b"\n")[:-1] if line.strip() and isinstance(json.loads(line), dict))


@pytest.mark.parametrize("ext", sorted(COMPRESS))
def test_a_file_cut_at_90_percent_keeps_every_record_that_decodes(tmp_path, ext):
    data = COMPRESS[ext](jsonl(400 if ext != ".bz2" else 4000))
    cut = data[: int(len(data) * 0.9)]
    expected = decodable_records(ext, cut)
    recs, _ = read(tmp_path, f"cut.jsonl{ext}", cut)
    assert len(docs(recs)) == expected and expected > 0
    assert reasons(recs) == ["truncated"]
    last = recs[-1]
    assert last.file == str(tmp_path / f"cut.jsonl{ext}") and last.position == f"after line {expected}"


def test_a_small_gzip_missing_its_last_40_bytes_keeps_its_decodable_records(tmp_path):
    data = gzip.compress(jsonl(5, seed=3))
    expected = decodable_records(".gz", data[:-40])
    assert expected >= 3
    recs, n = read(tmp_path, "five.jsonl.gz", data[:-40])
    assert len(docs(recs)) == expected and reasons(recs) == ["truncated"] and n == expected + 1


@pytest.mark.parametrize("ext", sorted(COMPRESS))
def test_trailing_garbage_after_a_valid_stream_keeps_its_records_and_is_counted(tmp_path, ext):
    payload = jsonl(30, seed=5)
    recs, n = read(tmp_path, f"tail.jsonl{ext}", COMPRESS[ext](payload) + b"this is not another member")
    assert len(docs(recs)) == 30 and reasons(recs) == ["corrupt_compressed"] and n == 31
    assert recs[-1].position == "after line 30"
    # the last record keeps its place even when the file does not end with a newline
    recs, _ = read(tmp_path, f"tail2.jsonl{ext}", COMPRESS[ext](payload.rstrip(b"\n")) + b"\x01garbage")
    assert len(docs(recs)) == 30 and reasons(recs) == ["corrupt_compressed"]


def test_zero_padding_and_several_gzip_members_are_one_stream(tmp_path):
    a, b = jsonl(4, seed=1), jsonl(3, seed=2)
    recs, _ = read(tmp_path, "members.jsonl.gz", gzip.compress(a) + gzip.compress(b) + b"\x00" * 700)
    assert len(recs) == 7 and not reasons(recs)
    recs, _ = read(tmp_path, "members.jsonl.xz", lzma.compress(a) + lzma.compress(b))
    assert len(recs) == 7 and not reasons(recs)


def test_one_nul_byte_in_line_2_rejects_that_line_not_the_file(tmp_path):
    lines = jsonl(40, seed=7).split(b"\n")
    lines[1] = lines[1][:20] + b"\x00" + lines[1][20:]
    recs, n = read(tmp_path, "nul.jsonl", b"\n".join(lines))
    assert n == 40 and len(docs(recs)) == 39
    bad = [r for r in recs if isinstance(r, Reject)]
    assert [r.reason for r in bad] == ["binary"]
    assert bad[0].doc_id == make_doc_id("web", "nul.jsonl", 1)
    # a file that is binary data (a tenth of its head control bytes) is still one reject
    blob = b'{"text": "a"}\n' + bytes(range(256)) * 8
    assert mostly_binary(blob[:8192]) and reasons(read(tmp_path, "bin.jsonl", blob)[0]) == ["binary"]


def test_a_nul_byte_in_one_delimited_story_rejects_that_story(tmp_path):
    data = b"first story\n<|endoftext|>\nsecond \x00 story\n<|endoftext|>\nthird story\n"
    recs, _ = read(tmp_path, "stories.txt", data, delimiter="<|endoftext|>")
    assert [type(r).__name__ for r in recs] == ["Document", "Reject", "Document"] and reasons(recs) == ["binary"]


@pytest.mark.parametrize("end", [b"\r", b"\n", b"\r\n"], ids=["cr", "lf", "crlf"])
def test_lines_ending_in_a_lone_cr_are_records(tmp_path, end):
    recs, _ = read(tmp_path, "lines.jsonl", jsonl(3, seed=9, end=end))
    assert len(docs(recs)) == 3
    assert [r.doc_id for r in recs] == [make_doc_id("web", "lines.jsonl", i) for i in range(3)]
    assert all("\r" not in r.text for r in recs)


def test_cr_lines_are_decided_by_the_first_line_end_even_across_reads():
    class Trickle(io.BytesIO):  # short reads: a CR can be the last byte of one
        def read(self, n=-1):
            return super().read(min(n if n >= 0 else 3, 3))

    cr = b'{"a": 1}\r{"b": 2}\r{"c": 3}'
    assert [line for line, _, _ in iter_lines(CrLines(Trickle(cr)), 100)] == [b'{"a": 1}', b'{"b": 2}', b'{"c": 3}']
    crlf = b'{"a": 1}\r\n{"b": "x\ry"}\r\n'  # CRLF: a CR inside a line stays
    assert [line for line, _, _ in iter_lines(CrLines(Trickle(crlf)), 100)] == [b'{"a": 1}\r', b'{"b": "x\ry"}\r']


def test_corrupt_parquet_metadata_is_corrupt_parquet(tmp_path):
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": [sentences(random.Random(i), 3) for i in range(4)]}), buf)
    data = buf.getvalue()
    meta = struct.unpack("<I", data[-8:-4])[0]
    garbled = data[:-8 - meta] + b"\xff" * meta + data[-8:]  # the footer's thrift metadata, unreadable
    recs, n = read(tmp_path, "meta.parquet", garbled)
    assert reasons(recs) == ["corrupt_parquet"] and n == 1
    assert recs[0].file == str(tmp_path / "meta.parquet") and recs[0].position == "whole file"


def test_a_tar_member_that_is_a_link_names_the_archive_and_the_member(tmp_path):
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        link = tarfile.TarInfo("docs/link.txt")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        t.addfile(link)
    recs, _ = read(tmp_path, "a.tar", buf.getvalue())
    assert reasons(recs) == ["not_a_file"]
    assert (recs[0].file, recs[0].position) == (str(tmp_path / "a.tar"), "member docs/link.txt")


def test_a_tar_cut_after_members_of_any_kind_names_the_last_member_read(tmp_path):
    import tarfile

    def tar_of(*members: tuple[str, bytes | None]) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for name, data in members:
                info = tarfile.TarInfo(name)
                if data is None:
                    info.type = tarfile.DIRTYPE
                    t.addfile(info)
                else:
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    # Only directory members (no records) before the cut: the position names the last one, not the whole file.
    only_dirs = tar_of(("a/", None), ("b/", None), ("b/x.txt", b"some words " * 80))
    recs, n = read(tmp_path, "dirs.tar", only_dirs[: 1024 + 300])
    assert reasons(recs) == ["truncated_archive"] and n == 1
    assert recs[-1].position == "after member b"  # tarfile drops the slash
    # A nested JSONL member read to its end, then the cut: after that member, by name.
    nested = tar_of(("one.txt", b"first document " * 40), ("more.jsonl", jsonl(3)), ("two.txt", b"cut " * 400))
    recs, n = read(tmp_path, "nested.tar", nested[: nested.index(b"two.txt") + 100])  # inside its header
    assert len(docs(recs)) == 4 and reasons(recs) == ["truncated_archive"] and n == 5
    assert recs[-1].position == "after member more.jsonl"


def test_reject_log_entries_name_the_file_and_the_place_from_the_doc_id():
    from pipelines.intermediates import rejects_to_jsonl
    from pipelines.records import Duplicate, path_key

    url = "https://alice:PASS@example.org/raw/a.jsonl"
    origins = {path_key("web", url): (url, "line"), path_key("web", "b.tar"): ("b.tar", "member")}
    recs = [Reject(make_doc_id("web", url, 11), "web", "filtered", "min_words", "short"),
            Duplicate(make_doc_id("web", "b.tar", 3), "web", make_doc_id("web", url, 0), "exact"),
            Reject(make_doc_id("web", "c.jsonl!error", 0), "web", "rejected", "unreadable",
                   "ClientResponseError: 401, url='https://bob:SECRET@example.org/c.jsonl'", file="c.jsonl",
                   position="after line 4"),
            Duplicate(make_doc_id("web", "b.tar", 4), "web", make_doc_id("web", url, 0), "exact", dup_of_index=True)]
    rows = [json.loads(line) for line in rejects_to_jsonl(recs, origins).decode().splitlines()]
    assert [(r["file"], r["position"]) for r in rows] == [
        ("https://example.org/raw/a.jsonl", "line 12"), ("b.tar", "member 3"), ("c.jsonl", "after line 4"),
        ("b.tar", "member 4")]
    assert rows[1]["bucket"] == "duplicate" and "PASS" not in json.dumps(rows) and "SECRET" not in json.dumps(rows)
    # a duplicate of a dedupe index's document says so; the others carry no such key
    assert [r.get("dup_of_index") for r in rows] == [None, None, None, True]


def test_report_html_writes_control_bytes_of_a_snippet_as_visible_escapes():
    from pipelines.report.html import table

    out = table(["snippet"], [['{"text": "a\x00b\x1b\x7f\x85<c>"}']])
    assert not any(ch in out for ch in "\x00\x1b\x7f\x85")
    assert "a\\x00b\\x1b\\x7f\\x85&lt;c&gt;" in out
