"""Near duplicates through the real build (cleaning first), by edit kind, beside datatrove's, on real text.

    python benchmarks/bench_clean_dedupe.py [--quick] [--out benchmarks/results/clean_dedupe.md]

Text: the prose paragraphs of the networkx, scipy, sympy, matplotlib and pandas docstrings
(``tests/docstring_prose.py``: ~168,000 words nobody here wrote, none of it in the other family sets).
Families (``tests/cleaning_families.py``, which describes every edit and negative): per base document
(~450 words, "news", and ~1,000, "long"; only bases that the cleaning rules keep) a truncation
mid-sentence, a web template (menus and a cookie line the line rules remove, a footer they keep),
a syndicated copy (3 % substituted, 5 words deleted, byline, source line), 3 / 4 / 5 % substitutions,
an excerpt of 30-60 % published alone, and the base quoted whole in a longer document; and six hard
negatives (the same template, two pages under one big menu, a shared lead, a shared first half, a
quotation of ~25 % of the base). A family's ids come in a random order, so its original is not
always the document a dedupe keeps first.

Methods, on the same JSONL file:

* ``shardforge build``: ``python -m pipelines.build`` with the default config on the file as source
  ``web`` (C4 line rules on); the verdicts read back from the build's reject log;
* ``shardforge build, earlier rule``: the same with ``containment_min_jaccard: 0.5``,
  ``before_line_rules: false`` and ``anchor_every: 0`` (the rule before, on today's clustering);
* ``shardforge dedupe alone``: the Beam ``Deduplicate`` on the raw texts (no cleaning: what the
  dedupe step finds when nothing cut lines);
* ``datatrove``: datatrove's MinHash dedup with its default ``MinhashConfig`` (5-gram shingles of
  its spaCy word tokenizer, 14 x 8, no verification; ``bench_near_dedupe.run_datatrove``) on the
  texts the build's cleaning kept (``pipelines.clean.rules.clean_batch``, the clean step's own
  function: the same texts the build's dedupe saw), and on the raw texts.

Scored by ``tests.cleaning_families.score``: a copy is caught when it and its original end at one
kept document (excerpts and quoted originals in the right direction: the shorter text removed); a
removal is wrong when it removes a negative or the longer quoting document, or points outside its
family at a text that does not hold it. Also: the true similarity per edit on the cleaned texts and
before the line rules, and the build's CPU seconds per input MB.
"""

from __future__ import annotations

import glob
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, command_line, machine, write_results  # noqa: E402
from pipelines.clean.normalize import normalize_text as clean_normalize  # noqa: E402
from pipelines.clean.rules import clean_batch, clean_document  # noqa: E402
from pipelines.dedupe.minhash import overlap, shingle_sets  # noqa: E402
from pipelines.records import Document  # noqa: E402
from schemas.config import CleanConfig, DedupeConfig  # noqa: E402
from tests.cleaning_families import NEGATIVES, SAME, Item, build_families, score  # noqa: E402
from tests.docstring_prose import docstring_documents  # noqa: E402

LENGTHS = {"news": (450, 30), "long": (1000, 12)}  # target words, bases
SOURCE = "web"
EARLIER = {"containment_min_jaccard": 0.5, "before_line_rules": False, "anchor_every": 0}


def write_items(items: list[Item], path: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps({"text": it.text}) + "\n")


