"""The PII stage: e-mail / IP / phone replaced by placeholders in kept documents, and nothing else changed.

Recall and precision on PII planted in real prose (``tests/pii_corpus.py``), precision on real prose
with numbers, dates and prices (gensim's Lee news and Wikipedia, the Python documentation's topics)
and on the installed packages' READMEs, dense in versions,
the clean step's outputs (counts, examples that show the placeholder, redacted reject snippets,
determinism), and a build through the real command line: the report counts PII per source and kind,
and no planted value is left anywhere in the corpus folder.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_python
from pii_corpus import HAZARDS, PLANTED, cases
from realtext import news_documents, wiki_documents

from pipelines.clean.pii import KINDS, find_spans, redact, rules_of
from pipelines.clean.rules import clean_batch
from pipelines.records import Document
from schemas.config import CleanConfig, PiiConfig

PLACEHOLDERS = {"email": "<EMAIL>", "ip": "<IP>", "phone": "<PHONE>"}


def every_kind(**kw) -> PiiConfig:
    return PiiConfig(email=True, ip=True, phone=True, email_placeholder="<EMAIL>", ip_placeholder="<IP>",
                     phone_placeholder="<PHONE>", **kw)


@pytest.mark.parametrize("case", cases(), ids=lambda c: f"{c.kind}:{c.value}")
def test_planted_pii_is_replaced_exactly_and_hazards_are_left_alone(case) -> None:
    out, found = redact(case.text, rules_of(every_kind()))
    assert out == case.expected(PLACEHOLDERS)
    assert (found is not None) == case.pii


def test_kinds_switch_off_one_by_one() -> None:
    for kind in KINDS:
        cfg = every_kind().model_copy(update={kind: False})
        rules = rules_of(cfg)
        for c in cases():
            if c.pii:
                expected = c.text if c.kind == kind else c.expected(PLACEHOLDERS)
                assert redact(c.text, rules)[0] == expected, (kind, c.value)


def test_defaults_are_email_and_public_ip_with_dolma_placeholders() -> None:
    rules = rules_of(PiiConfig())
    text = "Mail jane@example.com or visit 81.2.69.160, not 10.0.0.1; call (415) 555-0132."
    out, found = redact(text, rules)
    assert out == "Mail |||EMAIL_ADDRESS||| or visit |||IP_ADDRESS|||, not 10.0.0.1; call (415) 555-0132."
    assert found is not None and dict(found.counts) == {"email": 1, "ip": 1}
    assert redact("the router at 10.0.0.1", rules_of(every_kind(ip_public_only=False)))[0] == "the router at <IP>"


def test_real_prose_with_numbers_dates_and_prices_is_never_changed() -> None:
    """Every kind on, private addresses too: not one replacement in 3.3 MB of real prose."""
    import pydoc_data.topics

    docs = news_documents() + wiki_documents() + list(pydoc_data.topics.topics.values())
    text = "\n".join(docs)
    # What the prose holds that a loose pattern would take (counted, so the check means something).
    assert len(re.findall(r"\b\d[\d,.]*\b", text)) > 10_000
    assert len(re.findall(r"\b(?:1[5-9]|20)\d\d\b", text)) > 3_000  # years
    assert len(re.findall(r"[$£€]\s?\d", text)) > 200  # prices
    assert len(re.findall(r"\b\d+\.\d+\b", text)) > 600  # decimals and versions
    assert len(re.findall(r"\b\d+[-–]\d+\b", text)) > 200  # ranges, scores
    rules = rules_of(every_kind(ip_public_only=False))
    changed = [(i, find_spans(d, rules)) for i, d in enumerate(docs) if find_spans(d, rules)]
    assert changed == []


def test_package_readmes_dense_in_versions_lose_only_addresses() -> None:
    """The installed packages' METADATA (READMEs, release notes, dependency pins): thousands of dotted
    versions (``typing-extensions>=3.10.0.0``, ``binutils 2.22.90.20120727``), none taken for an IP
    address; every e-mail match is an address; with private addresses on, only addresses (loopback,
    private ranges, an IPv6 literal) are taken."""
    import glob
    import ipaddress
    import os

    site = [p for p in sys.path if p.endswith("site-packages")]
    files = sorted({f for s in site for f in glob.glob(os.path.join(s, "*.dist-info", "METADATA"))})
    texts = [open(f, encoding="utf-8", errors="replace").read() for f in files]
    joined = "\n".join(texts)
    assert len(re.findall(r"(?<![\d.])\d+\.\d+\.\d+(?![\d.])", joined)) > 1_000
    assert len(re.findall(r"(?<![\d.])\d+(?:\.\d+){3}(?![\d.])", joined)) > 20
    found: dict[str, list[str]] = {}
    for t in texts:
        for s, e, kind in find_spans(t, rules_of(PiiConfig())):
            found.setdefault(kind, []).append(t[s:e])
    assert "ip" not in found and len(found["email"]) > 100
    assert all(re.fullmatch(r"[\w.%'+-]+@(?:[\w-]+\.)+[A-Za-z]{2,}", v) for v in found["email"])
    private = [t[s:e] for t in texts for s, e, kind in find_spans(t, rules_of(PiiConfig(ip_public_only=False)))
               if kind == "ip"]
    assert all(ipaddress.ip_address(v) for v in private)  # 127.0.0.1, 192.168.0.1, ...
    assert all(v.startswith(("127.", "192.168.", "10.")) or ":" in v for v in private)


def test_aws_reference_prose_keeps_its_private_and_documentation_addresses() -> None:
    """botocore's API reference names e-mail addresses (replaced) and only private or documentation IP
    ranges (kept by default), with account ids and timestamps that are not phone numbers."""
    from realtext import aws_documents

    rules = rules_of(every_kind())
    kinds: dict[str, list[str]] = {}
    for d in aws_documents():
        for s, e, kind in find_spans(d, rules):
            kinds.setdefault(kind, []).append(d[s:e])
    assert "ip" not in kinds
    assert all("@" in v for v in kinds["email"]) and len(kinds["email"]) >= 15
    assert kinds.get("phone", []) == ["+1-555-010-0000"]


def test_no_backtracking_blowup_on_hostile_text() -> None:
    """Long runs of address characters, digits and dots: the work stays linear."""
    import time

    hostile = ("a" * 100_000 + "@" + "b." * 50_000 + "1.2." * 20_000 + "5" * 50_000 + " (415) " * 10_000
               + "x:" * 30_000)
    t = time.process_time()
    redact(hostile, rules_of(every_kind()))
    assert time.process_time() - t < 2.0


def test_clean_step_replaces_counts_and_shows_only_placeholders() -> None:
    news = news_documents(limit=3)
    docs = [Document("d0", "web", news[0] + " Write to jane.citizen@example.com or 81.2.69.160 today."),
            Document("d1", "web", news[1]),
            Document("d2", "web", "Too short, mail bob@example.org.")]
    cfg = CleanConfig(line_rules=False)
    out = clean_batch(docs, cfg, {"web": False})
    (kept, _, _, found), (plain, _, _, none), (rejected, _, _, no_report) = out
    assert "|||EMAIL_ADDRESS|||" in kept.text and "|||IP_ADDRESS|||" in kept.text
    assert "jane.citizen" not in kept.text and kept.words == len(kept.text.split())
    assert dict(found.counts) == {"email": 1, "ip": 1}
    assert all("example.com" not in ctx and "81.2.69" not in ctx for _, ctx in found.examples)
    assert plain.text == news[1] and none is None
    assert rejected.reason == "min_words" and "bob@" not in rejected.snippet and no_report is None
    assert out == clean_batch(docs, cfg, {"web": False})  # pure: same input, same output
    off = clean_batch(docs, CleanConfig(line_rules=False, pii=PiiConfig(email=False, ip=False)), {"web": False})
    assert off[0][0].text.endswith("jane.citizen@example.com or 81.2.69.160 today.") and off[0][3] is None


def _write_corpus(path: Path) -> tuple[list[str], int]:
    """Real news with PII planted in every fifth article: (the planted values, articles)."""
    articles = news_documents(limit=120)
    planted = []
    with open(path, "w", encoding="utf-8") as f:
        for i, text in enumerate(articles):
            if i % 5 == 0:
                email, ip = f"reader{i}.name@example-news.com.au", f"81.2.{i}.160"
                planted += [email, ip]
                text = f"{text} Readers can write to {email}; the server at {ip} logged the reply."
            f.write(json.dumps({"text": text}) + "\n")
    return planted, len(articles)


@pytest.mark.slow
def test_build_replaces_pii_and_reports_it_per_source_and_kind(tmp_path) -> None:
    raw = tmp_path / "raw.jsonl"
    planted, n = _write_corpus(raw)
    out = tmp_path / "corpus"
    res = run_python(["-m", "pipelines.build", "--input", f"news={raw}", "--output", str(out),
                      "--vocab_size", "400"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    pii = report["pii"]
    assert pii["kinds"]["email"]["on"] and pii["kinds"]["ip"]["on"] and not pii["kinds"]["phone"]["on"]
    kept = report["sources"]["news"]["kept"]
    # Every planted article is kept (they are real news), each holding one e-mail and one address.
    assert pii["sources"]["news"]["email"] == {"replaced": n // 5, "documents": n // 5} and kept > n // 2
    assert pii["sources"]["news"]["ip"] == {"replaced": n // 5, "documents": n // 5}
    assert [e["doc_id"] for e in pii["examples"]["email"]] == sorted(e["doc_id"] for e in pii["examples"]["email"])
    assert all("|||EMAIL_ADDRESS|||" in e["context"] for e in pii["examples"]["email"])
    html = (out / "report.html").read_text()
    assert "PII replaced" in html and "|||IP_ADDRESS|||" in html
    # No planted value anywhere in the corpus: the kept text (the clean intermediate, what the shards
    # encode), the reject log, the report, the manifest.
    kept_text = _clean_texts(out)
    assert len(kept_text) == kept and sum("|||EMAIL_ADDRESS|||" in t for t in kept_text) == n // 5
    for f in out.rglob("*"):
        if f.is_file() and f.suffix not in (".parquet", ".tar"):
            data = f.read_bytes()
            assert not any(v.encode() in data for v in planted), f
    assert not any(v in t for t in kept_text for v in planted)
    # Deterministic: the clean step in two other processes gives the same report and the same text.
    again = tmp_path / "again"
    res = subprocess.run([sys.executable, "-m", "pipelines.build", "--input", f"news={raw}", "--output", str(again),
                          "--vocab_size", "400", "--doc_processes", "2"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (again / "report.json").read_bytes() == (out / "report.json").read_bytes()
    assert _clean_texts(again) == kept_text
    # --pii none: the same corpus keeps them (the flag reaches the config).
    off = tmp_path / "off"
    res = run_python(["-m", "pipelines.build", "--input", f"news={raw}", "--output", str(off),
                      "--vocab_size", "400", "--pii", "none"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((off / "report.json").read_text())["pii"]["totals"] == {}
    assert sum(planted[0] in t for t in _clean_texts(off)) == 1


def _clean_texts(corpus: Path) -> list[str]:
    import pyarrow.parquet as pq

    return [t for p in sorted(corpus.rglob("clean/part-*.parquet")) for t in pq.read_table(p)["text"].to_pylist()]


def test_pii_flag_mistakes_are_one_line(tmp_path) -> None:
    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps({"text": "x"}) + "\n")
    res = run_python(["-m", "pipelines.build", "--input", str(raw), "--output",
                      str(tmp_path / "o"), "--pii", "email,phones"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: --pii 'email,phones': unknown kind(s) ['phones']; give a comma list of email, ip, phone, or none"]


def test_the_planted_set_covers_every_kind_and_hazard() -> None:
    assert {k for k, _, _ in PLANTED} == set(KINDS)
    assert {"version", "date", "price", "number", "private-ip", "isbn"} <= {k for k, _, _ in HAZARDS}
