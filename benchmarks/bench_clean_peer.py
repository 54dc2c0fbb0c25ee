"""Benchmark: Gopher's document rules, ours against datatrove's, on the same real text.

Both implement the rules of Rae et al. 2021 (Gopher, Table A1: word count, mean word length,
symbol / word ratio, bullet and ellipsis lines, alphabetic words, stop words, duplicate lines and
paragraphs, top 2-4-gram shares, duplicated 5-10-gram shares) with the paper's thresholds.
On each document of three real corpora nobody here wrote (``tests/realtext.py``: Lee news, English
Wikipedia articles, the AWS API reference prose botocore ships), normalized by our stage, this runs
our rules (``pipelines.clean.rules.clean_document`` with C4's line rules, the page rules,
``min_sentences`` and the language rule off: Gopher's rules alone) and datatrove's
``GopherQualityFilter`` then ``GopherRepetitionFilter`` (their defaults), in datatrove's own virtual
environment (``--datatrove-python``), and prints where the two decide alike, and where not, why:

* per disagreement, the statistic of the rule behind it both ways: the duplicated 5-gram share by
  the paper's definition (every occurrence of a repeated n-gram, overlaps counted once, over the
  words' characters: ``tests.reference.naive_dup_ngram_frac`` on our words) and as datatrove counts it (an
  occurrence after the first, then a jump of n words, over all the text's characters); the share
  of words with a letter over whitespace words and over datatrove's word tokens (punctuation
  tokens among them);
* that our ``dup_ngrams`` decision is the plain definition's (the reference's 5- to 10-gram shares
  on our words, against the paper's limits) on every document it kept or removed for that rule;
* each side's CPU time per MB (the rules alone; both pay for their own word splitting).

Run: ``python benchmarks/bench_clean_peer.py --datatrove-python /tmp/dtvenv/bin/python``
(``python -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install datatrove regex nltk spacy``).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from benchmarks.common import bench_parser, command_line, machine, run_in_venv, write_results  # noqa: E402
from pipelines.clean.normalize import normalize_text  # noqa: E402
from pipelines.clean.rules import clean_document  # noqa: E402
from pipelines.clean.stats import words_of  # noqa: E402
from pipelines.records import Document, Reject  # noqa: E402
from schemas.config import CleanConfig  # noqa: E402
from tests.realtext import aws_documents, news_documents, wiki_documents  # noqa: E402
from tests.reference import naive_dup_ngram_frac  # noqa: E402

# Gopher's rules alone: not C4's (line rules, min_sentences), not the page rules, not the language rule.
NOT_GOPHER = ["language", "min_sentences", "markup", "lorem_ipsum", "curly_braces"]
# The paper's duplicated n-gram limits (n -> share), as both sides use them.
DUP_LIMITS = {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}

DATATROVE_RUNNER = r"""
import json, sys, time
from datatrove.data import Document
from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter
from datatrove.pipeline.filters.gopher_repetition_filter import find_all_duplicate
from datatrove.utils.text import split_into_words
texts = json.load(open(sys.argv[1]))
quality, repetition = GopherQualityFilter(), GopherRepetitionFilter()
reasons, cpu = [], time.process_time()
for i, t in enumerate(texts):
    doc = Document(text=t, id=str(i))
    r = quality.filter(doc)
    if r is True:
        r = repetition.filter(doc)
    reasons.append(None if r is True else (r[1] if isinstance(r, tuple) else "removed"))
cpu = time.process_time() - cpu
stats = []
for t in texts:
    words = split_into_words(t, "en")
    stats.append({"alpha": sum(any(c.isalpha() for c in w) for w in words) / max(1, len(words)),
                  "dup5": find_all_duplicate(words, 5) / max(1, len(t))})
from importlib.metadata import version
json.dump({"reasons": reasons, "cpu": cpu, "stats": stats,
           "versions": {p: version(p) for p in ("datatrove", "nltk", "spacy")}}, open(sys.argv[2], "w"))
"""


def corpora() -> dict[str, list[str]]:
    return {"Lee news": news_documents(), "Wikipedia": wiki_documents(), "AWS reference": aws_documents()}


def ours(texts: list[str], source: str) -> tuple[list[str | None], float]:
    """Our reason per text (None: kept), and the CPU seconds of the rules."""
    cfg = CleanConfig(languages=[], disabled_rules=NOT_GOPHER)
    docs = [Document(doc_id=f"{source}-{i}", source=source, text=t) for i, t in enumerate(texts)]
    cpu = time.process_time()
    out = [clean_document(d, cfg, False) for d in docs]
    cpu = time.process_time() - cpu
    return [r.reason if isinstance(r, Reject) else None for r in out], cpu


def run_datatrove(python: str, texts: list[str]) -> dict[str, Any]:
    return run_in_venv(python, DATATROVE_RUNNER, texts)


def paper_dup_fail(words: list[str]) -> bool:
    """Gopher's duplicated n-gram rule by its definition, in plain Python, over our words."""
    return any(naive_dup_ngram_frac(words, n) > t for n, t in DUP_LIMITS.items())


