"""Common Crawl's WET files read as the crawl ships them: a gzip member per record, a warcinfo first.

The pages are real news no one here wrote (the Lee corpus gensim ships), written as WET records.
"""

from __future__ import annotations

import collections
import gzip
import json

from forkserver import run_python
from realtext import news_documents

from pipelines.records import Document, Reject
from pipelines.sources import read_file
from schemas.config import SourceConfig


def record(kind: str, content: bytes, uri: str | None = None, ctype: str = "text/plain",
           date: str = "2019-01-16T11:31:44Z") -> bytes:
    head = [b"WARC/1.0", f"WARC-Type: {kind}".encode(), f"WARC-Date: {date}".encode(),
            b"WARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-000000000000>"]
    if uri:
        head.append(f"WARC-Target-URI: {uri}".encode())
    head += [f"Content-Type: {ctype}".encode(), f"Content-Length: {len(content)}".encode()]
    return b"\r\n".join(head) + b"\r\n\r\n" + content + b"\r\n\r\n"


def wet(pages: list[str]) -> bytes:
    """A WET file as Common Crawl writes one: every record its own gzip member."""
    records = [record("warcinfo", b"software: test\r\nformat: WARC File Format 1.0\r\n", ctype="application/warc-fields")]
    records += [record("conversion", p.encode(), uri=f"https://news.example/{i}") for i, p in enumerate(pages)]
    return b"".join(gzip.compress(r, mtime=0) for r in records)


def read(path, **kw) -> list[Document | Reject]:
    return list(read_file(str(path), SourceConfig(name="cc", input=str(path), **kw)))


def outcomes(recs) -> collections.Counter:
    return collections.Counter("doc" if isinstance(r, Document) else f"{r.bucket}:{r.reason}" for r in recs)


def test_a_wet_file_gives_each_page_s_text_with_its_url_and_date(tmp_path):
    pages = news_documents(40)
    (p := tmp_path / "CC-MAIN-20190116-00000.warc.wet.gz").write_bytes(wet(pages))
    recs = read(p)
    assert outcomes(recs) == {"doc": 40, "filtered:warc_record_type": 1}
    docs = [r for r in recs if isinstance(r, Document)]
    assert [d.text for d in docs] == pages
    assert (docs[3].url, docs[3].date) == ("https://news.example/3", "2019-01-16T11:31:44Z")
    assert recs[0].snippet == "warcinfo record"


def test_wet_is_recognised_by_content_and_lf_only_files_read_too(tmp_path):
    pages = news_documents(3)
    data = gzip.decompress(wet(pages)).replace(b"\r\n", b"\n")  # a tool that wrote LF line ends
    for name in ("pages", "pages.wet", "pages.txt"):
        (p := tmp_path / name).write_bytes(data)
        recs = read(p, format="warc") if name.endswith(".txt") else read(p)
        assert [r.text for r in recs if isinstance(r, Document)] == [t.replace("\r\n", "\n") for t in pages], name


def test_a_warc_of_html_is_counted_and_says_where_the_text_is(tmp_path):
    html = b"<html><body><p>" + news_documents(1)[0].encode() + b"</p></body></html>"
    data = (record("request", b"GET / HTTP/1.1\r\n\r\n", uri="https://a.example/")
            + record("response", b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n" + html,
                     uri="https://a.example/", ctype="application/http; msgtype=response")
            + record("metadata", b"fetchTimeMs: 12\r\n", uri="https://a.example/"))
    (p := tmp_path / "CC-NEWS-20190116.warc.gz").write_bytes(gzip.compress(data))
    recs = read(p)
    assert outcomes(recs) == {"filtered:warc_record_type": 3}
    assert "WET files hold its text" in recs[1].snippet


def test_a_cut_or_broken_wet_keeps_the_records_before_the_fault(tmp_path):
    pages = news_documents(5)
    raw = gzip.decompress(wet(pages))
    (p := tmp_path / "cut.warc.wet").write_bytes(raw[:raw.index(pages[3].encode()) + 50])
    assert outcomes(read(p)) == {"filtered:warc_record_type": 1, "doc": 3, "rejected:truncated": 1}
    (p := tmp_path / "junk.warc.wet").write_bytes(raw + b"this is not a record\r\n")
    recs = read(p)
    assert outcomes(recs) == {"filtered:warc_record_type": 1, "doc": 5, "rejected:malformed_warc": 1}
    assert recs[-1].position == "after record 5"
    big = record("conversion", b"word " * 3000, uri="https://big.example/")
    (p := tmp_path / "big.warc.wet").write_bytes(big + record("conversion", b"small page.", uri="u"))
    assert outcomes(read(p, max_record_bytes=4000)) == {"filtered:max_doc_bytes": 1, "doc": 1}


def test_a_build_of_wet_files_keeps_the_pages_and_counts_the_rest(tmp_path):
    pages = news_documents(60)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.warc.wet.gz").write_bytes(wet(pages[:30]))
    (raw / "b.warc.wet.gz").write_bytes(wet(pages[30:]))
    r = run_python(["-m", "pipelines.build", "--input", f"cc={raw}", "--output", str(tmp_path / "o"),
                    "--vocab_size", "600", "--min_words", "20"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["totals"]["input"] == 62 and report["reasons"]["filtered:warc_record_type"] == 2
    assert report["totals"]["kept"] >= 50


def test_a_build_of_html_warc_files_alone_says_to_give_the_wet_files(tmp_path):
    html = record("response", b"HTTP/1.1 200 OK\r\n\r\n<html>" + news_documents(1)[0].encode() + b"</html>",
                  uri="https://a.example/", ctype="application/http; msgtype=response")
    (raw := tmp_path / "CC-NEWS-20190116.warc.gz").write_bytes(gzip.compress(html))
    r = run_python(["-m", "pipelines.build", "--input", str(raw), "--output", str(tmp_path / "o")],
                   capture_output=True, text=True)
    assert r.returncode == 2, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert "(1 warc_record_type)" in line and "give the WET files, or extract the text first" in line, line
