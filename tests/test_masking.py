"""Tests for trainer/masking.py: statistics of every scheme, invariants, and sample keying."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import BOS_ID, EOS_ID, MASK_ID, PAD_ID, SPECIAL_TOKENS
from schemas.config import MaskingConfig
from trainer.masking import IGNORE_INDEX, Masker, mix, mix_int, signed, word_start_table

V = 1000
SPECIALS = sorted(SPECIAL_TOKENS.values())
SCHEMES = ["token", "whole_word", "span", "ngram"]


def make_batch(
    lengths: list[int], L: int, gen: torch.Generator, separator_every: int = 0
) -> torch.Tensor:
    """Rows `<s> tokens... </s>` of the given total lengths (0: an empty row), right-padded to L."""
    ids = torch.full((len(lengths), L), PAD_ID, dtype=torch.int64)
    for r, n in enumerate(lengths):
        if n == 0:  # an empty row: padding only
            continue
        row = torch.randint(len(SPECIALS), V, (n,), generator=gen)
        row[0], row[n - 1] = BOS_ID, EOS_ID
        if separator_every:
            row[separator_every : n - 1 : separator_every] = EOS_ID
        ids[r, :n] = row
    return ids


def word_table(gen: torch.Generator, start_share: float = 0.6) -> torch.Tensor:
    ws = torch.rand(V, generator=gen) < start_share
    ws[SPECIALS] = True
    return ws


def masker(scheme: str, ws: torch.Tensor | None, **kw: float) -> Masker:
    return Masker(MaskingConfig(scheme=scheme, **kw), V, SPECIALS, MASK_ID, PAD_ID, ws)


def words_of_row(row: list[int], ws: torch.Tensor) -> list[list[int]]:
    """Reference word split (plain Python): positions of each maskable word."""
    words: list[list[int]] = []
    prev_special = True
    for i, t in enumerate(row):
        special = t in SPECIALS
        if not special:
            if ws[t] or prev_special:
                words.append([i])
            else:
                words[-1].append(i)
        prev_special = special
    return words


def runs(selected_row: list[bool]) -> list[tuple[int, int]]:
    """Maximal runs (start, length) of True."""
    out, i, n = [], 0, len(selected_row)
    while i < n:
        if selected_row[i]:
            j = i
            while j < n and selected_row[j]:
                j += 1
            out.append((i, j - i))
            i = j
        else:
            i += 1
    return out


# ---------------------------------------------------------------- building blocks


def test_tensor_hash_matches_python_splitmix64() -> None:
    values = [0, 1, -1, 2**63 - 1, -(2**63), 123456789, -987654321]
    got = mix(torch.tensor(values, dtype=torch.int64)).tolist()
    assert got == [signed(mix_int(v)) for v in values]


def test_word_start_table() -> None:
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "\u2581the", "re", "\u2581a", ",", "s"]
    t = word_start_table(pieces, SPECIALS)
    assert t.dtype == torch.bool and t.shape == (10,)
    assert t.tolist() == [True] * 5 + [True, False, True, False, False]


def test_word_schemes_need_a_table() -> None:
    for scheme in ("whole_word", "span", "ngram"):
        with pytest.raises(ValueError, match="word_starts"):
            masker(scheme, None)
    with pytest.raises(ValueError, match="shape"):
        masker("span", torch.ones(V + 1, dtype=torch.bool))


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_take_by_priority_matches_a_sequential_reference(rate: float) -> None:
    """The vectorized greedy (top-k or full sort) equals a plain loop over units."""
    gen = torch.Generator().manual_seed(14)
    B, L = 32, 64
    m = masker("token", None, rate=rate)
    prio = torch.randint(-(2**62), 2**62, (B, L), generator=gen)
    length = torch.randint(0, 4, (B, L), generator=gen)
    prio[length == 0] = 2**63 - 1  # no unit here
    budget = (length.sum(1) * rate).round().long()
    got = m._take_by_priority(prio, length, budget)
    for r in range(B):
        want = torch.zeros(L, dtype=torch.bool)
        used = 0
        for i in torch.argsort(prio[r]).tolist():
            n = length[r, i].item()
            if n == 0 or budget[r] == 0:
                break
            half_over = used + n / 2 - budget[r].item()  # exactly half over: a coin, the priority's low bit
            if used > 0 and (half_over > 0 or (half_over == 0 and prio[r, i].item() % 2 == 0)):
                break
            want[i] = True
            used += n
        assert torch.equal(got[r], want), r


# ---------------------------------------------------------------- statistics


def test_token_rate_and_80_10_10() -> None:
    gen = torch.Generator().manual_seed(1)
    B, L = 256, 512
    ids = make_batch([L] * B, L, gen)
    out = masker("token", None)(ids, torch.arange(B), epoch=0, seed=3)
    sel = out["labels"] != IGNORE_INDEX
    maskable = L - 2
    per_row = sel.sum(1).float()
    # Probabilistic rounding: every row within one token of rate × maskable, mean on target.
    assert (per_row - 0.15 * maskable).abs().max() <= 1.0
    assert abs(per_row.mean().item() / maskable - 0.15) < 0.002
    assert torch.equal(out["labels"][sel], ids[sel])
    new = out["input_ids"][sel]
    orig = ids[sel]
    n = sel.sum().item()
    is_mask = new == MASK_ID
    is_rand = ~is_mask & (new != orig)
    kept = new == orig
    assert abs(is_mask.sum().item() / n - 0.8) < 0.01
    # A random draw can equal the original (1/995): count that share with "kept".
    assert abs(is_rand.sum().item() / n - 0.1) < 0.008
    assert abs(kept.sum().item() / n - 0.1) < 0.008
    rand_ids = new[is_rand]
    assert not torch.isin(rand_ids, torch.tensor(SPECIALS)).any()
    assert torch.equal(out["input_ids"][~sel], ids[~sel])


@pytest.mark.parametrize("scheme", SCHEMES)
def test_rate_for_every_scheme(scheme: str) -> None:
    gen = torch.Generator().manual_seed(2)
    ws = word_table(gen)
    B, L = 128, 512
    ids = make_batch([L] * B, L, gen, separator_every=97)
    out = masker(scheme, ws)(ids, torch.arange(B), epoch=1, seed=0)
    sel = out["labels"] != IGNORE_INDEX
    maskable = ~torch.isin(ids, torch.tensor(SPECIALS))
    share = sel.sum().item() / maskable.sum().item()
    assert abs(share - 0.15) < 0.01, share  # measured 0.146-0.159 (0.150 with units well under the budget)


def test_whole_word_rate_holds_when_words_overshoot_by_exactly_half() -> None:
    """Rows of 2-token words: with an odd budget the word that would end half a word past it is taken on
    a coin (never taking it put the share 4.8% under the rate at 128 tokens)."""
    gen = torch.Generator().manual_seed(21)
    ws = torch.zeros(V, dtype=torch.bool)
    ws[0::2] = True  # even ids start a word, odd ids continue it
    ws[torch.tensor(SPECIALS)] = True
    B, L = 400, 128
    body = torch.randint(len(SPECIALS) // 2 + 1, V // 2, (B, L - 2), generator=gen) * 2
    body[:, 1::2] += 1
    ids = torch.cat([torch.full((B, 1), BOS_ID), body, torch.full((B, 1), EOS_ID)], 1)
    m = masker("whole_word", ws)
    masked = sum((m(ids, torch.arange(B), epoch=0, seed=s)["labels"] != IGNORE_INDEX).sum().item() for s in range(5))
    share = masked / (5 * B * (L - 2))
    assert abs(share / 0.15 - 1) < 0.01, share


@pytest.mark.parametrize("rate", [0.05, 0.3, 0.6])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_other_rates(scheme: str, rate: float) -> None:
    gen = torch.Generator().manual_seed(12)
    ws = word_table(gen)
    B, L = 64, 256
    ids = make_batch([L] * B, L, gen)
    out = masker(scheme, ws, rate=rate)(ids, torch.arange(B), epoch=0, seed=0)
    share = (out["labels"] != IGNORE_INDEX).sum().item() / (B * (L - 2))
    assert abs(share - rate) < 0.02 + 0.03 * rate, share


@pytest.mark.parametrize("scheme", SCHEMES)
def test_specials_and_padding_never_touched(scheme: str) -> None:
    gen = torch.Generator().manual_seed(3)
    ws = word_table(gen)
    lengths = torch.randint(3, 300, (96,), generator=gen).tolist()
    ids = make_batch(lengths, 300, gen, separator_every=23)
    ids[5, 7] = MASK_ID  # a <mask> already in the text is not maskable either
    out = masker(scheme, ws, rate=0.4)(ids, torch.arange(96), epoch=0, seed=0)
    special = torch.isin(ids, torch.tensor(SPECIALS))
    assert special.any() and (ids == PAD_ID).any()
    assert (out["labels"][special] == IGNORE_INDEX).all()
    assert torch.equal(out["input_ids"][special], ids[special])
    sel = out["labels"] != IGNORE_INDEX
    assert not torch.isin(out["input_ids"][sel], torch.tensor([BOS_ID, EOS_ID, PAD_ID, 3])).any()


@pytest.mark.parametrize("scheme", ["whole_word", "span", "ngram"])
def test_whole_words_masked_entirely(scheme: str) -> None:
    gen = torch.Generator().manual_seed(4)
    ws = word_table(gen, start_share=0.4)  # long words: ~2.5 tokens each
    B, L = 48, 256
    lengths = torch.randint(20, L + 1, (B,), generator=gen).tolist()
    ids = make_batch(lengths, L, gen, separator_every=31)
    out = masker(scheme, ws)(ids, torch.arange(B), epoch=0, seed=9)
    sel = (out["labels"] != IGNORE_INDEX).tolist()
    n_words_masked = 0
    for r in range(B):
        for word in words_of_row(ids[r].tolist(), ws):
            flags = {sel[r][i] for i in word}
            assert len(flags) == 1, (r, word)
            n_words_masked += flags.pop()
    assert n_words_masked > 100


def test_span_lengths_are_truncated_geometric() -> None:
    gen = torch.Generator().manual_seed(5)
    ws = torch.ones(V, dtype=torch.bool)  # one token per word: span length in words = tokens
    B, L = 256, 512
    ids = make_batch([L] * B, L, gen)
    out = masker("span", ws)(ids, torch.arange(B), epoch=0, seed=1)
    sel = out["labels"] != IGNORE_INDEX
    left, right = out["span_left"], out["span_right"]
    assert ((left == -1) == ~sel).all() and ((right == -1) == ~sel).all()
    r, c = torch.nonzero(sel, as_tuple=True)
    spans = set(zip(r.tolist(), left[sel].tolist(), right[sel].tolist(), strict=True))
    lengths = [rt - lt - 1 for _, lt, rt in spans]
    # Every predicted token lies strictly between its boundaries, and spans are
    # exactly the masked runs (boundaries are never masked: spans never touch).
    assert ((left[sel] < c) & (c < right[sel])).all()
    assert sorted(lengths) == sorted(n for row in sel.tolist() for _, n in runs(row))
    assert max(lengths) <= 10
    # Frequencies follow p(k) ∝ 0.2·0.8^(k-1) on 1..10 (mean 3.80; SpanBERT reports 3.8).
    probs = [0.2 * 0.8 ** (k - 1) for k in range(1, 11)]
    z = sum(probs)
    law_mean = sum(k * p for k, p in enumerate(probs, 1)) / z
    law_sd = math.sqrt(sum(k * k * p for k, p in enumerate(probs, 1)) / z - law_mean**2)
    mean = sum(lengths) / len(lengths)
    # Spans cut by the sequence edges or the budget run a little short of the law.
    assert law_mean - 4 * law_sd / math.sqrt(len(lengths)) - 0.05 < mean, mean
    assert mean < law_mean + 4 * law_sd / math.sqrt(len(lengths)), mean
    assert abs(law_mean - 3.797) < 0.001
    counts = Counter(lengths)
    for k in range(1, 11):
        expected = probs[k - 1] / z
        sd = math.sqrt(expected * (1 - expected) / len(lengths))
        assert abs(counts[k] / len(lengths) - expected) < 4 * sd + 0.005, (k, counts[k])


def test_span_80_10_10_is_decided_per_span() -> None:
    gen = torch.Generator().manual_seed(6)
    ws = word_table(gen)
    B, L = 256, 512
    ids = make_batch([L] * B, L, gen)
    out = masker("span", ws)(ids, torch.arange(B), epoch=0, seed=2)
    sel = out["labels"] != IGNORE_INDEX
    r, c = torch.nonzero(sel, as_tuple=True)
    kinds: dict[tuple[int, int], set[str]] = {}
    for row, col, lt in zip(r.tolist(), c.tolist(), out["span_left"][sel].tolist(), strict=True):
        new, old = out["input_ids"][row, col].item(), ids[row, col].item()
        kind = "mask" if new == MASK_ID else ("keep" if new == old else "random")
        kinds.setdefault((row, lt), set()).add(kind)
    # A random span may draw its original id at one position (1/995 per token).
    mixed = [k for k in kinds.values() if len(k) > 1]
    assert len(mixed) <= 0.02 * len(kinds) and all(k == {"random", "keep"} for k in mixed)
    first = Counter(("random" if "random" in k else k.pop()) for k in kinds.values())
    n = len(kinds)
    assert abs(first["mask"] / n - 0.8) < 0.03
    assert abs(first["random"] / n - 0.1) < 0.025
    assert abs(first["keep"] / n - 0.1) < 0.025


def test_ngram_lengths_follow_one_over_n() -> None:
    gen = torch.Generator().manual_seed(7)
    ws = torch.ones(V, dtype=torch.bool)
    B, L = 256, 512
    ids = make_batch([L] * B, L, gen)
    out = masker("ngram", ws)(ids, torch.arange(B), epoch=0, seed=4)
    sel = (out["labels"] != IGNORE_INDEX).tolist()
    # With single-token words and gaps of >= 1 word, masked runs are the n-grams;
    # runs cut by the sequence edges are left out.
    lengths = [n for row in sel for s, n in runs(row) if s > 1 and s + n < L - 2]
    counts = Counter(lengths)
    assert set(counts) <= {1, 2, 3}
    total = len(lengths)
    for n, p in ((1, 6 / 11), (2, 3 / 11), (3, 2 / 11)):
        assert abs(counts[n] / total - p) < 0.02, (n, counts[n] / total)


@pytest.mark.parametrize("scheme", ["span", "ngram"])
def test_span_masks_spread_over_positions(scheme: str) -> None:
    """The tiling starts in its stationary state, so a row's first word is as likely to be masked as the
    words in the middle (a tiling that started with a gap, shifted by an offset of four cycles, masked the
    first word ~10% less often: 0.136 against 0.152 for span on real 128-token rows)."""
    gen = torch.Generator().manual_seed(8)
    ws = word_table(gen)  # words of 1-3 tokens, as real text has
    B, L = 4096, 128
    ids = make_batch([L] * B, L, gen)
    m = masker(scheme, ws)
    sel = torch.stack([(m(ids, torch.arange(B) + B * s, 0, 0)["labels"] != IGNORE_INDEX) for s in range(10)])
    by_pos = sel.flatten(0, 1).float().mean(0)
    first, middle = by_pos[1].item(), by_pos[16:-16].mean().item()  # 40,960 rows: first's SE is 0.0018
    assert abs(first / middle - 1) < 0.05, (first, middle)
    assert abs(by_pos[2:6].mean().item() / middle - 1) < 0.03, (by_pos[2:6].tolist(), middle)


# ---------------------------------------------------------------- keying


@pytest.mark.parametrize("scheme", SCHEMES)
def test_mask_keyed_by_sample_not_batch(scheme: str) -> None:
    gen = torch.Generator().manual_seed(9)
    ws = word_table(gen)
    m = masker(scheme, ws)
    lengths = torch.randint(10, 200, (16,), generator=gen).tolist()
    ids = make_batch(lengths, 200, gen, separator_every=41)
    sids = torch.arange(1000, 1016)
    ref = m(ids, sids, epoch=3, seed=11)

    # Same samples, shuffled, with strangers mixed in, padded to a different length.
    perm = torch.randperm(16, generator=gen)
    extra = make_batch([150] * 5, 150, gen)
    L2 = max(lengths) + 7
    ids2 = torch.full((21, L2), PAD_ID, dtype=torch.int64)
    ids2[:16, : min(L2, 200)] = ids[perm][:, : min(L2, 200)]
    ids2[16:, :150] = extra
    sids2 = torch.cat([sids[perm], torch.arange(5)])
    got = m(ids2, sids2, epoch=3, seed=11)
    for k in ref:
        for i, p in enumerate(perm.tolist()):
            n = lengths[p]
            assert torch.equal(got[k][i, :n], ref[k][p, :n]), (k, p)
        assert (got["labels"][:16, :][ids2[:16] == PAD_ID] == IGNORE_INDEX).all()

    # One sample alone in its batch agrees too.
    alone = m(ids[3:4, : lengths[3]], sids[3:4], epoch=3, seed=11)
    for k in ref:
        assert torch.equal(alone[k][0], ref[k][3, : lengths[3]])

    # Calls are deterministic; a new epoch or seed gives a new mask.
    again = m(ids, sids, epoch=3, seed=11)
    assert all(torch.equal(again[k], ref[k]) for k in ref)
    for other in (m(ids, sids, epoch=4, seed=11), m(ids, sids, epoch=3, seed=12)):
        assert not torch.equal(other["labels"] != IGNORE_INDEX, ref["labels"] != IGNORE_INDEX)


def test_each_epoch_masks_differently() -> None:
    gen = torch.Generator().manual_seed(10)
    ids = make_batch([512] * 8, 512, gen)
    m = masker("token", None)
    sels = [m(ids, torch.arange(8), epoch=e, seed=0)["labels"] != IGNORE_INDEX for e in range(4)]
    for a in range(4):
        for b in range(a + 1, 4):
            overlap = (sels[a] & sels[b]).sum().item() / sels[a].sum().item()
            assert overlap < 0.25  # independent masks overlap ~15%


def test_same_tokens_different_sample_ids_differ() -> None:
    gen = torch.Generator().manual_seed(13)
    ids = make_batch([512], 512, gen).repeat(4, 1)
    out = masker("token", None)(ids, torch.tensor([0, 1, 2, 2**40]), epoch=0, seed=0)
    sel = out["labels"] != IGNORE_INDEX
    assert len({tuple(s.tolist()) for s in sel}) == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("scheme", SCHEMES)
def test_cuda_matches_cpu_bit_for_bit(scheme: str) -> None:
    gen = torch.Generator().manual_seed(11)
    ws = word_table(gen)
    lengths = torch.randint(10, 512, (64,), generator=gen).tolist()
    ids = make_batch(lengths, 512, gen, separator_every=61)
    cpu = masker(scheme, ws)(ids, torch.arange(64), epoch=2, seed=5)
    gpu = masker(scheme, ws).to("cuda")(ids.cuda(), torch.arange(64).cuda(), epoch=2, seed=5)
    for k in cpu:
        assert torch.equal(cpu[k], gpu[k].cpu()), k


# ---------------------------------------------------------------- properties


@settings(max_examples=40, deadline=None)
@given(
    scheme=st.sampled_from(SCHEMES),
    rows=st.lists(st.lists(st.integers(0, 39), min_size=0, max_size=60), min_size=1, max_size=6),
    starts=st.lists(st.booleans(), min_size=40, max_size=40),
    rate=st.floats(0.05, 0.9),
    epoch=st.integers(0, 2**31),
    seed=st.integers(-(2**62), 2**62),
)
def test_invariants_on_random_batches(
    scheme: str, rows: list[list[int]], starts: list[bool], rate: float, epoch: int, seed: int
) -> None:
    vocab = 40
    ws = torch.tensor(starts)
    m = Masker(MaskingConfig(scheme=scheme, rate=rate), vocab, SPECIALS, MASK_ID, PAD_ID, ws)
    L = max(len(r) for r in rows) + 2
    ids = torch.full((len(rows), L), PAD_ID, dtype=torch.int64)
    for i, r in enumerate(rows):
        row = [BOS_ID, *[t if t != PAD_ID else 7 for t in r], EOS_ID]
        ids[i, : len(row)] = torch.tensor(row)
    out = m(ids, torch.arange(len(rows)) * 7, epoch, seed)
    sel = out["labels"] != IGNORE_INDEX
    special = torch.isin(ids, torch.tensor(SPECIALS))
    assert not (sel & special).any()
    assert torch.equal(out["input_ids"][~sel], ids[~sel])
    assert torch.equal(out["labels"][sel], ids[sel])
    assert ((out["input_ids"] >= 0) & (out["input_ids"] < vocab)).all()
    n_maskable = (~special).sum(1)
    # Budget: at least one unit when the budget is positive; never a full unit over it.
    assert (sel.sum(1) <= n_maskable).all()
    if scheme == "token":
        assert ((sel.sum(1) - rate * n_maskable).abs() <= 1).all()
    if scheme == "span":
        c = torch.nonzero(sel, as_tuple=True)[1]
        lt, rt = out["span_left"][sel], out["span_right"][sel]
        assert ((lt < c) & (c < rt)).all() and (lt >= 0).all()
        assert ((out["span_left"] == -1) == ~sel).all()


def span_lengths_in_words(sel: torch.Tensor, ids: torch.Tensor, ws: torch.Tensor) -> list[int]:
    """Lengths, in whole words, of the masked runs (each run starts at a word start; a token
    right after a special token starts a word too)."""
    prev_special = torch.ones_like(sel)
    prev_special[:, 1:] = torch.isin(ids[:, :-1], torch.tensor(SPECIALS))
    starts = torch.cumsum(((ws[ids] | prev_special) & sel).long(), dim=1)
    edges = torch.diff(torch.nn.functional.pad(sel.long(), (1, 1)), dim=1)
    begin, end = torch.nonzero(edges == 1), torch.nonzero(edges == -1)
    rows, a, b = begin[:, 0], begin[:, 1], end[:, 1]
    before = torch.where(a > 0, starts[rows, (a - 1).clamp(min=0)], torch.zeros_like(a))
    return (starts[rows, b - 1] - before).tolist()


def test_span_length_law_holds_for_multi_token_words() -> None:
    """SpanBERT: span lengths in words ~ geometric(0.2) clipped at 10 (mean 3.797), also for the
    long spans. Sampling used to thin spans that overshoot the budget, which put lengths 8-10
    6-8% under the law here (10-13% on real text); the budget must hold all the same."""
    gen = torch.Generator().manual_seed(21)
    ws = word_table(gen, 0.75)  # ~1.3 tokens per word, as SentencePiece gives on English
    B, L = 4096, 512
    ids = make_batch([L] * B, L, gen)
    out = masker("span", ws)(ids, torch.arange(B), epoch=0, seed=1)
    sel = out["labels"] != IGNORE_INDEX
    assert abs(sel.sum().item() / (B * (L - 2)) - 0.15) < 0.001
    lengths = span_lengths_in_words(sel, ids, ws)
    n = len(lengths)
    probs = [0.2 * 0.8 ** (k - 1) for k in range(1, 11)]
    law = [p / sum(probs) for p in probs]
    counts = Counter(lengths)
    assert set(counts) <= set(range(1, 11)) and n > 50_000
    chi2 = sum((counts[k] - n * q) ** 2 / (n * q) for k, q in enumerate(law, 1))
    assert chi2 < 27.9, chi2  # chi-square, 9 degrees of freedom, p = 0.001
    assert abs(sum(lengths) / n - 3.797) < 0.04
    long_share = sum(counts[k] for k in (8, 9, 10)) / n
    assert abs(long_share / sum(law[7:]) - 1) < 0.03, long_share / sum(law[7:])


def test_span_length_law_holds_with_separators() -> None:
    """Pair rows carry a `</s>` between segments: spans run across it as one unit (the separator
    is never masked) instead of being cut there, which shortened exactly the long spans (lengths
    8-10 came out 10-17 % under the law with a separator every 97 tokens)."""
    gen = torch.Generator().manual_seed(22)
    ws = word_table(gen, 0.75)
    B, L = 4096, 512
    ids = make_batch([L] * B, L, gen, separator_every=97)
    out = masker("span", ws)(ids, torch.arange(B), epoch=0, seed=1)
    sel = out["labels"] != IGNORE_INDEX
    special = torch.isin(ids, torch.tensor(SPECIALS))
    assert not (sel & special).any()
    assert abs(sel.sum().item() / (~special).sum().item() - 0.15) < 0.002
    prev_special = torch.ones_like(sel)
    prev_special[:, 1:] = special[:, :-1]
    word_start = (ws[ids] | prev_special) & sel
    rows = torch.nonzero(sel, as_tuple=True)[0]
    unit = rows * L + out["span_left"][sel]  # one SBO span = one unit
    keys, inverse = torch.unique(unit, return_inverse=True)
    lengths = torch.zeros(len(keys), dtype=torch.int64).scatter_add_(0, inverse, word_start[sel].long())
    counts = Counter(lengths.tolist())
    n = len(keys)
    probs = [0.2 * 0.8 ** (k - 1) for k in range(1, 11)]
    law = [p / sum(probs) for p in probs]
    assert set(counts) <= set(range(1, 11)) and n > 50_000
    chi2 = sum((counts[k] - n * q) ** 2 / (n * q) for k, q in enumerate(law, 1))
    assert chi2 < 27.9, chi2
    long_share = sum(counts[k] for k in (8, 9, 10)) / n
    assert abs(long_share / sum(law[7:]) - 1) < 0.03, long_share / sum(law[7:])
    # Some spans do cross a separator, and their boundaries enclose it.
    left, right = out["span_left"][sel], out["span_right"][sel]
    r = rows
    crossing = [(int(a), int(b), int(x)) for a, b, x in zip(left.tolist(), right.tolist(), r.tolist(), strict=True)
                if bool(special[x, a + 1:b].any())]
    assert crossing


@pytest.mark.parametrize("scheme", ["span", "ngram"])
@pytest.mark.parametrize("L,start_share", [(64, 0.2), (32, 0.4), (128, 0.75)])
def test_span_and_ngram_rates_hold_when_a_unit_is_longer_than_the_budget(scheme: str, L: int,
                                                                        start_share: float) -> None:
    """Short rows of long words: a span (mean 3.8 words of ~5 tokens) is longer than a 64-token row's budget
    (9.3 tokens). Lowering that budget by the crossing unit's expected overshoot left it at 0: spans masked
    5% of the tokens, n-grams 12%, and most rows predicted nothing (a step's loss read 0)."""
    gen = torch.Generator().manual_seed(31)
    ws = word_table(gen, start_share)
    B = 4096
    ids = make_batch([L] * B, L, gen)
    sel = masker(scheme, ws)(ids, torch.arange(B), epoch=0, seed=2)["labels"] != IGNORE_INDEX
    share = sel.sum().item() / (B * (L - 2))
    assert abs(share - 0.15) < 0.01, share  # measured 0.146-0.159 (0.150 with units well under the budget)
