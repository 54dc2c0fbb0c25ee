"""Dynamic masking on the batch's device: token, whole-word, SpanBERT spans, ALBERT n-grams.

Every random choice comes from a counter-based hash (splitmix64's finalizer,
in int64 tensor ops) of ``(seed, epoch, stream, sample_id, index)``, where
``index`` is a token position *inside the sample* or a span counter. Nothing
depends on a generator's state, on the batch composition, on the batch order
or on the padded length, so a sample's mask is a pure function of (seed,
epoch, sample_id, its own tokens) and is bit-identical on CPU and CUDA
(everything after the hash is integer arithmetic, sorting and cumsums).

All schemes share one selection step: the row is cut into *units* (a token,
a whole word, a span of whole words, an n-gram of whole words), each unit
gets a hashed priority, and units are taken in priority order until the
row's token budget ``rate × maskable tokens`` is met (a unit is taken while
less than half of it would overshoot). See docs/masking.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import torch

from schemas.config import MaskingConfig

# The label of a position (or a row's sentence label) that carries no loss: PyTorch's
# cross_entropy default. The one definition: the loader, the loop and the model import it.
IGNORE_INDEX = -100
WORD_START = "\u2581"  # SentencePiece's word-boundary marker

# ---------------------------------------------------------------- keyed hashing

_M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MUL1 = 0xBF58476D1CE4E5B9
MUL2 = 0x94D049BB133111EB
INT64_MAX = (1 << 63) - 1
_U32 = 1 << 32

# One stream per independent random choice; changing a value changes every mask.
S_BUDGET, S_PRIO, S_DECIDE, S_SPAN_DECIDE, S_LEN, S_GAP, S_PHASE = range(1, 8)
STREAMS = 7  # streams 1..7 above


def signed(x: int) -> int:
    """A 64-bit pattern as the int64 value torch stores."""
    x &= _M64
    return x - (1 << 64) if x >> 63 else x


def mix_int(z: int) -> int:
    """splitmix64's finalizer on a Python int (the reference for the tensor version)."""
    z &= _M64
    z = ((z ^ (z >> 30)) * MUL1) & _M64
    z = ((z ^ (z >> 27)) * MUL2) & _M64
    return z ^ (z >> 31)


def stream_base(seed: int, epoch: int, stream: int) -> int:
    """The int64 key of one random stream of one (seed, epoch): what every row's key starts from."""
    return signed(mix_int(mix_int(mix_int(seed + GOLDEN) + epoch * GOLDEN) + stream * GOLDEN))


def srl(z: torch.Tensor, s: int) -> torch.Tensor:
    # torch's >> on int64 is arithmetic; masking off the sign copies makes it logical.
    return (z >> s) & ((1 << (64 - s)) - 1)


