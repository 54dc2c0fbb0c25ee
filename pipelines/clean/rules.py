"""Cleaning a document: the guards, the page rules, the Gopher / C4 document rules, by name.

Per document, in this order (the first failing rule names the reason):

1. guards: ``max_doc_bytes`` before any work; ``invalid_utf8`` (bytes the reader could not decode,
   kept as lone surrogates) -> bucket ``rejected``, or repaired to U+FFFD with ``invalid_utf8: repair``;
2. normalize (``pipelines.clean.normalize``): NFC, control characters stripped, whitespace runs
   collapsed, lines trimmed;
3. page rules: ``empty``, ``markup`` (HTML-heavy), ``lorem_ipsum`` (C4), ``curly_braces`` (C4, web);
4. C4 line rules (``pipelines.clean.lines``; web and news sources, off for stories by default, see
   ``line_rules_for``): lines mentioning javascript, cookie / privacy / terms boilerplate, holding a
   word over 1000 chars, with fewer than ``line_min_words`` words, or without terminal punctuation
   are removed;
5. Gopher rules on what is left: word count, mean word length, symbol/word ratio, bullet and
   ellipsis lines, alphabetic words, stop words, duplicate lines / paragraphs (count and chars),
   top 2-4-gram shares, duplicated 5-10-gram shares; then C4's ``min_sentences`` and ``language``
   (pipelines/clean/langid.py: CLD2 by default; the kept document records its language and score).

The document rules run in ``document_reason``, in the order of ``DOC_RULE_NAMES``: each statistic is
computed once, when the first rule that reads it runs, with the per-word work in C; n-grams are
counted only where a bound or a uniqueness proof does not settle the rule (``NGrams``, with the
other statistics in ``pipelines.clean.stats``). The stage before this rewrite is frozen in
tests/reference_clean.py, and tests/test_clean_equivalence.py holds this one to its records.
Thresholds live in ``CleanConfig``; ``disabled_rules`` switches rules (and line rules) off by name;
``RULE_NAMES`` is every name it accepts. A filtered document becomes
``Reject(bucket="filtered", reason=<rule>)``. ``clean_batch`` is the clean step's work for a batch
(the rules, then the PII replacement of ``pipelines.clean.pii``);
``raw_words`` the report's word count of the text as read. Plain Python, no Beam: the document
processes import this module.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from itertools import repeat

from pipelines.clean.langid import OTHER, LanguageGuess, code_of_name, identify, known_codes
from pipelines.clean.lines import LINE_RULES, filter_lines, line_rules_for
from pipelines.clean.normalize import BLANK_LINES, has_invalid_utf8, normalize_text, repair_utf8, safe
from pipelines.clean.pii import PiiFound, PiiRules, redact, rules_of
from pipelines.clean.sentences import count_sentences
from pipelines.clean.stats import (
    UNSPACED,
    NGrams,
    dup_fractions,
    has_unspaced,
    letter_words,
    strip_chars,
    tokens_of,
    unspaced_word_count,
    words_of,
)
from pipelines.records import Document, Reject, count_words, unspaced_tokens
from schemas.config import CleanConfig
from schemas.errors import UserError

REJECTS = "rejects"
RAW_WORDS = "raw_words"  # CleanDocuments' (source, words of the text as read) per document: the report's "before"

# A precomposed Hangul syllable.
HANGUL = re.compile("[\uac00-\ud7a3]")
# An HTML tag, as the markup rule measures a page's markup.
_TAG = re.compile(r"<[^<>\n]{1,400}>")
# Gopher's stop words (a document needs at least `min_stop_words` of them).
GOPHER_STOP_WORDS = frozenset(["the", "be", "to", "of", "and", "that", "have", "with"])
BULLETS = ("\u2022", "\u2023", "\u25e6", "\u2043", "\u25aa", "\u25cf", "\u00b7", "-", "*", "\u2013")
ELLIPSES = ("...", "\u2026")

# ------------------------------------------------------------------ rule names

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
    """The language rule: enough of the text is in the languages the user keeps.

    An empty ``cfg.languages`` keeps every language. CLD2: the share of the text's bytes in the
    kept languages, by CLD2's chunks (``LanguageGuess.shares``: a document a third English and
    two thirds Tagalog is a third English, whatever CLD2's summary says), is at least
    ``min_language_score``. The stop-word method: its language is kept and its score (the stop-word
    share) is at least ``min_english_score``.
    """
    if not cfg.languages:
        return True
    if cfg.language_id == "stopwords":
        return guess.code in cfg.languages and guess.score >= cfg.min_english_score
    return guess.share(cfg.languages) >= cfg.min_language_score


def disabled_rules(cfg: CleanConfig) -> frozenset[str]:
    """cfg.disabled_rules with old names mapped to the current ones."""
    return frozenset(RULE_ALIASES.get(n, n) for n in cfg.disabled_rules)


def check_rule_names(cfg: CleanConfig) -> None:
    """A misspelled name in disabled_rules or languages must not silently change the rules."""
    unknown = sorted(set(cfg.disabled_rules) - RULE_NAMES)
    if unknown:
        raise UserError(f"clean.disabled_rules: unknown rule(s) {unknown}; known: {sorted(RULE_NAMES)}")
    codes = known_codes(cfg.language_id)
    named = {b: code_of_name(b) for b in cfg.languages if b not in codes}  # the unknown, in the order given
    if named:
        if all(c in codes for c in named.values()):  # names, not codes: say the codes
            said = ", ".join(f"{b!r} is {c!r}" for b, c in named.items())
            raise UserError(f"clean.languages takes ISO 639-1 codes, not names: {said} "
                            f"(give {','.join(c for c in named.values())})")
        raise UserError(f"clean.languages: unknown code(s) {sorted(named)} for language_id={cfg.language_id!r}; "
                        "use ISO 639-1 codes: en, de, fr, es, zh, ... (CLD2's; see docs/cleaning.md)")


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
    was identified on the way, and the text's words (``count_words``: ``len(text.split())`` but in
    Chinese and Japanese; the report's length unit, counted here once for the kept documents).

    text is normalized (pipelines.clean.normalize.normalize_text, then the line rules): lines are trimmed
    and at most one blank line separates paragraphs, so lines and paragraphs are plain splits.
    lower: text.lower(), where the caller has it. Each statistic is computed once, when the first
    rule that reads it runs, with the per-word work in C (str methods through map / filter, one
    Counter of the words); the rules and their order are DOC_RULE_NAMES.
    """
    if lower is None:
        lower = text.lower()
    tokens = lower.split()  # lower-casing changes no whitespace: the same tokens as text.split()
    unspaced = has_unspaced(lower)
    reason, guess = _first_failed_rule(text, tokens_of(lower) if unspaced else tokens, c, disabled, unspaced)
    return reason, guess, count_words(text) if unspaced else len(tokens)


