"""The cleaning stage as it was before its rewrite for speed: the reference for the fast one.

A frozen copy of ``pipelines/clean/rules.py``, ``pipelines/clean/langid.py`` and ``pipelines/clean/sentences.py``
at b5124a0 (the rules, the statistics, the sentence splitter the ``min_sentences`` rule counts
with, the language identifiers), kept only so that tests/test_clean_equivalence.py can prove
the rewritten stage reaches the same decision, text, reason, language and score on every
document, and so benchmarks/bench_clean.py can time both in one process. The package never
uses it. Do not "fix" it: it is the definition the fast path is held to.

One exception: the language rule is a policy, not part of the rewrite. Since b5124a0 it reads the
share of the text in the kept languages by CLD2's chunks (``LanguageGuess.shares``), so
``identify_cld2`` and ``accepts_language`` here are the package's own.

A third, the sentence splitter's policy since: an upper-case word is an acronym, not a listed
abbreviation ("the signing CA."); a period right after a space, a closing bracket or a quote belongs to
no abbreviation ("(Shell Co.). The"); "etc." is no abbreviation (a lower-case word after it continues
anyway) and "Brig." is; a sentence begins past any number of opening quotes and brackets ('"[I] don't');
a citation mark after the end stays with its sentence ("Benjamin.[1] In 2005").

A second: text in other languages than English, a policy added since and written here in this
file's plain style (the package's fast path is held to it like the rest): the sentence-final marks
of other scripts end sentences and lines (``_SCRIPT_MARKS``, ``_CJK_MARKS``; after a mark and a space
an upper-case letter of any script or a letter of a script without case begins a sentence); each
Han / kana character is a word of its own (``_UNSPACED``), a word of those scripts counting as
``UNSPACED_CHARS_PER_WORD`` characters in the word count and in the n-gram rules' n, and left out of
the mean word length (not measured where they are most of the words); a Hangul syllable is 2-3 letters in the mean word length; and a build keeping
other languages than English takes the stop words of each document's language (``stop_words_for``).
"""

# ruff: noqa

from __future__ import annotations

import dataclasses
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from itertools import takewhile
from typing import Literal

import pycld2

from pipelines.records import UNSPACED_CHARS_PER_WORD  # the measured figure (benchmarks/bench_languages.py)
from pipelines.records import Document, Reject, snippet
from schemas.config import CleanConfig, SourceConfig

# ------------------------------------------------------------------ pipelines/clean/sentences.py

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
_CJK_MARKS = "\u3002\uff01\uff1f\uff0e\uff61"
_CJK_CLOSERS = "\u300d\u300f\uff09\u3011\u3015\u300b\u3009"
_SCRIPT_MARKS = "\u0964\u0965\u061f\u06d4\u0589\u1362\u104b"
_BOUNDARY = re.compile("([.!?" + _SCRIPT_MARKS + _CJK_MARKS + "]+[\"'\u201d\u2019)\\]\u00bb\u203a" + _CJK_CLOSERS
                       + "]*(?:\\[\\d{1,3}\\])*)(\\s*)")
_OPENERS = "\"'([\u201c\u2018\u201e\u201a\u00ab\u2039\u00bf\u00a1\u300c\u300e\uff08\u3010"
_CLOSERS = ".!?\"')]\u201d\u2019\u00bb\u203a"


def _ends_sentence(para: str, m: re.Match) -> bool:
    """A mark run followed by whitespace and a sentence's first letter, or one ending as CJK ends a
    sentence (its last mark ideographic, or an ideographic bracket among its closers, and no title
    mark 》 〉 among them) with text after."""
    rest = para[m.end():]
    if not rest:
        return False
    run = re.sub(r"(\[\d{1,3}\])+$", "", m.group(1))
    marks = run.rstrip("\"')]\u201d\u2019\u00bb\u203a" + _CJK_CLOSERS)
    if m.group(1) == "\uff0e" and not m.group(2) and para[:m.start()][-1:].isdigit() and rest[0].isdigit():
        return False  # a full-width decimal point
    closers = set(run[len(marks):])
    title = bool(closers & {"\u300b", "\u3009"})  # the mark is a title's
    if not title and (marks[-1] in _CJK_MARKS or closers & set(_CJK_CLOSERS)):
        return True
    if not m.group(2):
        return False
    c = rest.lstrip(_OPENERS)[:1] or rest[-1]
    return c.isupper() or c.isdigit() or (c.isalpha() and not c.islower())


