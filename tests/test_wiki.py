"""Wikipedia as downloaded: MediaWiki XML dumps and WikiExtractor output, read page by page.

The real dump is the one gensim ships as test data (206 pages of the April 2016 English
Wikipedia); the markup cases are one construct each, as articles write them.
"""

from __future__ import annotations

import bz2
import collections
import gzip
import io
import json
import re
import tarfile

from forkserver import run_python
from realtext import wiki_dump

from pipelines.records import Document, Reject
from pipelines.sources import read_file
from pipelines.sources.wikitext import plain_text
from schemas.config import SourceConfig


def read(path, **kw) -> list[Document | Reject]:
    return list(read_file(str(path), SourceConfig(name="wiki", input=str(path), **kw)))


def outcomes(recs) -> collections.Counter:
    return collections.Counter("doc" if isinstance(r, Document) else f"{r.bucket}:{r.reason}" for r in recs)


def dump(pages: str, site: str = "") -> bytes:
    return (f'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
            f"{site}{pages}</mediawiki>\n").encode()


def page(title: str, text: str, ns: int = 0, redirect: str | None = None) -> str:
    esc = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    red = f'<redirect title="{redirect}" />' if redirect else ""
    return (f"<page><title>{title}</title><ns>{ns}</ns><id>1</id>{red}<revision><id>2</id>"
            f"<timestamp>2016-04-22T10:19:33Z</timestamp><text xml:space=\"preserve\">{esc}</text></revision></page>\n")


PROSE = "The town has a long history of trade and farming along the river valley."


# ------------------------------------------------------------------ the real dump

def test_a_real_dump_gives_every_article_as_prose_and_counts_every_page(tmp_path):
    recs = read(wiki_dump())
    assert outcomes(recs) == {"doc": 106, "filtered:wiki_redirect": 99, "filtered:wiki_namespace": 1}
    docs = [r for r in recs if isinstance(r, Document)]
    first = docs[0]
    assert (first.title, first.url, first.date) == ("Anarchism", "https://en.wikipedia.org/wiki/Anarchism",
                                                    "2016-04-22T10:19:33Z")
    assert first.text.startswith("Anarchism is a political philosophy that advocates self-governed societies")
    text = "\n".join(d.text for d in docs)
    assert sum(len(d.text.split()) for d in docs) > 350_000
    for residue in ("{{", "}}", "[[", "]]", "<ref", "&nbsp;", "&lt;", "thumb|", "Category:", "''"):
        assert residue not in text, residue
    assert not re.search(r"^\s*(=.*=|[*#:;|!])", text, re.M)  # no heading, list or table line
    assert "Mount Tahat (3003 m)." in text  # {{formatnum: 3003}} renders its number


