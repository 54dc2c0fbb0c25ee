"""C4's line rules: which lines of a page are boilerplate, and for which sources the rules apply.

A line is removed when it mentions javascript, holds a cookie / privacy / terms phrase, holds a
word over ``line_max_word_chars`` characters, has fewer than ``line_min_words`` words, or does
not end in an end mark (``CleanConfig.line_end_marks``). ``line_rules_for`` says whether a
source gets them (off for narrative sources such as stories and books). Plain Python, no Beam.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from pipelines.clean.stats import has_unspaced, unspaced_word_count, words_of
from schemas.config import CleanConfig, SourceConfig

# C4 (c4_utils.py): boilerplate phrases, end marks. C4 keeps a line only if it ends in one of
# . ? ! " (straight quote) and not in "..." (CleanConfig.line_end_marks="c4", the default);
# "typographic" also accepts closing curly quotes and keeps lines ending in "...".
POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                  "use cookies")
C4_END_MARKS = (".", "?", "!", '"')
# C4 was English: the sentence-final marks of other scripts end a line as . ? ! do (ideographic 。！？．｡
# and the corner brackets that close a quoted sentence, Devanagari's danda । ॥, Arabic's ؟, Urdu's ۔,
# Armenian's ։, Ethiopic's ።, Myanmar's ။, Khmer's ។ ៕, Tibetan's ། ༎), and an ideographic mark inside the
# curly quotes Chinese closes a quotation with (。” ！” ？” and ’ likewise; the corner brackets' role). An
# English line never ends in one: C4's test there is unchanged.
SCRIPT_END_MARKS = ("\u3002", "\uff01", "\uff1f", "\uff0e", "\uff61", "\u300d", "\u300f", "\u0964", "\u0965",
                    "\u061f", "\u06d4", "\u0589", "\u1362", "\u104b", "\u17d4", "\u17d5", "\u0f0d", "\u0f0e",
                    *(m + q for m in "\u3002\uff01\uff1f" for q in "\u201d\u2019"))
TERMINAL = {"c4": (*C4_END_MARKS, *SCRIPT_END_MARKS),
            "typographic": (*C4_END_MARKS, "\u201d", "\u2019", *SCRIPT_END_MARKS)}

# The line rules by name (CleanConfig.disabled_rules switches them off) and the sources they skip.
LINE_RULES = ("javascript", "policy", "long_word", "min_line_words", "terminal_punct")
NARRATIVE_SOURCES = ("stories", "story", "book")


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


def filter_lines(text: str, cfg: CleanConfig, disabled: frozenset[str] = frozenset(),
                 lower: str | None = None) -> tuple[str, Counter]:
    """Apply C4's line rules; returns the kept text and how many lines each rule removed.

    Blank lines (paragraph breaks) are kept so paragraphs survive for the repetition rules.
    lower: ``text.lower()``, where the caller has it (the page rules computed it already).

    The boilerplate phrases are looked for in the whole page first: a page without any (most)
    never lower-cases a line. Lower-casing keeps every newline, so a phrase in a line's
    lower-case form is in the page's.
    """
    if lower is None:
        lower = text.lower()
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
        if long_word and len(line) > max_chars and has_long_token(line, longest):
            removed["long_word"] += 1
            continue
        # maxsplit: counting up to min_words tokens is enough; in a line of a script written without
        # spaces (Chinese, Japanese) its words are counted as the document rules count them
        few = min_words > 0 and len(line.split(None, min_words - 1)) < min_words
        if few and has_unspaced(line):
            few = unspaced_word_count(words_of(line), line) < min_words
        if few:
            removed["min_line_words"] += 1
        elif terminal and not (line.endswith(ends) and not (no_ellipsis and line.endswith("..."))):
            removed["terminal_punct"] += 1
        else:
            kept.append(line)
    return "\n".join(kept).strip(), removed


def has_long_token(line: str, longest: int) -> bool:
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