def is_abbreviation(word: str, next_char: str) -> bool:
    """Whether ``word`` (the token before a period, closers stripped) is an abbreviation."""
    lower = word.lower()
    if len(word) == 1 and word.isalpha():  # initials: "J. Smith"
        return True
    if lower in _BEFORE_NUMBER:
        return next_char.isdigit()
    if word.isupper() and "." not in word:
        return False
    if lower in _ABBREV or word in _ABBREV_CAPITALIZED:
        return True
    # other dotted forms such as "N.Y." or "W.Va." (a letter, a period, a letter...)
    return "." in lower and all(part.isalpha() and len(part) <= 3 for part in lower.split("."))


# Abbreviations that may end a sentence, and the words that begin sentences and no name.
_MAY_END = {"u.s", "u.k", "u.n", "a.m", "p.m", "inc", "ltd", "co", "corp", "bros", "jr", "sr", "st", "ave", "blvd",
            "rd", "hwy", "al"}
_STARTERS = {"The", "A", "An", "This", "That", "These", "Those", "It", "Its", "He", "His", "She", "Her", "They",
             "Their", "We", "Our", "You", "In", "On", "At", "For", "From", "By", "With", "After", "Before", "During",
             "When", "While", "If", "As", "But", "And", "However", "There", "Then", "Some", "Many", "Most", "All",
             "Each", "Both", "Such", "Since", "Although", "Though", "Because"}


def ends_sentence_before(abbreviation: str, rest: str, words_before: list[str]) -> bool:
    """An abbreviation that may end a sentence (a place, a company, a time, an initial, a dotted form, a
    state; not a title, a month, "e.g."; not a list's letter after a colon, semicolon or period) does,
    before a word that begins sentences."""
    if len(abbreviation) == 1 and words_before and words_before[-1][-1] in ":;.":
        return False
    word = "".join(takewhile(lambda c: c.isalnum() or c in "_-", rest))
    low = abbreviation.lower()
    may_end = (len(abbreviation) == 1 or low in _MAY_END or abbreviation in _ABBREV_CAPITALIZED
               or ("." in low and low not in _ABBREV))
    return may_end and word in _STARTERS and not rest[len(word):].startswith(".")


def split_sentences(text: str) -> list[str]:
    """Split a document into sentences (paragraph breaks always end a sentence)."""
    out: list[str] = []
    for para in text.split("\n"):
        para = para.strip()
        if not para:
            continue
        start = 0
        for m in _BOUNDARY.finditer(para):
            if not _ends_sentence(para, m):
                continue
            end = m.end(1)
            before = para[start:m.start(1)]
            if m.group(1)[0] in ".\uff0e" and (re.fullmatch(r"\d+", before) or (
                    len(before) == 1 and unicodedata.category(before).startswith("L"))):
                continue  # a list item's number or letter
            nxt = para[m.end():].lstrip(_OPENERS)[:1]
            if (m.group(1).startswith(".") and not m.group(1).startswith("..") and before
                    and not before[-1].isspace() and before[-1] not in "\"')]\u201d\u2019\u00bb\u203a"
                    and is_abbreviation(before.split()[-1].rstrip(_CLOSERS).lstrip(_OPENERS), nxt)
                    and not ends_sentence_before(before.split()[-1].rstrip(_CLOSERS).lstrip(_OPENERS),
                                                 para[m.end():].lstrip(_OPENERS), before.split()[:-1])):
                continue
            out.append(para[start:end].strip())
            start = m.end()
        tail = para[start:].strip()
        if tail:
            out.append(tail)
    return out

