"""The rewritten clean stage (one pass per statistic, per-word work in C) reaches exactly the
decisions of the stage it replaced (tests/reference_clean.py, frozen at b5124a0): the same kept
text, language and score, the same reject bucket, reason, snippet and language, and the same
lines removed per line rule, on every document of a large sample of real and hostile text
(tests/clean_sample.py), under the default configuration and 16 others that move every
threshold. Every rule must fire somewhere in the sample, so no rule goes unchecked.
"""

from __future__ import annotations

import random
from collections import Counter
from unittest import mock

import pytest
import reference_clean as ref
from clean_sample import sample_documents, variant_configs
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.clean import stats as clean
from pipelines.clean.lines import LINE_RULES
from pipelines.clean.rules import RULE_ALIASES, RULE_NAMES, clean_document, raw_words
from pipelines.clean.sentences import count_sentences, split_sentences
from pipelines.clean.stats import DocStats
from pipelines.records import Document, Reject, count_words
from schemas.config import CleanConfig


@pytest.fixture(scope="module")
def docs() -> list[Document]:
    return sample_documents()


def outcome(out: Document | Reject) -> str:
    return out.reason if isinstance(out, Reject) else "kept"


def compare(docs: list[Document], cfg: CleanConfig, line_rules: bool, seen: Counter) -> None:
    """Both implementations on every document: equal records and equal line counts."""
    for d in docs:
        lines_new: Counter = Counter()
        lines_ref: Counter = Counter()
        new = clean_document(d, cfg, line_rules, lines_new)
        old = ref.clean_document(d, cfg, line_rules, lines_ref)
        assert new == old, (d.doc_id, cfg, line_rules, outcome(old), outcome(new))
        # dataclass equality compares floats by value: also the exact bits of the score
        if isinstance(new, Document):
            assert repr(new.language_score) == repr(old.language_score), d.doc_id
            # the word count the report's length histogram reads (not part of the record's equality)
            assert new.words == count_words(new.text), d.doc_id
        # the raw text's count (the report's histogram before cleaning), reused or counted
        assert raw_words(d, new) == count_words(d.text), d.doc_id
        assert lines_new == lines_ref, (d.doc_id, lines_ref, lines_new)
        seen[outcome(new)] += 1
        seen.update(f"line:{k}" for k in lines_new)


def test_sample_is_large_and_real(docs):
    assert len(docs) > 2000
    assert sum(len(d.text) for d in docs) > 5_000_000


def test_same_decisions_as_the_reference_on_real_and_hostile_text(docs):
    seen: Counter = Counter()
    default = CleanConfig()
    for line_rules in (True, False):
        compare(docs, default, line_rules, seen)
    subset = docs[::9] + [d for d in docs if len(d.text) > 100_000 or not d.text.strip()]
    for cfg in variant_configs():
        compare(subset, cfg, True, seen)
        if cfg.disabled_rules:
            compare(subset[::3], cfg, False, seen)
    rules = RULE_NAMES - set(RULE_ALIASES) - set(LINE_RULES)
    missing = sorted(r for r in rules if not seen[r]) + sorted(r for r in LINE_RULES if not seen[f"line:{r}"])
    assert not missing, f"rules the sample never exercised: {missing}"
    assert seen["kept"] > 500


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "bb", "ccc", "dddd", "e", "ff", "a.", "(bb)", "\u201cccc\u201d"]),
                min_size=0, max_size=80))
def test_ngram_statistics_equal_the_reference(ws):
    """Top n-gram shares (ties included) and duplicated n-gram shares, n = 1..10."""
    text = " ".join(ws)
    old = ref.DocStats(text)
    for sort_from in (clean._SORT_WORDS, 0):  # the set proof for short texts, and the sort alone
        with mock.patch.object(clean, "_SORT_WORDS", sort_from):
            new = DocStats(text)
            for n in range(1, 11):
                assert new.top_ngram_frac(n) == old.top_ngram_frac(n), n
            assert new.dup_ngram_fracs == old.dup_ngram_fracs


@pytest.mark.parametrize(("vocab", "length"), [(3, 3000), (40, 3000), (400, 3000), (5000, 3000), (10**6, 9000)])
def test_duplicated_ngrams_of_long_texts_equal_the_reference(vocab, length):
    """Long texts (numbered by sorting, no set proof): few to many distinct words (over 6,208 the
    5-grams no longer fit int64 as base-vocabulary digits), repeated passages of 5 to 12 words."""
    rng = random.Random(vocab)
    words = [f"w{rng.randrange(vocab)}" for _ in range(length)]
    for _ in range(20):
        at, size, to = rng.randrange(length - 100), rng.randint(5, 12), rng.randrange(length - 100)
        words[to:to] = words[at:at + size]
    text = " ".join(words)
    assert len(text.split()) >= clean._SORT_WORDS
    if vocab > 10**5:
        assert len(set(words)) ** 5 > 2**63
    assert DocStats(text).dup_ngram_fracs == ref.DocStats(text).dup_ngram_fracs