def mix(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finalizer on an int64 tensor (multiplication wraps mod 2**64).

    Works in place on one fresh copy: on CPU, fresh 1 MB temporaries cost more
    than the arithmetic.
    """
    z = z.clone()
    for shift, mul in ((30, MUL1), (27, MUL2), (31, 0)):
        t = z >> shift
        t &= (1 << (64 - shift)) - 1
        z ^= t
        if mul:
            z *= signed(mul)
    return z


def top32(h: torch.Tensor) -> torch.Tensor:
    """Top 32 bits of a hash as int64 in [0, 2**32): a uniform integer."""
    return srl(h, 32)


def _fixed(p: float) -> int:
    """Probability p as a threshold on a uniform 32-bit integer."""
    return min(_U32, max(0, round(p * _U32)))


_TABLE_BITS = 16


def _inverse_cdf_table(probs: Sequence[float], first: int = 0, values: Sequence[int] | None = None) -> torch.Tensor:
    """int64 [2**16]: value for each 16-bit uniform bin, so P(value = first + k) ≈ probs[k] (or
    P(value = values[k]) ≈ probs[k] when ``values`` is given; probs need not sum to 1).

    Sampling is one gather of integers, hence identical on every device; the
    law is exact to 2**-16 per value (a geometric tail below that is cut off).
    """
    n = 1 << _TABLE_BITS
    total = sum(probs)
    cut, acc = [], 0.0
    for p in probs[:-1]:
        acc += p / total
        cut.append(min(n, round(acc * n)))
    bins = torch.arange(n, dtype=torch.int64)
    index = torch.searchsorted(torch.tensor(cut, dtype=torch.int64), bins, right=True)
    return first + index if values is None else torch.tensor(list(values), dtype=torch.int64)[index]


def _phase_law(len_probs: Sequence[float], len_first: int, gap_probs: Sequence[float],
               gap_first: int) -> tuple[list[float], list[int]]:
    """The stationary start of a tiling that alternates gaps and spans (lengths by the two laws): slot 0
    lies in a span with probability E[span] / (E[span] + E[gap]), and then r slots of that span are left
    (itself included) with probability ∝ P(span >= r); likewise in a gap. As (weights, values): +r for the
    rest of a span, -r for the rest of a gap. Both weights are P(X >= r) over E[span] + E[gap]."""
    def tail(probs: Sequence[float], first: int) -> list[float]:  # P(X >= r), r = 1 .. max
        total = sum(probs)
        top = first + len(probs) - 1
        return [sum(p for k, p in enumerate(probs) if first + k >= r) / total for r in range(1, top + 1)]

    spans, gaps = tail(len_probs, len_first), tail(gap_probs, gap_first)
    return spans + gaps, [r for r in range(1, len(spans) + 1)] + [-r for r in range(1, len(gaps) + 1)]


def _lookup(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """table[index] for a 1-D table; index_select is several times faster than advanced indexing on CPU."""
    return table.index_select(0, index.reshape(-1)).view(index.shape)


def word_start_table(pieces: Sequence[str], special_ids: Iterable[int], marker: str = WORD_START) -> torch.Tensor:
    """bool [V]: True where a piece starts a word (begins with `marker`: "\u2581" for SentencePiece,
    "\u0120" for byte-level BPE, schemas.tokenizer_files.WORD_START_MARKERS) or is special/control."""
    table = torch.tensor([p.startswith(marker) for p in pieces], dtype=torch.bool)
    for i in special_ids:
        if 0 <= i < len(pieces):
            table[i] = True
    return table


class MaskTables(NamedTuple):
    """What a Masker computes with besides the batch: its tables and 32-bit fixed-point constants."""

    is_special: torch.Tensor  # bool [V]: never masked, never drawn as a random token
    allowed: torch.Tensor  # int64 [A]: the ids a random replacement draws from
    word_starts: torch.Tensor | None  # bool [V] (word schemes): the token starts a word (specials included)
    len_table: torch.Tensor | None  # int64 [2**16] (span, ngram): span length in words per 16-bit bin
    gap_table: torch.Tensor | None  # int64 [2**16] (span, ngram): gap length in slots per 16-bit bin
    phase_table: torch.Tensor | None  # int64 [2**16] (span, ngram): the tiling's start (``_phase_law``) per bin
    rate: int  # the mask rate as a threshold on a uniform 32-bit integer
    t_mask: int  # below it a selected token becomes <mask>
    t_random: int  # below it (and not below t_mask) a random token


class Masker:
    """Vectorized, sample-keyed dynamic masking for one MaskingConfig.

    Build once, move with ``.to(device)``, call per batch. No per-sequence
    Python loops; the only Python-side work is a handful of scalar constants.
    """

    def __init__(
        self,
        cfg: MaskingConfig,
        vocab_size: int,
        special_ids: Iterable[int],
        mask_id: int,
        pad_id: int,
        word_starts: torch.Tensor | None = None,
    ) -> None:
        self.cfg = cfg
        self.check_ids = True  # the CPU-only id range check of `checked`
        self.vocab_size = int(vocab_size)
        self.mask_id = int(mask_id)
        self.pad_id = int(pad_id)
        specials = {int(i) for i in special_ids} | {self.mask_id, self.pad_id}
        if any(not 0 <= i < self.vocab_size for i in specials):
            raise ValueError(f"special ids {sorted(specials)} out of range for vocab_size={vocab_size}")
        is_special = torch.zeros(self.vocab_size, dtype=torch.bool)
        is_special[sorted(specials)] = True
        self._is_special = is_special
        self._host_special = is_special  # stays on the host: prediction_bound reads host batches
        self._allowed = torch.nonzero(~is_special).flatten()  # ids a "random token" may take
        if self._allowed.numel() == 0:
            raise ValueError("the vocabulary has no non-special token to sample from")

        if cfg.scheme != "token":
            if word_starts is None:
                raise ValueError(f"masking scheme {cfg.scheme!r} needs a word_starts table")
            if word_starts.shape != (self.vocab_size,):
                raise ValueError(f"word_starts must have shape [{self.vocab_size}], got {tuple(word_starts.shape)}")
            # Specials always start a slot so a word never runs across <s>, </s> or <pad>.
            self._word_starts: torch.Tensor | None = word_starts.to(torch.bool).cpu() | is_special
        else:
            self._word_starts = None
        self._host_word_starts = self._word_starts

        self._rate = _fixed(cfg.rate)
        self._t_mask = _fixed(cfg.mask_prob)
        self._t_random = _fixed(cfg.mask_prob + cfg.random_prob)

        # Span / n-gram length laws and the tiling that proposes candidate spans.
        self._len_table: torch.Tensor | None = None
        self._gap_table: torch.Tensor | None = None
        self._phase_table: torch.Tensor | None = None
        if cfg.scheme in ("span", "ngram"):
            if cfg.scheme == "span":
                # SpanBERT: geometric(p) truncated to 1..span_max and renormalized (mean 3.8).
                q = 1.0 - cfg.span_p
                probs = [cfg.span_p * q ** (k - 1) for k in range(1, cfg.span_max + 1)]
            else:
                # ALBERT: n-gram of n <= ngram_max words with p(n) ∝ 1/n.
                probs = [1.0 / n for n in range(1, cfg.ngram_max + 1)]
            mean_len = sum(k * p for k, p in enumerate(probs, 1)) / sum(probs)
            self._len_table = _inverse_cdf_table(probs, first=1)
            # Candidate spans cover ~density of the slots (twice the rate, at least half),
            # so the thinning step almost always has enough to fill the budget.
            density = min(0.9, max(0.5, 2.0 * cfg.rate))
            mean_gap = mean_len * (1.0 - density) / density
            # A gap of at least one slot keeps spans apart, so span boundaries stay visible.
            gap_min = 1 if mean_gap >= 1.0 else 0
            extra = mean_gap - gap_min
            keep = extra / (1.0 + extra)  # geometric on {0, 1, ...} with mean `extra`
            gap_probs = [1.0]
            while keep > 0 and keep ** len(gap_probs) > 2.0**-20:
                gap_probs.append(keep ** len(gap_probs))
            self._gap_table = _inverse_cdf_table(gap_probs, first=gap_min)
            # The tiling starts in its stationary state, so a row's first words are masked as often as
            # the rest (a tiling that starts with a gap masks them ~10% less often).
            weights, values = _phase_law(probs, 1, gap_probs, gap_min)
            self._phase_table = _inverse_cdf_table(weights, values=values)

    # ------------------------------------------------------------- plumbing

    def to(self, device: torch.device | str) -> Masker:
        """Move the lookup tables to ``device`` (in place); returns self."""
        self._is_special = self._is_special.to(device)
        self._allowed = self._allowed.to(device)
        if self._word_starts is not None:
            self._word_starts = self._word_starts.to(device)
        if self._len_table is not None:
            self._len_table = self._len_table.to(device)
        if self._gap_table is not None:
            self._gap_table = self._gap_table.to(device)
        if self._phase_table is not None:
            self._phase_table = self._phase_table.to(device)
        return self

    def tables(self) -> MaskTables:
        """The lookup tables and fixed-point constants every call uses (on the masker's device)."""
        return MaskTables(is_special=self._is_special, allowed=self._allowed, word_starts=self._word_starts,
                          len_table=self._len_table, gap_table=self._gap_table, phase_table=self._phase_table,
                          rate=self._rate, t_mask=self._t_mask, t_random=self._t_random)

    def prediction_bound(self, input_ids: torch.Tensor) -> int:
        """At least as many positions as this masker can select in the batch, whatever the seed and epoch,
        from the host batch (no device work), rounded up to a multiple of 64.

        Per row, with n maskable tokens, b = ceil(n x rate) the largest budget and w the row's longest
        word in tokens: token masking selects b; whole words at most max(2b - 1, w) (a word is taken
        while less than half of it goes over the budget, the first one always); spans and n-grams at most
        b - 1 + m w (the crossing unit is taken whole; a unit holds at most m = span_max / ngram_max
        words). Never more than n. Lets the masked-only head gather a static number of rows without a
        host sync (trainer/model.py, ``predicted_rows``).
        """
        ids = input_ids.long().cpu()
        special = _lookup(self._host_special, ids)
        maskable = ~special
        n = maskable.sum(1)
        b = (n * self._rate + _U32 - 1) >> 32
        scheme = self.cfg.scheme
        if scheme == "token":
            bound = b
        else:
            assert self._host_word_starts is not None
            pos = torch.arange(ids.shape[1])
            prev_special = torch.ones_like(special)
            prev_special[:, 1:] = special[:, :-1]
            start = maskable & (ids != self.pad_id) & (_lookup(self._host_word_starts, ids) | prev_special)
            ustart = torch.cummax(torch.where(start, pos, -1), dim=1).values.clamp_(min=0)
            w = torch.zeros_like(ids).scatter_add_(1, ustart, maskable.long()).amax(1)
            if scheme == "whole_word":
                bound = torch.maximum(2 * b - 1, w)
            else:
                words = self.cfg.span_max if scheme == "span" else self.cfg.ngram_max
                bound = b - 1 + words * w
            bound = torch.where(b > 0, torch.minimum(bound, n), 0)
        total = int(bound.sum())
        return max(64, -(-total // 64) * 64)

    @staticmethod
    def _row_keys(sample_ids: torch.Tensor, seed: int, epoch: int, stream: int) -> torch.Tensor:
        """Per-row hash state for one stream: int64 [B]."""
        return mix(sample_ids * signed(GOLDEN) + stream_base(seed, epoch, stream))

    @staticmethod
    def _hash(row_keys: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Hash of (row, index): int64 [B, N] for index [N] or [B, N] (splitmix64's stream)."""
        return mix(row_keys[:, None] + (index + 1) * signed(GOLDEN))

    # ------------------------------------------------------------- the call

    @torch.no_grad()
    def __call__(
        self, input_ids: torch.Tensor, sample_ids: torch.Tensor, epoch: int, seed: int
    ) -> dict[str, torch.Tensor]:
        """Mask a padded batch; see the module docstring for the keying guarantees.

        input_ids: int64 [B, L] padded with pad_id; sample_ids: int64 [B] global sample indices.
        Returns input_ids (masked), labels (original id where predicted, -100 elsewhere) and,
        for scheme "span", span_left / span_right (boundary positions, -1 where not predicted).
        """
        ids, sids = self.checked(input_ids, sample_ids)
        seed, epoch = int(seed), int(epoch)
        pos = torch.arange(ids.shape[1], device=ids.device)
        special = _lookup(self._is_special, ids)  # pad and <mask> included
        maskable = ~special
        member, unit_start = self._units(ids, sids, seed, epoch, special, maskable, pos)
        selected, ustart = self._select(ids, sids, seed, epoch, maskable, member, unit_start, pos)
        out = self._replace(ids, sids, seed, epoch, selected, ustart, pos)
        if self.cfg.scheme == "span":
            assert ustart is not None
            out.update(self._span_bounds(ids, member, selected, ustart, pos))
        return out

    # ------------------------------------------------------------- steps

    def checked(self, input_ids: torch.Tensor, sample_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids int64 [B, L], sample ids int64 [B] on the same device), validated.

        Token ids are range-checked on CPU only (``check_ids``): on CUDA the check would force a
        host sync every batch, and the loader has checked every sample against the vocabulary.
        """
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [B, L], got shape {tuple(input_ids.shape)}")
        ids = input_ids.long()
        device = ids.device
        B, L = ids.shape
        sids = sample_ids.to(device=device, dtype=torch.int64).reshape(-1)
        if sids.numel() != B:
            raise ValueError(f"sample_ids has {sids.numel()} entries for a batch of {B}")
        if self.check_ids and device.type == "cpu" and ids.numel() and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"token id out of range for vocab_size={self.vocab_size}")
        return ids, sids

    def _units(self, ids: torch.Tensor, sids: torch.Tensor, seed: int, epoch: int, special: torch.Tensor,
               maskable: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cut each row into the scheme's units: (member, unit_start) bool [B, L].

        member: the token belongs to a unit that may be masked; unit_start: a unit begins here.
        """
        scheme = self.cfg.scheme
        if scheme == "token":
            return maskable, maskable
        assert self._word_starts is not None
        not_pad = ids != self.pad_id
        prev_special = torch.ones_like(special)
        prev_special[:, 1:] = special[:, :-1]
        # A slot is a whole word or a single special token.
        slot_start = not_pad & (_lookup(self._word_starts, ids) | prev_special)
        if scheme == "whole_word":
            return maskable, maskable & slot_start
        return self._tile_spans(sids, seed, epoch, slot_start, maskable, pos)

    def _select(self, ids: torch.Tensor, sids: torch.Tensor, seed: int, epoch: int, maskable: torch.Tensor,
                member: torch.Tensor, unit_start: torch.Tensor,
                pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Take units in hashed priority order up to the row's token budget.

        Returns (selected bool [B, L], ustart): ustart, for the word and span schemes, is the
        first position of each token's unit (None for scheme "token").
        """
        scheme = self.cfg.scheme
        n_maskable = maskable.sum(dim=1)
        # Probabilistic rounding keeps the expected budget exactly rate × maskable.
        u_budget = top32(mix(self._row_keys(sids, seed, epoch, S_BUDGET)))
        target = n_maskable * self._rate  # 32-bit fixed point
        ustart = ulen = None
        if scheme in ("span", "ngram"):
            ustart = torch.cummax(torch.where(unit_start, pos, -1), dim=1).values.clamp_(min=0)
            ulen = torch.zeros_like(ids).scatter_add_(1, ustart, member.long())
            target = self._span_budget(target, ulen, unit_start)
        budget = (target + u_budget) >> 32
        prio = torch.where(
            unit_start, self._hash(self._row_keys(sids, seed, epoch, S_PRIO), pos), INT64_MAX
        )
        if scheme == "token":
            selected = self._take_by_priority(prio, maskable.long(), budget)
        else:
            # Every member token points at its unit's first position (units are contiguous runs).
            if scheme == "whole_word":
                ustart = torch.cummax(torch.where(unit_start, pos, -1), dim=1).values.clamp_(min=0)
                ulen = torch.zeros_like(ids).scatter_add_(1, ustart, member.long())
            assert ustart is not None and ulen is not None
            chosen = self._take_by_priority(prio, ulen, budget, whole_crossing=scheme != "whole_word")
            selected = member & chosen.gather(1, ustart)
        return selected, ustart

    def _replace(self, ids: torch.Tensor, sids: torch.Tensor, seed: int, epoch: int, selected: torch.Tensor,
                 ustart: torch.Tensor | None, pos: torch.Tensor) -> dict[str, torch.Tensor]:
        """Replace the selected tokens (<mask>, a random token, or kept); {"input_ids", "labels"}."""
        # 80/10/10: per span for SpanBERT (as its paper does), per token otherwise.
        h_dec = self._hash(self._row_keys(sids, seed, epoch, S_DECIDE), pos)
        if self.cfg.scheme == "span":
            assert ustart is not None
            u_dec = top32(self._hash(self._row_keys(sids, seed, epoch, S_SPAN_DECIDE), ustart))
        else:
            u_dec = top32(h_dec)  # top bits decide, low bits (below) pick the random token
        rand_ids = _lookup(self._allowed, (h_dec & 0x7FFFFFFF) % self._allowed.numel())
        out_ids = torch.where(selected & (u_dec < self._t_mask), self.mask_id, ids)
        use_rand = selected & (u_dec >= self._t_mask) & (u_dec < self._t_random)
        out_ids = torch.where(use_rand, rand_ids, out_ids)
        labels = torch.where(selected, ids, IGNORE_INDEX)
        return {"input_ids": out_ids, "labels": labels}

    def _span_bounds(self, ids: torch.Tensor, member: torch.Tensor, selected: torch.Tensor, ustart: torch.Tensor,
                     pos: torch.Tensor) -> dict[str, torch.Tensor]:
        """{"span_left", "span_right"}: the boundaries of the span each predicted token belongs to,
        kept inside the sample (-1 where not predicted)."""
        n_tokens = torch.where(ids != self.pad_id, pos + 1, 0).amax(dim=1, keepdim=True)
        # A unit's last member (a span across a separator is longer than its member count).
        last_of = torch.zeros_like(ids).scatter_reduce_(1, ustart, torch.where(member, pos, 0), "amax")
        last = last_of.gather(1, ustart)
        left = (ustart - 1).clamp(min=0)
        right = torch.minimum(last + 1, (n_tokens - 1).clamp(min=0))
        return {"span_left": torch.where(selected, left, -1), "span_right": torch.where(selected, right, -1)}

    def _take_by_priority(self, prio: torch.Tensor, length: torch.Tensor, budget: torch.Tensor,
                          whole_crossing: bool = False) -> torch.Tensor:
        """Take units in priority order while the budget holds; bool [B, L] indexed like prio.

        Default (tokens, whole words): a unit is taken when less than half of it would
        overshoot the budget, or exactly half on a keyed coin (its priority's low bit), so the
        expected total is the budget whatever the unit lengths (a strict rule never took the
        word overshooting by exactly half: 2-token words came out 4.8% under the rate at 128);
        the first unit is always taken when the budget is positive.

        whole_crossing (spans, n-grams): units are taken while the total is below the budget,
        the unit that crosses it included. The number taken is then a stopping time of the
        random order, so by Wald's identity the taken units follow the candidates' length law
        exactly (the half rule drops long crossing units more often: SpanBERT lengths 8-10 came
        out 10-13% under the law). The caller lowers the budget by the expected overshoot.
        """
        L = prio.shape[1]
        # Taken units are a prefix of the priority order no longer than the largest
        # possible budget (each unit holds >= 1 token), so a partial top-k suffices;
        # the bound is static, so no device sync is needed to find it.
        k = min(L, math.ceil(self.cfg.rate * L) + 1)
        if 4 * k < L:
            order = torch.topk(prio, k, dim=1, largest=False, sorted=True).indices
        else:
            order = torch.argsort(prio, dim=1)
        ls = length.gather(1, order)
        before = torch.cumsum(ls, dim=1) - ls
        b = budget[:, None]
        if whole_crossing:
            take = (ls > 0) & (before < b)
        else:
            twice_end = 2 * before + ls
            coin = (prio.gather(1, order) & 1) == 1
            take = (ls > 0) & ((twice_end < 2 * b) | ((twice_end == 2 * b) & coin) | ((before == 0) & (b > 0)))
        return torch.zeros_like(prio, dtype=torch.bool).scatter_(1, order, take)

    @staticmethod
    def _span_budget(target: torch.Tensor, ulen: torch.Tensor, unit_start: torch.Tensor) -> torch.Tensor:
        """The budget units are taken up to (the crossing unit included), per row, in 32-bit fixed point,
        such that the tokens taken average ``target``; integer arithmetic only, so it is identical on every
        device. X: the row's candidate unit lengths in tokens.

        A target of at least E[X] is lowered by the expected overshoot of the crossing unit,
        (E[X²] - E[X]) / (2 E[X]) (the mean overshoot of a renewal process on the integers), and kept at
        1 or more. A smaller target (short rows of long words, where one span is longer than the
        row's budget) becomes target / E[X], below 1: rounded up with that probability, one unit is
        taken (E[X] tokens on average), else none. Lowering such a target by the overshoot left
        nothing: 64-token rows of 5-token words had 5% of their tokens masked by spans, not 15%.
        """
        x = torch.where(unit_start, ulen, 0)
        sx = x.sum(dim=1)
        sxx = (x * x).sum(dim=1)
        n = unit_start.sum(dim=1)
        large = (target - ((sxx - sx) << 32) // (2 * sx).clamp(min=1)).clamp(min=1 << 32)
        return torch.where(target * n < sx << 32, (target * n) // sx.clamp(min=1), large)

    def _tile_spans(
        self,
        sids: torch.Tensor,
        seed: int,
        epoch: int,
        slot_start: torch.Tensor,
        maskable: torch.Tensor,
        pos: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Propose spans by tiling each row's slot sequence; (member, unit_start) bool [B, L].

        Segment j is a gap followed by a span of whole-word slots, its lengths
        hashed from (row, j): positions come from a cumsum, so there is no
        sequential placement loop and spans never overlap. Spans are laid on the
        row's *maskable* words only: a separator (``</s>`` between the segments of
        a pair) is skipped, not a boundary, so a span that reaches it continues
        in the next segment as one unit (the separator itself is never masked),
        as ALBERT's n-gram reference does. Cutting spans there instead would
        shorten exactly the long spans and put lengths 8-10 ~10 % under the law
        in rows with separators.
        """
        assert self._len_table is not None and self._gap_table is not None and self._phase_table is not None
        B, L = slot_start.shape
        j = torch.arange(L + 1, device=pos.device)  # enough segments: each covers >= 1 slot
        span_len = _lookup(self._len_table, srl(self._hash(self._row_keys(sids, seed, epoch, S_LEN), j), 48))
        gap = _lookup(self._gap_table, srl(self._hash(self._row_keys(sids, seed, epoch, S_GAP), j), 48))
        # Segment 0 starts the tiling in its stationary state: inside a span (the rest of it) or a gap.
        phase = _lookup(self._phase_table, srl(mix(self._row_keys(sids, seed, epoch, S_PHASE)), 48))[:, None]
        gap = torch.where(j == 0, (-phase).clamp(min=0), gap)
        span_len = torch.where((j == 0) & (phase > 0), phase, span_len)
        end = torch.cumsum(gap + span_len, dim=1)  # exclusive, slot coordinates
        begin = end - span_len
        # Paint the disjoint spans onto slot space: +1 at each begin, -1 at each end
        # (clipped to the row), then a cumsum says which slots are covered.
        paint = torch.zeros(B, L + 1, dtype=torch.int64, device=pos.device)
        paint.scatter_add_(1, begin.clamp(0, L), torch.ones_like(begin))
        first_slot = paint[:, :L] > 0  # a span begins here (before clipping at slot 0 too)
        paint.scatter_add_(1, end.clamp(0, L), torch.full_like(end, -1))
        covered = torch.cumsum(paint[:, :L], dim=1) > 0
        # Slots are maskable words only: special tokens take no slot (each points at the word before).
        word_slot = slot_start & maskable
        slot = (torch.cumsum(word_slot.long(), dim=1) - 1).clamp_(min=0)
        member = maskable & covered.gather(1, slot)
        # A unit starts where a span begins (spans touch only when the gap law allows zero-length
        # gaps); inside a span only special tokens are not members, and they do not split it.
        unit_start = member & word_slot & first_slot.gather(1, slot)
        return member, unit_start