# ------------------------------------------------------------------ pipelines/clean/langid.py

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
    get = _LANGS_OF.get
    for w in words:
        langs = get(w)
        if langs:
            for lang in langs:
                counts[lang] += 1
    return {k: (v / n if n else 0.0) for k, v in counts.items()}


def english_score(text: str) -> float:
    """Share of English stop words among the text's word tokens (0 for no words)."""
    words = words_of(text)
    return sum(1 for w in words if w in ENGLISH) / len(words) if words else 0.0


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


@dataclass(frozen=True)
class LanguageGuess:
    """A document's language: code (ISO 639-1 style, CLD2's spelling) and score in [0, 1]."""

    code: str
    score: float


def known_codes(method: Method = "cld2") -> frozenset[str]:
    """Codes the method can return (to reject a misspelled ``CleanConfig.languages`` entry)."""
    if method == "stopwords":
        return frozenset(("en", *OTHER))
    return frozenset(code for _, code in pycld2.LANGUAGES) - {UNKNOWN}


def identify_cld2(text: str):
    """The package's (the language rule's policy, see the module's docstring)."""
    from pipelines.clean.langid import identify_cld2 as current

    return current(text)


def identify_stopwords(text: str) -> LanguageGuess:
    """The stop-word heuristic: the language with the highest stop-word share, and that share."""
    shares = stopword_shares(words_of(text))
    best = max(shares, key=lambda k: (shares[k], k == "en"))
    return LanguageGuess(best, shares[best]) if shares[best] > 0 else LanguageGuess(UNKNOWN, 0.0)


def identify(text: str, method: Method = "cld2") -> LanguageGuess:
    """The document's language by the named method."""
    return identify_stopwords(text) if method == "stopwords" else identify_cld2(text)

# ------------------------------------------------------------------ pipelines/clean/rules.py

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200d\u2060\ufeff]")
_SPACES = re.compile(r"[ \t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+")
_BLANK_LINES = re.compile(r"\n{3,}")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_TAG = re.compile(r"<[^<>\n]{1,400}>")
# A whitespace-delimited token none of whose characters is a letter ([^\W\d_] is "a letter").
_NO_LETTER_TOKEN = re.compile(r"(?<!\S)(?:(?![^\W\d_])\S)+(?!\S)")

# C4 (c4_utils.py): boilerplate phrases, end marks. C4 keeps a line only if it ends in one of
# . ? ! " (straight quote) and not in "..." (CleanConfig.line_end_marks="c4", the default);
# "typographic" also accepts closing curly quotes and keeps lines ending in "...".
POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                  "use cookies")
C4_END_MARKS = (".", "?", "!", '"', *"\u3002\uff01\uff1f\uff0e\uff61\u300d\u300f\u0964\u0965\u061f\u06d4\u0589\u1362\u104b"
                "\u17d4\u17d5\u0f0d\u0f0e", "\u3002\u201d", "\uff01\u201d", "\uff1f\u201d", "\u3002\u2019", "\uff01\u2019",
                "\uff1f\u2019")
TERMINAL = {"c4": C4_END_MARKS, "typographic": (*C4_END_MARKS, "\u201d", "\u2019")}
_UNSPACED = re.compile("([\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
                       "\U00020000-\U0002fa1f])")


def spaced(text: str) -> str:
    return _UNSPACED.sub(r" \1 ", text)


def stop_words_for(c: CleanConfig, s: "DocStats") -> frozenset[str] | None:
    """Gopher's eight in a build of English alone; else those of the document's language (None: no list)."""
    if (c.english_only and "language" not in disabled_rules(c) and c.languages
            and all(code == "en" for code in c.languages)):
        return GOPHER_STOP_WORDS
    code = s.language.code
    return GOPHER_STOP_WORDS if code == "en" else OTHER.get(code)
