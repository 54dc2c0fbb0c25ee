"""A synthetic corpus with known duplicates, and the scoring of a dedupe run against it.

Used by tests/test_dedupe.py, tests/test_dedupe_wiring.py and the dedupe benchmarks
(benchmarks/bench_dedupe.py's quality half; bench_near_dedupe.py runs ``run_dedupe``): per family an
original, exact copies and near copies at known word edit rates, plus unrelated documents; the
ground truth says which is which, and ``evaluate`` turns a list of ``Duplicate`` records into
precision / recall against it (with true Jaccard computed independently of our hashing).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from pipelines.records import Document, Duplicate, make_doc_id
from tests.reference import true_jaccard, true_near

EDIT_RATES = (0.01, 0.02, 0.05, 0.10, 0.15, 0.20)
SOURCES = ("ccnews", "openwebtext", "stories")


# ------------------------------------------------------------------ corpus

@dataclass(frozen=True)
class Truth:
    """What a generated document is: its family, how it was made, and the edit rate of a near copy."""

    family: int
    kind: str  # original | exact | near | unrelated
    rate: float = 0.0


def _vocab(rng: random.Random, n: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = set()
    while len(words) < n:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(2, 9))))
    return sorted(words)


def _text(words: list[str], rng: random.Random) -> str:
    """Words as sentences with capitals and punctuation (so normalization matters)."""
    out, i = [], 0
    while i < len(words):
        n = rng.randint(6, 18)
        sent = words[i : i + n]
        out.append(sent[0].capitalize() + " " + " ".join(sent[1:]) + rng.choice([".", "!", "?", "."]))
        i += n
    return " ".join(out)


def _edit(words: list[str], rate: float, rng: random.Random, vocab: list[str], weights: list[float]) -> list[str]:
    """Word substitutions, insertions and deletions, each word edited with probability ``rate``."""
    out: list[str] = []
    for w in words:
        if rng.random() >= rate:
            out.append(w)
            continue
        op = rng.randrange(3)
        if op == 0:
            out.append(rng.choices(vocab, cum_weights=weights)[0])
        elif op == 1:
            out.extend([w, rng.choices(vocab, cum_weights=weights)[0]])
        # op == 2: deletion
    return out


def make_corpus(families: int, unrelated: int, words: int = 300, exact_per_family: int = 1,
                seed: int = 0) -> tuple[list[Document], dict[str, Truth]]:
    """A shuffled corpus: per family an original, exact copies (case/punctuation/space changes)
    and one near copy per edit rate; plus unrelated documents. Sources are mixed at random,
    so many duplicates cross sources."""
    rng = random.Random(seed)
    vocab = _vocab(rng, 20_000)
    cum, acc = [], 0.0
    for r in range(len(vocab)):
        acc += 1.0 / (r + 1) ** 1.05  # Zipf-like word frequencies
        cum.append(acc)
    raw: list[tuple[str, Truth]] = []
    for f in range(families):
        base = rng.choices(vocab, cum_weights=cum, k=rng.randint(words // 2, words * 3 // 2))
        original = _text(base, rng)
        raw.append((original, Truth(f, "original")))
        for _ in range(exact_per_family):
            copy = original.upper() if rng.random() < 0.5 else original.replace(".", " ;  ").replace(" ", "  ")
            raw.append((copy, Truth(f, "exact")))
        for rate in EDIT_RATES:
            raw.append((_text(_edit(base, rate, rng, vocab, cum), rng), Truth(f, "near", rate)))
    for u in range(unrelated):
        body = rng.choices(vocab, cum_weights=cum, k=rng.randint(words // 2, words * 3 // 2))
        raw.append((_text(body, rng), Truth(families + u, "unrelated")))
    order = list(range(len(raw)))
    rng.shuffle(order)  # doc_id order unrelated to which copy is the original
    docs, truth = [], {}
    for idx, k in enumerate(order):
        text, t = raw[k]
        src = rng.choice(SOURCES)
        doc_id = make_doc_id(src, f"synthetic-{seed}", idx)
        docs.append(Document(doc_id=doc_id, source=src, text=text))
        truth[doc_id] = t
    return docs, truth


# ------------------------------------------------------------------ quality

def evaluate(docs: list[Document], truth: dict[str, Truth], duplicates: list[Duplicate], ngram: int = 5,
             threshold: float = 0.8, recall_at: float = 0.85, cfg=None) -> dict[str, object]:
    """Precision / recall of a dedupe result against the generated ground truth.

    ``ngram`` and ``recall_at`` define the pairs recall counts (true Jaccard at
    least ``recall_at``). ``near_verified_frac``: the share of near removals
    that pass ``cfg``'s rule (``true_near``), or without ``cfg``, whose true
    ``ngram`` Jaccard reaches ``threshold``.
    """
    text = {d.doc_id: d.text for d in docs}
    root = {d.doc_id: d.doc_id for d in docs}
    for dup in duplicates:
        root[dup.doc_id] = dup.dup_of
    removed = len(duplicates)
    same_family = sum(truth[d.doc_id].family == truth[d.dup_of].family for d in duplicates)
    near = [d for d in duplicates if d.kind == "near"]
    if cfg is not None:
        near_ok = sum(true_near(text[d.doc_id], text[d.dup_of], cfg) for d in near)
    else:
        near_ok = sum(true_jaccard(text[d.doc_id], text[d.dup_of], ngram) >= threshold for d in near)

    by_family: dict[int, list[str]] = defaultdict(list)
    for doc_id, t in truth.items():
        by_family[t.family].append(doc_id)
    removed_ids = {d.doc_id for d in duplicates}
    pairs_hi = caught_hi = clustered_hi = 0
    for members in by_family.values():
        for a, b in combinations(sorted(members), 2):
            if true_jaccard(text[a], text[b], ngram) >= recall_at:
                pairs_hi += 1
                # Caught: the corpus no longer holds both (at least one was removed).
                caught_hi += a in removed_ids or b in removed_ids
                clustered_hi += root[a] == root[b]
    # Per edit rate: near copy vs its original; how often the copy itself was removed.
    per_rate: dict[float, list[float]] = defaultdict(lambda: [0, 0, 0, 0.0])
    originals = {t.family: doc_id for doc_id, t in truth.items() if t.kind == "original"}
    for doc_id, t in truth.items():
        if t.kind == "near":
            orig = originals[t.family]
            row = per_rate[t.rate]
            row[0] += 1
            row[1] += doc_id in removed_ids
            row[2] += root[doc_id] == root[orig]
            row[3] += true_jaccard(text[doc_id], text[orig], ngram)
    exact_docs = [d for d, t in truth.items() if t.kind == "exact"]
    exact_caught = sum(root[d] == root[originals[truth[d].family]] for d in exact_docs)
    return {
        "removed": removed,
        "precision": same_family / removed if removed else 1.0,
        "near_removed": len(near),
        "near_verified_frac": near_ok / len(near) if near else 1.0,
        "pairs_at_recall_threshold": pairs_hi,
        "recall": caught_hi / pairs_hi if pairs_hi else 1.0,
        "recall_same_cluster": clustered_hi / pairs_hi if pairs_hi else 1.0,
        "dup_of_kept": all(root[d.dup_of] == d.dup_of for d in duplicates),
        "exact_recall": exact_caught / len(exact_docs) if exact_docs else 1.0,
        "per_rate": {r: (v[0], v[1] / v[0], v[2] / v[0], v[3] / v[0]) for r, v in sorted(per_rate.items())},
    }


def _dump(items: list, path: str) -> None:
    Path(path).write_text("\n".join(json.dumps(dataclasses.asdict(x), sort_keys=True) for x in items))


def run_dedupe(docs: list[Document], cfg=None, index_in: str | None = None,
               index_out: str | None = None, index_root: str | None = None,
               local: bool = False) -> tuple[list[Document], list[Duplicate]]:
    """Run the Beam Deduplicate transform on FnApiRunner; (kept, duplicates), each sorted by doc_id.
    ``local``: wired as the build wires it on the local runner (``Deduplicate``'s ``one_machine``);
    else as on a distributed runner.

    Outputs travel through files: FnApiRunner pickles DoFns, so appending to a
    list in the driver would append to a copy.
    """
    import apache_beam as beam

    from pipelines.dedupe.deduplicate import Deduplicate
    from schemas.config import DedupeConfig

    cfg = cfg or DedupeConfig()
    with tempfile.TemporaryDirectory() as tmp:
        kept_path, dups_path = os.path.join(tmp, "kept.jsonl"), os.path.join(tmp, "dups.jsonl")
        # Input from a file, like the real readers (beam.Create would pickle and
        # bz2-compress the whole corpus into the pipeline graph, and time that).
        in_path = os.path.join(tmp, "docs.jsonl")
        _dump(docs, in_path)
        with beam.Pipeline(runner="FnApiRunner") as p:
            out = (
                p
                | "Read" >> beam.io.ReadFromText(in_path)
                | "Parse" >> beam.Map(lambda line: Document(**json.loads(line)))
                | Deduplicate(cfg, index_in=index_in, index_out=index_out, index_root=index_root,
                              one_machine=local)
            )
            _ = out["kept"] | "ListKept" >> beam.combiners.ToList() | "DumpKept" >> beam.Map(_dump, kept_path)
            _ = out["duplicates"] | "ListDups" >> beam.combiners.ToList() | "DumpDups" >> beam.Map(_dump, dups_path)

        def load(path: str, cls: type) -> list:
            text = Path(path).read_text()
            return sorted((cls(**json.loads(line)) for line in text.splitlines() if line), key=lambda x: x.doc_id)

        return load(kept_path, Document), load(dups_path, Duplicate)
