"""Properties of the packing rules (pipelines/pack/rules.py).

Corpora are generated with globally unique, per-document increasing token
ids (all >= 5, so never a special), which lets a test trace every token of
every sequence back to its document and position.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.pack.encoding import decode_packed, encode_packed
from pipelines.pack.pairs import truncate_pair as _truncate_pair
from pipelines.pack.rules import group_of, pack_group, split_of
from pipelines.pack.sequences import PackedSequence, PackStats
from pipelines.records import TokenizedDocument
from schemas import BOS_ID, EOS_ID
from schemas.config import PackingConfig

RULES = ["full_sentences", "doc_sentences", "segment_pair_nsp", "sentence_pair_nsp", "sop"]
FIRST_ID = 5  # first non-special id


def make_docs(shape: list[list[int]]) -> tuple[list[TokenizedDocument], dict[int, str]]:
    """Documents whose sentences have the given lengths; returns them and token -> doc_id."""
    docs = []
    owner: dict[int, str] = {}
    nxt = FIRST_ID
    for d, lengths in enumerate(shape):
        doc_id = f"src-{d:04d}"
        sents = []
        for n in lengths:
            sents.append(tuple(range(nxt, nxt + n)))
            for t in range(nxt, nxt + n):
                owner[t] = doc_id
            nxt += n
        docs.append(TokenizedDocument(doc_id, "src", tuple(sents), sum(lengths)))
    return docs, owner


def random_shape(rng: random.Random, n_docs: int, max_sents: int = 30, max_len: int = 40) -> list[list[int]]:
    return [[rng.randint(1, max_len) for _ in range(rng.randint(1, max_sents))] for _ in range(n_docs)]


def split_pair(seq: PackedSequence) -> tuple[list[int], list[int]]:
    """(A, B) of a pair sequence, checking the ``<s> A </s> B </s>`` layout and token types."""
    ids, tt = seq.input_ids, seq.token_type_ids
    assert tt is not None and len(tt) == len(ids)
    n_a = tt.count(0) - 2
    assert ids[0] == BOS_ID and ids[n_a + 1] == EOS_ID and ids[-1] == EOS_ID
    assert list(tt) == [0] * (n_a + 2) + [1] * (len(ids) - n_a - 2)
    a, b = list(ids[1 : n_a + 1]), list(ids[n_a + 2 : -1])
    assert a and b, "both segments must be non-empty"
    assert all(t >= FIRST_ID for t in a + b)
    return a, b


def home_tokens(seqs: list[PackedSequence], rule: str) -> list[int]:
    """Tokens placed in their home sequence (random-next B segments are borrowed copies)."""
    out: list[int] = []
    for s in seqs:
        if rule in ("full_sentences", "doc_sentences"):
            out.extend(t for t in s.input_ids if t >= FIRST_ID)
        else:
            a, b = split_pair(s)
            out.extend(a)
            if not (rule != "sop" and s.label == 1):
                out.extend(b)
    return out


def cfg_for(rule: str, max_seq_len: int, short: float | None = None) -> PackingConfig:
    return PackingConfig(rule=rule, max_seq_len=max_seq_len, short_seq_prob=short, groups=1)


shapes = st.lists(st.lists(st.integers(0, 40), max_size=8), max_size=10)
lengths = st.sampled_from([8, 9, 13, 32, 64])
shorts = st.sampled_from([None, 0.0, 0.5, 1.0])


# ------------------------------------------------------------ properties, all rules


@pytest.mark.parametrize("rule", RULES)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes, max_len=lengths, short=shorts, seed=st.integers(0, 2**32))
def test_lengths_layout_and_exactly_once(rule, shape, max_len, short, seed):
    docs, owner = make_docs(shape)
    seqs, stats = pack_group(docs, cfg_for(rule, max_len, short), seed, 0)
    for s in seqs:
        assert 2 < len(s.input_ids) <= max_len
        assert s.input_ids[0] == BOS_ID and s.input_ids[-1] == EOS_ID
        assert BOS_ID not in s.input_ids[1:]
        assert s.doc_ids and len(set(s.doc_ids)) == len(s.doc_ids)
        # doc_ids names exactly the documents whose tokens appear.
        present = {owner[t] for t in s.input_ids if t >= FIRST_ID}
        assert present == set(s.doc_ids)
    home = home_tokens(seqs, rule)
    assert len(home) == len(set(home)), "a token has two home sequences"
    every = [t for d in docs for sent in d.sentences for t in sent]
    assert set(home) <= set(every)
    # What is missing is exactly what the stats say was truncated or dropped.
    assert len(every) - len(home) == stats.truncated_tokens + stats.dropped_tokens
    assert stats.input_tokens == len(every) and stats.home_tokens == len(home)
    assert stats.unaccounted_tokens == 0
    assert stats.sequences == len(seqs) and stats.tokens == sum(len(s.input_ids) for s in seqs)
    assert stats.documents == len(docs)
    if rule in ("full_sentences", "doc_sentences", "sentence_pair_nsp", "sop"):
        # these rules never truncate: SOP chunks close at a sentence boundary that fits
        assert stats.truncated_tokens == 0 and stats.truncated_pairs == 0
    if rule in ("segment_pair_nsp", "sentence_pair_nsp", "sop"):
        assert stats.pairs == len(seqs)
        assert stats.cut_segments >= 2 * stats.split_for_pair
    if rule == "segment_pair_nsp":
        # only a random B whose first sentence cannot fit what A left is ever cut
        assert stats.truncated_pairs <= stats.random_next


@pytest.mark.parametrize("rule", RULES)
@settings(max_examples=60, deadline=None)
@given(shape=shapes, max_len=lengths, seed=st.integers(0, 2**32), order=st.randoms(use_true_random=False))
def test_deterministic_and_order_independent(rule, shape, max_len, seed, order):
    docs, _ = make_docs(shape)
    cfg = cfg_for(rule, max_len)
    first = pack_group(docs, cfg, seed, 0)
    shuffled = list(docs)
    order.shuffle(shuffled)
    assert pack_group(shuffled, cfg, seed, 0) == first
    assert pack_group(docs, cfg, seed, 0) == first


@pytest.mark.parametrize("rule", RULES)
@settings(max_examples=40, deadline=None)
@given(shape=shapes, max_len=lengths, seed=st.integers(0, 2**32), wide=st.booleans())
def test_a_packed_group_crosses_to_the_writer_unchanged(rule, shape, max_len, seed, wide):
    """encode_packed / decode_packed (the packing step's hand-over to the shard writer): the same
    sequences, ids, token types, labels and doc ids, for every rule; a group with an id past uint16 too."""
    docs, _ = make_docs(shape)
    if wide and docs and docs[0].sentences:
        docs[0] = TokenizedDocument(docs[0].doc_id, "src", ((70_000,) + tuple(docs[0].sentences[0]),)
                                    + docs[0].sentences[1:], docs[0].num_tokens + 1)
    seqs, _ = pack_group(docs, cfg_for(rule, max_len), seed, 0)
    back = decode_packed(encode_packed(seqs))
    assert back == seqs
    assert [(s.doc_ids, s.label, s.token_type_ids) for s in back] == [(s.doc_ids, s.label, s.token_type_ids)
                                                                        for s in seqs]


def test_a_packed_blob_is_checked() -> None:
    assert decode_packed(encode_packed([])) == []
    with pytest.raises(ValueError, match="not a packed group"):
        decode_packed(b"\x80\x05 pickle?")


@pytest.mark.parametrize("rule", ["segment_pair_nsp", "sentence_pair_nsp", "sop"])
def test_seed_changes_choices(rule):
    docs, _ = make_docs(random_shape(random.Random(1), 40))
    cfg = cfg_for(rule, 64)
    assert pack_group(docs, cfg, 1, 0)[0] != pack_group(docs, cfg, 2, 0)[0]


# ------------------------------------------------------------ FULL- / DOC-SENTENCES


@pytest.mark.parametrize("rule", ["full_sentences", "doc_sentences"])
@settings(max_examples=120, deadline=None)
@given(shape=shapes, max_len=lengths, seed=st.integers(0, 2**32))
def test_contiguous_rules_keep_order_and_separate_documents(rule, shape, max_len, seed):
    docs, owner = make_docs(shape)
    seqs, _ = pack_group(docs, cfg_for(rule, max_len), seed, 0)
    # Concatenating the sequences' content gives the corpus back in doc_id order.
    content = [t for s in seqs for t in s.input_ids[1:-1] if t >= FIRST_ID]
    assert content == [t for d in sorted(docs, key=lambda d: d.doc_id) for s in d.sentences for t in s]
    for s in seqs:
        inner = s.input_ids[1:-1]
        # One </s> between consecutive documents, none anywhere else.
        parts = [p for p in _split_on(inner, EOS_ID)]
        assert all(parts), "empty part: doubled or leading/trailing separator"
        assert [owner[p[0]] for p in parts] == list(s.doc_ids)
        assert all(len({owner[t] for t in p}) == 1 for p in parts)
        if rule == "doc_sentences":
            assert len(s.doc_ids) == 1 and EOS_ID not in inner


def _split_on(ids: tuple[int, ...], sep: int) -> list[list[int]]:
    parts: list[list[int]] = [[]]
    for t in ids:
        if t == sep:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


@pytest.mark.parametrize("rule", ["full_sentences", "doc_sentences"])
def test_whole_sentences_unless_too_long(rule):
    rng = random.Random(3)
    shape = random_shape(rng, 30, max_len=70)
    docs, _ = make_docs(shape)
    max_len = 64
    seqs, stats = pack_group(docs, cfg_for(rule, max_len), 7, 0)
    where = {t: i for i, s in enumerate(seqs) for t in s.input_ids if t >= FIRST_ID}
    long = 0
    for d in docs:
        for sent in d.sentences:
            homes = {where[t] for t in sent}
            if len(sent) <= max_len - 2:
                assert len(homes) == 1, "a sentence that fits was cut"
            else:
                long += 1
                assert len(homes) >= 2
    assert long > 0 and stats.split_long_sentences == long
    # Blocks are greedy: a block is closed only when the next segment does not fit.
    assert max(len(s.input_ids) for s in seqs) >= max_len - 5


def test_full_sentences_fills_blocks_across_documents():
    docs, _ = make_docs([[3, 4], [5], [6, 2]])
    seqs, _ = pack_group(docs, cfg_for("full_sentences", 32), 0, 0)
    assert len(seqs) == 1
    ids = seqs[0].input_ids
    # <s> d0 (7 tokens) </s> d1 (5) </s> d2 (8) </s>
    assert len(ids) == 1 + 7 + 1 + 5 + 1 + 8 + 1
    assert [i for i, t in enumerate(ids) if t == EOS_ID] == [8, 14, 23]
    doc_seqs, _ = pack_group(docs, cfg_for("doc_sentences", 32), 0, 0)
    assert [s.doc_ids for s in doc_seqs] == [("src-0000",), ("src-0001",), ("src-0002",)]


def test_short_seq_prob_shortens_contiguous_blocks():
    docs, _ = make_docs(random_shape(random.Random(4), 60, max_len=10))
    full, s_full = pack_group(docs, cfg_for("full_sentences", 128), 0, 0)
    short, s_short = pack_group(docs, cfg_for("full_sentences", 128, short=1.0), 0, 0)
    assert s_full.short_targets == 0 and s_short.short_targets == len(short)
    assert len(short) > len(full)


# ------------------------------------------------------------ pair rules


@pytest.mark.parametrize("rule", ["segment_pair_nsp", "sentence_pair_nsp", "sop"])
@settings(max_examples=120, deadline=None)
@given(shape=shapes, max_len=lengths, short=shorts, seed=st.integers(0, 2**32))
def test_pair_structure(rule, shape, max_len, short, seed):
    docs, owner = make_docs(shape)
    seqs, stats = pack_group(docs, cfg_for(rule, max_len, short), seed, 0)
    for s in seqs:
        a, b = split_pair(s)
        assert a == sorted(a) and b == sorted(b), "segments keep document order"
        assert {owner[t] for t in a} == {s.doc_ids[0]}
        if rule == "sop":
            assert len(s.doc_ids) == 1 and s.label in (0, 1)
            # 0: A precedes B in the document; 1: swapped.
            assert (b[0] > a[-1]) if s.label == 0 else (a[0] > b[-1])
        elif s.label == 0:
            assert len(s.doc_ids) == 1 and b[0] > a[-1]
        else:
            assert s.label == 1 and len(s.doc_ids) == 2
            assert {owner[t] for t in b} == {s.doc_ids[1]} and s.doc_ids[1] != s.doc_ids[0]
        if rule == "sentence_pair_nsp":
            by_sentence = {sent: d.doc_id for d in docs for sent in d.sentences}
            # Each segment is one natural sentence (or a piece of a long one).
            for seg in (a, b):
                assert any(set(seg) <= set(sent) for sent in by_sentence)
    labels = Counter(s.label for s in seqs)
    if rule == "sop":
        assert (stats.in_order, stats.swapped) == (labels[0], labels[1])
    else:
        assert (stats.real_next, stats.random_next) == (labels[0], labels[1])


@pytest.mark.parametrize("rule", ["segment_pair_nsp", "sentence_pair_nsp", "sop"])
def test_pair_labels_balanced(rule):
    docs, _ = make_docs(random_shape(random.Random(5), 600, max_sents=25, max_len=30))
    seqs, stats = pack_group(docs, cfg_for(rule, 64), 11, 0)
    n = len(seqs)
    ones = sum(s.label for s in seqs)
    assert n > 2000
    # Every pair takes the keyed coin, a lone last segment too (BERT forces a random B there: its
    # labels come out 53-57% random next): 0.03 is 2.7 sigma at n=2000
    assert abs(ones / n - 0.5) < 0.03, ones / n
    if rule != "sop":
        assert stats.split_for_pair > 0  # lone last segments on real next


def test_single_document_group_falls_back_to_real_next():
    docs, _ = make_docs([[5, 6, 7, 8, 9, 4, 3]])
    for rule in ("segment_pair_nsp", "sentence_pair_nsp"):
        seqs, stats = pack_group(docs, cfg_for(rule, 16), 3, 0)
        assert seqs and all(s.label == 0 for s in seqs)
        assert stats.random_next == 0 and stats.fallback_real_next > 0
        assert stats.unaccounted_tokens == 0 and stats.dropped_tokens == 0


def test_lone_one_token_segment_is_counted_dropped():
    docs, _ = make_docs([[1]])
    for rule in ("segment_pair_nsp", "sentence_pair_nsp", "sop"):
        seqs, stats = pack_group(docs, cfg_for(rule, 16), 0, 0)
        assert seqs == [] and stats.dropped_tokens == 1 and stats.unaccounted_tokens == 0


def test_random_next_puts_back_unused_segments():
    # With many documents some NSP pairs are random; the A-side continuation of
    # those must still appear (as home tokens) in a later sequence. One-token
    # sentences never overshoot a target, so nothing is truncated.
    docs, _ = make_docs(random_shape(random.Random(6), 50, max_sents=150, max_len=1))
    seqs, stats = pack_group(docs, cfg_for("segment_pair_nsp", 64, short=0.0), 2, 0)
    assert stats.random_next > 10
    assert stats.truncated_tokens == 0
    home = home_tokens(seqs, "segment_pair_nsp")
    assert sorted(home) == [t for d in docs for s in d.sentences for t in s]


def _bert_truncate_counts(la: int, lb: int, max_tokens: int) -> tuple[int, int]:
    """BERT's truncate_seq_pair loop, on lengths only (the side does not change the counts)."""
    ra = rb = 0
    while la + lb > max_tokens:
        if la > lb:
            la, ra = la - 1, ra + 1
        else:
            lb, rb = lb - 1, rb + 1
    return ra, rb


@settings(max_examples=300, deadline=None)
@given(la=st.integers(1, 300), lb=st.integers(1, 300), max_tokens=st.integers(5, 300), key=st.integers())
def test_truncate_pair_matches_bert(la, lb, max_tokens, key):
    a, b = list(range(la)), list(range(1000, 1000 + lb))
    ta, tb, ra, rb = _truncate_pair(a, b, max_tokens, (key,))
    assert (ra, rb) == _bert_truncate_counts(la, lb, max_tokens)
    assert len(ta) == la - ra and len(tb) == lb - rb
    # Removed from the ends only: what is left is a contiguous slice.
    for full, kept in ((a, ta), (b, tb)):
        if kept:
            i = full.index(kept[0])
            assert full[i : i + len(kept)] == kept


def test_truncate_sides_are_fair():
    fronts = 0
    trials = 400
    for k in range(trials):
        a, _, ra, _ = _truncate_pair(list(range(100)), list(range(10)), 50, ("side", k))
        fronts += a[0]  # tokens removed from the front
        assert ra == 60
    mean = fronts / trials
    assert abs(mean - 30) < 1.5  # Binomial(60, 1/2): mean 30, sd of the mean ~0.19


# ------------------------------------------------------------ routing and stats


def test_split_of_fraction_and_stability():
    ids = [f"doc-{i}" for i in range(20000)]
    valid = [d for d in ids if split_of(d, 9, 0.1) == "valid"]
    assert abs(len(valid) / len(ids) - 0.1) < 0.01
    assert all(split_of(d, 9, 0.1) == "valid" for d in valid)  # stable
    # Growing the fraction only moves documents from train to valid.
    assert set(valid) <= {d for d in ids if split_of(d, 9, 0.2) == "valid"}
    assert all(split_of(d, 9, 0.0) == "train" for d in ids[:2000])
    other_seed = {d for d in ids if split_of(d, 10, 0.1) == "valid"}
    assert other_seed != set(valid)


def test_group_of_is_uniform_and_independent_of_split():
    ids = [f"doc-{i}" for i in range(16000)]
    counts = Counter(group_of(d, 3, 16) for d in ids)
    assert set(counts) == set(range(16))
    assert max(counts.values()) < 1.15 * 1000 and min(counts.values()) > 0.85 * 1000
    valid_groups = Counter(group_of(d, 3, 16) for d in ids if split_of(d, 3, 0.5) == "valid")
    assert min(valid_groups.values()) > 0.8 * 500
    with pytest.raises(ValueError):
        group_of("x", 0, 0)


def test_pack_group_rejects_documents_of_another_group():
    docs, _ = make_docs([[3, 3]] * 40)
    cfg = PackingConfig(rule="full_sentences", groups=4)
    mine = [d for d in docs if group_of(d.doc_id, 5, 4) == 2]
    seqs, _ = pack_group(mine, cfg, 5, 2)
    assert seqs
    with pytest.raises(ValueError, match="packing group"):
        pack_group(docs, cfg, 5, 2)


def test_stats_merge_across_groups():
    docs, _ = make_docs(random_shape(random.Random(8), 80))
    cfg = PackingConfig(rule="segment_pair_nsp", max_seq_len=64, groups=3)
    total = PackStats()
    merged = PackStats()
    for g in range(3):
        part = [d for d in docs if group_of(d.doc_id, 1, 3) == g]
        _, st_g = pack_group(part, cfg, 1, g)
        total += st_g
        merged = merged + st_g
    assert total == merged
    assert total.documents == len(docs) and total.unaccounted_tokens == 0
    assert total.as_dict()["input_tokens"] == sum(d.num_tokens for d in docs)


def test_empty_inputs():
    for rule in RULES:
        assert pack_group([], cfg_for(rule, 16), 0, 0) == ([], PackStats())
        docs, _ = make_docs([[], [0, 0]])
        seqs, stats = pack_group(docs, cfg_for(rule, 16), 0, 0)
        assert seqs == [] and stats.empty_documents == 2 and stats.documents == 2


# ------------------------------------------------------------ cut rate on real sentence lengths


def lee_shape(limit: int = 200) -> list[list[int]]:
    """Sentence lengths (in words) of real news: the Lee corpus gensim ships, split by our splitter."""
    from realtext import news_documents

    from pipelines.clean.sentences import split_sentences

    return [[len(s.split()) for s in split_sentences(d)] for d in news_documents()[:limit]]


@pytest.mark.parametrize("rule", ["segment_pair_nsp", "sop"])
@pytest.mark.parametrize("max_len", [64, 128])
def test_pairs_are_rarely_cut_on_real_sentence_lengths(rule, max_len):
    """BERT closes a chunk only after it overshoots the target, so its truncation cut 67-74% of
    pairs at 64 tokens (and half at 128) on these lengths. Closing at the last sentence boundary
    that fits leaves truncation to random-next B segments whose first sentence cannot fit."""
    docs, _ = make_docs(lee_shape())
    seqs, stats = pack_group(docs, cfg_for(rule, max_len), 0, 0)
    assert stats.pairs == len(seqs) > 300
    cut_rate = stats.truncated_pairs / stats.pairs
    if rule == "sop":
        assert cut_rate == 0
    else:
        assert cut_rate < 0.05, cut_rate
    # sequences stay reasonably full (closing early costs some fill)
    assert stats.tokens / len(seqs) > 0.7 * max_len
    # every real pair is made of whole sentences unless a lone sentence had to be split
    assert stats.cut_segments <= 2 * stats.split_for_pair + 2 * stats.truncated_pairs



@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("vocab_size", [60_000, 70_000])  # uint16 and int32 ids
def test_planned_tar_size_is_the_encoded_size(rule, vocab_size):
    """The packing step sizes samples without encoding them: exactly what encoding them gives."""
    from pipelines.pack.rules import pack_group
    from pipelines.pack.step import planned_tar_size
    from schemas.sample import encode_sample, sample_tar_size

    rng = random.Random(5)
    docs, _ = make_docs(random_shape(rng, 40, max_len=60))
    seqs, _ = pack_group(docs, cfg_for(rule, 130, 0.3), 11, 0)
    assert len(seqs) > 20
    for s in seqs:
        members = encode_sample(s.input_ids, vocab_size, s.token_type_ids, s.label, {"doc_ids": list(s.doc_ids)})
        assert planned_tar_size(s, vocab_size) == sample_tar_size(members)


def test_join_ids_equals_token_ids_of_the_flat_ids() -> None:
    """Blocks are joined as memory where segments are uint16; the ids and their width are those of
    ``token_ids`` over every id, whatever mix of widths, slices and separators a block holds."""
    import random
    from array import array

    from pipelines.pack.rules import join_ids as _join_ids
    from pipelines.records import TokenIds, token_ids

    rng = random.Random(0)
    for _ in range(300):
        parts: list = []
        for _ in range(rng.randint(0, 6)):
            kind = rng.choice(["small", "big", "int32-small", "slice", "sep", "bigsep"])
            ids = [rng.randrange(60_000) for _ in range(rng.randint(1, 9))]
            if kind == "small":
                parts.append(token_ids(ids))
            elif kind == "big":
                parts.append(token_ids(ids + [70_000]))  # an int32 sentence
            elif kind == "int32-small":
                parts.append(array("i", ids))  # a piece cut from an int32 sentence: every id fits uint16
            elif kind == "slice":
                parts.append(token_ids(ids + ids)[: len(ids)])  # a plain array('H'), as _segments cuts
            else:
                parts.append(2 if kind == "sep" else 80_000)
        first, last = rng.choice([(0, 2), (101, 102), (0, 70_001)])
        flat = [first] + [i for p in parts for i in ([p] if isinstance(p, int) else p)] + [last]
        got, want = _join_ids(first, parts, last), token_ids(flat)
        assert type(got) is TokenIds and list(got) == flat and got.typecode == want.typecode