# Gopher's stop words (a document needs at least `min_stop_words` of them).
GOPHER_STOP_WORDS = frozenset(["the", "be", "to", "of", "and", "that", "have", "with"])
BULLETS = ("\u2022", "\u2023", "\u25e6", "\u2043", "\u25aa", "\u25cf", "\u00b7", "-", "*", "\u2013")
ELLIPSES = ("...", "\u2026")
_PUNCT = (string.punctuation + "\u2018\u2019\u201c\u201d\u2026\u2013\u2014\u00ab\u00bb"
          + "\u3001\u3002\u300c\u300d\u300e\u300f\u3010\u3011\u300a\u300b\u3008\u3009\uff01\uff08\uff09\uff0c\uff0e\uff1a\uff1b\uff1f")

LINE_RULES = ("javascript", "policy", "long_word", "min_line_words", "terminal_punct")
NARRATIVE_SOURCES = ("stories", "story", "book")


# ------------------------------------------------------------------ normalization

def normalize_text(text: str) -> str:
    """NFC, control characters stripped, runs of spaces collapsed, lines trimmed."""
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    text = _SPACES.sub(" ", text)
    text = "\n".join(line.strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", text).strip()


def has_invalid_utf8(text: str) -> bool:
    """True if the text holds lone surrogates: undecodable bytes kept by the reader."""
    return _SURROGATE.search(text) is not None


def repair_utf8(text: str) -> str:
    """Replace lone surrogates (invalid bytes) with U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def safe(text: str) -> str:
    """A snippet that is valid Unicode (rejects are written as UTF-8 JSON)."""
    return repair_utf8(snippet(text))


# ------------------------------------------------------------------ C4 line rules

def line_rules_for(source: str, sources: Iterable[SourceConfig] = (), cfg: CleanConfig | None = None) -> bool:
    """Whether C4's line rules apply to a source: its SourceConfig.line_rules, else by name
    (off for narrative sources such as stories and books, on for news and web text)."""
    for s in sources:
        if s.name == source and s.line_rules is not None:
            return s.line_rules
    if cfg is not None and not cfg.line_rules:
        return False
    return not any(n in source for n in NARRATIVE_SOURCES)


def has_end_mark(line: str, marks: str = "c4") -> bool:
    """C4's line test: the line ends in an end mark and (with "c4") not in an ellipsis."""
    return line.endswith(TERMINAL[marks]) and not (marks == "c4" and line.endswith("..."))


def filter_lines(text: str, cfg: CleanConfig, disabled: frozenset[str] = frozenset()) -> tuple[str, Counter]:
    """Apply C4's line rules; returns the kept text and how many lines each rule removed.

    Blank lines (paragraph breaks) are kept so paragraphs survive for the repetition rules.
    """
    removed: Counter = Counter()
    kept: list[str] = []
    for line in text.split("\n"):
        if not line:
            if kept and kept[-1]:
                kept.append(line)
            continue
        lower = line.lower()
        words = line.split()
        if "javascript" in lower and "javascript" not in disabled:
            removed["javascript"] += 1
        elif "policy" not in disabled and any(p in lower for p in POLICY_PHRASES):
            removed["policy"] += 1
        elif ("long_word" not in disabled and len(line) > cfg.line_max_word_chars
              and any(len(w) > cfg.line_max_word_chars for w in words)):
            removed["long_word"] += 1
        elif "min_line_words" not in disabled and (DocStats(line).word_count if _UNSPACED.search(line)
                                                   else len(words)) < cfg.line_min_words:
            removed["min_line_words"] += 1
        elif "terminal_punct" not in disabled and not has_end_mark(line, cfg.line_end_marks):
            removed["terminal_punct"] += 1
        else:
            kept.append(line)
    return "\n".join(kept).strip(), removed


# ------------------------------------------------------------------ document statistics

class DocStats:
    """Everything the document rules look at, computed once and only when a rule asks."""

    def __init__(self, text: str, language_id: Method = "cld2"):
        self.text = text
        self.language_id = language_id

    @cached_property
    def language(self) -> LanguageGuess:
        """The detected language (pipelines/clean/langid.py), computed once for the rule and the record."""
        return identify(self.text, self.language_id)

    @cached_property
    def raw_words(self) -> list[str]:
        return spaced(self.text).split()

    @cached_property
    def words(self) -> list[str]:
        """Lower-cased words with surrounding punctuation stripped (empty ones dropped)."""
        stripped = (w.strip(_PUNCT) for w in spaced(self.text.lower()).split())
        return [w for w in stripped if w]

    @cached_property
    def unspaced_chars(self) -> int:
        return len(_UNSPACED.findall(self.text))

    @cached_property
    def word_count(self) -> float:
        """Words, a word of a script written without spaces counting as UNSPACED_CHARS_PER_WORD characters."""
        return len(self.words) - self.unspaced_chars + self.unspaced_chars / UNSPACED_CHARS_PER_WORD

    def n_tokens(self, n: int) -> int:
        """An n-gram of words in tokens (characters, in text of a script written without spaces)."""
        return int(n * UNSPACED_CHARS_PER_WORD + 0.5) if self.unspaced_chars and n >= 1 else n

    @cached_property
    def lines(self) -> list[str]:
        return [ln for ln in self.text.split("\n") if ln.strip()]

    @cached_property
    def paragraphs(self) -> list[str]:
        return [p.strip() for p in re.split(r"\n\s*\n", self.text) if p.strip()]

    @cached_property
    def non_alpha_words(self) -> int:
        """Whitespace tokens without a single letter (numbers, symbols)."""
        return len(_NO_LETTER_TOKEN.findall(spaced(self.text)))

    @cached_property
    def word_chars(self) -> int:
        return sum(map(len, self.words))

    @cached_property
    def word_ids(self) -> list[int]:
        """Words as small ints (equal words, equal ids): cheap n-gram keys."""
        vocab: dict[str, int] = {}
        return [vocab.setdefault(w, len(vocab)) for w in self.words]

    @cached_property
    def line_dups(self) -> tuple[float, float]:
        """dup_fractions of the lines (two rules read it: computed once)."""
        return dup_fractions(self.lines)

    @cached_property
    def paragraph_dups(self) -> tuple[float, float]:
        """dup_fractions of the paragraphs (two rules read it: computed once)."""
        return dup_fractions(self.paragraphs)

    def top_ngram_frac(self, n: int) -> float:
        """Gopher: characters of the most frequent n-gram times its count, over all word characters."""
        ids = self.word_ids
        if len(ids) < n or not self.word_chars:
            return 0.0
        counts = Counter(zip(*(ids[i:] for i in range(n)), strict=False))
        gram, count = counts.most_common(1)[0]
        if count <= 1:
            return 0.0
        first = next(i for i in range(len(ids) - n + 1) if tuple(ids[i:i + n]) == gram)
        chars = sum(len(w) for w in self.words[first:first + n])
        return chars * count / self.word_chars

    @cached_property
    def dup_ngram_fracs(self) -> dict[int, float]:
        """Gopher: share of word characters inside n-grams that occur more than once, n = 5..10 (in
        tokens: to n_tokens(10)).

        A duplicated (n+1)-gram starts with a duplicated n-gram, so each larger n only looks at
        the positions where the smaller one repeated (usually few; none in clean prose).
        """
        ids, words = self.word_ids, self.words
        last = self.n_tokens(10)
        total = self.word_chars
        out: dict[int, float] = {}
        if not total:
            return out
        lens = [len(w) for w in words]
        # Fast path: no repeated 5-gram (the usual case) means no repeated longer n-gram either.
        fives = Counter(zip(*(ids[i:] for i in range(5)), strict=False))
        if not fives or max(fives.values()) == 1:
            return {n: 0.0 for n in range(5, last + 1)}
        starts = range(len(ids))
        for n in range(5, last + 1):
            grams = [(i, tuple(ids[i:i + n])) for i in starts if i + n <= len(ids)]
            counts = Counter(g for _, g in grams)
            dup_starts = [i for i, g in grams if counts[g] > 1]
            covered = bytearray(len(ids))
            for i in dup_starts:
                covered[i:i + n] = b"\x01" * n
            out[n] = sum(lens[i] for i in range(len(ids)) if covered[i]) / total if dup_starts else 0.0
            starts = dup_starts
            if not starts:
                for m in range(n + 1, last + 1):
                    out[m] = 0.0
                break
        return out


def dup_fractions(items: list[str]) -> tuple[float, float]:
    """(share of items that repeat an earlier one, share of characters in those repeats)."""
    if not items:
        return 0.0, 0.0
    seen: set[str] = set()
    dup = dup_chars = total_chars = 0
    for it in items:
        total_chars += len(it)
        if it in seen:
            dup += 1
            dup_chars += len(it)
        else:
            seen.add(it)
    return dup / len(items), (dup_chars / total_chars if total_chars else 0.0)


# ------------------------------------------------------------------ rules

Rule = Callable[[DocStats, CleanConfig], bool]  # True: the document fails the rule


def _mean_word_len(s: DocStats) -> float | None:
    """In letters (a Hangul syllable is its 2-3 jamo); None where every word is of a script without spaces."""
    words = [w for w in s.words if not _UNSPACED.fullmatch(w)] if s.unspaced_chars else s.words
    if s.unspaced_chars and 2 * len(words) <= len(s.words):  # mostly words of one such character
        return None
    letters = sum(len(w) + sum(2 if (ord(ch) - 0xAC00) % 28 else 1 for ch in w if "\uac00" <= ch <= "\ud7a3")
                  for w in words)
    return letters / len(words) if words else 0.0


def _markup(s: DocStats, c: CleanConfig) -> bool:
    if "<" not in s.text:
        return False
    return sum(len(m) for m in _TAG.findall(s.text)) > c.max_markup_frac * len(s.text)


def _top_ngrams(s: DocStats, c: CleanConfig) -> bool:
    return any(s.top_ngram_frac(s.n_tokens(n)) > t for n, t in sorted(c.max_top_ngram_frac.items()))


def _dup_ngrams(s: DocStats, c: CleanConfig) -> bool:
    fr = s.dup_ngram_fracs
    return any((fr.get(s.n_tokens(n), 0.0) if 5 <= n <= 10 else 0.0) > t for n, t in sorted(c.max_dup_ngram_frac.items()))


def _share(lines: list[str], pred: Callable[[str], bool]) -> float:
    return sum(1 for ln in lines if pred(ln)) / len(lines) if lines else 0.0


PAGE_RULES: list[tuple[str, Rule]] = [
    ("markup", _markup),
    ("lorem_ipsum", lambda s, c: "lorem ipsum" in s.text.lower()),
]
WEB_PAGE_RULES: list[tuple[str, Rule]] = [
    ("curly_braces", lambda s, c: "{" in s.text),
]
DOC_RULES: list[tuple[str, Rule]] = [
    ("min_words", lambda s, c: s.word_count < c.min_words),
    ("max_words", lambda s, c: s.word_count > c.max_words),
    ("mean_word_len", lambda s, c: _mean_word_len(s) is not None
     and not c.min_mean_word_len <= _mean_word_len(s) <= c.max_mean_word_len),
    ("symbol_word_ratio", lambda s, c: (s.text.count("#") + s.text.count("...") + s.text.count("\u2026"))
     > c.max_symbol_word_ratio * s.word_count),
    ("bullet_lines", lambda s, c: _share(s.lines, lambda ln: ln.lstrip().startswith(BULLETS)) > c.max_bullet_lines),
    ("ellipsis_lines", lambda s, c: _share(s.lines, lambda ln: ln.rstrip().endswith(ELLIPSES)) > c.max_ellipsis_lines),
    ("alpha_words", lambda s, c: len(s.raw_words) - s.non_alpha_words < c.min_alpha_words * len(s.raw_words)),
    ("stop_words", lambda s, c: stop_words_for(c, s) is not None
     and sum(1 for w in s.words if w in stop_words_for(c, s)) < c.min_stop_words),
    ("dup_lines", lambda s, c: s.line_dups[0] > c.max_dup_line_frac),
    ("dup_line_chars", lambda s, c: s.line_dups[1] > c.max_dup_line_char_frac),
    ("dup_paragraphs", lambda s, c: s.paragraph_dups[0] > c.max_dup_para_frac),
    ("dup_paragraph_chars", lambda s, c: s.paragraph_dups[1] > c.max_dup_para_char_frac),
    ("top_ngrams", _top_ngrams),
    ("dup_ngrams", _dup_ngrams),
    ("min_sentences", lambda s, c: len(split_sentences(s.text)) < c.min_sentences),
    ("language", lambda s, c: c.english_only and not accepts_language(s.language, c)),
]
GUARD_RULES = ("empty", "max_doc_bytes", "invalid_utf8", "empty_after_line_rules")
# Old rule names still accepted in disabled_rules.
RULE_ALIASES = {"english": "language"}
RULE_NAMES = (frozenset(GUARD_RULES + LINE_RULES) | {n for n, _ in PAGE_RULES + WEB_PAGE_RULES + DOC_RULES}
              | set(RULE_ALIASES))


def accepts_language(guess: LanguageGuess, cfg: CleanConfig) -> bool:
    """The package's (the language rule's policy, see the module's docstring)."""
    from pipelines.clean.rules import accepts_language as current

    return current(guess, cfg)


def disabled_rules(cfg: CleanConfig) -> frozenset[str]:
    """cfg.disabled_rules with old names mapped to the current ones."""
    return frozenset(RULE_ALIASES.get(n, n) for n in cfg.disabled_rules)


def clean_document(doc: Document, cfg: CleanConfig, line_rules: bool = True,
                   line_counts: Counter | None = None) -> Document | Reject:
    """Normalize a document and apply the enabled rules; the first failing rule names the reason.

    line_rules: apply C4's line rules (web/news). line_counts, if given, is incremented with the
    number of lines each line rule removed.
    """
    disabled = disabled_rules(cfg)

    def filtered(reason: str, text: str) -> Reject:
        return Reject(doc.doc_id, doc.source, "filtered", reason, safe(text))

    text = doc.text
    # UTF-8 bytes >= characters: a cheap bound first, the exact size only near the limit.
    if len(text) > cfg.max_doc_bytes or (len(text) * 4 > cfg.max_doc_bytes
                                         and len(text.encode("utf-8", "surrogatepass")) > cfg.max_doc_bytes):
        if "max_doc_bytes" not in disabled:
            return filtered("max_doc_bytes", text)
    if has_invalid_utf8(text):
        if cfg.invalid_utf8 == "reject":
            return Reject(doc.doc_id, doc.source, "rejected", "invalid_utf8", safe(text))
        text = repair_utf8(text)
    text = normalize_text(text)
    if not text:
        return filtered("empty", text)
    stats = DocStats(text, cfg.language_id)
    page_rules = PAGE_RULES + (WEB_PAGE_RULES if line_rules else [])
    for name, rule in page_rules:
        if name not in disabled and rule(stats, cfg):
            return filtered(name, text)
    if line_rules:
        kept, removed = filter_lines(text, cfg, disabled)
        if line_counts is not None:
            line_counts.update(removed)
        if not kept:
            return filtered("empty_after_line_rules", text)
        if removed:
            text = _BLANK_LINES.sub("\n\n", kept)
            stats = DocStats(text, cfg.language_id)
    for name, rule in DOC_RULES:
        if name not in disabled and rule(stats, cfg):
            out = filtered(name, text)
            return dataclasses.replace(out, language=stats.language.code) if name == "language" else out
    guess = stats.language
    return dataclasses.replace(doc, text=text, language=guess.code, language_score=guess.score)
