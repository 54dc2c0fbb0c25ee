"""Document statistics the Gopher rules read: words, letters, n-gram shares, duplicate fractions.

``words_of``: Gopher's words (lower-cased tokens, surrounding punctuation stripped);
``letter_words``: how many of them hold a letter; ``NGrams``: top 2-4-gram shares and duplicated
5-10-gram shares, exact, counting as little as possible; ``dup_fractions``: repeated lines or
paragraphs; ``DocStats``: all of them for one text (inspection and tests). Plain Python and
numpy, no Beam.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterator
from functools import cached_property
from itertools import accumulate, filterfalse, repeat
from operator import mul, sub

import numpy as np

from pipelines.clean.langid import LanguageGuess, Method, identify
from pipelines.records import UNSPACED, UNSPACED_CHARS_PER_WORD, has_unspaced

# What Gopher strips from a token's ends: ASCII punctuation, typographic quotes, dashes and ellipses, and
# the ideographic punctuation of Chinese and Japanese text.
_PUNCT = (string.punctuation + "\u2018\u2019\u201c\u201d\u2026\u2013\u2014\u00ab\u00bb"
          "\u3001\u3002\u300c\u300d\u300e\u300f\u3010\u3011\u300a\u300b\u3008\u3009\uff01\uff08\uff09\uff0c\uff0e\uff1a\uff1b\uff1f")
# A letter, as the alpha_words rule means it: a word character that is not a digit nor "_".
_LETTER = re.compile(r"[^\W\d_]")


# A run of UNSPACED characters (one substitution per run, its characters joined in C: per character,
# the substitution's Python-level template was most of the clean rules' time on Chinese text).
_UNSPACED_RUN = re.compile(UNSPACED.pattern + "+")


def _spread(m: re.Match) -> str:
    return " " + " ".join(m.group()) + " "


def spaced(text: str) -> str:
    """The text with a space on each side of every ``UNSPACED`` character: each is then one word."""
    return _UNSPACED_RUN.sub(_spread, text)


def tokens_of(lower: str) -> list[str]:
    """The whitespace tokens Gopher's rules count, of a lower-cased text: each character of a script
    written without spaces (Chinese, Japanese) is one token of its own."""
    return (spaced(lower) if has_unspaced(lower) else lower).split()


def unspaced_word_count(words: list[str], text: str) -> float:
    """How many words ``words`` (``words_of(text)``) are, a word of a script written without spaces
    counting as UNSPACED_CHARS_PER_WORD of its characters (each of which is one of ``words``)."""
    chars = len(UNSPACED.findall(text))
    return len(words) - chars + chars / UNSPACED_CHARS_PER_WORD


def words_of(text: str) -> list[str]:
    """Gopher's words: lower-cased tokens (``tokens_of``) with surrounding punctuation stripped (empty
    ones dropped). map/filter keep the per-word work in C."""
    return list(filter(None, map(str.strip, tokens_of(text.lower()), repeat(strip_chars(text)))))


def strip_chars(text: str) -> str:
    """The punctuation to strip from the text's tokens: ASCII text holds none of _PUNCT's other
    characters, and str.strip tests a shorter, one-byte set faster (str.isascii is O(1))."""
    return string.punctuation if text.isascii() else _PUNCT


def letter_words(freq: Counter) -> int:
    """How many of the counted words hold a letter (_LETTER), which is how many of the text's
    whitespace tokens do (the alpha_words rule): a word is its lower-cased token with punctuation
    stripped, and neither step adds or removes a letter (a token of punctuation only holds none).
    Only the distinct words that are not all letters (str.isalpha) are searched, in C."""
    no_letter = filterfalse(_LETTER.search, filterfalse(str.isalpha, freq))
    return sum(freq.values()) - sum(map(freq.__getitem__, no_letter))


# Gopher's duplicated n-gram lengths (words).
DUP_NS = (5, 6, 7, 8, 9, 10)
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

    def dup_frac_steps(self, ns: tuple[int, ...] = DUP_NS) -> Iterator[tuple[int, float]]:
        """(n, duplicated n-gram share) for each n of ``ns`` (increasing, each >= 5: Gopher's 5..10), in
        order, each computed only when asked.

        A duplicated (n+1)-gram starts with a duplicated n-gram, so each larger n only looks at
        the positions where the smaller one repeated (usually few; none in clean prose). The
        shares never grow with n: every word a repeated (n+1)-gram covers, its repeated n-gram
        prefix or suffix covers.
        """
        if not self.word_chars or not self.may_repeat(5):
            for n in ns:
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
        wanted = set(ns)
        for n in range(5, max(ns) + 1):
            if n > 5:  # only where the (n-1)-gram repeated: its number and the next word's
                fits = starts <= size - n
                starts, keys = starts[fits], keys[fits]
                keys, counts = _dense_ids(keys * size + ids[starts + (n - 1)])
                repeated = counts[keys] > 1
                starts, keys = starts[repeated], keys[repeated]
            if not len(starts):
                if n == 5:
                    self._mark_unique(5)
                for m in ns:
                    if m >= n:
                        yield m, 0.0
                return
            if n in wanted:
                # words covered by some repeated n-gram: +1 where one starts, -1 where it ends
                depth = np.cumsum(np.bincount(starts, minlength=size + n)
                                  - np.bincount(starts + n, minlength=size + n))
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
