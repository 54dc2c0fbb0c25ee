"""Language identification for the clean stage: CLD2 by default, a stop-word heuristic by name.

``identify(text, method)`` returns a ``LanguageGuess`` (code, score) for one document:

* ``cld2`` (default): Google's Compact Language Detector 2 through ``pycld2``. Its n-gram tables
  are compiled into the extension module, so the wheel *is* the model: nothing is downloaded or
  read from disk at run time, and the result is a pure function of the text (deterministic). It
  names 165 languages with ISO 639-1 style codes ("en", "de", "zh", "zh-Hant", ...; "un" when the
  text carries no evidence). The code is CLD2's top language and the score its percentage of the
  text (0..1), as CLD2 sums them up; ``shares`` is each language's share of the text's bytes,
  paragraph by paragraph (``paragraph_shares``: each paragraph's bytes split by CLD2's own chunks of
  that paragraph, ``returnVectors``), which the language rule reads: CLD2's summary calls a
  document whose English is a third English half the time (it sums over the chunks it trusts),
  its chunks do not. On a short paragraph (fewer than ``SHORT_WORDS`` words) CLD2's English needs an
  English function word besides (``english_evidence``): UI strings of Tagalog or Malay full of
  English technical terms otherwise pass. Measured by ``benchmarks/bench_langid.py``.
* ``stopwords``: the earlier English filter, kept as a named option for comparison: the share of
  English stop words, which must be at least ``CleanConfig.min_english_score`` and at least the
  stop-word share of German, French, Spanish, Dutch, Italian and Portuguese. It cannot tell other
  languages apart (Polish, Finnish, Danish... often score as English at 10-20 words).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import pycld2

ENGLISH = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my
myself no nor not now of off on once only or other our ours ourselves out over own same she should so
some such than that the their theirs them themselves then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your
yours yourself yourselves also may might must shall upon
""".split())

OTHER: dict[str, frozenset[str]] = {
    "de": frozenset("""
aber alle allem allen aller alles als also am an auch auf aus bei bin bis bist da damit dann das dass
dem den denn der des die dies diese diesem diesen dieser dieses doch dort du durch ein eine einem einen
einer eines er es euch für hat hatte hier ich ihm ihn ihr im in ist jetzt kann kein keine mich mir mit
nach nicht noch nur ob oder sehr sein seine sich sie sind so über um und uns unter vom von vor war
waren was weil wenn wer wie wir wird wurde wurden zu zum zur zwischen
""".split()),
    "fr": frozenset("""
à au aux avec ce ces cette dans de des du elle elles en est et été être il ils je la le les leur leurs
lui mais me même mes moi mon ne nous on ou où par pas pour qu que qui sa sans se ses son sont sur ta
te tes toi ton tu un une vos votre vous y était ont avait comme aussi plus très bien
""".split()),
    "es": frozenset("""
a al algo como con de del desde donde el ella ellas ellos en entre era es esa ese eso esta este esto
está están fue ha han hay la las le les lo los más me mi muy no nos o para pero por que qué se sin
sobre su sus también te tiene un una uno y ya yo cuando porque todo
""".split()),
    "nl": frozenset("""
aan al als bij dan dat de der deze die dit doch door een en er had heb heeft hem het hij hoe hun ik in
is je kan me meer men met mij maar na naar niet nog nu of om onder ons ook op over te tegen toen tot u
uit van veel voor want was wat we werd wie wij wordt zal ze zei zich zij zijn zo zou
""".split()),
    "it": frozenset("""
a al alla alle anche che chi ci come con da dal dalla dei del della delle di e è gli ha hanno i il in
io la le lei lo loro lui ma mi ne nel nella noi non o per più quando questa questo se si sono su sua
suo tra tu un una uno era erano anche molto sempre ancora
""".split()),
    "pt": frozenset("""
a ao aos as com como da das de do dos e é ela ele eles em entre era essa esse está foi há isso já mais
mas me muito na nas não no nos o os ou para pela pelo por que se sem seu sua são também te um uma você
""".split()),
}

