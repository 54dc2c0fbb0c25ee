"""Unit tests for the pure MinHash / LSH functions (no Beam)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pipelines.dedupe import minhash
from pipelines.dedupe.minhash import (
    MinHasher,
    candidate_probability,
    estimate_margin,
    estimated_jaccard,
    jaccard,
    lsh_threshold,
    normalize_text,
    normalized_text_hash,
    shingle_sets,
)

WORDS = [f"w{i}" for i in range(3000)]


def _doc(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(n)]


def _substitute(words: list[str], k: int, rng: random.Random) -> list[str]:
    out = list(words)
    for i in rng.sample(range(len(out)), k):
        out[i] = "x" + rng.choice(WORDS)
    return out


def _python_jaccard(a: str, b: str, n: int) -> float:
    def grams(t: str) -> set[tuple[str, ...]]:
        w = normalize_text(t).split()
        return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}

    sa, sb = grams(a), grams(b)
    return len(sa & sb) / len(sa | sb)


def test_normalization_ignores_case_punctuation_and_spacing() -> None:
    assert normalize_text("  Hello,   WORLD!\n\tIt's  me. ") == "hello world its me"
    assert normalized_text_hash("Hello, world!") == normalized_text_hash("hello   WORLD")
    assert normalized_text_hash("Hello, world!") != normalized_text_hash("Hello, word!")
    # NFKC: the full-width letters of a copied page match their ASCII form.
    assert normalized_text_hash("ＡＢＣ def") == normalized_text_hash("abc def")
    assert len(normalized_text_hash("x")) == 32


def _normalize_by_definition(text: str) -> str:
    import re
    import unicodedata

    return " ".join(re.sub(r"[^\w\s]+", "", unicodedata.normalize("NFKC", text).lower()).split())


def test_fast_normalization_equals_its_definition() -> None:
    """The ASCII translation + narrower regex of normalize_text give exactly the one-regex definition."""
    import sys

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tests.realtext import news_documents, wiki_documents

    every_ascii = "".join(map(chr, range(128)))
    samples = [every_ascii, every_ascii + "é", "Ｆｕｌｌ－ｗｉｄｔｈ，“curly” — dash… ½ ﬁ", "lone \ud800 surrogate!",
               "İstanbul ǅ ß ΣΑΣ", "tab\u2003em\u00a0nbsp\u200bzwsp", ""]
    samples += news_documents(50) + wiki_documents(50)  # mostly ASCII, mostly not
    for t in samples:
        assert normalize_text(t) == _normalize_by_definition(t), t[:80]

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(st.text(alphabet=st.characters(max_codepoint=sys.maxunicode), max_size=60))
    def prop(t: str) -> None:
        assert normalize_text(t) == _normalize_by_definition(t)

    prop()


def test_shingles_match_python_sets_and_ignore_batching() -> None:
    rng = random.Random(1)
    texts = [" ".join(_doc(rng, n)) for n in (0, 1, 3, 5, 6, 50, 200)]
    batch = shingle_sets(texts, 5)
    for t, s in zip(texts, batch, strict=True):
        assert s.dtype == np.uint32
        assert np.all(np.diff(s.astype(np.int64)) > 0)  # sorted, unique
        alone = shingle_sets([t], 5)[0]
        assert np.array_equal(alone, s)
        n_words = len(t.split())
        expected = 0 if n_words == 0 else (1 if n_words < 5 else len({tuple(t.split()[i:i + 5])
                                                                         for i in range(n_words - 4)}))
        assert s.size == expected
    # Word order matters inside a shingle.
    assert not np.array_equal(shingle_sets(["a b c d e"], 5)[0], shingle_sets(["e d c b a"], 5)[0])


def test_shingle_hashes_do_not_depend_on_the_word_cache() -> None:
    texts = ["the quick brown fox jumps over the lazy dog again and again"]
    first = shingle_sets(texts, 3)[0]
    minhash._word_cache.clear()
    assert np.array_equal(shingle_sets(texts, 3)[0], first)


def test_exact_jaccard_of_shingles_matches_python() -> None:
    rng = random.Random(2)
    base = _doc(rng, 300)
    for k in (0, 3, 10, 40):
        other = _substitute(base, k, rng)
        a, b = shingle_sets([" ".join(base), " ".join(other)], 5)
        assert jaccard(a, b) == pytest.approx(_python_jaccard(" ".join(base), " ".join(other), 5), abs=1e-3)


def test_estimate_tracks_true_jaccard() -> None:
    rng = random.Random(3)
    hasher = MinHasher(ngram=5, bands=14, rows=8, seed=7)
    errors = []
    for _ in range(60):
        base = _doc(rng, 400)
        other = _substitute(base, rng.randint(0, 60), rng)
        sh = shingle_sets([" ".join(base), " ".join(other)], 5)
        sig = hasher.signatures(sh)
        assert sig.shape == (2, 112) and sig.dtype == np.uint32
        true = jaccard(sh[0], sh[1])
        est = estimated_jaccard(sig[0], sig[1])
        # Binomial(112, J) standard error; 4 sigma is a generous per-pair bound.
        assert abs(est - true) <= 4 * np.sqrt(max(true * (1 - true), 0.01) / 112) + 1e-9
        errors.append(est - true)
    assert abs(float(np.mean(errors))) < 0.02  # unbiased on average
    assert float(np.mean(np.abs(errors))) < 0.05


def test_signatures_are_deterministic_and_seeded() -> None:
    rng = random.Random(4)
    texts = [" ".join(_doc(rng, 120)) for _ in range(20)]
    sh = shingle_sets(texts, 5)
    h1 = MinHasher(seed=1)
    sig = h1.signatures(sh)
    assert np.array_equal(sig, MinHasher(seed=1).signatures(sh))
    # The same row whatever the batch (and however the shingles are chunked).
    assert np.array_equal(h1.signatures(sh[5:6])[0], sig[5])
    assert np.array_equal(h1.signatures(sh[::-1])[::-1], sig)
    assert not np.array_equal(MinHasher(seed=2).signatures(sh), sig)
    a, b = h1.permutations()
    assert np.all(a % 2 == 1) and len(set(a.tolist())) == 112
    # Empty documents get the all-max signature and never share a band with real ones.
    empty = h1.signatures([np.empty(0, np.uint32)])
    assert np.all(empty == 0xFFFFFFFF)


def test_signature_chunking_across_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    sh = shingle_sets([" ".join(_doc(rng, n)) for n in (300, 7, 1, 0, 2000, 40)], 5)
    h = MinHasher(seed=3)
    ref = h.signatures(sh)
    monkeypatch.setattr(minhash, "_CHUNK_ROWS", 7)  # chunks split documents everywhere
    assert np.array_equal(h.signatures(sh), ref)
    monkeypatch.setattr(minhash, "_SMALL_DOC", 10**9)  # runs of "small" documents (reduceat) wherever they fit
    assert np.array_equal(h.signatures(sh), ref)
    # Brute force: min over the shingles of the multiply-add-shift permutations.
    a, b = h.permutations()
    with np.errstate(over="ignore"):
        brute = ((sh[0].astype(np.uint64)[:, None] * a + b) >> np.uint64(32)).min(axis=0)
    assert np.array_equal(brute.astype(np.uint32), ref[0])


def test_band_keys() -> None:
    rng = random.Random(6)
    base = _doc(rng, 300)
    texts = [" ".join(base), " ".join(base), " ".join(_doc(rng, 300))]
    h = MinHasher(bands=14, rows=8, seed=9)
    keys = h.band_keys(h.signatures(shingle_sets(texts, 5)))
    assert keys.shape == (3, 14) and keys.dtype == np.int64
    assert np.array_equal(keys[0], keys[1])
    assert not np.any(keys[0] == keys[2])
    # Equal band values in different bands still give different keys.
    same = np.zeros((1, 112), dtype=np.uint32)
    assert len(set(h.band_keys(same)[0].tolist())) == 14


def test_s_curve() -> None:
    # DESIGN.md: 14 x 8 puts the threshold near 0.72 and catches s = 0.8 with p ~ 0.92.
    assert lsh_threshold(14, 8) == pytest.approx(0.719, abs=0.01)
    assert candidate_probability(0.8, 14, 8) == pytest.approx(0.92, abs=0.01)
    assert candidate_probability(0.85, 14, 8) > 0.98
    assert candidate_probability(0.3, 14, 8) < 1e-3
    probs = [candidate_probability(s / 20, 14, 8) for s in range(21)]
    assert probs == sorted(probs)
    assert estimate_margin(0.8, 112) == pytest.approx(2 * np.sqrt(0.16 / 112))


def test_lsh_catches_near_duplicates_empirically() -> None:
    rng = random.Random(7)
    h = MinHasher(seed=11)
    hits = total = 0
    for _ in range(40):
        base = _doc(rng, 400)
        other = _substitute(base, 6, rng)  # J ~ 0.86
        keys = h.band_keys(h.signatures(shingle_sets([" ".join(base), " ".join(other)], 5)))
        total += 1
        hits += bool(np.any(keys[0] == keys[1]))
    assert hits / total >= 0.9


def test_near_rule_paths_and_guards() -> None:
    """Jaccard path, containment path, and the two guards that keep snippets and shared leads apart."""
    from pipelines.dedupe.candidates import EdgeScreen
    from pipelines.dedupe.minhash import NearRule, overlap

    rule = NearRule(0.7, 0.9, min_jaccard=0.5, min_shingles=50)
    base = np.arange(1000, dtype=np.uint32)
    assert overlap(base, base[:600]) == (0.6, 1.0)
    assert rule.accepts(base, base[:750])  # Jaccard 0.75
    assert rule.accepts(base, base[:600])  # dropped 40%: Jaccard 0.6, containment 1.0
    assert not rule.accepts(base, base[:450])  # Jaccard 0.45 < min_jaccard: a shared first half
    assert not NearRule(0.7).accepts(base, base[:600])  # Jaccard only
    small = np.arange(40, dtype=np.uint32)
    assert not rule.accepts(small, small[:25])  # 25 shingles < min_shingles, Jaccard 0.625
    assert NearRule(0.7, 0.9, 0.5, 20).accepts(small, small[:25])
    assert overlap(np.empty(0, np.uint32), base) == (0.0, 0.0)
    assert not rule.accepts(base[:600], base)  # the longer text never goes for a passage of it
    # The screen on real signatures: a dropped-48% pair (Jaccard 0.52) passes on estimated containment, a pair
    # sharing 30% does not; without shingle counts only the Jaccard path is open.
    h = MinHasher(ngram=1, bands=28, rows=4, seed=42)
    other = np.arange(5000, 5700, dtype=np.uint32)
    sig = h.signatures([base, base[:520], np.union1d(base[:300], other)])
    screen = EdgeScreen.of(rule, h.num_perm)
    assert screen.passes(sig[0], 1000, sig[1], 520)
    assert not screen.passes(sig[0], None, sig[1], 520)
    assert not screen.passes(sig[0], 1000, sig[2], 1000)


@pytest.mark.parametrize(("ngram", "bands", "rows", "digest"), [
    (3, 28, 4, "3ba5cc22ceaabbb849a3387a77e0981de05180d6fa7b8cb143e1ade205720bde"),
    (5, 14, 8, "245ab196bdf26175c58d64a4567bb4a185f408c2e7011d1dc413837704e634f7"),
])
@pytest.mark.parametrize("kernel", ["numpy", "numba"])
def test_shingles_signatures_and_band_keys_are_frozen(ngram: int, bands: int, rows: int, digest: str, kernel: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The index stores signatures and band keys: they must never change (digests from before the MinHash rewrite).

    Real text (gensim's Lee news), empty and one-word documents and a Unicode
    space; the per-document and run-of-small-documents paths of numpy both
    taken, and the compiled kernel giving the same bits.
    """
    import hashlib

    from tests.realtext import news_documents

    monkeypatch.setenv(minhash.KERNEL_ENV, kernel)
    monkeypatch.setattr(minhash, "_kernel", minhash._KernelChoice())
    texts = news_documents(40) + ["", "one", "two words", "a\u2003b  c"]
    for small_doc in (minhash._SMALL_DOC, 1, minhash._CHUNK_ROWS + 1):  # both paths of MinHasher.signatures for every document
        monkeypatch.setattr(minhash, "_SMALL_DOC", small_doc)
        sh = shingle_sets(texts, ngram)
        h = MinHasher(ngram=ngram, bands=bands, rows=rows)
        sig = h.signatures(sh)
        got = hashlib.sha256(b"".join(s.tobytes() for s in sh) + sig.tobytes() + h.band_keys(sig).tobytes())
        assert got.hexdigest() == digest


