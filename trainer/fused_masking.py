"""Dynamic masking as a few compiled kernels: the same masks as trainer.masking.Masker, bit for bit.

The reference Masker (trainer/masking.py) is a chain of small tensor ops: on
a GPU each op is a kernel launch, and a call of 136 (token) to 336 (span)
aten ops is bound by launches, not arithmetic. Here every step of it is
rewritten as what a compiler fuses: elementwise work (the keyed hash, table
lookups, the 80/10/10 choice) and per-row reductions. The ops that do not
fuse (sort / top-k, cumsum, cummax, scatter) become masked reductions over
a row's pairs of positions:

- the units taken in priority order (top-k, then a cumsum of their lengths):
  ``before[i] = sum of the lengths of the units whose priority is below unit i's``;
- a cumsum / cummax along the row: a sum / max over the positions ``j <= i``;
- a scatter-add / scatter-amax by unit: a sum / max over the positions of that unit.

Each pass over a row's pairs of positions is a kernel, so the passes are merged where their inputs
allow: a word's length is its distance to the next stop (a min over the row, which needs no cummax
first); for spans, the two cumsums are packed into one, a unit's length is summed over its span number
(known from the tiling) in the cummax's pass, and the budget's row totals are repeated at every
position so that they run in the pass of the priority order's sums. The units' priorities are
returned, so inductor stores them once instead of hashing them again for each pair.

That costs O(L^2) arithmetic per row (about 8 M simple ops for 32 x 512),
which a GPU does in microseconds and which never leaves the kernel as a
[B, L, L] tensor: each reduction is one loop. ``torch.compile`` (inductor:
C++ on CPU, Triton on CUDA) turns a scheme's call into a handful of kernels
(counted in the generated code: one C++ kernel per scheme, and 3 / 4 / 6 / 6
Triton kernels for token / whole word / span / n-gram with torch 2.13, which
``tests/test_triton_masking.py`` generates and runs on the CPU under Triton's
interpreter); every random choice is integer arithmetic, so the result equals
the reference bit for bit on every device.

The only difference from the reference: it breaks ties between two units of
one row whose 64-bit priorities are equal by position, where ``topk`` breaks
them as it likes (a chance of about L^2 / 2^65 per row).

``FusedMasker`` wraps a Masker with the same call. Every constant is a
tensor input and the shapes are dynamic, so one compiled function per scheme
serves every rate, seed, epoch, vocabulary and batch shape. Where compiling
is not possible (no C++ compiler, no Triton, an unsupported Python) the
first call falls back to the reference Masker, with one warning.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch

from schemas.config import MaskingConfig
from trainer.masking import (
    GOLDEN,
    IGNORE_INDEX,
    INT64_MAX,
    MUL1,
    MUL2,
    S_BUDGET,
    S_DECIDE,
    S_GAP,
    S_LEN,
    S_PHASE,
    S_PRIO,
    S_SPAN_DECIDE,
    STREAMS,
    Masker,
    signed,
    srl,
    stream_base,
    top32,
)

log = logging.getLogger("shardforge.masking")

# The reference's constants as int64 tensor operands (splitmix64's increment and multipliers).
_G, _MUL1, _MUL2 = signed(GOLDEN), signed(MUL1), signed(MUL2)
# Layout of the int64 constants tensor.
_RATE, _T_MASK, _T_RANDOM, _MASK_ID, _PAD_ID = range(5)
# Masks of the packed fields of the span tiling's reductions, and the longest row they hold (longer rows are
# masked by the reference ops): a count of segments (at most L) in 21 bits, a sum of segment lengths in 40
# (a gap and a span, each at most ~2^16 as the laws' tables have 2^16 bins: under 2^38 for L < 2^20).
_LOW21, _LOW40 = (1 << 21) - 1, (1 << 40) - 1
MAX_SPAN_ROW = 1 << 20


# ------------------------------------------------------------------ elementwise building blocks


def _mix(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finalizer, out of place (the reference's in-place form, for the compiler)."""
    z = (z ^ srl(z, 30)) * _MUL1
    z = (z ^ srl(z, 27)) * _MUL2
    return z ^ srl(z, 31)