# word -> languages whose stop-word list holds it (one dict lookup per token for all languages)
_LANGS_OF: dict[str, tuple[str, ...]] = {}
for _lang, _words in (("en", ENGLISH), *OTHER.items()):
    for _w in _words:
        _LANGS_OF[_w] = (*_LANGS_OF.get(_w, ()), _lang)

_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")


def words_of(text: str) -> list[str]:
    """Lower-cased letter tokens (numbers and punctuation are not evidence of a language)."""
    return _WORD.findall(text.lower())


def stopword_shares(words: list[str]) -> dict[str, float]:
    """Share of tokens that are stop words, per language ('en' plus OTHER)."""
    n = len(words)
    counts = dict.fromkeys(("en", *OTHER), 0)
    # Count each distinct word once (Counter is C), then visit only the stop words among them.
    freq = Counter(words)
    for w in _LANGS_OF.keys() & freq.keys():
        k = freq[w]
        for lang in _LANGS_OF[w]:
            counts[lang] += k
    return {k: (v / n if n else 0.0) for k, v in counts.items()}


def is_english(text: str, min_score: float) -> bool:
    """English stop-word share >= min_score and >= every other language's share."""
    shares = stopword_shares(words_of(text))
    en = shares.pop("en")
    return en >= min_score and all(en >= s for s in shares.values())


def guess_language(text: str) -> str:
    """The language with the highest stop-word share ('en', 'de', ...); 'unknown' with no evidence."""
    code = identify_stopwords(text).code
    return "unknown" if code == UNKNOWN else code


# ------------------------------------------------------------------ identifiers

Method = Literal["cld2", "stopwords"]
UNKNOWN = "un"  # CLD2's code for "no evidence"; the stop-word method returns it too


# Below this many words, CLD2's English needs an English function word too (english_evidence).
SHORT_WORDS = 30
# A run of lines shorter than this many words (a heading, a caption, a list item) joins the next
# lines into one paragraph for CLD2 (paragraphs): a few words carry little evidence of a language.
PARAGRAPH_WORDS = 10


@dataclass(frozen=True)
class LanguageGuess:
    """A document's language: code (ISO 639-1 style, CLD2's spelling) and score in [0, 1], and (cld2)
    each language's share of the text's bytes by CLD2's chunks, largest first."""

    code: str
    score: float
    shares: tuple[tuple[str, float], ...] = ()

    def share(self, codes: Iterable[str]) -> float:
        """The share of the text in any of ``codes`` (by ``shares``; without them, the score of a code
        among them)."""
        wanted = set(codes)
        if not self.shares:
            return self.score if self.code in wanted else 0.0
        return sum(s for c, s in self.shares if c in wanted)


def known_codes(method: Method = "cld2") -> frozenset[str]:
    """Codes the method can return (to reject a misspelled ``CleanConfig.languages`` entry)."""
    if method == "stopwords":
        return frozenset(("en", *OTHER))
    return frozenset(code for _, code in pycld2.LANGUAGES) - {UNKNOWN}


def code_of_name(name: str) -> str | None:
    """The code of a language given by its English name ("english", "German"), or None."""
    names = {n.lower(): code for n, code in pycld2.LANGUAGES if code != UNKNOWN}
    return names.get(name.strip().lower())


def identify_cld2(text: str, shares: bool = True) -> LanguageGuess:
    """CLD2's top language and the share of the text it covers, and each language's share paragraph by
    paragraph (``paragraph_shares``; left out, with its CLD2 call per paragraph, when ``shares`` is False).

    isPlainText: our text is already plain (CLD2 would otherwise skip anything between < and >).
    Text CLD2 refuses (it validates UTF-8 strictly, e.g. noncharacters) is unknown, with the shares of the
    paragraphs it reads.
    """
    try:
        _, _, details = pycld2.detect(text, isPlainText=True)
    except pycld2.error:  # the paragraphs CLD2 reads still count
        return LanguageGuess(UNKNOWN, 0.0, paragraph_shares(text) if shares else ())
    _, code, percent, _ = details[0]
    return LanguageGuess(code, percent / 100.0, paragraph_shares(text) if shares else ())


