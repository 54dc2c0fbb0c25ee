"""Near-duplicate families that the cleaning stage acts on, from real docstring prose, and their scoring.

The corpus of ``benchmarks/bench_clean_dedupe.py`` and of the build-level near-dedupe test: edits a
web corpus is full of, made so that C4's line rules (which run before dedupe) change the copies.
Text: the prose paragraphs of networkx's and scipy's docstrings (``tests/docstring_prose.py``).
The first ``BASE_SHARE`` of the documents make base documents (runs of consecutive docstrings
reaching a target word count, one paragraph a line); the rest is held out for headers, footers,
quoting documents and the bodies of the negatives, each held-out paragraph used once.

Edits (one copy of each per base document; ``SAME`` must be caught):

- ``trunc``: the base cut mid-sentence at 30-90 % of its words, sometimes followed by "..." (the
  cut paragraph has no end mark, so the line rules drop it: the copy loses more than the cut);
- ``boilerplate``: a web page's template around the base: menu lines and a cookie notice (removed
  by the line rules) above, a held-out paragraph and a copyright line (kept) below;
- ``syndication``: 3 % of the words substituted, 5 deleted, a byline (removed) and a "first
  published" line (kept);
- ``sub3`` / ``sub4`` / ``sub5``: that share of the words replaced by random words of the corpus
  (a replaced last word takes its paragraph's full stop with it: the line rules drop that paragraph);
- ``excerpt``: a run of whole paragraphs from inside the base, 30-60 % of its words (a passage
  published on its own): it must be removed, the base kept;
- ``quoted``: the base quoted whole inside a longer held-out document (0.6-2.5x the base's words
  around it: Jaccard 0.29-0.63): the base must be removed as a copy of the longer document, which
  must stay.

Hard negatives (must never be removed nor be what a removal points at):

- ``neg_template``: the same template around a held-out body (same page template, other article);
- ``neg_menu_a`` / ``neg_menu_b``: two pages under one menu of ~6x their body's words (before the
  line rules they are Jaccard ~0.7 similar; after them, unrelated);
- ``neg_lead``: the base's first paragraphs (~15 %) and held-out text;
- ``neg_half``: the base's first half and held-out text;
- ``neg_quote``: a held-out document quoting a run of the base's paragraphs (~25 % of the base).

``score`` reads ``doc_id -> dup_of`` (the build's reject log, or any method's result) against the
families: recall per edit, precision, wrong removals (a removal that points outside its family, a
negative touched, or a longer quoting document removed in favour of the passage it quotes).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

SAME = ("trunc", "boilerplate", "syndication", "sub3", "sub4", "sub5", "excerpt", "quoted")
NEGATIVES = ("neg_template", "neg_menu_a", "neg_menu_b", "neg_lead", "neg_half", "neg_quote")
BASE_SHARE = 0.25
MENU_SHARE = 6  # the menu pages' menus: this many times their body's words
MENU = ("Home", "News", "Documentation", "Tutorials", "Reference", "Gallery", "Community", "Blog",
        "About us", "Contact", "Sign in", "Register", "Search", "Previous article", "Next article",
        "Share on social media", "Print this page", "Subscribe", "Related topics", "Archives")
COOKIES = "This site uses cookies to improve your experience and to show you relevant content."
COPYRIGHT = "Copyright 2024 The Example Publishing Group. All rights reserved."


@dataclass(frozen=True)
class Item:
    """One document of the set: its id (the build's doc order), its family and the edit that made it."""

    doc_id: str
    family: str
    edit: str  # "orig", a SAME name or a NEGATIVES name
    text: str


def _words(paras: list[str]) -> int:
    return sum(len(p.split()) for p in paras)


def _join(paras: list[str]) -> str:
    return "\n\n".join(p for p in paras if p)


class _Pool:
    """Held-out paragraphs dealt without replacement (a shuffled deck): no two documents of the set share
    a held-out paragraph by chance, so every overlap is one the set was built with."""

    def __init__(self, paras: list[str], rng: random.Random) -> None:
        self.paras = rng.sample(paras, len(paras))
        self.next = 0

    def take(self, words: int) -> list[str]:
        """Paragraphs adding up to at least ``words`` words (at least one)."""
        out: list[str] = []
        while not out or _words(out) < words:
            if self.next >= len(self.paras):
                raise ValueError("the held-out prose ran out: fewer bases or a larger BASE_SHARE")
            out.append(self.paras[self.next])
            self.next += 1
        return out


def _substitute(text: str, rate: float, rng: random.Random, vocab: list[str]) -> str:
    """Replace ``rate`` of the whitespace tokens (inside lines) by random tokens of the corpus."""
    lines = text.split("\n")
    slots = [(i, j) for i, line in enumerate(lines) for j in range(len(line.split(" "))) if line]
    toks = [line.split(" ") for line in lines]
    for i, j in rng.sample(slots, max(1, round(rate * len(slots)))):
        toks[i][j] = rng.choice(vocab)
    return "\n".join(" ".join(t) for t in toks)


def _delete_words(text: str, n: int, rng: random.Random) -> str:
    lines = [line.split(" ") for line in text.split("\n")]
    slots = [(i, j) for i, t in enumerate(lines) for j in range(len(t)) if len(t) > 6]
    drop = set(rng.sample(slots, min(n, len(slots))))
    return "\n".join(" ".join(w for j, w in enumerate(t) if (i, j) not in drop) for i, t in enumerate(lines))


def _truncate(text: str, rng: random.Random) -> str:
    """Cut at 30-90 % of the words, inside a sentence (never just after an end mark)."""
    words = text.split(" ")
    at = rng.randrange(int(0.3 * len(words)), int(0.9 * len(words)))
    while at < len(words) - 1 and words[at - 1].endswith((".", "!", "?", "\n")):
        at += 1
    return " ".join(words[:at]).rstrip() + rng.choice(("", "", "..."))


def _bases(docs: list[str], target: int) -> list[list[str]]:
    """Runs of consecutive documents (as paragraph lists) reaching about ``target`` words."""
    out, cur = [], []
    for d in docs:
        paras = d.split("\n\n")
        if cur and _words(cur) + _words(paras) - target > target - _words(cur):
            out.append(cur)
            cur = []
        cur = cur + paras
    return [b for b in out if len(b) >= 4]


def _menu(rng: random.Random, words: int) -> str:
    """Menu lines (each under the line rules' five words) adding up to about ``words`` words."""
    lines: list[str] = []
    while sum(len(x.split()) for x in lines) < words:
        lines.append(rng.choice(MENU))
    return "\n".join(lines)


def _negatives(paras: list[str], pool: _Pool, header: str, footer: str,
               rng: random.Random) -> dict[str, str]:
    n = _words(paras)
    lead = max(1, round(0.15 * len(paras)))
    half = len(paras) // 2
    q_at = rng.randrange(1, max(2, len(paras) - 2))
    q_len = max(1, round(0.25 * len(paras)))
    body = pool.take(130)
    menu = _menu(rng, MENU_SHARE * _words(body))
    quote_doc = pool.take(n)
    quote_doc[len(quote_doc) // 2:len(quote_doc) // 2] = paras[q_at:q_at + q_len]
    return {
        "neg_template": header + "\n\n" + _join(pool.take(n)) + "\n\n" + footer,
        "neg_menu_a": menu + "\n\n" + _join(body),
        "neg_menu_b": menu + "\n\n" + _join(pool.take(130)),
        "neg_lead": _join(paras[:lead] + pool.take(n - _words(paras[:lead]))),
        "neg_half": _join(paras[:half] + pool.take(n - _words(paras[:half]))),
        "neg_quote": _join(quote_doc),
    }


def _copies(paras: list[str], pool: _Pool, header: str, footer: str, vocab: list[str],
            rng: random.Random) -> dict[str, str]:
    text = _join(paras)
    n = _words(paras)
    start = rng.randrange(1, max(2, len(paras) // 2))
    share = rng.uniform(0.3, 0.6)
    end = start + 1
    while end < len(paras) and _words(paras[start:end + 1]) <= share * n:
        end += 1
    around = pool.take(round(rng.uniform(0.6, 2.5) * n))
    cut = rng.randrange(0, len(around) + 1)
    synd = _delete_words(_substitute(text, 0.03, rng, vocab), 5, rng)
    source = " ".join(pool.take(1)[0].split()[:8]).rstrip(".,;:")
    return {
        "trunc": _truncate(text, rng),
        "boilerplate": header + "\n\n" + text + "\n\n" + footer,
        "syndication": "By Staff Writer\n\n" + synd + f"\n\nThis article was first published as {source}.",
        "sub3": _substitute(text, 0.03, rng, vocab),
        "sub4": _substitute(text, 0.04, rng, vocab),
        "sub5": _substitute(text, 0.05, rng, vocab),
        "excerpt": _join(paras[start:end]),
        "quoted": _join(around[:cut] + paras + around[cut:]),
    }


def build_families(docs: list[str], target_words: int, max_bases: int | None = None, seed: int = 0,
                   prefix: str = "", accept: Callable[[str], bool] | None = None) -> list[Item]:
    """Originals, a copy of every ``SAME`` edit and the negatives, for one document length.

    ``docs``: ``docstring_documents()`` (or any documents of paragraphs joined by blank lines).
    ``accept``: which base texts to use (say, those the cleaning rules keep); the first
    ``max_bases`` accepted make families. A
    family's documents get their ids in a random order (``{prefix}{words}-{base}-{rank}``), so the
    original is not always the smallest id (the document a dedupe keeps first).
    """
    rng = random.Random(seed)
    split = math.ceil(BASE_SHARE * len(docs))
    pool = _Pool([p for d in docs[split:] for p in d.split("\n\n")], rng)
    vocab = sorted({w for d in docs for w in d.split()})
    header = _menu(random.Random(seed + 1), 25) + "\n" + COOKIES
    footer = pool.take(1)[0] + "\n\n" + COPYRIGHT
    items: list[Item] = []
    bases = [b for b in _bases(docs[:split], target_words) if accept is None or accept(_join(b))]
    for b, paras in enumerate(bases[:max_bases]):
        fam = f"{prefix}{target_words}-{b:04d}"
        made = [("orig", fam, _join(paras))]
        made += [(k, fam, t) for k, t in _copies(paras, pool, header, footer, vocab, rng).items()]
        made += [(k, f"{fam}-{k}", t) for k, t in _negatives(paras, pool, header, footer, rng).items()]
        for rank, (edit, family, text) in zip(rng.sample(range(len(made)), len(made)), made, strict=True):
            items.append(Item(f"{fam}-{rank:02d}", family, edit, text))
    return sorted(items, key=lambda it: it.doc_id)


def score(items: list[Item], dup_of: dict[str, str], present: set[str] | None = None,
          texts: dict[str, str] | None = None) -> dict:
    """Recall per edit and wrong removals of a result ``doc_id -> dup_of`` (removed documents only).

    ``present``: the doc ids that reached dedupe (the build's cleaning may filter some); copies
    whose original or own text was filtered are left out of their edit's recall.
    A copy is caught when it and its original end at one kept document, in the right direction for
    ``excerpt`` (the excerpt removed) and ``quoted`` (the quoted original removed, the longer document
    kept). A removal is wrong when it removes a negative or a ``quoted`` document (the longer one: its
    other text is lost), or points outside its family at a text that does not hold it: with
    ``texts`` (the texts dedupe saw), 90 % of the removed text's word 3-grams must lie in the
    target's (``tests.reference``, independent of the hashing); without, any such removal is wrong.
    ``outside``: removals pointing outside their family that are not wrong (a truncated copy inside
    a negative that holds the base's first half: the corpus keeps all of its text).
    """
    from tests.reference import shingle_set

    present = {it.doc_id for it in items} if present is None else present
    fam = {it.doc_id: it.family for it in items}
    edit = {it.doc_id: it.edit for it in items}
    orig = {it.family: it.doc_id for it in items if it.edit == "orig"}

    def rep(d: str) -> str:
        return dup_of.get(d, d)

    def held(d: str, t: str) -> bool:
        if texts is None:
            return False
        a, b = shingle_set(texts[d], 3), shingle_set(texts[t], 3)
        return bool(a) and len(a & b) >= 0.9 * len(a)

    hit: dict[str, list[bool]] = defaultdict(list)
    for it in items:
        if it.edit not in SAME or it.doc_id not in present or orig[it.family] not in present:
            continue
        o = orig[it.family]
        same = rep(it.doc_id) == rep(o)
        if it.edit == "excerpt":
            same = same and it.doc_id in dup_of
        elif it.edit == "quoted":
            same = o in dup_of and rep(o) == it.doc_id
        hit[it.edit].append(same)
    wrong, outside = [], []
    for d, t in dup_of.items():
        if edit.get(d) in NEGATIVES or edit.get(d) == "quoted":
            wrong.append(d)
        elif fam.get(d) != fam.get(t):
            (outside if held(d, t) else wrong).append(d)
    same_all = [h for e in SAME for h in hit[e]]
    return {
        "recall": {e: (sum(hit[e]), len(hit[e])) for e in SAME},
        "same_recall": sum(same_all) / len(same_all) if same_all else 0.0,
        "removed": len(dup_of),
        "wrong": len(wrong),
        "wrong_ids": sorted(wrong),
        "outside": len(outside),
        "negatives_removed": sum(edit.get(d) in NEGATIVES for d in dup_of),
        "precision": 1 - len(wrong) / len(dup_of) if dup_of else 1.0,
    }
