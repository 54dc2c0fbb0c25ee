"""Sentence splitting without downloads: paragraphs, then a punctuation rule.

A sentence ends at . ! ? (optionally followed by closing quotes/brackets) when whitespace and then
an upper-case letter (of any cased script: "Über", "Это"), a letter of a script without case
(Arabic, Hebrew, Devanagari, ...), a digit or an opening quote follow. The full stops and question
marks of other scripts end one the same way (Devanagari's danda । and ॥, Arabic's ؟, Urdu's ۔,
Armenian's ։, Ethiopic's ።, Myanmar's ။), and the ideographic ones (。！？．｡, with the quotes and
brackets that close them: 」 ” ）) end one with or without a space after: Chinese and Japanese put none.
A period after a known abbreviation does not end a sentence: titles (Mr., Rev., Gen.), months
(Jan., Sept.), US states as AP style writes them (Calif., Mass.; capitalized only, since several
are also words: "ill", "miss", "wash"), scholarly references (Fig., Figs., Sec., Ed., Vol., pp.,
Phys. Rev., Proc. Natl. Acad. Sci.), single letters (initials) and dotted forms (e.g., U.S.).
"No." is an abbreviation only before a digit ("No. 5"), otherwise the word "no". One that may also end a
sentence (a place, a company, a time, an initial, a dotted form, a state: "U.S.", "Inc.", "p.m.") ends one
before a word that begins sentences and no name ("… the rest of the U.S. The state's roads …").
A period after a number or a letter that is all a sentence holds so far is a list item's ("1. The first
step", "B. The blue one"), as is one after a letter that follows a colon ("options: a. The red one").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import islice

# Case-insensitive: never (or hardly ever) a sentence's last word in running text.
_ABBREV = frozenset("""
mr mrs ms messrs mmes dr prof sr jr st mt ft rev hon fr msgr gen col lt maj capt cmdr adm sgt cpl
pvt gov sen rep pres supt det insp atty amb brig
jan feb mar apr jun jul aug sep sept oct nov dec
vs e.g i.e u.s u.k u.n a.m p.m cf viz approx ca
inc ltd co corp bros assn dept univ govt natl intl
ave blvd rd hwy
fig figs eq eqs sec secs ch chap vol vols ed eds pp ref refs al op cit ibid suppl ser trans
proc phys rev lett acad sci natl math stat comput soc amer appl mech chem biol publ conf symp
""".split())
# Capitalized only: the AP state abbreviations that are also English words or common names.
_ABBREV_CAPITALIZED = frozenset("""
Ala Ariz Ark Calif Colo Conn Del Fla Ga Ill Ind Kan Kans Ky La Md Mass Mich Minn Miss Mo Mont
Neb Nebr Nev Okla Ore Pa Tenn Tex Vt Va Wash Wis Wyo
""".split())
# Abbreviations only when a number follows.
_BEFORE_NUMBER = frozenset(("no", "nos", "art", "p"))
# Abbreviations that also end sentences (a place, a company, a time, a name's suffix, "et al."), as do
# initials, other dotted forms and the states: before a word that begins sentences and no name
# (``_STARTERS``) they end one ("… the rest of the U.S. The state's roads …", "… Apple Inc. It said …").
_MAY_END = frozenset("u.s u.k u.n a.m p.m inc ltd co corp bros jr sr st ave blvd rd hwy al".split())
_STARTERS = frozenset("""
The A An This That These Those It Its He His She Her They Their We Our You In On At For From By With After
Before During When While If As But And However There Then Some Many Most All Each Both Such Since Although
Though Because
""".split())
_NEXT_WORD = re.compile(r"[\w-]*")
# Sentence-final marks that a space follows: . ! ? and those of other scripts (। ॥ ؟ ۔ ։ ። ။).
_MARKS = ".!?\u0964\u0965\u061f\u06d4\u0589\u1362\u104b"
# Ideographic sentence-final marks (。！？．｡) and the closing brackets that may follow them.
_CJK_MARKS = "\u3002\uff01\uff1f\uff0e\uff61"
_CJK_CLOSERS = "\u300d\u300f\uff09\u3011\u3015\u300b\u3009"
_ALL_MARKS = _MARKS + _CJK_MARKS
# Quotes and brackets that close a sentence after its mark, and those that may open the next one.
_CLOSING = "\"'\u201d\u2019)\\]\u00bb\u203a" + _CJK_CLOSERS
_OPENERS = "\"'([\u201c\u2018\u201e\u201a\u00ab\u2039\u00bf\u00a1\u300c\u300e\uff08\u3010"
_CLOSERS = ".!?\"')]\u201d\u2019\u00bb\u203a"
_QUOTES_BRACKETS = _CLOSERS.lstrip(".!?")  # closers that are no mark: after one, a period is no abbreviation's
# A citation mark after the sentence's end stays with it ("Benjamin.[1] In 2005"; Wikipedia's text as scraped).
# A mark, then the rest of the run of marks, closers and citations taken whole: the lookahead captures
# it and the backreference consumes it, so the engine never backtracks into a shorter run (which split
# "。。。" at a paragraph's end, or "！」」" between its brackets; re has atomic groups only from 3.11).
# A pattern whose first item is a character set lets the regex engine skip ahead to the next mark in C
# (on Wikipedia's text: 224 MB/s for the regex alone, 60 with the lookahead first). After a mark and
# whitespace the next letter (past opening quotes and brackets) is checked in code (``_begins``): re has
# no class for the upper-case letters of every script. A run ending in an ideographic mark, a closer or
# a citation may also end a sentence with no whitespace after (group 3 marks that case): the code keeps
# it where the run's last mark is ideographic or an ideographic bracket closes it (``_ideographic``).
_BOUNDARY = re.compile(f"([{_ALL_MARKS}](?=([{_ALL_MARKS}]*[{_CLOSING}]*(?:\\[\\d{{1,3}}\\])*))\\2)"
                       f"(?:\\s+(?=[{_OPENERS}]*\\w)|(?<=[{_CJK_MARKS}{_CLOSING}])()\\s*(?=\\S))")


def _begins(c: str) -> bool:
    """Whether a sentence may begin with the character: an upper-case letter of any cased script, a
    letter of a script without case (neither upper nor lower), or a digit; a lower-case letter continues."""
    return c.isupper() or c.isdigit() or (c.isalpha() and not c.islower())


def _ideographic(run: str) -> bool:
    """Whether a run of marks, closers and citations ends as Chinese and Japanese end a sentence: its
    last mark is ideographic (the closers after it, "”" as well as "」", stay with it: "你好！”然后"),
    or an ideographic bracket is among its closers ("!」"); not where a title mark 》 〉 closes it (the
    mark is the title's: "《如此美容美发店！》披露了")."""
    n = len(run) - len(run.lstrip(_ALL_MARKS))  # the marks; closers and citations follow them
    closers = run[n:]
    if "\u300b" in closers or "\u3009" in closers:
        return False
    return run[n - 1] in _CJK_MARKS or any(c in _CJK_CLOSERS for c in closers)


def is_abbreviation(word: str, next_char: str) -> bool:
    """Whether ``word`` (the token before a period, closers stripped) is an abbreviation."""
    lower = word.lower()
    if len(word) == 1 and word.isalpha():  # initials: "J. Smith"
        return True
    if lower in _BEFORE_NUMBER:
        return next_char.isdigit()
    if word.isupper() and "." not in word:  # an acronym, not a listed abbreviation: "the signing CA."
        return False
    if lower in _ABBREV or word in _ABBREV_CAPITALIZED:
        return True
    # other dotted forms such as "N.Y." or "W.Va." (a letter, a period, a letter...)
    return "." in lower and all(part.isalpha() and len(part) <= 3 for part in lower.split("."))


def _starts(para: str, at: int) -> bool:
    """Whether the word at ``at`` is one that begins sentences (``_STARTERS``), and no initial ("E. T. A. Hoffmann")."""
    m = _NEXT_WORD.match(para, at)
    return m.group() in _STARTERS and para[m.end():m.end() + 1] != "."


def _list_letter(before: str, word: str) -> bool:
    """Whether ``word``, the last of ``before``, is a list item's letter: one letter after a colon, a
    semicolon or a period ("which means that: a. The source …", "… this Account. b. The source …")."""
    if len(word) != 1:
        return False
    rest = before[:len(before) - len(before.rsplit(None, 1)[-1])].rstrip()
    return rest.endswith((":", ";", "."))


def may_end_sentence(word: str) -> bool:
    """Whether an abbreviation (``is_abbreviation``) may also be a sentence's last word: "U.S.", "Inc.",
    "a.m.", an initial ("Plan B."), "Calif."; not a title, a month or "e.g." (which precede what follows)."""
    lower = word.lower()
    if len(word) == 1 or lower in _MAY_END or word in _ABBREV_CAPITALIZED:
        return True
    return "." in lower and lower not in _ABBREV


def iter_sentences(text: str) -> Iterator[str]:
    """The sentences of a document in order (paragraph breaks always end a sentence)."""
    for para in text.split("\n"):
        para = para.strip()
        if not para:
            continue
        start = 0
        for m in _BOUNDARY.finditer(para):
            end = m.end(1)
            mark = m.group(1)
            after = m.end()  # the next word's first letter, past its opening quotes and brackets ("[I] ...")
            while after < len(para) - 1 and para[after] in _OPENERS:
                after += 1
            if (m.start(3) >= 0 or not _begins(para[after])) and not _ideographic(mark):
                continue  # a space and a sentence's first letter follow, or the run ends it in CJK's way
            if mark == "\uff0e" and m.start(3) >= 0 and para[m.start(1) - 1:m.start(1)].isdigit() \
                    and para[m.end()].isdigit():
                continue  # the full-width decimal point of Chinese text: "１１０．８亿"
            before = para[start:m.start(1)]
            if mark[0] in ".\uff0e" and (before.isdecimal() or (len(before) == 1 and before.isalpha())):
                continue  # a list item's number or letter, the sentence's only word so far: "1. The first", "２．概述"
            # Only a single period can follow an abbreviation ("!", "?" and ".." always end), and only
            # right after its word (not after a space, a closing bracket or quote: "(Shell Co.). The ...").
            if mark[0] == "." and not mark.startswith("..") and before and not before[-1].isspace() \
                    and before[-1] not in _QUOTES_BRACKETS:
                word = before.rsplit(None, 1)[-1].rstrip(_CLOSERS).lstrip(_OPENERS)
                if is_abbreviation(word, para[after]) and not (
                        may_end_sentence(word) and _starts(para, after) and not _list_letter(before, word)):
                    continue
            yield para[start:end].strip()
            start = m.end()
        tail = para[start:].strip()
        if tail:
            yield tail


def split_sentences(text: str) -> list[str]:
    """Split a document into sentences (paragraph breaks always end a sentence)."""
    return list(iter_sentences(text))


def split_batch(texts: list[str]) -> list[tuple[str, ...]]:
    """``split_sentences`` of each text, as tuples: a document process's task (``pipelines.localrunner.docpool``)."""
    return [tuple(iter_sentences(t)) for t in texts]


def count_sentences(text: str, at_most: int) -> int:
    """min(at_most, the number of sentences): a threshold needs only the first few."""
    return sum(1 for _ in islice(iter_sentences(text), max(0, at_most)))