def _first_failed_rule(text: str, tokens: list[str], c: CleanConfig, disabled: frozenset[str],
                       unspaced: bool = False) -> tuple[str | None, LanguageGuess | None]:
    """``document_reason``'s rules on the text and its tokens (lower-cased; ``tokens_of``): ``unspaced``,
    the text holds characters of a script written without spaces, each one token."""
    words = list(filter(None, map(str.strip, tokens, repeat(strip_chars(text)))))
    n_words = len(words)
    if unspaced:  # a word of Chinese or Japanese is UNSPACED_CHARS_PER_WORD characters on average
        n_words = unspaced_word_count(words, text)
    if "min_words" not in disabled and n_words < c.min_words:
        return "min_words", None
    if "max_words" not in disabled and n_words > c.max_words:
        return "max_words", None
    grams = NGrams(words)  # the words' Counter: characters and stop words come from it too
    if "mean_word_len" not in disabled and not _mean_word_len_ok(grams, n_words, text, unspaced, c):
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
        if letter_words(grams.freq) < c.min_alpha_words * len(tokens):
            return "alpha_words", None
    guess = None
    if "stop_words" not in disabled:
        stops: frozenset[str] | None = GOPHER_STOP_WORDS
        if not english_build(c, disabled):  # the stop words of the document's language, where there is a list
            guess = identify(text, c.language_id, shares=language_rule(c, disabled))
            stops = stop_words_of(guess.code)
        if stops is not None and sum(map(grams.freq.get, stops, repeat(0))) < c.min_stop_words:
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
        if "top_ngrams" not in disabled and _top_ngrams_fail(grams, c.max_top_ngram_frac, unspaced):
            return "top_ngrams", None
        if "dup_ngrams" not in disabled and _dup_ngrams_fail(grams, c.max_dup_ngram_frac, unspaced):
            return "dup_ngrams", None
    if "min_sentences" not in disabled and count_sentences(text, c.min_sentences) < c.min_sentences:
        return "min_sentences", None
    if language_rule(c, disabled):
        if guess is None:
            guess = identify(text, c.language_id)
        if not accepts_language(guess, c):
            return "language", guess
    return None, guess


