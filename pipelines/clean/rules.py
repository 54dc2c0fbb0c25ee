"""Cleaning: normalize text, drop boilerplate lines (C4), filter documents by named rules (Gopher).

Per document, in this order (the first failing rule names the reason):

1. guards: ``max_doc_bytes`` before any work; ``invalid_utf8`` (bytes the reader could not decode,
   kept as lone surrogates) -> bucket ``rejected``, or repaired to U+FFFD with ``invalid_utf8: repair``;
2. normalize: NFC, control characters stripped, whitespace runs collapsed, lines trimmed;
3. page rules: ``empty``, ``markup`` (HTML-heavy), ``lorem_ipsum`` (C4), ``curly_braces`` (C4, web);
4. C4 line rules (web and news sources; off for stories by default, see ``line_rules_for``): lines
   mentioning javascript, cookie / privacy / terms boilerplate, holding a word over 1000 chars,
   with fewer than ``line_min_words`` words, or without terminal punctuation are removed;
5. Gopher rules on what is left: word count, mean word length, symbol/word ratio, bullet and
   ellipsis lines, alphabetic words, stop words, duplicate lines / paragraphs (count and chars),
   top 2-4-gram shares, duplicated 5-10-gram shares; then C4's ``min_sentences`` and ``language``
   (pipelines/clean/langid.py: CLD2 by default; the kept document records its language and score).

The document rules run in ``document_reason``, in the order of ``DOC_RULE_NAMES``: each statistic is
computed once, when the first rule that reads it runs, with the per-word work in C; n-grams are
counted only where a bound or a uniqueness proof does not settle the rule (``NGrams``). The stage
before #16 is frozen in tests/reference_clean.py, and tests/test_clean_equivalence.py holds this one
to its records. Thresholds live in ``CleanConfig``; ``disabled_rules`` switches rules (and line
rules) off by name. A filtered document becomes ``Reject(bucket="filtered", reason=<rule>)``.
"""

from __future__ import annotations

import dataclasses
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import cached_property
from itertools import accumulate, filterfalse, repeat
from operator import mul, sub

import numpy as np

from pipelines.clean.langid import LanguageGuess, Method, identify, known_codes
from pipelines.clean.sentences import count_sentences
from pipelines.records import Document, Reject, count_words, snippet
from schemas.config import CleanConfig, SourceConfig
from schemas.errors import UserError

REJECTS = "rejects"
RAW_WORDS = "raw_words"  # CleanDocuments' (source, words of the text as read) per document: the report's "before"

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200d\u2060\ufeff]")
# A run of spaces that normalization changes: two or more, or any that is not a plain " " (a
# lone plain space stays, so the common case is no replacement at all).
_SPACE = "\t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"  # collapsed to " ", with " " itself
_SPACES = re.compile(f" [ {_SPACE}]+|[{_SPACE}][ {_SPACE}]*")
_BLANK_LINES = re.compile(r"\n{3,}")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_TAG = re.compile(r"<[^<>\n]{1,400}>")
# A letter, as the alpha_words rule means it: a word character that is not a digit nor "_".
_LETTER = re.compile(r"[^\W\d_]")
# ASCII characters that are not printable, but for the newline (normalize_text).
_ASCII_CONTROLS = bytes([*range(0x0a), *range(0x0b, 0x20), 0x7f])

# C4 (c4_utils.py): boilerplate phrases, end marks. C4 keeps a line only if it ends in one of
# . ? ! " (straight quote) and not in "..." (CleanConfig.line_end_marks="c4", the default);
# "typographic" also accepts closing curly quotes and keeps lines ending in "...".
POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                  "use cookies")
C4_END_MARKS = (".", "?", "!", '"')
TERMINAL = {"c4": C4_END_MARKS, "typographic": (*C4_END_MARKS, "\u201d", "\u2019")}
# Gopher's stop words (a document needs at least `min_stop_words` of them).
GOPHER_STOP_WORDS = frozenset(["the", "be", "to", "of", "and", "that", "have", "with"])
BULLETS = ("\u2022", "\u2023", "\u25e6", "\u2043", "\u25aa", "\u25cf", "\u00b7", "-", "*", "\u2013")
ELLIPSES = ("...", "\u2026")
_PUNCT = string.punctuation + "\u2018\u2019\u201c\u201d\u2026\u2013\u2014\u00ab\u00bb"

