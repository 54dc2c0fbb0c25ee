"""A small synthetic multi-source corpus for the demo, tests and benchmarks.

English-like news, web and story text from templates (deterministic given a
seed), in the layouts the real corpora ship in, plus the mess real crawls
have: exact and near duplicates (also across sources), malformed JSON lines,
invalid UTF-8, empty and tiny documents.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass

SUBJECTS = ["the council", "a local farmer", "the new mayor", "our reporter", "the research team", "the school board",
            "a young engineer", "the city museum", "the football club", "a small company", "the river authority",
            "the hospital staff", "an old sailor", "the village baker", "the university", "a group of students"]
VERBS = ["announced", "discussed", "rejected", "approved", "described", "questioned", "celebrated", "reviewed",
         "planned", "opened", "visited", "built", "measured", "repaired", "explained", "shared"]
OBJECTS = ["a plan for the harbor", "the budget for next year", "a new bridge over the river",
           "the results of the survey", "a proposal to plant more trees", "the history of the town",
           "an exhibition of early maps", "the cost of public transport", "a study of local birds",
           "the rules for the market", "a festival in the summer", "the repairs to the old library",
           "a program for young readers", "the price of fresh bread", "a route through the hills"]
TAILS = ["after a long meeting on Tuesday", "because the weather had changed", "with support from the region",
         "although many residents were not sure", "before the end of the month", "in front of a large crowd",
         "while the rain kept falling", "as the first snow arrived", "for the third time this year",
         "despite some concerns about the cost", "with the help of volunteers", "on a quiet Sunday morning"]
STORY = ["Once upon a time", "Long ago", "One cold evening", "Later that night", "In the morning", "At last"]
CHARACTERS = ["the little fox", "a brave knight", "the old queen", "a clever girl", "the tired wolf", "a kind giant"]
ACTIONS = ["walked into the dark forest", "found a silver key", "sang a quiet song", "crossed the wide river",
           "opened the heavy door", "met a talking bird", "lost the way home", "climbed the tallest tower"]


def _sentence(rng: random.Random) -> str:
    s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}."
    return s[0].upper() + s[1:]


def _story_sentence(rng: random.Random) -> str:
    return f"{rng.choice(STORY)}, {rng.choice(CHARACTERS)} {rng.choice(ACTIONS)} and {rng.choice(ACTIONS)}."


def make_article(rng: random.Random, sentences: int = 12, story: bool = False) -> str:
    gen = _story_sentence if story else _sentence
    paras = []
    for _ in range(max(1, sentences // 4)):
        paras.append(" ".join(gen(rng) for _ in range(4)))
    return "\n\n".join(paras)


def perturb(text: str, rng: random.Random, rate: float) -> str:
    """Replace a share of words: a near duplicate."""
    words = text.split(" ")
    for i in range(len(words)):
        if rng.random() < rate:
            words[i] = rng.choice(["various", "several", "quickly", "often", "later", "green", "small"])
    return " ".join(words)


@dataclass
class SynthStats:
    records: int = 0
    exact_duplicates: int = 0
    near_duplicates: int = 0
    junk: int = 0


def write_demo_corpus(root: str, docs_per_source: int = 60, seed: int = 7) -> dict[str, str]:
    """Write three sources under root; returns {source name: glob}. Deterministic for a seed."""
    rng = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    stats = SynthStats()
    globs: dict[str, str] = {}
    articles = [make_article(rng, rng.randint(8, 20)) for _ in range(docs_per_source)]

    # CC-News-like JSONL: two files, with duplicates and junk lines.
    d = os.path.join(root, "ccnews")
    os.makedirs(d, exist_ok=True)
    for part in range(2):
        lines: list[bytes] = []
        for i, text in enumerate(articles[part::2]):
            rec = {"text": text, "title": text.split(".")[0][:60], "url": f"https://news.example/{part}/{i}"}
            lines.append(json.dumps(rec).encode())
        lines.append(json.dumps({"text": articles[0], "url": "https://mirror.example/a"}).encode())  # exact dup
        lines.append(json.dumps({"text": perturb(articles[1], rng, 0.03)}).encode())  # near dup
        lines.append(b'{"text": "broken json')  # malformed
        lines.append(b'{"text": "bad \xff\xfe utf8 bytes"}')  # invalid UTF-8
        lines.append(json.dumps({"text": "   "}).encode())  # empty after normalization
        lines.append(json.dumps({"title": "no text field"}).encode())
        stats.exact_duplicates += 1
        stats.near_duplicates += 1
        stats.junk += 4
        with open(os.path.join(d, f"part-{part}.jsonl"), "wb") as f:
            f.write(b"\n".join(lines) + b"\n")
        stats.records += len(lines)
    globs["ccnews"] = os.path.join(d, "*.jsonl")

    # OpenWebText-like: web pages, one of them a copy of a news article (cross-source duplicate).
    d = os.path.join(root, "openwebtext")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "web.jsonl"), "w") as f:
        for _ in range(docs_per_source):
            f.write(json.dumps({"text": make_article(rng, rng.randint(8, 24))}) + "\n")
        f.write(json.dumps({"text": articles[2]}) + "\n")
        stats.records += docs_per_source + 1
        stats.exact_duplicates += 1
    globs["openwebtext"] = os.path.join(d, "*.jsonl")

    # Stories: plain JSONL of long narratives.
    d = os.path.join(root, "stories")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "stories.jsonl"), "w") as f:
        for _ in range(docs_per_source // 2):
            f.write(json.dumps({"text": make_article(rng, rng.randint(12, 30), story=True)}) + "\n")
        stats.records += docs_per_source // 2
    globs["stories"] = os.path.join(d, "*.jsonl")
    with open(os.path.join(root, "SYNTH.json"), "w") as f:
        json.dump(stats.__dict__, f, sort_keys=True)
    return globs