def english_build(c: CleanConfig, disabled: frozenset[str]) -> bool:
    """Whether the build keeps English alone (the default: the language rule on, keeping ``en``): Gopher's
    English stop words then apply to every document, with no language identified for them."""
    return language_rule(c, disabled) and bool(c.languages) and set(c.languages) <= {"en"}


def language_rule(c: CleanConfig, disabled: frozenset[str]) -> bool:
    """Whether the language rule runs."""
    return c.english_only and "language" not in disabled


def stop_words_of(code: str) -> frozenset[str] | None:
    """The stop words a document in the language needs ``min_stop_words`` of: Gopher's eight for
    English, the function words of ``pipelines.clean.langid.OTHER`` for German, French, Spanish,
    Dutch, Italian and Portuguese; None (the rule does not apply) for any other language."""
    return GOPHER_STOP_WORDS if code == "en" else OTHER.get(code)


def in_tokens(n: int, unspaced: bool) -> int:
    """An n-gram of words as tokens: n itself (words delimited by spaces), or, in text of a script
    written without spaces (``unspaced``: a character per token), n words' worth of characters."""
    return unspaced_tokens(n) if unspaced and n >= 1 else n


def _mean_word_len_ok(grams: NGrams, n_words: int, text: str, unspaced: bool, c: CleanConfig) -> bool:
    """Gopher's mean word length bounds, in letters. The rule measures words that spaces delimit: in a
    text whose words are mostly characters of a script written without spaces (each a word of one
    character: Chinese, Japanese) it does not apply, and in one where they are fewer the mean is that
    of the other words. A Hangul syllable is the two or three letters (jamo) it is written with."""
    if unspaced:
        spaced_words = words_of(UNSPACED.sub(" ", text))
        if len(spaced_words) * 2 <= len(grams.words):
            return True
        chars, n_words = sum(map(len, spaced_words)), len(spaced_words)
    else:
        chars = grams.word_chars
    if not text.isascii():
        chars += hangul_letters(text)
    mean = chars / n_words if n_words else 0.0
    return c.min_mean_word_len <= mean <= c.max_mean_word_len


def hangul_letters(text: str) -> int:
    """The letters beyond one per character that the text's Hangul syllables are written with: a
    syllable is an initial consonant and a vowel, and a final consonant in 27 of each 28."""
    syllables = HANGUL.findall(text)
    return len(syllables) + sum(1 for s in syllables if (ord(s) - 0xAC00) % 28)


def _lines(text: str) -> list[str]:
    """The non-blank lines of a normalized text (its blank lines are empty: lines are trimmed)."""
    lines = text.split("\n")
    return list(filter(None, lines)) if "" in lines else lines


def _top_ngrams_fail(grams: NGrams, limits: dict[int, float], unspaced: bool = False) -> bool:
    """Gopher's top n-gram rule: for some n the most frequent n-gram holds more than its share
    (n in tokens: ``in_tokens``).

    Where NGrams.top_bound is within the limit (ordinary prose: 3- and 4-grams) nothing is counted:
    the share <= bound / word characters <= the limit.
    """
    for n, t in sorted((in_tokens(n, unspaced), t) for n, t in limits.items()):
        if n >= 1 and grams.word_chars and grams.top_bound(n, t * grams.word_chars) / grams.word_chars <= t:
            continue  # share <= bound / word characters <= t
        if grams.top_frac(n) > t:
            return True
    return False


