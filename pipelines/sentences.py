"""Sentence splitting without downloads: paragraphs, then a punctuation rule.

A sentence ends at . ! ? (optionally followed by closing quotes/brackets)
when whitespace and an upper-case letter, digit or opening quote follow.
Common abbreviations (Mr., Dr., e.g., U.S.) do not end a sentence.
"""

from __future__ import annotations

import re

_ABBREV = {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "u.s", "u.k",
           "inc", "ltd", "co", "corp", "no", "fig", "jan", "feb", "mar", "apr", "jun", "jul", "aug",
           "sep", "sept", "oct", "nov", "dec", "gen", "gov", "sen", "rep", "mt", "ft", "a.m", "p.m"}
_BOUNDARY = re.compile(r"([.!?]+[\"'\u201d\u2019)\]]*)\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Split a document into sentences (paragraph breaks always end a sentence)."""
    out: list[str] = []
    for para in text.split("\n"):
        para = para.strip()
        if not para:
            continue
        start = 0
        for m in _BOUNDARY.finditer(para):
            end = m.end(1)
            word = para[start:end].rsplit(None, 1)[-1].rstrip(".!?\"')]\u201d\u2019").lower()
            if m.group(1).startswith(".") and (word in _ABBREV or (len(word) == 1 and word.isalpha())):
                continue
            out.append(para[start:end].strip())
            start = m.end()
        tail = para[start:].strip()
        if tail:
            out.append(tail)
    return out