# Pieces of text the splitter decides on: marks, quotes, abbreviations and the words after them,
# citations, and in Chinese the ideographic marks, closing quotes and brackets, a title mark and the
# full-width decimal point.
_SENTENCE_PARTS = [*"ab .!?\n\"'([)1", "Mr.", "No.", " 5", "U.S.", "A", "...", " The", "CA.", "etc.", "Co.).", "[1]",
                   "[12]", "Brig.", "Inc.", " It's", " In-", "e.g.", ":", ";", "\u3002", "\uff01", "\u300d", "\u201d", "\u597d",
                   "\uff0e", "\uff15", "\u300b"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_SENTENCE_PARTS), max_size=80),
       st.integers(min_value=-1, max_value=6))
def test_sentence_count_stops_early_and_agrees(parts, at_most):
    text = "".join(parts)
    assert split_sentences(text) == ref.split_sentences(text)
    assert (count_sentences(text, at_most) < at_most) == (len(ref.split_sentences(text)) < at_most)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "bb", "ccc", "dddd", "e", "the", "of"]), min_size=0, max_size=80),
       st.sampled_from([0.0, 1e9]))
def test_top_ngram_bounds_are_upper_bounds(ws, enough):
    """The bounds that spare the top n-gram counting are never below the true characters x count."""
    from pipelines.clean.stats import NGrams

    grams = NGrams(ws)
    for n in range(1, 7):
        true = grams.top_frac(n) * grams.word_chars
        assert grams.top_bound(n, enough) >= true - 1e-6, n


# Every character the normalization removes or collapses, next to the ones it keeps.
_NORMALIZE_ALPHABET = ([chr(c) for c in (*range(0x00, 0x21), *range(0x7f, 0xa1))]
                       + list("\u1680\u2000\u2005\u200a\u200b\u200c\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff")
                       + list("aZ.é\u0301ñ語") + ["\ud800", "\udfff", "  ", "\r\n", "\n\n\n"])


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_NORMALIZE_ALPHABET), max_size=60))
def test_normalization_and_utf8_guard_equal_the_reference(parts):
    """The fast paths (printable lines skip the substitutions; strict encoding finds surrogates)
    agree with the reference's regex passes on every character they special-case."""
    from pipelines.clean.normalize import has_invalid_utf8, normalize_text

    joined = "".join(parts)
    for text in (joined, joined.encode("ascii", "ignore").decode()):  # and the ASCII fast path
        assert has_invalid_utf8(text) == ref.has_invalid_utf8(text)
        if not ref.has_invalid_utf8(text):
            assert normalize_text(text) == ref.normalize_text(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "b.", " ", "\n", "\u00e9", "\u8a9e", "\u00a0", "\t"]), max_size=30))
def test_normalization_of_mostly_printable_text_equals_the_reference(parts):
    """Printable lines with single spaces (no substitution): spaces next to newlines are trimmed."""
    from pipelines.clean.normalize import normalize_text

    text = "".join(parts)
    assert normalize_text(text) == ref.normalize_text(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "\u1369" * 7, "\u1361", " ", "\u3000", ".", "word", "\n", "x" * 9]), max_size=40),
       st.integers(min_value=-2, max_value=12))
def test_long_word_rule_equals_the_reference(parts, max_chars):
    """The longest-token test by str.split removes the same lines as the reference's."""
    from pipelines.clean.lines import filter_lines

    text = "".join(parts)
    cfg = CleanConfig(line_max_word_chars=max_chars)
    assert filter_lines(text, cfg) == ref.filter_lines(text, cfg)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from([chr(c) for c in range(128)] + list("\u00e9\u4e00\u00b2\u2170\u24d0\u0663\u0301\u00a0\u3000\u02b0\u00aa")),
               max_size=40))
def test_letter_token_count_equals_the_regex(text):
    """Tokens holding a letter, counted over the distinct stripped words, equal the regex's count."""
    from pipelines.clean.stats import letter_words as _letter_words
    from pipelines.clean.stats import words_of

    for t in (text, text.encode("ascii", "ignore").decode()):  # and ASCII text (stripped differently)
        tokens = ref.spaced(t)  # a Han character is a token of its own
        assert _letter_words(Counter(words_of(t))) == len(tokens.split()) - len(ref._NO_LETTER_TOKEN.findall(tokens))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["a", "bcd", "x" * 7, " ", "\u3000", "\t", "\u00e9\u00e9"]), max_size=30),
       st.integers(min_value=0, max_value=9))
def test_long_token_probes_equal_splitting(parts, longest):
    from pipelines.clean.lines import has_long_token as _has_long_token

    line = "".join(parts)
    assert _has_long_token(line, longest) == (max(map(len, line.split()), default=0) > longest)
