"""Real evaluation texts planted into a real corpus: the cases benchmark decontamination is held to.

The corpus is gensim's Lee news (``tests/realtext.py``); the "benchmark" is passages of the English
Wikipedia articles gensim ships (another real source), written as a JSONL evaluation set of
``{"id", "passage", "question", "answer"}`` records. Planted into every ``STRIDE``-th article, after
its second sentence:

- ``contaminated``: 20-40 consecutive words of a passage, in one of several surface forms (as written,
  upper case, extra spaces and a line break, punctuation dropped): each must be found;
- ``near``: 12 consecutive word tokens of a passage (one short of an n-gram) or 20 words with every
  sixth word replaced by another real word: each must stay.

    from decontamination_corpus import planted_corpus   # in tests (pytest puts tests/ on sys.path)
    corpus = planted_corpus()   # .documents, .eval_records, .contaminated, .near, .forms, .original
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from realtext import after_second_sentence, news_documents, wiki_documents

STRIDE = 6
FORMS = ("as written", "upper case", "spaced", "no punctuation")


@dataclass(frozen=True)
class PlantedCorpus:
    documents: list[str]  # the corpus, article i at index i
    eval_records: list[dict[str, str]]  # the evaluation set
    contaminated: dict[int, str]  # article index -> the passage words planted (as planted)
    near: dict[int, str]  # article index -> the near miss planted
    forms: dict[int, str]  # article index -> the surface form of its contaminated plant
    original: dict[int, tuple[str, str]]  # article index -> (text before the plant, text after it)


def _cut(article: str) -> int:
    cut = after_second_sentence(article)
    return len(article) // 2 if cut is None else cut


def _forms(words: list[str], k: int) -> str:
    """Surface form k of a passage excerpt: as written, upper case, spaced with a line break, no punctuation."""
    text = " ".join(words)
    if k == 1:
        return text.upper()
    if k == 2:
        mid = len(words) // 2
        return "  ".join(words[:mid]) + "\n" + " ".join(words[mid:])
    if k == 3:
        return re.sub(r"[^\w\s]", "", text)
    return text


def _first_tokens(words: list[str], n: int) -> list[str]:
    """The longest run of words from the start holding at most n word tokens (``\\w+`` runs: "U.S." is two)."""
    out: list[str] = []
    for w in words:
        if len(re.findall(r"\w+", " ".join(out + [w]))) > n:
            break
        out.append(w)
    return out


def planted_corpus(limit: int = 240) -> PlantedCorpus:
    """The corpus (the first ``limit`` articles) with plants in every STRIDE-th one, and its evaluation set."""
    articles = news_documents(limit=limit)
    passages = [" ".join(p.split()[:80]) for a in wiki_documents(limit=60) for p in a.split("\n")[:2]
                if len(p.split()) >= 60]
    records = [{"id": f"wiki-{i}", "passage": p, "question": "Which article is this passage from?",
                "answer": p.split()[0]} for i, p in enumerate(passages)]
    vocab = sorted({w for a in articles[:20] for w in a.split() if w.isalpha() and len(w) > 3})
    docs, contaminated, near, original, forms = list(articles), {}, {}, {}, {}
    for n, i in enumerate(range(0, limit, STRIDE)):
        words = passages[n % len(passages)].split()
        start = 5 + n % 17
        if n % 3 == 2:  # a near miss
            excerpt = _first_tokens(words[start:], 12) if n % 2 else [
                vocab[(7 * n + j) % len(vocab)] if j % 6 == 3 else w for j, w in enumerate(words[start:start + 20])]
            plant = " ".join(excerpt)
            near[i] = plant
        else:
            plant = _forms(words[start:start + 20 + n % 21], n % 4)
            contaminated[i], forms[i] = plant, FORMS[n % 4]
        cut = _cut(articles[i])
        head, tail = articles[i][:cut], articles[i][cut:]
        original[i] = (head, tail)
        docs[i] = head + plant + " " + tail
    return PlantedCorpus(docs, records, contaminated, near, forms, original)