def run_build(items: list[Item], tmp: Path, dedupe: dict | None = None) -> tuple[dict[str, str], set[str], float]:
    """The real build CLI on the items (one JSONL file): (doc_id -> dup_of, doc_ids that reached dedupe,
    CPU seconds of the build process). The build's doc ids are the file's line numbers."""
    raw = tmp / "web.jsonl"
    write_items(items, raw)
    out = tmp / f"out-{len(list(tmp.glob('out-*')))}"
    cmd = [sys.executable, "-m", "pipelines.build", "--input", f"{SOURCE}={raw}", "--output", str(out),
           "--vocab_size", "2000"]
    if dedupe:
        cfg = tmp / "build.json"
        cfg.write_text(json.dumps({"dedupe": dedupe}))
        cmd += ["--config", str(cfg)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    by_line = {f"{i:08d}": it.doc_id for i, it in enumerate(items)}
    dup_of: dict[str, str] = {}
    filtered: set[str] = set()
    for part in sorted(glob.glob(str(out / "versions" / "*" / "rejects" / "part-*.jsonl"))):
        for line in open(part, encoding="utf-8"):
            r = json.loads(line)
            d = by_line[r["doc_id"].rsplit("-", 1)[1]]
            if r["bucket"] == "duplicate":
                dup_of[d] = by_line[r["dup_of"].rsplit("-", 1)[1]]
            else:
                filtered.add(d)
    return dup_of, {it.doc_id for it in items} - filtered, cpu


def cleaned(items: list[Item]) -> dict[str, str]:
    """doc_id -> the text the build's clean step keeps (``clean_batch``, line rules on)."""
    docs = [Document(it.doc_id, SOURCE, it.text) for it in items]
    out = clean_batch(docs, CleanConfig(), {SOURCE: True})
    return {d.doc_id: r[0].text for d, r in zip(docs, out, strict=True) if type(r[0]) is Document}


def run_dedupe_alone(items: list[Item]) -> dict[str, str]:
    from tests.dedupe_corpus import run_dedupe

    _, dups = run_dedupe([Document(it.doc_id, SOURCE, it.text) for it in items], DedupeConfig())
    return {d.doc_id: d.dup_of for d in dups}


def run_datatrove(items: list[Item], texts: dict[str, str] | None) -> dict[str, str] | None:
    from benchmarks.bench_near_dedupe import run_datatrove as dt

    return dt([Item(it.doc_id, it.family, it.edit, texts[it.doc_id] if texts else it.text)
               for it in items if texts is None or it.doc_id in texts])


def similarity_rows(items: list[Item], texts: dict[str, str]) -> list[str]:
    """Per edit: median true 3-gram Jaccard and containment (the copy in its original) of the cleaned
    texts, and the median Jaccard of the texts before the line rules (normalized)."""
    orig = {it.family: it.doc_id for it in items if it.edit == "orig"}
    pairs = []
    for it in items:
        base = it.family if it.edit in SAME else it.family.rsplit("-", 1)[0]
        o = orig.get(base)
        if it.edit != "orig" and o in texts and it.doc_id in texts:
            pairs.append((it.edit, texts[it.doc_id], texts[o], it.text, next(x.text for x in items if x.doc_id == o)))
    rows: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for edit, copy, origin, copy_raw, origin_raw in pairs:
        a, b = shingle_sets([copy, origin], 3)
        ra, rb = shingle_sets([clean_normalize(copy_raw), clean_normalize(origin_raw)], 3)
        j, _ = overlap(a, b)
        inter = len(set(a.tolist()) & set(b.tolist()))
        rows[edit].append((j, inter / max(1, a.size), overlap(ra, rb)[0]))
    out = ["| edit | J (cleaned) | C: copy in original (cleaned) | J before the line rules |", "|---|---|---|---|"]
    for edit in (*SAME, *NEGATIVES):
        v = sorted(rows.get(edit, []))
        if v:
            med = [sorted(x[k] for x in v)[len(v) // 2] for k in range(3)]
            out.append(f"| {edit} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.2f} |")
    return out


def _row(name: str, q: dict | None, secs: float) -> str:
    if q is None:
        return f"| {name} | not installed |" + " |" * (len(SAME) + 3)
    cells = " | ".join(f"{a}/{b}" for a, b in (q["recall"][e] for e in SAME))
    return (f"| {name} | {q['same_recall']:.3f} | {q['wrong']} of {q['removed']} | {q['negatives_removed']} | "
            f"{cells} | {secs:.1f} |")


def method_rows(items: list[Item], texts: dict[str, str], tmp: Path, mb: float) -> list[str]:
    """One table row per method on one family set."""
    runs = [("shardforge build (default config)", lambda: run_build(items, tmp)),
            ("shardforge build, earlier rule (containment_min_jaccard 0.5, no cleaning path, no anchors)",
             lambda: run_build(items, tmp, EARLIER)),
            ("shardforge dedupe alone, raw text (no cleaning)", lambda: (run_dedupe_alone(items), None, 0.0)),
            ("datatrove 0.10 MinHash, default config, cleaned text", lambda: (run_datatrove(items, texts), None, 0.0)),
            ("datatrove 0.10 MinHash, default config, raw text", lambda: (run_datatrove(items, None), None, 0.0))]
    rows = []
    for name, fn in runs:
        t0 = time.perf_counter()
        dup_of, seen, cpu = fn()
        secs = time.perf_counter() - t0
        raw_run = "raw text" in name
        q = None if dup_of is None else score(items, dup_of, None if raw_run else (seen or set(texts)),
                                              None if raw_run else texts)
        rows.append(_row(name, q, secs))
        if cpu:
            rows[-1] += f" <!-- build CPU {cpu:.1f} s, {cpu / mb:.2f} CPU-s per input MB -->"
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = bench_parser(__doc__, "clean_dedupe")
    ap.add_argument("--quick", action="store_true", help="a third of the bases (a smoke run)")
    args = ap.parse_args()
    prose = docstring_documents()
    cfg = CleanConfig()

    def accept(text: str) -> bool:
        return type(clean_document(Document("x", SOURCE, text), cfg, True)) is Document

    lines = ["# Near duplicates through the build, by edit kind (bench_clean_dedupe.py)", "",
             f"Command: `{command_line()}`", "", machine("apache-beam", "datatrove", "spacy"), "",
             "Columns: recall over the copies of every edit (caught / copies whose text and original "
             "passed cleaning), wrong removals of all removals, negatives removed, seconds (wall).", ""]
    with tempfile.TemporaryDirectory() as scratch:
        for label, (words, bases) in LENGTHS.items():
            items = build_families(prose, words, max_bases=bases // 3 if args.quick else bases, accept=accept)
            texts = cleaned(items)
            mb = sum(len(it.text.encode()) for it in items) / 1e6
            lines += [f"## {label}: {sum(it.edit == 'orig' for it in items)} bases of ~{words} words, "
                      f"{len(items)} documents, {mb:.2f} MB; {len(items) - len(texts)} filtered by cleaning", "",
                      "| method | same-family recall | wrong removals | negatives removed | " + " | ".join(SAME)
                      + " | s |", "|---|---|---|---|" + "---|" * len(SAME) + "---|"]
            tmp = Path(scratch) / label
            tmp.mkdir()
            lines += method_rows(items, texts, tmp, mb)
            lines += ["", "True similarity to the original (medians):", ""] + similarity_rows(items, texts) + [""]
    lines += ["datatrove: its four file-based stages (signatures, buckets, clusters) in this process; a removed "
              "document's dup_of is the document its cluster keeps. It verifies nothing: every bucket collision "
              "removes.", ""]
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