def test_a_multistream_dump_reads_as_one_stream(tmp_path):
    """pages-articles-multistream.xml.bz2: the header, each run of 100 pages and the end are bz2 streams of their own."""
    raw = bz2.decompress(open(wiki_dump(), "rb").read())
    starts = [m.start() for m in re.finditer(rb"  <page>", raw)] + [raw.index(b"</mediawiki>")]
    cuts = [0, *starts[:-1:100], starts[-1], len(raw)]
    (p := tmp_path / "enwiki-pages-articles-multistream.xml.bz2").write_bytes(
        b"".join(bz2.compress(raw[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)))
    assert outcomes(read(p)) == {"doc": 106, "filtered:wiki_redirect": 99, "filtered:wiki_namespace": 1}


def test_a_dump_is_recognised_by_its_content_whatever_its_name(tmp_path):
    data = dump(page("Town", PROSE))
    for name in ("pages.xml", "pages", "pages.xml.gz"):
        p = tmp_path / name
        p.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        (doc,) = read(p)
        assert isinstance(doc, Document) and doc.text == PROSE and doc.title == "Town", name
    (p := tmp_path / "other.txt").write_bytes(b"plain text, not a dump\n")
    (rej,) = read(p, format="wikipedia")
    assert (rej.bucket, rej.reason) == ("rejected", "malformed_xml") and "not a Wikipedia dump" in rej.snippet


def test_broken_xml_keeps_the_pages_before_it_and_counts_the_rest(tmp_path):
    data = dump(page("A", PROSE) + page("B", PROSE))
    cut = data[:data.index(b"<page>", data.index(b"</page>")) + 40]  # inside the second page
    (p := tmp_path / "cut.xml").write_bytes(cut)
    recs = read(p)
    assert outcomes(recs) == {"doc": 1, "rejected:malformed_xml": 1}
    assert recs[1].position == "after page 0"


def test_a_document_type_declaration_is_refused_not_expanded(tmp_path):
    """Entity expansion ("billion laughs") lives in the DTD: a dump has none; one ends the file."""
    lol = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
    data = (f'<?xml version="1.0"?><!DOCTYPE mediawiki [<!ENTITY l0 "lol">{lol}]>'.encode()
            + dump("<page><title>A</title><ns>0</ns><revision><text>&l9;</text></revision></page>"))
    (p := tmp_path / "bomb.xml").write_bytes(data)
    (rej,) = read(p)
    assert rej.reason == "malformed_xml" and "document type" in rej.snippet


def test_a_page_over_the_cap_is_filtered_as_too_large(tmp_path):
    (p := tmp_path / "big.xml").write_bytes(dump(page("Big", PROSE * 200) + page("Small", PROSE)))
    assert outcomes(read(p, max_record_bytes=4000)) == {"filtered:max_doc_bytes": 1, "doc": 1}


def test_the_dump_s_own_namespace_names_drop_its_file_and_category_links(tmp_path):
    site = ('<siteinfo><base>https://de.wikipedia.org/wiki/Wikipedia:Hauptseite</base><namespaces>'
            '<namespace key="6">Datei</namespace><namespace key="14">Kategorie</namespace></namespaces></siteinfo>')
    text = f"[[Datei:Fluss.jpg|mini|Der [[Fluss]] im Sommer.]]\n{PROSE}\n[[Kategorie:Stadt]]"
    (p := tmp_path / "de.xml").write_bytes(dump(page("Stadt am Fluss", text), site))
    (doc,) = read(p)
    assert doc.text == PROSE and doc.url == "https://de.wikipedia.org/wiki/Stadt_am_Fluss"


# ------------------------------------------------------------------ the markup

def test_templates_go_except_the_ones_that_render_text():
    wt = ("{{Infobox settlement|name=Town|population={{formatnum:1200}}}}The town ({{IPAc-en|t|aʊ|n}}) lies "
          "{{convert|5|km|mi}} from the coast and {{convert|5|-|10|km}} from the hills; its name is "
          "{{lang|fr|la ville}}{{snd}}{{nowrap|a place}} of trade {{as of|2014|5|lc=y}}.{{citation needed|date=May}}")
    assert plain_text(wt) == ("The town lies 5 km from the coast and 5 - 10 km from the hills; its name is la ville "
                              "\u2013 a place of trade as of May 2014.")


def test_links_become_their_text():
    wt = ("[[File:Map.png|thumb|A [[map]] of the [[river]].]]The [[river|River Aire]] feeds [[mill]]s near "
          "[[Leeds#History]], as [[:Category:Rivers]] lists; see [[Aire (river)|]] and "
          "[http://example.org the survey] [http://example.org].[[Category:Rivers]][[fr:Aire]]")
    assert plain_text(wt) == ("The River Aire feeds mills near Leeds, as Category:Rivers lists; see Aire and "
                              "the survey.")


def test_lists_tables_headings_and_apparatus_sections_go():
    wt = (f"'''Town''' is a ''small'' place.&nbsp;{PROSE}<ref name=a>{{{{cite web|url=x}}}}</ref><ref name=a/>\n"
          "<!-- a comment -->\n== History ==\n* a list item.\n# another.\n: an indented line.\n"
          f"{{| class=wikitable\n|-\n| a cell || {{|\n| nested |}}\n|}}\n{PROSE}\n"
          "continued on a second line.<math>x^2</math>\n\n== See also ==\nA line of the apparatus.\n"
          "=== Sub ===\nStill apparatus.\n== Economy ==\nTrade grows.<br/>Again.\n__NOTOC__")
    assert plain_text(wt).split("\n") == [f"Town is a small place. {PROSE}",
                                          f"{PROSE} continued on a second line.", "Trade grows. Again."]


def test_apparatus_sections_go_in_other_languages_too_but_only_as_sections_of_their_own():
    wt = f"{PROSE}\n== Einzelnachweise ==\nEin Satz der Belege.\n== Geschichte ==\n{PROSE}\n== Voir aussi ==\nAutre."
    assert plain_text(wt).split("\n") == [PROSE, PROSE]
    culture = f"== Culture ==\n=== Notes ===\n{PROSE}\n== References ==\nA citation."  # a subsection named so
    assert plain_text(culture) == PROSE


def test_unbalanced_markup_loses_no_prose():
    assert plain_text(f"{{{{Unclosed template|{PROSE}") == f"Unclosed template|{PROSE}"
    assert plain_text(f"{PROSE}}}}} [[Unclosed link") == f"{PROSE} Unclosed link"


def test_hostile_markup_costs_time_linear_in_the_page():
    """A megabyte of markup never closed (references, external links, templates, links) is stripped in
    seconds: a regular expression per opening that scans on to the end took 40 s for 280 KB of <ref>."""
    import time

    for unit in ("<ref>x ", "[http://x ", "{{a|[[b|", "<math>", "<!--", "{|\n", "'''''x "):
        text = unit * (1_000_000 // len(unit))
        t0 = time.process_time()
        plain_text(text)
        assert time.process_time() - t0 < 10, unit


# ------------------------------------------------------------------ WikiExtractor output

EXTRACTED = (b'<doc id="12" url="https://en.wikipedia.org/wiki?curid=12" title="Tom &amp; Jerry">\n'
             b"Tom & Jerry\n\n" + PROSE.encode() + b"\nSecond paragraph.\n</doc>\n"
             b'<doc id="13" url="https://en.wikipedia.org/wiki?curid=13" title="Empty">\n</doc>\n'
             b"stray text outside\n"
             b'<doc id="14" url="u" title="Cut">\nCut\n\n' + PROSE.encode() + b"\n")


def test_wikiextractor_files_give_one_document_per_doc_element(tmp_path):
    (p := tmp_path / "wiki_00").write_bytes(EXTRACTED)
    recs = read(p)
    assert [("doc" if isinstance(r, Document) else r.reason) for r in recs] == ["doc", "doc", "parse_error", "doc"]
    first = recs[0]
    assert (first.title, first.url, first.text) == ("Tom & Jerry", "https://en.wikipedia.org/wiki?curid=12",
                                                     f"{PROSE}\nSecond paragraph.")
    assert recs[1].text == "" and recs[3].text == PROSE  # an empty doc is a record; a cut one is kept
    assert "stray text outside" in recs[2].snippet


def test_wikiextractor_output_tarred_is_read_file_by_file(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in (("text/AA/wiki_00", EXTRACTED), ("text/AA/wiki_01", dump(page("X", PROSE))),
                           ("text/README", b"A plain member stays one document.\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    (p := tmp_path / "wiki.tar.gz").write_bytes(buf.getvalue())
    recs = read(p)
    assert outcomes(recs) == {"doc": 5, "rejected:parse_error": 1}
    assert recs[-1].text == "A plain member stays one document.\n"


# ------------------------------------------------------------------ through the build

def test_a_build_of_a_real_dump_reports_its_redirects_and_articles(tmp_path):
    raw = tmp_path / "enwiki-pages-articles1.xml.bz2"
    raw.write_bytes(bz2.compress(bz2.decompress(open(wiki_dump(), "rb").read())[:1_500_000]
                                 .rsplit(b"</page>", 1)[0] + b"</page></mediawiki>"))
    r = run_python(["-m", "pipelines.build", "--input", f"wiki={raw}", "--output", str(tmp_path / "o"),
                    "--vocab_size", "2000", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    pages = report["totals"]["input"]
    assert report["reasons"]["filtered:wiki_redirect"] >= 10 and report["totals"]["kept"] >= 10
    assert pages == sum(report["totals"][k] for k in ("kept", "duplicate", "filtered", "rejected"))
    assert pages == len(re.findall(rb"<page>", bz2.decompress(raw.read_bytes())))


def test_a_dump_s_redirects_are_no_warning_but_a_rule_removing_most_pages_is():
    """Most pages of a pages-articles dump are redirects and other namespaces: the build's 'a rule removed
    most of a source' warning is for rules a setting can change, not for the dump's structure."""
    from pipelines.report.record import build_warnings

    def warnings(filtered: dict[str, int]) -> list[str]:
        accounting = {"wiki": {"input": 100, "filtered": filtered}}
        return build_warnings({"config": {"packing": {"valid_fraction": 0}}, "totals": {}, "accounting": accounting})

    assert warnings({"wiki_redirect": 60, "wiki_namespace": 20}) == []
    (line,) = warnings({"wiki_redirect": 20, "min_words": 60})
    assert line.startswith("warning: filtered rule 'min_words' removed 60 of 100 documents"), line