def paragraphs(text: str) -> list[str]:
    """The text's paragraphs for CLD2: its non-empty lines, a run of lines shorter than ``PARAGRAPH_WORDS``
    words joined to the lines after it (what remains at the end joins the last paragraph)."""
    out: list[str] = []
    run: list[str] = []
    words = 0
    for line in text.split("\n"):
        if line.strip():
            run.append(line)
            words += len(line.split())
            if words >= PARAGRAPH_WORDS:
                out.append("\n".join(run))
                run, words = [], 0
    if run:
        if out:
            out[-1] += "\n" + "\n".join(run)
        else:
            out.append("\n".join(run))
    return out


def paragraph_shares(text: str) -> tuple[tuple[str, float], ...]:
    """Each language's share of the text's bytes, paragraph by paragraph: a paragraph's bytes are split
    among languages as CLD2's chunks of that paragraph split it (``chunk_shares``; a paragraph CLD2 refuses
    or finds no chunk in is unknown), largest first (ties by code). A chunk never spans two paragraphs, so a
    short English paragraph among others is counted as English, and one of another language is not."""
    size: dict[str, float] = {}
    total = 0
    for para in paragraphs(text):
        n = len(para.encode("utf-8", "surrogatepass"))
        total += n
        try:
            shares = chunk_shares(para, pycld2.detect(para, isPlainText=True, returnVectors=True)[3])
        except pycld2.error:
            shares = ()
        for c, share in shares or ((UNKNOWN, 1.0),):
            size[c] = size.get(c, 0.0) + share * n
    if not total:
        return ()
    return tuple(sorted(((c, v / total) for c, v in size.items()), key=lambda cs: (-cs[1], cs[0])))


def chunk_shares(text: str, chunks: Iterable[tuple[int, int, str, str]]) -> tuple[tuple[str, float], ...]:
    """Each language's share of the bytes of CLD2's chunks ``(byte offset, bytes, name, code)`` (CLD2's own
    unit, as its summary's percentages), largest first (ties by code). English on a short text without
    ``english_evidence`` counts as unknown."""
    size: dict[str, int] = {}
    for _, n, _, code in chunks:
        size[code] = size.get(code, 0) + n
    if size.get("en") and not english_evidence(text):
        size[UNKNOWN] = size.get(UNKNOWN, 0) + size.pop("en")
    total = sum(size.values())
    if not total:
        return ()
    return tuple(sorted(((c, n / total) for c, n in size.items()), key=lambda cs: (-cs[1], cs[0])))


def english_evidence(text: str) -> bool:
    """True unless the text is short (fewer than ``SHORT_WORDS`` words) and holds no English function
    word (``ENGLISH``): CLD2's character n-grams alone call a fifth of short Tagalog UI strings English."""
    if text.count(" ") >= SHORT_WORDS:  # at least SHORT_WORDS words whatever else: not short
        return True
    words = words_of(text)
    return len(words) >= SHORT_WORDS or any(w in ENGLISH for w in words)


def identify_stopwords(text: str) -> LanguageGuess:
    """The stop-word heuristic: the language with the highest stop-word share, and that share."""
    shares = stopword_shares(words_of(text))
    best = max(shares, key=lambda k: (shares[k], k == "en"))
    return LanguageGuess(best, shares[best]) if shares[best] > 0 else LanguageGuess(UNKNOWN, 0.0)


def identify(text: str, method: Method = "cld2", shares: bool = True) -> LanguageGuess:
    """The document's language by the named method (``shares``: with CLD2's paragraph shares, which only
    the language rule reads)."""
    return identify_stopwords(text) if method == "stopwords" else identify_cld2(text, shares)
