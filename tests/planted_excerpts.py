"""Excerpts planted in prose whose documents share paragraphs: the hard case for containment candidates.

The corpus is ``tests.prose``'s (documents of 3-9 real paragraphs drawn from one pool, so every
paragraph turns up in several documents, of every length). An excerpt is a run of 15-60 % of a
document's words, cut anywhere (mid-paragraph, mid-sentence), published alone; three in ten have 2 %
of their words replaced. A longer document holding one of the excerpt's paragraphs wins that
paragraph's anchor buckets as their longest entry, which is what can hide the excerpt's source.

``candidate_recall`` runs the near step's own candidate functions (shard batches, shard candidates,
the member's screen, the root's screen) without Beam and reports, of the excerpts that truly lie in
their source (``NearRule``'s containment on true shingle sets), how many got a screened edge to a
document that holds them, with what the candidates cost: elements out of the bucket shuffle and
distinct pairs screened.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

from pipelines.dedupe.candidates import EdgeScreen, lsh_shard_batches, screen_at_member, shard_candidates
from pipelines.dedupe.near import signature_by_node
from pipelines.dedupe.sketch import minhasher, near_rule, sketch_documents
from pipelines.records import Document
from schemas.config import DedupeConfig
from tests.prose import write_prose_corpus


def planted_corpus(work: Path, megabytes: float, excerpts: int, seed: int = 5) -> tuple[list[str], list[tuple[int, int]]]:
    """(texts, [(excerpt index, source index)]): the prose corpus of ``megabytes`` and its excerpts after it."""
    raw = work / "prose.jsonl"
    write_prose_corpus(raw, megabytes, 7)
    with open(raw, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    rng = random.Random(seed)
    planted = []
    for src in rng.sample(range(len(texts)), min(excerpts, len(texts))):
        words = texts[src].split(" ")
        n = max(60, int(len(words) * rng.uniform(0.15, 0.6)))
        start = rng.randrange(0, max(1, len(words) - n))
        cut = words[start:start + n]
        if rng.random() < 0.3:
            cut = [w if rng.random() > 0.02 else "zyzzyva" for w in cut]
        planted.append((len(texts), src))
        texts.append(" ".join(cut))
    return texts, planted


def candidate_recall(texts: list[str], planted: list[tuple[int, int]], cfg: DedupeConfig) -> dict[str, int]:
    """Of the planted excerpts that lie in their source: how many got an edge to a text holding them;
    with the candidates' cost (``elements``, ``pairs`` screened) over the whole corpus."""
    hasher = minhasher(cfg)
    docs = [Document(f"d{i:06d}", "web", t) for i, t in enumerate(texts)]
    sketches = sketch_documents(docs, hasher)
    by_shard: dict[int, list] = defaultdict(list)
    for i in range(0, len(sketches), 512):
        for shard, batch in lsh_shard_batches(sketches[i:i + 512], hasher):
            by_shard[shard].append(batch)
    by_member: dict[str, list] = defaultdict(list)
    elements = 0
    for values in by_shard.values():
        for member, cand in shard_candidates(values):
            by_member[member].append(cand)
            elements += 1
    screen = EdgeScreen.of(near_rule(cfg), hasher.num_perm)
    sig = dict(e for s in sketches for e in signature_by_node(s))
    edges, pairs = set(), 0
    for member, cands in by_member.items():
        for out in screen_at_member(member, sig[member], cands, screen):
            pairs += 1
            if out[0] == "edge":
                edges.add(out[1])
            elif screen.passes(out[1][1], out[1][2], sig[out[0]], out[1][3]):
                edges.add((out[0], member))
    rule = near_rule(cfg)
    holders: dict[str, set[str]] = defaultdict(set)
    for root, member in edges:
        holders[member].add(root)
    shingles = {s.node: s.shingles for s in sketches}
    truth = found = 0
    for m, src in planted:
        node, src_node = sketches[m].node, sketches[src].node
        if not rule.judge(shingles[src_node], shingles[node])[0]:
            continue
        truth += 1
        found += any(rule.judge(shingles[r], shingles[node])[0] for r in holders[node])
    return {"excerpts": truth, "found": found, "elements": elements, "pairs": pairs}