def test_signatures_move_to_the_compiled_kernel_once_it_pays(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto``: numpy until the process has hashed KERNEL_AFTER products, then numba; the same bits either way."""
    from tests.realtext import news_documents

    monkeypatch.setenv(minhash.KERNEL_ENV, "auto")
    choice = minhash._KernelChoice()
    monkeypatch.setattr(minhash, "_kernel", choice)
    sh = shingle_sets(news_documents(60) + [""], 3)
    h = MinHasher(ngram=3, bands=28, rows=4)
    products = sum(len(s) for s in sh) * h.num_perm
    monkeypatch.setattr(minhash, "KERNEL_AFTER", products + 1)
    first = h.signatures(sh)
    assert choice.fn is None and choice.products == products
    second = h.signatures(sh)  # the count passes KERNEL_AFTER: this batch runs compiled
    assert choice.fn is not None
    assert np.array_equal(first, second)
    # Larger documents than the numpy block, and one shingle, through the kernel.
    big = [np.arange(3 * minhash._CHUNK_ROWS, dtype=np.uint32) * np.uint32(2654435761), np.array([7], np.uint32)]
    monkeypatch.setenv(minhash.KERNEL_ENV, "numpy")
    ref = h.signatures(big)
    monkeypatch.setenv(minhash.KERNEL_ENV, "numba")
    assert np.array_equal(h.signatures(big), ref)


def test_a_bad_kernel_setting_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from schemas.errors import UserError

    monkeypatch.setenv(minhash.KERNEL_ENV, "rust")
    with pytest.raises(UserError, match="SHARDFORGE_MINHASH_KERNEL='rust': expected auto, numba or numpy"):
        MinHasher().signatures([np.arange(10, dtype=np.uint32)])


def test_without_numba_signatures_stay_on_numpy(tmp_path) -> None:
    """A real second process where numba cannot be imported: auto warns once and gives the same signatures."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = """
import sys
sys.modules["numba"] = None  # import numba -> ImportError, as on a machine without it
import logging, numpy as np
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
from pipelines.dedupe import minhash
from tests.realtext import news_documents
minhash.KERNEL_AFTER = 0
sh = minhash.shingle_sets(news_documents(20), 3)
h = minhash.MinHasher(ngram=3, bands=28, rows=4)
a, b = h.signatures(sh), h.signatures(sh)
assert minhash._kernel.fn is None and minhash._kernel.unavailable
np.save(sys.argv[1], a)
"""
    env = {**os.environ, "PYTHONPATH": str(root), "SHARDFORGE_MINHASH_KERNEL": "auto"}
    out = tmp_path / "sig.npy"
    proc = subprocess.run([sys.executable, "-c", script, str(out)], env=env, cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("numba is not installed") == 1, proc.stderr
    from tests.realtext import news_documents

    ref = MinHasher(ngram=3, bands=28, rows=4).signatures(shingle_sets(news_documents(20), 3))
    assert np.array_equal(np.load(out), ref)


# ------------------------------------------------------------------ containment: anchors, samples, the rule


def _prose() -> str:
    from tests.realtext import news_documents

    return " ".join(news_documents(12))  # ~2,300 words of real news


def test_anchor_keys_of_a_passage_are_those_of_the_text_it_lies_in() -> None:
    """Anchors are chosen by shingle value: a passage's pairs are the longer text's pairs at the same place,
    whatever share of it the passage is (Jaccard 0.1 here); an unrelated text shares none."""
    from tests.realtext import news_documents

    words = _prose().split()
    passage, other = " ".join(words[900:1150]), " ".join(news_documents(40)[30:].copy())
    (full, part, unrelated), keys = minhash.shingles_and_anchors([" ".join(words), passage, other], 3, anchor_every=32)
    assert jaccard(full, part) < 0.15
    assert keys[1].size >= 3 and set(keys[1].tolist()) <= set(keys[0].tolist())
    assert not set(keys[2].tolist()) & set(keys[0].tolist())
    assert all(np.array_equal(np.unique(k), k) for k in keys)
    # The shingles are those of shingle_sets (the index's digest), whatever the anchors.
    assert all(np.array_equal(a, b) for a, b in zip((full, part, unrelated), shingle_sets(
        [" ".join(words), passage, other], 3), strict=True))
    assert all(k.size == 0 for k in minhash.shingles_and_anchors([passage], 3)[1])


def test_the_sample_is_consistent_and_nested() -> None:
    sh = shingle_sets([_prose()], 3)[0]
    s16, s32 = minhash.sampled(sh, 16), minhash.sampled(sh, 32)
    assert not (s32 & ~s16).any()  # the anchors' sample lies in the screen's
    assert 0.04 < s16.mean() < 0.09 and 0.015 < s32.mean() < 0.05
    assert np.array_equal(minhash.sampled(sh[::3], 16), s16[::3])  # a value's verdict depends on it alone


def test_containment_is_directional_and_has_no_jaccard_floor() -> None:
    """A document that lies in a longer one goes whatever their Jaccard; the longer one never goes for it."""
    from pipelines.dedupe.sketch import near_rule
    from schemas.config import DedupeConfig

    rule = near_rule(DedupeConfig())
    base = np.arange(4000, dtype=np.uint32)
    passage = base[1000:1400]  # 400 of 4,000: Jaccard 0.1
    assert rule.accepts(base, passage) and not rule.accepts(passage, base)
    half = np.union1d(base[:2000], np.arange(9000, 11000, dtype=np.uint32))  # a shared half
    assert not rule.accepts(base, half) and not rule.accepts(half, base)
    assert not rule.accepts(base, base[:40])  # a snippet (40 < containment_min_shingles)
    assert not minhash.NearRule(0.7, 0.9, min_jaccard=0.5).accepts(base, passage)  # the floor, where a config asks


def test_cleaning_path_judges_a_copy_by_the_text_before_the_line_rules() -> None:
    """A 4 % substituted copy whose substitutions took the full stops of three paragraphs: the line rules cut them,
    so the kept texts are Jaccard < 0.7 and the copy lies < 0.9 in the original; before the line rules the
    copy is Jaccard >= 0.7 and what is kept of it lies >= 0.82 in the original's: it goes. Two pages that share
    only a menu the line rules remove are Jaccard >= 0.7 before them and keep nothing in common: they stay."""
    from pipelines.clean.rules import clean_document
    from pipelines.clean.sentences import split_sentences
    from pipelines.dedupe.sketch import minhasher, near_rule, sketch_documents
    from pipelines.records import Document
    from schemas.config import CleanConfig, DedupeConfig
    from tests.realtext import news_documents

    sents = [s for a in news_documents(12) for s in split_sentences(a)]
    paras = [" ".join(sents[3 * i:3 * i + 3]) for i in range(10)]
    rng = random.Random(3)
    words = [p.split() for p in paras]
    for k in (2, 5, 8):
        words[k][-1] = "cut"  # a substitution takes the paragraph's full stop
    for w in words:
        for i in rng.sample(range(len(w) - 1), len(w) // 25):
            w[i] = rng.choice(WORDS)
    copy = "\n\n".join(" ".join(w) for w in words)
    menu = "\n".join(" ".join(rng.sample(WORDS, 2)) for _ in range(300))  # menu lines: under five words
    pages = [menu + "\n\n" + " ".join(split_sentences(news_documents(60)[40 + i])[:4]) for i in range(2)]
    cfg, dcfg = CleanConfig(), DedupeConfig()
    docs = [clean_document(Document(f"d{i}", "web", t), cfg) for i, t in enumerate(["\n\n".join(paras), copy, *pages])]
    assert all(type(d) is Document for d in docs)
    orig, cp, page_a, page_b = sketch_documents(docs, minhasher(dcfg))
    assert cp.lost.size and page_a.lost.size and not orig.lost.size
    rule = near_rule(dcfg)
    j, c = minhash.overlap(orig.shingles, cp.shingles)
    assert j < 0.7 and np.intersect1d(orig.shingles, cp.shingles).size / cp.shingles.size < 0.9
    assert not rule.accepts(orig.shingles, cp.shingles)  # the kept texts alone
    assert rule.judge(orig.shingles, cp.shingles, orig.lost, cp.lost)[0]
    assert not minhash.NearRule(0.7, 0.9, cleaning=False).judge(orig.shingles, cp.shingles, orig.lost, cp.lost)[0]
    before = minhash.jaccard(np.union1d(page_a.shingles, page_a.lost), np.union1d(page_b.shingles, page_b.lost))
    assert before >= 0.7
    assert not rule.judge(page_a.shingles, page_b.shingles, page_a.lost, page_b.lost)[0]


def test_the_screen_estimates_containment_on_the_samples() -> None:
    """A passage at Jaccard ~0.2 passes the screen on the samples its signature carries; a shared half does not;
    an indexed root (a signature without a sample) falls back on the Jaccard estimate and the sizes."""
    from pipelines.dedupe.candidates import EdgeScreen
    from pipelines.dedupe.near import signature_by_node
    from pipelines.dedupe.sketch import Sketch, near_rule
    from schemas.config import DedupeConfig

    h = MinHasher(ngram=3, bands=28, rows=4)
    words = _prose().split()
    full, passage, half = shingle_sets([" ".join(words), " ".join(words[500:1000]),
                                        " ".join(words[:1100] + [w + "x" for w in words[1100:]])], 3)
    sigs = h.signatures([full, passage, half])
    sk = [Sketch(f"1d{i}", "s", "", sigs[i], h.band_keys(sigs[i:i + 1])[0], s) for i, s in enumerate((full, passage, half))]
    carried = [signature_by_node(s)[0][1] for s in sk]
    screen = EdgeScreen.of(near_rule(DedupeConfig()), h.num_perm)
    assert jaccard(full, passage) < 0.25 and estimated_jaccard(sigs[0], sigs[1]) < screen.jaccard
    assert screen.passes(carried[0], full.size, carried[1], passage.size)
    assert not screen.passes(carried[0], full.size, carried[2], half.size)
    assert screen.passes(sigs[0].tobytes(), full.size, carried[1], passage.size) == (
        estimated_jaccard(sigs[0], sigs[1]) * (full.size + passage.size)
        / ((1 + estimated_jaccard(sigs[0], sigs[1])) * passage.size) >= screen.containment - estimate_margin(
            screen.containment, h.num_perm))
