"""Near-duplicate edit families built from real news, and their scoring against a dedupe result.

The corpus of ``benchmarks/bench_near_dedupe.py`` (its docstring describes every edit family and
negative) and of the real-text near-dedupe test in tests/test_dedupe.py. Base documents are runs
of consecutive Lee news articles (``tests/realtext.py``) reaching a target word count; articles
0-199 make bases, the rest is held out for inserted paragraphs, boilerplate and the bodies of the
negatives. A paragraph is three consecutive sentences (``pipelines.clean.sentences.split_sentences``).
Each base gets one copy per edit family (``copies`` with other seeds) and three negatives that
must not be merged with it. ``score`` reads a dedupe result (doc_id -> dup_of) against the families:
recall per edit family, same-article recall, precision and negatives merged.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from pipelines.clean.sentences import split_sentences

SAME_ARTICLE = ("boilerplate", "sent_reorder", "para_reorder", "para_insert", "para_delete", "block_insert",
                "block_delete", "syndication", "sub1", "sub2", "sub3", "sub5")
GRADED = ("sub10", "sub20")
FAMILIES = SAME_ARTICLE + GRADED
NEGATIVES = ("neg_template", "neg_lead", "neg_half")
BLOCK_SHARE = 0.35  # block_insert / block_delete: at least this share of the paragraphs, consecutive
BASE_ARTICLES = 200  # articles 0..199 make base documents; the rest is held out
PARA_SENTENCES = 3




@dataclass(frozen=True)
class Item:
    """One benchmark document: its text, the family it belongs to and the edit that made it."""

    doc_id: str
    family: str
    edit: str  # "orig", a FAMILIES name or a NEGATIVES name
    text: str


def _paragraphs(articles: list[str]) -> list[list[str]]:
    sents = [s for a in articles for s in split_sentences(a)]
    return [sents[i:i + PARA_SENTENCES] for i in range(0, len(sents), PARA_SENTENCES)]


def _join(paras: list[list[str]]) -> str:
    return "\n\n".join(" ".join(p) for p in paras if p)


def _substitute(text: str, rate: float, rng: random.Random, vocab: list[str]) -> str:
    words = text.split(" ")
    for i in rng.sample(range(len(words)), max(1, round(rate * len(words)))):
        words[i] = rng.choice(vocab)
    return " ".join(words)


def _delete_words(text: str, n: int, rng: random.Random) -> str:
    words = text.split(" ")
    drop = set(rng.sample(range(len(words)), min(n, len(words) - 1)))
    return " ".join(w for i, w in enumerate(words) if i not in drop)


def _bases(articles: list[str], target_words: int) -> list[list[str]]:
    """Runs of consecutive articles whose word count is as close to ``target_words`` as the articles allow."""
    out, cur, n = [], [], 0
    for a in articles:
        k = len(a.split())
        if cur and n + k - target_words > target_words - n:  # adding it would overshoot more than stopping
            out.append(cur)
            cur, n = [], 0
        cur.append(a)
        n += k
    return out


def build_corpus(articles: list[str], target_words: int, copies: int = 1, max_bases: int | None = None,
                 seed: int = 0) -> list[Item]:
    """Originals, edited copies of every family and the negatives, for one document length."""
    rng = random.Random(seed)
    held = articles[BASE_ARTICLES:]
    held_paras = _paragraphs(held)
    vocab = sorted({w for a in articles for w in a.split()})
    header, footer = " ".join(held_paras[0]), " ".join(held_paras[1])
    pool = held_paras[2:]
    bases = _bases(articles[:BASE_ARTICLES], target_words)[:max_bases]
    items: list[Item] = []
    for b, base in enumerate(bases):
        fam = f"{target_words}-{b:04d}"
        paras = _paragraphs(base)
        text = _join(paras)
        items.append(Item(f"{fam}-0", fam, "orig", text))
        for c in range(copies):
            for edit in FAMILIES:
                if edit.startswith("sub"):
                    t = _substitute(text, int(edit[3:]) / 100, rng, vocab)
                elif edit == "para_insert":
                    p = list(paras)
                    p.insert(rng.randrange(1, len(p) + 1), rng.choice(pool))
                    t = _join(p)
                elif edit == "para_delete":
                    p = list(paras)
                    del p[rng.randrange(1, len(p))]
                    t = _join(p)
                elif edit in ("block_insert", "block_delete"):
                    k = max(1, math.ceil(BLOCK_SHARE * len(paras)))
                    p = list(paras)
                    at = rng.randrange(1, len(p) - k + 1) if len(p) > k else 1
                    if edit == "block_delete":
                        del p[at:at + k]
                    else:
                        p[at:at] = rng.sample(pool, k)
                    t = _join(p)
                elif edit == "boilerplate":
                    t = header + "\n\n" + text + "\n\n" + footer
                elif edit == "sent_reorder":
                    t = _join([rng.sample(p, len(p)) for p in paras])
                elif edit == "para_reorder":
                    t = _join(rng.sample(paras, len(paras)))
                else:  # syndication
                    t = _delete_words(_substitute(text, 0.03, rng, vocab), 5, rng)
                items.append(Item(f"{fam}-1{edit}-{c}", fam, edit, t))
        # Negatives: held-out text of the base's length, in the shared template / after the shared lead.
        # Bodies are random held-out paragraphs (two bodies share ~2% of them), not runs that would overlap.
        n_words = len(text.split())
        k = max(2, round(len(paras) * n_words / max(1, sum(len(" ".join(p).split()) for p in paras))))
        items.append(Item(f"{fam}-2neg_template", f"{fam}-neg_template", "neg_template",
                          header + "\n\n" + _join(rng.sample(pool, k)) + "\n\n" + footer))
        items.append(Item(f"{fam}-2neg_lead", f"{fam}-neg_lead", "neg_lead",
                          _join([paras[0]] + rng.sample(pool, len(paras) - 1))))
        half = len(paras) // 2
        items.append(Item(f"{fam}-2neg_half", f"{fam}-neg_half", "neg_half",
                          _join(paras[:half] + rng.sample(pool, len(paras) - half))))
    return items


def score(items: list[Item], dup_of: dict[str, str]) -> dict:
    """Recall per edit family, same-article recall, precision and negatives merged, from doc_id -> dup_of."""
    fam = {it.doc_id: it.family for it in items}

    def rep(d: str) -> str:
        return dup_of.get(d, d)

    orig = {it.family: it.doc_id for it in items if it.edit == "orig"}
    hit: dict[str, list[bool]] = defaultdict(list)
    for it in items:
        if it.edit in FAMILIES:
            hit[it.edit].append(rep(it.doc_id) == rep(orig[it.family]))
    removed = len(dup_of)
    correct = sum(fam[d] == fam[t] for d, t in dup_of.items())
    same = [h for e in SAME_ARTICLE for h in hit[e]]
    neg = [it for it in items if it.edit in NEGATIVES]
    return {
        "recall": {e: float(np.mean(hit[e])) for e in FAMILIES if hit[e]},
        "same_article_recall": float(np.mean(same)),
        "precision": correct / removed if removed else 1.0,
        "removed": removed,
        "false_removals": removed - correct,
        "negatives_merged": sum(d.doc_id in dup_of or any(t == d.doc_id for t in dup_of.values()) for d in neg),
        "negatives": len(neg),
    }