def median(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f}" if xs else "-"


def report(rows: list[dict[str, Any]], cpu: dict[str, float], mb: float) -> list[str]:
    lines = ["| corpus | documents | kept: ours | kept: datatrove | same decision |", "|---|---|---|---|---|"]
    for name in dict.fromkeys(r["corpus"] for r in rows):
        sub = [r for r in rows if r["corpus"] == name]
        same = sum((r["ours"] is None) == (r["dt"] is None) for r in sub)
        lines.append(f"| {name} | {len(sub):,} | {sum(r['ours'] is None for r in sub):,} | "
                     f"{sum(r['dt'] is None for r in sub):,} | {same:,} ({same / len(sub):.1%}) |")
    same = sum((r["ours"] is None) == (r["dt"] is None) for r in rows)
    lines.append(f"| all | {len(rows):,} | {sum(r['ours'] is None for r in rows):,} | "
                 f"{sum(r['dt'] is None for r in rows):,} | **{same:,} ({same / len(rows):.1%})** |")
    lines += ["", "Where they differ: our reason / datatrove's, with the statistic behind it both ways (medians):", "",
              "| ours | datatrove | documents | dup. 5-gram share: paper / datatrove | words with a letter: "
              "whitespace words / datatrove's tokens |", "|---|---|---|---|---|"]
    split = Counter((r["ours"] or "kept", r["dt"] or "kept") for r in rows if (r["ours"] is None) != (r["dt"] is None))
    for (o, t), n in split.most_common():
        sub = [r for r in rows if (r["ours"] or "kept", r["dt"] or "kept") == (o, t)]
        lines.append(f"| {o} | {t} | {n:,} | {median([r['paper_dup5'] for r in sub])} / "
                     f"{median([r['dt_dup5'] for r in sub])} | {median([r['ws_alpha'] for r in sub])} / "
                     f"{median([r['dt_alpha'] for r in sub])} |")
    agree = sum((r["ours"] == "dup_ngrams") == r["paper_dup"] for r in rows if r["ours"] in (None, "dup_ngrams"))
    considered = sum(r["ours"] in (None, "dup_ngrams") for r in rows)
    lines += ["", f"Our `dup_ngrams` decision against the paper's definition in plain Python (every document our "
              f"rules kept or removed for it): the same on **{agree:,} of {considered:,}**.", "",
              f"CPU per MB of text ({mb:.1f} MB): ours {cpu['ours'] / mb:.3f} s, datatrove {cpu['datatrove'] / mb:.3f} s "
              f"(**{cpu['datatrove'] / cpu['ours']:.1f}x** ours)."]
    return lines


def main() -> int:
    ap = bench_parser(__doc__, "clean_peer")
    ap.add_argument("--datatrove-python", required=True, help="Python of a venv with datatrove installed.")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    cpu = {"ours": 0.0, "datatrove": 0.0}
    mb, versions = 0.0, ""
    for name, raw in corpora().items():
        texts = [normalize_text(t) for t in raw]
        mb += sum(len(t.encode()) for t in texts) / 1e6
        mine, spent = ours(texts, name.split()[0].lower())
        cpu["ours"] += spent
        dt = run_datatrove(args.datatrove_python, texts)
        cpu["datatrove"] += dt["cpu"]
        versions = ", ".join(f"{k} {v}" for k, v in dt["versions"].items())
        for t, o, d, s in zip(texts, mine, dt["reasons"], dt["stats"], strict=True):
            ws, words = t.split(), words_of(t)
            rows.append({"corpus": name, "ours": o, "dt": d, "dt_alpha": s["alpha"], "dt_dup5": s["dup5"],
                         "ws_alpha": sum(any(c.isalpha() for c in w) for w in ws) / max(1, len(ws)),
                         "paper_dup5": naive_dup_ngram_frac(words, 5), "paper_dup": paper_dup_fail(words)})
    lines = ["# Gopher's rules: ours against datatrove's", "", f"`{command_line()}`", "",
             f"Machine: {machine()}; the peer's venv: {versions}", "", *report(rows, cpu, mb)]
    print("\n".join(lines))
    write_results(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
