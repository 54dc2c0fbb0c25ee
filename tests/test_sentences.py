"""Sentence splitting on real prose: abbreviations must not end a sentence.

The abbreviations come from real references nobody on this project wrote: the docstrings and
comments of installed packages (networkx cites "Phys. Rev. E 71", "Sec. 4.1",
"Vol. 17", "Ed. D. Z. Du", "Proc. Natl. Acad. Sci."), plus the Lee news corpus gensim ships.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from pipelines.clean.sentences import split_sentences

PACKAGES = ("networkx", "gensim")
ABBREVS = ("Rev", "Sept", "Calif", "Ed", "Eds", "Sec", "Fig", "Figs", "Vol", "Univ", "Dept", "Proc", "Phys")
_HIT = re.compile(r"\b(" + "|".join(ABBREVS) + r")\.(?= [A-Z0-9])")


def real_lines_with_abbreviations(limit_per_package: int = 400) -> list[tuple[str, str]]:
    """(abbreviation, line) for lines of installed packages' sources that use one mid-sentence."""
    out: list[tuple[str, str]] = []
    for name in PACKAGES:
        dist = metadata.distribution(name)
        found = 0
        for f in sorted(dist.files or (), key=str):
            if found >= limit_per_package or not str(f).endswith((".py", ".txt", ".cor")):
                continue
            path = Path(dist.locate_file(f))
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            for line in text.splitlines():
                for m in _HIT.finditer(line):
                    out.append((m.group(1), line.strip().lstrip("#").strip()))
                    found += 1
    return out


def test_no_split_after_scholarly_and_title_abbreviations_in_real_text():
    hits = real_lines_with_abbreviations()
    kinds = {abbr for abbr, _ in hits}
    assert len(hits) >= 40 and {"Rev", "Sec", "Vol", "Ed"} <= kinds, (len(hits), kinds)
    bad = [line for abbr, line in hits
           if any(s.endswith(f" {abbr}.") or s == f"{abbr}." or s.endswith(f"({abbr}.")
                  for s in split_sentences(line)[:-1])]
    assert not bad, bad[:5]


def test_months_states_titles_figures():
    text = ("The Rev. Martin Luther King Jr. spoke in Montgomery, Ala. on Sept. 5, 1955. "
            "Results are in Fig. 3 and Figs. 4-5 (see Sec. 2.1 and Ed. note). "
            "Gov. Brown of Sacramento, Calif., signed it on Jan. 3. He said no. Then he left. "
            "She fell ill. Doctors came. It was Item No. 5 of the list.")
    assert split_sentences(text) == [
        "The Rev. Martin Luther King Jr. spoke in Montgomery, Ala. on Sept. 5, 1955.",
        "Results are in Fig. 3 and Figs. 4-5 (see Sec. 2.1 and Ed. note).",
        "Gov. Brown of Sacramento, Calif., signed it on Jan. 3.",
        "He said no.",
        "Then he left.",
        "She fell ill.",
        "Doctors came.",
        "It was Item No. 5 of the list.",
    ]


def test_real_news_still_splits_at_sentence_ends():
    """On the Lee news corpus almost every sentence ends in . ! ? or a closing quote, and the
    abbreviation list does not glue sentences together (sentences stay news-length)."""
    from realtext import news_documents

    docs = news_documents()[:80]
    sents = [s for d in docs for s in split_sentences(d)]
    assert len(sents) > 600
    ends = sum(s.endswith((".", "!", "?", '"', "'")) for s in sents) / len(sents)
    assert ends > 0.97
    mean_words = sum(len(s.split()) for s in sents) / len(sents)
    assert 15 < mean_words < 35, mean_words