LINE_RULES = ("javascript", "policy", "long_word", "min_line_words", "terminal_punct")
NARRATIVE_SOURCES = ("stories", "story", "book")


# ------------------------------------------------------------------ normalization

def normalize_text(text: str) -> str:
    """NFC, control characters stripped, runs of spaces collapsed, lines trimmed."""
    text = unicodedata.normalize("NFC", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    # Every character the two substitutions remove or collapse (controls, format characters,
    # spaces other than " ") is non-printable: where every line is printable and no "  " occurs
    # (most text, in any script) neither changes anything, so C scans replace two regex passes;
    # and then a line's only whitespace is single spaces, so a line needs trimming only where a
    # space touches a newline.
    if "  " in text or not _printable_lines(text):
        text = _SPACES.sub(" ", _CONTROL.sub("", text))
        trim = True
    else:
        trim = " \n" in text or "\n " in text
    if trim and "\n" in text:
        text = "\n".join(map(str.strip, text.split("\n")))
    if "\n\n\n" in text:
        text = _BLANK_LINES.sub("\n\n", text)
    return text.strip()


def _printable_lines(text: str) -> bool:
    """Whether every line of the text is printable (str.isprintable; the newlines aside).

    ASCII: deleting the control bytes from the encoded text (C, a table lookup per byte) is the
    faster test."""
    if text.isascii():
        return len(text.encode("ascii").translate(None, _ASCII_CONTROLS)) == len(text)
    return all(map(str.isprintable, text.split("\n")))


def has_invalid_utf8(text: str) -> bool:
    """True if the text holds lone surrogates: undecodable bytes kept by the reader."""
    if text.isascii():
        return False
    try:  # strict UTF-8 refuses exactly the surrogates, and encodes in C faster than a regex scans
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


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
    return _filter_lines(text, text.lower(), cfg, disabled)


def _filter_lines(text: str, lower: str, cfg: CleanConfig, disabled: frozenset[str]) -> tuple[str, Counter]:
    """filter_lines with the text's lower-case form given (the page rules computed it already).

    The boilerplate phrases are looked for in the whole page first: a page without any (most)
    never lower-cases a line. Lower-casing keeps every newline, so a phrase in a line's
    lower-case form is in the page's.
    """
    removed: Counter = Counter()
    kept: list[str] = []
    javascript = "javascript" not in disabled and "javascript" in lower
    policy = "policy" not in disabled and any(p in lower for p in POLICY_PHRASES)
    long_word = "long_word" not in disabled
    max_chars = cfg.line_max_word_chars
    longest = max(max_chars, 0)  # a token is never shorter than 0 characters
    min_words = cfg.line_min_words if "min_line_words" not in disabled else 0
    terminal = "terminal_punct" not in disabled
    ends = TERMINAL[cfg.line_end_marks]
    no_ellipsis = cfg.line_end_marks == "c4"
    for line in text.split("\n"):
        if not line:
            if kept and kept[-1]:
                kept.append(line)
            continue
        if javascript or policy:
            low = line.lower()
            if javascript and "javascript" in low:
                removed["javascript"] += 1
                continue
            if policy and any(p in low for p in POLICY_PHRASES):
                removed["policy"] += 1
                continue
        if long_word and len(line) > max_chars and _has_long_token(line, longest):
            removed["long_word"] += 1
            continue
        # maxsplit: counting up to min_words tokens is enough
        few = min_words > 0 and len(line.split(None, min_words - 1)) < min_words
        if few:
            removed["min_line_words"] += 1
        elif terminal and not (line.endswith(ends) and not (no_ellipsis and line.endswith("..."))):
            removed["terminal_punct"] += 1
        else:
            kept.append(line)
    return "\n".join(kept).strip(), removed


def _has_long_token(line: str, longest: int) -> bool:
    """Whether a whitespace-delimited token of the line (str.split's) is longer than `longest`.

    Any longest + 1 consecutive characters hold exactly one position p with p % (longest + 1) ==
    longest, so a longer token covers one of those probes. Where the only whitespace is " " (a
    printable line: every other whitespace character is non-printable), find / rfind measure the
    token around each probe, a few C scans of short tokens instead of splitting a long line (a
    regex for longest + 1 non-spaces would rescan a long token from each of its characters).
    """
    if not line.isprintable():
        return max(map(len, line.split()), default=0) > longest
    for p in range(longest, len(line), longest + 1):
        if line[p] != " ":
            end = line.find(" ", p)
            if (len(line) if end < 0 else end) - line.rfind(" ", 0, p) - 1 > longest:
                return True
    return False


# ------------------------------------------------------------------ document statistics

def words_of(text: str) -> list[str]:
    """Gopher's words: lower-cased whitespace tokens with surrounding punctuation stripped (empty
    ones dropped). map/filter keep the per-word work in C."""
    return list(filter(None, map(str.strip, text.lower().split(), repeat(_strip_chars(text)))))


def _strip_chars(text: str) -> str:
    """The punctuation to strip from the text's tokens: ASCII text holds none of _PUNCT's other
    characters, and str.strip tests a shorter, one-byte set faster (str.isascii is O(1))."""
    return string.punctuation if text.isascii() else _PUNCT


# From this many words on, a sort of numbered 5-grams (numpy) is cheaper than a set of tuples.
_SORT_WORDS = 2000
_INT64_MAX = int(np.iinfo(np.int64).max)


class NGrams:
    """Gopher's n-gram statistics of one document's words, exact, counting as little as possible.

    Built on the words' Counter (the number of words, their characters and the stop words come
    from it). Two facts spare most n-gram counting:

    * an n-gram occurs at most as often as each of its words, so its (characters x count) is at
      most the sum of (length x count) of its words, hence at most the largest such sum over n
      consecutive words (prefix sums, in C): where that is within Gopher's limit (ordinary prose,
      for 2- to 4-grams) the n-grams are not counted;
    * once no m-gram repeats, no longer n-gram does (its m-gram prefix would repeat): then its
      share and its duplicated characters are 0 (most prose has no repeated 5-gram).

    Where n-grams are counted: the 2- to 4-gram top share as tuples of words (zip over slices, in
    C; rarely needed); the repeated 5- to 10-grams by numbering them with numpy sorts.
    """

    def __init__(self, words: list[str], freq: Counter | None = None):
        self.words = words
        self.size = len(words)
        self.freq = Counter(words) if freq is None else freq
        # characters x count of each distinct word, in the Counter's order
        self._weights = list(map(mul, map(len, self.freq), self.freq.values()))
        self.word_chars = sum(self._weights)
        self._most = max(self._weights, default=0)
        self._unique_from: int | None = None  # the least n known to have no repeated n-gram
        self._prefix: list[int] | None = None

    def _mark_unique(self, n: int) -> None:
        if self._unique_from is None or n < self._unique_from:
            self._unique_from = n

    def may_repeat(self, n: int) -> bool:
        """False when no n-gram (n >= 1) occurs twice; True when one may (a large document is not
        checked here: the sort in ``dup_frac_steps`` settles it for less than a set of tuples)."""
        if self._unique_from is not None and n >= self._unique_from:
            return False
        positions = self.size - n + 1
        if positions < 2:
            return False
        if self.size >= _SORT_WORDS:
            return True
        grams = zip(*(self.words[i:] for i in range(n)), strict=False)
        if len(set(grams)) == positions:
            self._mark_unique(n)
            return False
        return True

    def top_bound(self, n: int, enough: float = 0.0) -> int:
        """An upper bound on (characters x count) of any n-gram, n >= 1 (see the class): n times the
        largest (length x count) of a word where that is at most `enough`, else the largest sum of
        (length x count) over n consecutive words (tighter, one more pass)."""
        if n * self._most <= enough:
            return n * self._most
        if self._prefix is None:
            weight = dict(zip(self.freq, self._weights, strict=True))
            self._prefix = [0, *accumulate(map(weight.__getitem__, self.words))]
        prefix = self._prefix
        return max(map(sub, prefix[n:], prefix[:-n]), default=0)

    def top_frac(self, n: int) -> float:
        """Gopher: characters of the most frequent n-gram times its count, over all word characters.

        Ties go to the n-gram seen first (``Counter.most_common``'s order)."""
        if self.size < n or not self.word_chars:
            return 0.0
        if n >= 1 and self._unique_from is not None and n >= self._unique_from:
            return 0.0
        gram, count = Counter(zip(*(self.words[i:] for i in range(n)), strict=False)).most_common(1)[0]
        if count <= 1:
            if n >= 1:
                self._mark_unique(n)
            return 0.0
        return sum(map(len, gram)) * count / self.word_chars

    def dup_fracs(self) -> dict[int, float]:
        """Gopher: share of word characters inside n-grams that occur more than once, n = 5..10."""
        return dict(self.dup_frac_steps()) if self.word_chars else {}

    def _five_gram_numbers(self, ids: np.ndarray, vocab: int) -> tuple[np.ndarray, np.ndarray]:
        """Each 5-gram's number (equal 5-grams alike) and each number's count, from the word numbers
        (0..vocab-1): the 5 numbers as digits base vocab where that fits int64 (one sort), else
        pairs, then pairs of pairs, then one more word, numbered in turn (three sorts)."""
        size = self.size
        if vocab ** 5 <= _INT64_MAX + 1:
            keys = ids[:size - 4].copy()
            for i in range(1, 5):
                keys *= vocab
                keys += ids[i:size - 4 + i]
            return _dense_ids(keys)
        pairs, _ = _dense_ids(ids[:-1] * size + ids[1:])  # numbers < size: products fit int64
        quads, _ = _dense_ids(pairs[:-2] * size + pairs[2:])
        return _dense_ids(quads[:-1] * size + ids[4:])

    def dup_frac_steps(self) -> Iterator[tuple[int, float]]:
        """(n, duplicated n-gram share) for n = 5..10, in order, each computed only when asked.

        A duplicated (n+1)-gram starts with a duplicated n-gram, so each larger n only looks at
        the positions where the smaller one repeated (usually few; none in clean prose). The
        shares never grow with n: every word a repeated (n+1)-gram covers, its repeated n-gram
        prefix or suffix covers.
        """
        if not self.word_chars or not self.may_repeat(5):
            for n in range(5, 11):
                yield n, 0.0
            return
        size, vocab = self.size, len(self.freq)
        # Words numbered in the Counter's order; from 6-grams on, an n-gram's key is its (n-1)-gram
        # prefix's number x size + its last word's number, exact in int64 (numbers < size).
        number = dict(zip(self.freq, range(vocab), strict=True))
        ids = np.fromiter(map(number.__getitem__, self.words), dtype=np.int64, count=size)
        keys, counts = self._five_gram_numbers(ids, vocab)
        starts = np.flatnonzero(counts[keys] > 1)
        keys = keys[starts]
        lens = np.fromiter(map(len, self.freq), dtype=np.int64, count=vocab)[ids]
        for n in range(5, 11):
            if n > 5:  # only where the (n-1)-gram repeated: its number and the next word's
                fits = starts <= size - n
                starts, keys = starts[fits], keys[fits]
                keys, counts = _dense_ids(keys * size + ids[starts + (n - 1)])
                repeated = counts[keys] > 1
                starts, keys = starts[repeated], keys[repeated]
            if not len(starts):
                if n == 5:
                    self._mark_unique(5)
                for m in range(n, 11):
                    yield m, 0.0
                return
            # words covered by some repeated n-gram: +1 where one starts, -1 where it ends
            depth = np.cumsum(np.bincount(starts, minlength=size + n) - np.bincount(starts + n, minlength=size + n))
            yield n, int(lens[depth[:size] > 0].sum()) / self.word_chars


def _dense_ids(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Equal keys numbered alike: (each key's number in 0..k-1, each number's count), by one sort."""
    order = np.argsort(keys)
    ordered = keys[order]
    first = np.empty(len(keys), dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    group = np.cumsum(first, dtype=np.int64) - 1
    ids = np.empty_like(group)
    ids[order] = group
    return ids, np.bincount(group)


def dup_fractions(items: list[str]) -> tuple[float, float]:
    """(share of items that repeat an earlier one, share of characters in those repeats)."""
    if not items:
        return 0.0, 0.0
    if len(set(items)) == len(items):  # no repeat (the usual case): nothing to add up
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


class DocStats:
    """Everything the document rules look at, for one text, each computed once when asked.

    For inspection and tests; ``clean_document`` computes the same values inline, in rule order.
    """

    def __init__(self, text: str, language_id: Method = "cld2"):
        self.text = text
        self.language_id = language_id

    @cached_property
    def language(self) -> LanguageGuess:
        """The detected language (pipelines/clean/langid.py)."""
        return identify(self.text, self.language_id)

    @cached_property
    def words(self) -> list[str]:
        """Lower-cased words with surrounding punctuation stripped (empty ones dropped)."""
        return words_of(self.text)

    @cached_property
    def word_chars(self) -> int:
        return sum(map(len, self.words))

    @cached_property
    def ngrams(self) -> NGrams:
        return NGrams(self.words)

    def top_ngram_frac(self, n: int) -> float:
        """Gopher: characters of the most frequent n-gram times its count, over all word characters."""
        return self.ngrams.top_frac(n)

    @cached_property
    def dup_ngram_fracs(self) -> dict[int, float]:
        """Gopher: share of word characters inside repeated n-grams, n = 5..10."""
        return self.ngrams.dup_fracs()


# ------------------------------------------------------------------ rules

PAGE_RULE_NAMES = ("markup", "lorem_ipsum")
WEB_PAGE_RULE_NAMES = ("curly_braces",)
# The document rules in the order they run (the first failing one names the reason).
DOC_RULE_NAMES = ("min_words", "max_words", "mean_word_len", "symbol_word_ratio", "bullet_lines", "ellipsis_lines",
                  "alpha_words", "stop_words", "dup_lines", "dup_line_chars", "dup_paragraphs",
                  "dup_paragraph_chars", "top_ngrams", "dup_ngrams", "min_sentences", "language")
GUARD_RULES = ("empty", "max_doc_bytes", "invalid_utf8", "empty_after_line_rules")
# Old rule names still accepted in disabled_rules.
RULE_ALIASES = {"english": "language"}
RULE_NAMES = (frozenset(GUARD_RULES + LINE_RULES + PAGE_RULE_NAMES + WEB_PAGE_RULE_NAMES + DOC_RULE_NAMES)
              | set(RULE_ALIASES))


def accepts_language(guess: LanguageGuess, cfg: CleanConfig) -> bool:
    """The language rule: the detected language is one the user keeps, with enough of the text in it.

    An empty ``cfg.languages`` keeps every language. The score bound is ``min_language_score``
    for CLD2 (share of the text) and ``min_english_score`` for the stop-word method.
    """
    if not cfg.languages:
        return True
    least = cfg.min_english_score if cfg.language_id == "stopwords" else cfg.min_language_score
    return guess.code in cfg.languages and guess.score >= least


def disabled_rules(cfg: CleanConfig) -> frozenset[str]:
    """cfg.disabled_rules with old names mapped to the current ones."""
    return frozenset(RULE_ALIASES.get(n, n) for n in cfg.disabled_rules)


def check_rule_names(cfg: CleanConfig) -> None:
    """A misspelled name in disabled_rules or languages must not silently change the rules."""
    unknown = sorted(set(cfg.disabled_rules) - RULE_NAMES)
    if unknown:
        raise UserError(f"clean.disabled_rules: unknown rule(s) {unknown}; known: {sorted(RULE_NAMES)}")
    codes = known_codes(cfg.language_id)
    bad = sorted(set(cfg.languages) - codes)
    if bad:
        raise UserError(f"clean.languages: unknown code(s) {bad} for language_id={cfg.language_id!r}; "
                        f"use ISO 639-1 codes such as {sorted(codes)[:12]}...")


def page_reason(text: str, lower: str, c: CleanConfig, disabled: frozenset[str], web: bool) -> str | None:
    """The first page rule the normalized text fails (markup, lorem_ipsum, curly_braces), or None."""
    if ("markup" not in disabled and "<" in text
            and sum(map(len, _TAG.findall(text))) > c.max_markup_frac * len(text)):
        return "markup"
    if "lorem_ipsum" not in disabled and "lorem ipsum" in lower:
        return "lorem_ipsum"
    if web and "curly_braces" not in disabled and "{" in text:
        return "curly_braces"
    return None


def document_reason(text: str, c: CleanConfig, disabled: frozenset[str],
                    lower: str | None = None) -> tuple[str | None, LanguageGuess | None, int]:
    """The first Gopher / C4 document rule the text fails (None: it passes), the language where it
    was identified on the way, and the text's whitespace-separated words (``len(text.split())``:
    the report's length unit, counted here once for the kept documents).

    text is normalized (pipelines.clean.rules.normalize_text, then the line rules): lines are trimmed
    and at most one blank line separates paragraphs, so lines and paragraphs are plain splits.
    lower: text.lower(), where the caller has it. Each statistic is computed once, when the first
    rule that reads it runs, with the per-word work in C (str methods through map / filter, one
    Counter of the words); the rules and their order are DOC_RULE_NAMES.
    """
    if lower is None:
        lower = text.lower()
    tokens = lower.split()  # lower-casing changes no whitespace: the same tokens as text.split()
    reason, guess = _first_failed_rule(text, tokens, c, disabled)
    return reason, guess, len(tokens)


def _first_failed_rule(text: str, tokens: list[str], c: CleanConfig,
                       disabled: frozenset[str]) -> tuple[str | None, LanguageGuess | None]:
    """``document_reason``'s rules on the text and its whitespace tokens (lower-cased)."""
    words = list(filter(None, map(str.strip, tokens, repeat(_strip_chars(text)))))
    n_words = len(words)
    if "min_words" not in disabled and n_words < c.min_words:
        return "min_words", None
    if "max_words" not in disabled and n_words > c.max_words:
        return "max_words", None
    grams = NGrams(words)  # the words' Counter: characters and stop words come from it too
    if "mean_word_len" not in disabled:
        mean = grams.word_chars / n_words if n_words else 0.0
        if not c.min_mean_word_len <= mean <= c.max_mean_word_len:
            return "mean_word_len", None
    if ("symbol_word_ratio" not in disabled
            and text.count("#") + text.count("...") + text.count("\u2026") > c.max_symbol_word_ratio * n_words):
        return "symbol_word_ratio", None
    lines: list[str] | None = None
    if "bullet_lines" not in disabled or "ellipsis_lines" not in disabled:
        lines = _lines(text)
        if ("bullet_lines" not in disabled
                and sum(map(str.startswith, lines, repeat(BULLETS))) / len(lines) > c.max_bullet_lines):
            return "bullet_lines", None
        if ("ellipsis_lines" not in disabled
                and sum(map(str.endswith, lines, repeat(ELLIPSES))) / len(lines) > c.max_ellipsis_lines):
            return "ellipsis_lines", None
    if "alpha_words" not in disabled:
        if _letter_words(grams.freq) < c.min_alpha_words * len(tokens):
            return "alpha_words", None
    if ("stop_words" not in disabled
            and sum(map(grams.freq.get, GOPHER_STOP_WORDS, repeat(0))) < c.min_stop_words):
        return "stop_words", None
    if "dup_lines" not in disabled or "dup_line_chars" not in disabled:
        frac, chars = dup_fractions(_lines(text) if lines is None else lines)
        if "dup_lines" not in disabled and frac > c.max_dup_line_frac:
            return "dup_lines", None
        if "dup_line_chars" not in disabled and chars > c.max_dup_line_char_frac:
            return "dup_line_chars", None
    if "dup_paragraphs" not in disabled or "dup_paragraph_chars" not in disabled:
        frac, chars = dup_fractions(text.split("\n\n"))
        if "dup_paragraphs" not in disabled and frac > c.max_dup_para_frac:
            return "dup_paragraphs", None
        if "dup_paragraph_chars" not in disabled and chars > c.max_dup_para_char_frac:
            return "dup_paragraph_chars", None
    if "top_ngrams" not in disabled or "dup_ngrams" not in disabled:
        if "top_ngrams" not in disabled and _top_ngrams_fail(grams, c.max_top_ngram_frac):
            return "top_ngrams", None
        if "dup_ngrams" not in disabled and _dup_ngrams_fail(grams, c.max_dup_ngram_frac):
            return "dup_ngrams", None
    if "min_sentences" not in disabled and count_sentences(text, c.min_sentences) < c.min_sentences:
        return "min_sentences", None
    if "language" not in disabled and c.english_only:
        guess = identify(text, c.language_id)
        if not accepts_language(guess, c):
            return "language", guess
        return None, guess
    return None, None


def _lines(text: str) -> list[str]:
    """The non-blank lines of a normalized text (its blank lines are empty: lines are trimmed)."""
    lines = text.split("\n")
    return list(filter(None, lines)) if "" in lines else lines


def _letter_words(freq: Counter) -> int:
    """How many of the counted words hold a letter (_LETTER), which is how many of the text's
    whitespace tokens do (the alpha_words rule): a word is its lower-cased token with punctuation
    stripped, and neither step adds or removes a letter (a token of punctuation only holds none).
    Only the distinct words that are not all letters (str.isalpha) are searched, in C."""
    no_letter = filterfalse(_LETTER.search, filterfalse(str.isalpha, freq))
    return sum(freq.values()) - sum(map(freq.__getitem__, no_letter))


def _top_ngrams_fail(grams: NGrams, limits: dict[int, float]) -> bool:
    """Gopher's top n-gram rule: for some n the most frequent n-gram holds more than its share.

    Where NGrams.top_bound is within the limit (ordinary prose: 3- and 4-grams) nothing is counted:
    the share <= bound / word characters <= the limit.
    """
    for n, t in sorted(limits.items()):
        if n >= 1 and grams.word_chars and grams.top_bound(n, t * grams.word_chars) / grams.word_chars <= t:
            continue  # share <= bound / word characters <= t
        if grams.top_frac(n) > t:
            return True
    return False


def _dup_ngrams_fail(grams: NGrams, limits: dict[int, float]) -> bool:
    """Gopher's duplicated n-gram rule: for some n the share of characters in repeated n-grams
    exceeds its limit (n outside 5..10 has share 0, as in Gopher's definition here).

    The shares never grow with n, so once a share is within every later limit the larger n are
    not computed (prose with a few repeated phrases stops at n = 5).
    """
    if any(0.0 > t for n, t in limits.items() if not 5 <= n <= 10):
        return True
    inside = {n: t for n, t in limits.items() if 5 <= n <= 10}
    if not inside:
        return False
    for n, frac in grams.dup_frac_steps():
        if n in inside and frac > inside[n]:
            return True
        later = [t for m, t in inside.items() if m > n]
        if not later or frac <= min(later):
            return False
    return False


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
    lower: str | None = text.lower()
    reason = page_reason(text, lower, cfg, disabled, line_rules)
    if reason is not None:
        return filtered(reason, text)
    if line_rules:
        kept, removed = _filter_lines(text, lower, cfg, disabled)
        if line_counts is not None:
            line_counts.update(removed)
        if not kept:
            return filtered("empty_after_line_rules", text)
        if removed:
            text = _BLANK_LINES.sub("\n\n", kept)
            lower = None
    reason, guess, words = document_reason(text, cfg, disabled, lower)
    if reason is not None:
        out = filtered(reason, text)
        return dataclasses.replace(out, language=guess.code) if reason == "language" and guess else out
    if guess is None:
        guess = identify(text, cfg.language_id)
    return dataclasses.replace(doc, text=text, language=guess.code, language_score=guess.score, words=words)


def raw_words(doc: Document, out: Document | Reject) -> int:
    """``count_words`` of the text as read: the count the clean rules made where the document was kept
    with its text unchanged (most prose), else counted here."""
    if type(out) is Document and out.words is not None and out.text == doc.text:
        return out.words
    return count_words(doc.text)


def clean_batch(docs: list[Document], cfg: CleanConfig,
                line_rules: dict[str, bool]) -> list[tuple[Document | Reject, dict[str, int], int]]:
    """The clean step's work for a batch: per document, what ``clean_document`` made of it, the lines
    each line rule removed and ``raw_words``. Pure (the step counts): it may run in a document
    process (``pipelines.localrunner.docpool``). ``line_rules``: source -> whether line rules apply."""
    out = []
    for doc in docs:
        on = line_rules.get(doc.source)
        if on is None:
            on = line_rules_for(doc.source, (), cfg)
        lines: Counter = Counter()
        result = clean_document(doc, cfg, on, lines)
        out.append((result, dict(lines), raw_words(doc, result)))
    return out