def _row_key(sids: torch.Tensor, keys: torch.Tensor, stream: int) -> torch.Tensor:
    """int64 [B, 1]: a row's key for one stream (keys[stream] is stream_base(seed, epoch, stream))."""
    return _mix(sids * _G + keys[stream])[:, None]


def _hash(row_key: torch.Tensor, index: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Hash of (row, index) for index [N] or [B, N].

    The increment is read from ``keys[0]``, not written as a constant: with a constant, inductor folds
    ``arange * increment`` into an index expression, which its Triton code evaluates in 32-bit
    integers (a compile error in Triton's frontend, or a truncated hash)."""
    return _mix(row_key + (index + 1) * keys[0])


def _lookup(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return table[index]


# ------------------------------------------------------------------ reductions over pairs of positions


def _cumsum(x: torch.Tensor) -> torch.Tensor:
    """Inclusive cumsum along dim 1 of [B, N], as a reduction over j <= i."""
    n = x.shape[1]
    idx = torch.arange(n, device=x.device)
    upto = idx[None, :] <= idx[:, None]  # [i, j]: j <= i
    return torch.where(upto[None], x[:, None, :], 0).sum(2)


def _last_start(start: torch.Tensor) -> torch.Tensor:
    """For each position, the last position <= it where ``start`` holds, 0 when none (cummax, clamped)."""
    n = start.shape[1]
    idx = torch.arange(n, device=start.device)
    cand = torch.where(start[:, None, :] & (idx[None, :] <= idx[:, None])[None], idx[None, None, :], -1)
    return cand.amax(2).clamp(min=0)


def _next(stop: torch.Tensor) -> torch.Tensor:
    """For each position, the first position after it where ``stop`` holds, the row's length when none."""
    n = stop.shape[1]
    idx = torch.arange(n, device=stop.device)
    return torch.where(stop[:, None, :] & (idx[None, :] > idx[:, None])[None], idx[None, None, :], n).amin(2)


def _across_row(x: torch.Tensor) -> torch.Tensor:
    """[B, L] -> [B, L, L]: the row at every position, so that a reduction over the last dim gives each
    position its row's sum or max (a [B] total repeated, as one more reduction of the [B, L] x L loops the
    other sums run in)."""
    return x[:, None, :].expand(-1, x.shape[1], -1)


def _within_unit(unit: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """[B, L, L]: at (i, j), value[j] where unit[j] == unit[i], else 0 (reduced over j: a sum or a max
    over position i's unit)."""
    return torch.where(unit[:, None, :] == unit[:, :, None], value[:, None, :], 0)


def _before(prio: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """For each unit, the total length of the units ahead of it in priority order (the reference's
    exclusive cumsum of lengths in top-k order)."""
    return torch.where(prio[:, None, :] < prio[:, :, None], length[:, None, :], 0).sum(2)


# ------------------------------------------------------------------ the steps of a call


def _common(ids: torch.Tensor, sids: torch.Tensor, keys: torch.Tensor, consts: torch.Tensor,
            is_special: torch.Tensor, wide: bool = False) -> tuple[torch.Tensor, ...]:
    """(special, maskable, the row's target in 32-bit fixed point [B, 1] ([B, L], every column the row's,
    when ``wide``), its rounding uniform [B, 1])."""
    special = _lookup(is_special, ids)
    maskable = ~special
    n_maskable = _across_row(maskable.long()).sum(2) if wide else maskable.sum(1, keepdim=True)
    target = n_maskable * consts[_RATE]
    u_budget = top32(_mix(_row_key(sids, keys, S_BUDGET)))
    return special, maskable, target, u_budget


def _slot_starts(ids: torch.Tensor, is_special: torch.Tensor, word_starts: torch.Tensor,
                 consts: torch.Tensor) -> torch.Tensor:
    """A slot (a whole word or one special token) begins here."""
    pos = torch.arange(ids.shape[1], device=ids.device)
    prev_special = (pos == 0) | _lookup(is_special, torch.gather(ids, 1, (pos - 1).clamp(min=0).expand_as(ids)))
    return (ids != consts[_PAD_ID]) & (_lookup(word_starts, ids) | prev_special)


def _take(before: torch.Tensor, length: torch.Tensor, budget: torch.Tensor, prio: torch.Tensor,
          crossing: bool) -> torch.Tensor:
    """The reference's rule for taking a unit, from its place in the priority order."""
    if crossing:
        return (length > 0) & (before < budget)
    twice_end = 2 * before + length
    return (length > 0) & ((twice_end < 2 * budget) | ((twice_end == 2 * budget) & ((prio & 1) == 1))
                           | ((before == 0) & (budget > 0)))


def _tile(sids: torch.Tensor, keys: torch.Tensor, len_table: torch.Tensor, gap_table: torch.Tensor,
          phase_table: torch.Tensor, word_slot: torch.Tensor, maskable: torch.Tensor,
          pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(member, unit_start, unit): the reference's span tiling (Masker._tile_spans) as reductions.

    ``unit`` numbers the spans: for a member token, how many spans begin at or before its slot, the same
    for every member of one span and different between spans (it means nothing off the members).
    Segment j is numbered by position j: L segments cover every slot, as each covers at least one (the
    reference tiles L + 1; the last begins past every slot)."""
    L = word_slot.shape[1]
    span_len = _lookup(len_table, srl(_hash(_row_key(sids, keys, S_LEN), pos, keys), 48))
    gap = _lookup(gap_table, srl(_hash(_row_key(sids, keys, S_GAP), pos, keys), 48))
    phase = _lookup(phase_table, srl(_mix(_row_key(sids, keys, S_PHASE)), 48))  # [B, 1]
    gap = torch.where(pos == 0, (-phase).clamp(min=0), gap)
    span_len = torch.where((pos == 0) & (phase > 0), phase, span_len)
    # One cumsum for two: the segments' ends (the low 40 bits) and the word slots up to each token (the high
    # bits), one reduction instead of two.
    both = _cumsum(gap + span_len + (word_slot.long() << 40))
    end = both & _LOW40
    upto = both >> 40
    slot = (upto - 1).clamp(min=0)
    word_slot = upto > torch.where(pos == 0, 0, torch.gather(upto, 1, (pos - 1).clamp(min=0).expand_as(upto)))
    begin = (end - span_len).clamp(0, L)
    end = end.clamp(0, L)
    # One reduction for three counts over the segments, 21 bits each: those beginning at or before each
    # token's slot, those ending there (their difference: the spans covering it, at most one) and those
    # beginning at that slot.
    s, b, e = slot[:, :, None], begin[:, None, :], end[:, None, :]
    counts = ((b <= s).long() + ((e <= s).long() << 21) + ((b == s).long() << 42)).sum(2)
    begun = counts & _LOW21
    covered, first = begun - ((counts >> 21) & _LOW21) > 0, (counts >> 42) > 0
    member = maskable & covered
    return member, member & word_slot & first, begun


def _replace(ids: torch.Tensor, sids: torch.Tensor, keys: torch.Tensor, consts: torch.Tensor,
             allowed: torch.Tensor, selected: torch.Tensor, ustart: torch.Tensor | None,
             pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(masked ids, labels): <mask> / a random token / kept, as the reference decides."""
    h_dec = _hash(_row_key(sids, keys, S_DECIDE), pos, keys)
    u_dec = top32(h_dec) if ustart is None else top32(_hash(_row_key(sids, keys, S_SPAN_DECIDE), ustart, keys))
    rand_ids = _lookup(allowed, (h_dec & 0x7FFFFFFF) % allowed.shape[0])
    out = torch.where(selected & (u_dec < consts[_T_MASK]), consts[_MASK_ID], ids)
    use_rand = selected & (u_dec >= consts[_T_MASK]) & (u_dec < consts[_T_RANDOM])
    out = torch.where(use_rand, rand_ids, out)
    return out, torch.where(selected, ids, IGNORE_INDEX)


def _select(sids: torch.Tensor, keys: torch.Tensor, budget: torch.Tensor, member: torch.Tensor,
            unit_start: torch.Tensor, ustart: torch.Tensor, ulen: torch.Tensor, pos: torch.Tensor,
            crossing: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(selected, prio): the member tokens of the units taken in priority order up to the budget
    (Masker._select), and the units' priorities."""
    prio = torch.where(unit_start, _hash(_row_key(sids, keys, S_PRIO), pos, keys), INT64_MAX)
    chosen = _take(_before(prio, ulen), ulen, budget, prio, crossing=crossing)
    return member & torch.gather(chosen, 1, ustart), prio


def _span_budget(target: torch.Tensor, u_budget: torch.Tensor, unit_start: torch.Tensor,
                 ulen: torch.Tensor) -> torch.Tensor:
    """The budget that averages the target, the crossing unit taken whole (Masker._span_budget), from
    the units' lengths at their first positions (0 elsewhere): [B, L], every column the row's. Its sums
    are taken at each position, so they run in the loop of the priority order's sums (one kernel), not
    in a kernel of their own."""
    sx, sxx, n = _across_row(ulen).sum(2), _across_row(ulen * ulen).sum(2), _across_row(unit_start.long()).sum(2)
    large = (target - ((sxx - sx) << 32) // (2 * sx).clamp(min=1)).clamp(min=1 << 32)
    target = torch.where(target * n < sx << 32, (target * n) // sx.clamp(min=1), large)
    return (target + u_budget) >> 32


# ------------------------------------------------------------------ one function per scheme


def mask_token(ids, sids, keys, consts, is_special, allowed):  # noqa: ANN001, ANN201 - compiled
    """RoBERTa's token masking: (input_ids, labels)."""
    pos = torch.arange(ids.shape[1], device=ids.device)
    special, maskable, target, u_budget = _common(ids, sids, keys, consts, is_special)
    budget = (target + u_budget) >> 32
    prio = torch.where(maskable, _hash(_row_key(sids, keys, S_PRIO), pos, keys), INT64_MAX)
    length = maskable.long()
    selected = _take(_before(prio, length), length, budget, prio, crossing=False)
    return _replace(ids, sids, keys, consts, allowed, selected, None, pos)


def mask_whole_word(ids, sids, keys, consts, is_special, allowed, word_starts):  # noqa: ANN001, ANN201
    """Whole-word masking: (input_ids, labels, the units' priorities, as mask_span)."""
    pos = torch.arange(ids.shape[1], device=ids.device)
    special, maskable, target, u_budget = _common(ids, sids, keys, consts, is_special)
    unit_start = maskable & _slot_starts(ids, is_special, word_starts, consts)
    # A word's maskable pieces run from its first up to the next word or special token (a token after a
    # special starts a slot), so its length is the distance to that stop: a min over the row that does
    # not wait for the cummax finding each piece's first position (a scatter-add by that position would).
    ustart = _last_start(unit_start)
    ulen = torch.where(unit_start, _next(unit_start | ~maskable) - pos, 0)
    budget = (target + u_budget) >> 32
    selected, prio = _select(sids, keys, budget, maskable, unit_start, ustart, ulen, pos, crossing=False)
    return *_replace(ids, sids, keys, consts, allowed, selected, None, pos), prio


def _spans(ids, sids, keys, consts, is_special, allowed, word_starts, len_table, gap_table, phase_table,
           per_span: bool):  # noqa: ANN001, ANN202
    pos = torch.arange(ids.shape[1], device=ids.device)
    special, maskable, target, u_budget = _common(ids, sids, keys, consts, is_special, wide=True)
    word_slot = maskable & _slot_starts(ids, is_special, word_starts, consts)
    member, unit_start, unit = _tile(sids, keys, len_table, gap_table, phase_table, word_slot, maskable, pos)
    # A unit's length from its number, not from its first position: the two reductions over the row
    # (its first position, its length) then read the same inputs and run as one loop. The length is kept
    # at the unit's first position only (0 elsewhere), where the reference reads it.
    ustart = _last_start(unit_start)
    ulen = torch.where(unit_start, _within_unit(unit, member.long()).sum(2), 0)
    budget = _span_budget(target, u_budget, unit_start, ulen)
    selected, prio = _select(sids, keys, budget, member, unit_start, ustart, ulen, pos, crossing=True)
    out, labels = _replace(ids, sids, keys, consts, allowed, selected, ustart if per_span else None, pos)
    return out, labels, selected, member, ustart, unit, pos, prio


def mask_span(ids, sids, keys, consts, is_special, allowed, word_starts, len_table, gap_table,  # noqa: ANN001
              phase_table):  # noqa: ANN001, ANN201
    """SpanBERT's spans: (input_ids, labels, span_left, span_right, the units' priorities).

    The priorities are returned (FusedMasker drops them) so that inductor stores them: read only inside
    the pairwise reduction, they would be inlined there and hashed again for each pair of positions."""
    out, labels, selected, member, ustart, unit, pos, prio = _spans(
        ids, sids, keys, consts, is_special, allowed, word_starts, len_table, gap_table, phase_table,
        per_span=True)
    n_tokens = _across_row(torch.where(ids != consts[_PAD_ID], pos + 1, 0)).amax(2)
    last = _within_unit(unit, torch.where(member, pos, 0)).amax(2)  # at a selected token: its span's last member
    left = (ustart - 1).clamp(min=0)
    right = torch.minimum(last + 1, (n_tokens - 1).clamp(min=0))
    return out, labels, torch.where(selected, left, -1), torch.where(selected, right, -1), prio


def mask_ngram(ids, sids, keys, consts, is_special, allowed, word_starts, len_table, gap_table,  # noqa: ANN001
               phase_table):  # noqa: ANN001, ANN201
    """ALBERT's n-grams: (input_ids, labels, the units' priorities, as mask_span)."""
    out, labels, *_, prio = _spans(ids, sids, keys, consts, is_special, allowed, word_starts, len_table, gap_table,
                                   phase_table, per_span=False)
    return out, labels, prio


SCHEMES: dict[str, Callable[..., Any]] = {"token": mask_token, "whole_word": mask_whole_word, "span": mask_span,
                                          "ngram": mask_ngram}
OUTPUTS = {"token": ("input_ids", "labels"), "whole_word": ("input_ids", "labels"),
           "span": ("input_ids", "labels", "span_left", "span_right"), "ngram": ("input_ids", "labels")}

# One compiled function per scheme for the whole process: every Masker of a scheme shares it.
_COMPILED: dict[str, Callable[..., Any]] = {}


def compiled(scheme: str) -> Callable[..., Any]:
    """The scheme's function under torch.compile (dynamic shapes: no recompile per batch shape)."""
    if scheme not in _COMPILED:
        _COMPILED[scheme] = torch.compile(SCHEMES[scheme], dynamic=True, fullgraph=True)
    return _COMPILED[scheme]


def _static(t: torch.Tensor) -> torch.Tensor:
    """t with its sizes static for the compiler: under ``dynamic=True`` a table whose size equals the
    batch's (5 constants, a batch of 5 rows) would otherwise tie the two and recompile at the next shape."""
    torch._dynamo.mark_static(t)
    return t


class FusedMasker:
    """A Masker's masks from one compiled function per scheme: same call, same outputs, few kernels.

    ``compile=False`` runs the same functions eagerly (every reduction then
    materializes [B, L, L]: a test reference, not a fast path). The first
    compiled call that fails (no compiler for this device) switches this
    masker to the reference Masker for good, with one warning.
    """

    def __init__(self, masker: Masker, compile: bool = True) -> None:
        self.reference = masker
        self.cfg = masker.cfg
        # Compiled at the first call (torch.compile imports dynamo: seconds), eager form when compile=False.
        self.fn: Callable[..., Any] | None = None if compile else SCHEMES[masker.cfg.scheme]
        self.fallback: str | None = None  # why the reference Masker runs instead, once it does
        self._keys: dict[tuple[int, int, str], torch.Tensor] = {}
        self._on: tuple[torch.device, tuple] | None = None

    def to(self, device: torch.device | str) -> FusedMasker:
        """Move the reference masker's tables (in place); returns self."""
        self.reference.to(device)
        self._on = None
        return self

    @property
    def pad_id(self) -> int:
        return self.reference.pad_id

    def prediction_bound(self, input_ids: torch.Tensor) -> int:
        """Masker.prediction_bound: the masks are the same."""
        return self.reference.prediction_bound(input_ids)

    @property
    def check_ids(self) -> bool:
        return self.reference.check_ids

    @check_ids.setter
    def check_ids(self, value: bool) -> None:
        self.reference.check_ids = value

    def _inputs(self, device: torch.device) -> tuple:
        """(consts, tables...) on the device, built once per device."""
        if self._on is None or self._on[0] != device:
            t = self.reference.tables()
            r = self.reference
            consts = torch.tensor([t.rate, t.t_mask, t.t_random, r.mask_id, r.pad_id],
                                  dtype=torch.int64, device=device)
            tables: tuple = (t.is_special, t.allowed)
            if self.cfg.scheme != "token":
                tables += (t.word_starts,)
            if self.cfg.scheme in ("span", "ngram"):
                tables += (t.len_table, t.gap_table, t.phase_table)
            self._on = (device, tuple(_static(x) for x in (consts, *tables)))
        return self._on[1]

    def _stream_keys(self, seed: int, epoch: int, device: torch.device) -> torch.Tensor:
        """int64 [8]: splitmix64's increment, then stream_base of streams 1..7; copied to the device once per
        (seed, epoch)."""
        key = (seed, epoch, str(device))
        if key not in self._keys:
            if len(self._keys) > 8:
                self._keys.clear()
            bases = [_G] + [stream_base(seed, epoch, s) for s in range(1, STREAMS + 1)]
            self._keys[key] = _static(torch.tensor(bases, dtype=torch.int64, device=device))
        return self._keys[key]

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, sample_ids: torch.Tensor, epoch: int,
                 seed: int) -> dict[str, torch.Tensor]:
        """The reference Masker's outputs for this batch (Masker.__call__)."""
        if self.fallback is not None:
            return self.reference(input_ids, sample_ids, epoch=epoch, seed=seed)
        ids, sids = self.reference.checked(input_ids, sample_ids)
        if self.cfg.scheme in ("span", "ngram") and ids.shape[1] >= MAX_SPAN_ROW:
            return self.reference(input_ids, sample_ids, epoch=epoch, seed=seed)
        args = [ids, sids, self._stream_keys(int(seed), int(epoch), ids.device), *self._inputs(ids.device)]
        try:
            if self.fn is None:
                self.fn = compiled(self.cfg.scheme)
            outs = self.fn(*args)
        except Exception as e:  # compiling needs a C++ compiler (CPU) or Triton (CUDA)
            self.fallback = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            log.warning("fused masking unavailable (%s): masking with the reference ops instead", self.fallback)
            return self.reference(input_ids, sample_ids, epoch=epoch, seed=seed)
        names = OUTPUTS[self.cfg.scheme]
        return dict(zip(names, outs[:len(names)], strict=True))


MaskingImpl = Literal["auto", "fused", "reference"]


def make_masker(cfg: MaskingConfig, vocab_size: int, special_ids: Iterable[int], mask_id: int, pad_id: int,
                word_starts: torch.Tensor | None, *, device: torch.device,
                impl: MaskingImpl = "auto") -> Masker | FusedMasker:
    """The trainer's masker on ``device``: the reference ops or the compiled ones (the same masks).

    ``auto``: fused on CUDA, where a call of 136-336 small ops is bound by kernel launches; the
    reference on CPU, where one compile costs ~20-30 s per scheme and the fused form's O(L^2)
    reductions do not beat the reference's sorts and scans. A fused masker whose compile fails
    (no Triton, no C++ compiler) masks with the reference ops, with one warning.
    """
    if impl not in ("auto", "fused", "reference"):
        raise ValueError(f"masking_impl must be auto, fused or reference, got {impl!r}")
    masker = Masker(cfg, vocab_size, special_ids, mask_id=mask_id, pad_id=pad_id, word_starts=word_starts).to(device)
    fused = impl == "fused" or impl == "auto" and device.type == "cuda"
    return FusedMasker(masker).to(device) if fused else masker


_LAUNCH = re.compile(r"^\s+(?:(?P<kernel>(?:cpp|triton)_\w+)(?:\.run)?|(?P<extern>extern_kernels\.\w+|aten\.\w+"
                     r"|torch\.ops\.\w+\.\w+))\(", re.M)


def launches(code: str) -> tuple[list[str], list[str]]:
    """(generated kernels, extern / aten calls) that inductor's output code launches per call, in order.

    Read from the module's ``call`` (what ``torch._inductor.utils.run_and_get_code`` returns): a C++
    kernel is ``cpp_fused_...(``, a Triton one ``triton_..._N.run(``; anything else that runs is an
    extern kernel (``extern_kernels.mm``) or an aten fallback. Allocations are not launches.
    """
    start = code.find("def call(")
    body = code[start:] if start >= 0 else code
    kernels, extern = [], []
    for m in _LAUNCH.finditer(body):
        (kernels if m.group("kernel") else extern).append(m.group("kernel") or m.group("extern"))
    return kernels, extern