def _dup_ngrams_fail(grams: NGrams, limits: dict[int, float], unspaced: bool = False) -> bool:
    """Gopher's duplicated n-gram rule: for some n the share of characters in repeated n-grams
    exceeds its limit (n outside 5..10 has share 0, as in Gopher's definition here; n in tokens:
    ``in_tokens``).

    The shares never grow with n, so once a share is within every later limit the larger n are
    not computed (prose with a few repeated phrases stops at n = 5).
    """
    if any(0.0 > t for n, t in limits.items() if not 5 <= n <= 10):
        return True
    inside = {n: t for n, t in limits.items() if 5 <= n <= 10}
    if not inside:
        return False
    inside = {in_tokens(n, unspaced): t for n, t in inside.items()}
    for n, frac in grams.dup_frac_steps(tuple(sorted(inside))):
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
    before = None  # the text before the line rules, where they cut lines (near dedupe judges copies on it too)
    if line_rules:
        kept, removed = filter_lines(text, cfg, disabled, lower)
        if line_counts is not None:
            line_counts.update(removed)
        if not kept:
            return filtered("empty_after_line_rules", text)
        if removed:
            before, text = text, BLANK_LINES.sub("\n\n", kept)
            lower = None
    reason, guess, words = document_reason(text, cfg, disabled, lower)
    if reason is not None:
        out = filtered(reason, text)
        return dataclasses.replace(out, language=guess.code) if reason == "language" and guess else out
    if guess is None:  # the language rule did not run: the document's language and score only
        guess = identify(text, cfg.language_id, shares=False)
    return dataclasses.replace(doc, text=text, language=guess.code, language_score=guess.score, words=words,
                               before_line_rules=before)


def raw_words(doc: Document, out: Document | Reject) -> int:
    """``count_words`` of the text as read: the count the clean rules made where the document was kept
    with its text unchanged (most prose), else counted here."""
    if type(out) is Document and out.words is not None and out.text == doc.text:
        return out.words
    return count_words(doc.text)


def clean_batch(docs: list[Document], cfg: CleanConfig,
                line_rules: dict[str, bool]) -> list[tuple[Document | Reject, dict[str, int], int, PiiFound | None]]:
    """The clean step's work for a batch: per document, what ``clean_document`` made of it with its PII
    replaced (``pipelines.clean.pii``: in a kept text, and in a filtered one's snippet), the lines each
    line rule removed, ``raw_words`` and what PII was replaced (None: none). Pure (the step counts): it
    may run in a document process (``pipelines.localrunner.docpool``). ``line_rules``: source -> whether
    line rules apply."""
    rules = rules_of(cfg.pii)
    out = []
    for doc in docs:
        on = line_rules.get(doc.source)
        if on is None:
            on = line_rules_for(doc.source, (), cfg)
        lines: Counter = Counter()
        result = clean_document(doc, cfg, on, lines)
        words = raw_words(doc, result)
        result, found = redact_record(result, rules)
        out.append((result, dict(lines), words, found))
    return out


def redact_record(record: Document | Reject, rules: PiiRules) -> tuple[Document | Reject, PiiFound | None]:
    """A kept document with its PII replaced (its word count taken again where the text changed), or a
    reject with its snippet's; and what was replaced in a kept document (None: nothing)."""
    if not rules.any:
        return record, None
    if type(record) is Document:
        text, found = redact(record.text, rules)
        if found is None:
            return record, None
        words = record.words if record.words is None else count_words(text)
        before = record.before_line_rules  # what near dedupe also sketches: the same placeholders there
        if before is not None:
            before = redact(before, rules)[0]
        return dataclasses.replace(record, text=text, words=words, before_line_rules=before), found
    snippet, found = redact(record.snippet, rules)
    return (record if found is None else dataclasses.replace(record, snippet=snippet)), None
