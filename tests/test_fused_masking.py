"""Tests for trainer/fused_masking.py: the same masks as trainer.masking.Masker, bit for bit, in few kernels.

The eager form of the fused functions (``compile=False``: the same code, every reduction a [B, L, L]
tensor) is checked against the reference over every scheme, several rates, seeds, epochs and ragged
batches: that is where a rewrite would go wrong, and it runs in seconds. The compiled form is checked
as the GPU's Triton code under Triton's interpreter (tests/test_triton_masking.py: every scheme, several
shapes and rates with one compile, the kernels counted) and, in inductor's C++, by the GPU benchmark's dry
run (tests/test_fastpath.py: token compiled, its kernels counted, its masks compared). The CUDA tests here
run on a GPU (benchmarks/gpu.sh).
"""

from __future__ import annotations

import re

import pytest
import torch
from test_masking import SPECIALS, V, make_batch, masker, word_table

from schemas import MASK_ID, PAD_ID
from schemas.config import MaskingConfig
from trainer.fused_masking import FusedMasker, launches, make_masker
from trainer.masking import Masker

SCHEMES = ["token", "whole_word", "span", "ngram"]
CUDA = torch.cuda.is_available()


def ragged(gen: torch.Generator, B: int, L: int, separator_every: int = 0) -> torch.Tensor:
    """Rows `<s> ... </s>` of random lengths (an empty row and a 2-token row among them), right-padded to L."""
    lengths = torch.randint(2, L + 1, (B,), generator=gen).tolist()
    lengths[0] = L
    if B > 2:
        lengths[1], lengths[2] = 0, 2
    return make_batch(lengths, L, gen, separator_every)


def assert_same(ref: dict[str, torch.Tensor], got: dict[str, torch.Tensor], what: str) -> None:
    assert ref.keys() == got.keys(), what
    for k in ref:
        assert ref[k].dtype == got[k].dtype and torch.equal(ref[k], got[k]), f"{what}: {k} differs"


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("rate", [0.05, 0.15, 0.4])
def test_fused_functions_equal_the_reference(scheme: str, rate: float) -> None:
    gen = torch.Generator().manual_seed(int(rate * 100) + len(scheme))
    ws = word_table(gen)
    ref = masker(scheme, ws, rate=rate)
    fused = FusedMasker(ref, compile=False)
    for B, L, sep in [(6, 48, 0), (4, 64, 11), (1, 17, 0), (9, 8, 3)]:
        ids = ragged(gen, B, L, sep)
        sids = torch.randint(0, 2**40, (B,), generator=gen)
        for seed, epoch in [(0, 0), (7, 3), (123456789, 41)]:
            assert_same(ref(ids, sids, epoch=epoch, seed=seed), fused(ids, sids, epoch=epoch, seed=seed),
                        f"{scheme} rate {rate} {B}x{L} seed {seed} epoch {epoch}")


@pytest.mark.parametrize("scheme", ["span", "ngram"])
def test_fused_span_laws_with_other_parameters(scheme: str) -> None:
    gen = torch.Generator().manual_seed(5)
    ws = word_table(gen)
    kw = {"span_p": 0.5, "span_max": 4} if scheme == "span" else {"ngram_max": 5}
    ref = masker(scheme, ws, rate=0.3, mask_prob=0.5, random_prob=0.3, **kw)
    fused = FusedMasker(ref, compile=False)
    ids = ragged(gen, 5, 96, separator_every=13)
    sids = torch.arange(5) * 1000
    assert_same(ref(ids, sids, epoch=2, seed=9), fused(ids, sids, epoch=2, seed=9), scheme)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_fused_functions_equal_the_reference_with_specials_and_padding_anywhere(scheme: str) -> None:
    """Rows the packer never writes (special tokens and padding at any position, words of one piece or of
    many), other laws and rates: the same masks."""
    gen = torch.Generator().manual_seed(len(scheme) + 31)
    for trial in range(12):
        pick = torch.randint(0, 1 << 30, (8,), generator=gen).tolist()
        ws = word_table(gen, start_share=[0.05, 0.3, 0.6, 0.95][pick[0] % 4])
        kw = {"span": {"span_p": [0.05, 0.2, 0.9][pick[1] % 3], "span_max": [1, 3, 10, 30][pick[2] % 4]},
              "ngram": {"ngram_max": [1, 3, 6][pick[1] % 3]}}.get(scheme, {})
        ref = masker(scheme, ws, rate=[0.01, 0.15, 0.5, 0.8][pick[3] % 4], **kw)
        B, L = 1 + pick[4] % 5, 1 + pick[5] % 90
        ids = torch.randint(len(SPECIALS), V, (B, L), generator=gen)
        special = torch.tensor(SPECIALS)[torch.randint(0, len(SPECIALS), (B, L), generator=gen)]
        ids = torch.where(torch.rand(B, L, generator=gen) < [0.0, 0.05, 0.3][pick[6] % 3], special, ids)
        for row, cut in enumerate(torch.randint(0, L + 1, (B,), generator=gen).tolist()):
            if (pick[7] >> row) & 1:
                ids[row, cut:] = PAD_ID
        sids = torch.randint(0, 2**40, (B,), generator=gen)
        assert_same(ref(ids, sids, epoch=trial, seed=pick[0]),
                    FusedMasker(ref, compile=False)(ids, sids, epoch=trial, seed=pick[0]),
                    f"{scheme} trial {trial} {B}x{L}")


def test_fused_masker_keeps_the_reference_interface() -> None:
    gen = torch.Generator().manual_seed(1)
    ref = masker("whole_word", word_table(gen))
    fused = FusedMasker(ref, compile=False)
    ids = ragged(gen, 4, 32)
    assert fused.pad_id == ref.pad_id and fused.prediction_bound(ids) == ref.prediction_bound(ids)
    fused.check_ids = False
    assert ref.check_ids is False
    with pytest.raises(ValueError, match="input_ids must be"):
        fused(ids[0], torch.arange(1), epoch=0, seed=0)


def test_a_failing_compile_falls_back_to_the_reference(caplog) -> None:
    gen = torch.Generator().manual_seed(2)
    ref = masker("token", word_table(gen))
    fused = FusedMasker(ref, compile=False)

    def broken(*args: object) -> None:
        raise RuntimeError("no C++ compiler\nmore")

    fused.fn = broken
    ids, sids = ragged(gen, 3, 20), torch.arange(3)
    assert_same(ref(ids, sids, epoch=0, seed=0), fused(ids, sids, epoch=0, seed=0), "fallback")
    assert fused.fallback == "RuntimeError: no C++ compiler"
    assert "fused masking unavailable" in caplog.text
    assert_same(ref(ids, sids, epoch=1, seed=0), fused(ids, sids, epoch=1, seed=0), "after the fallback")


@pytest.mark.parametrize("scheme", ["span", "ngram"])
def test_rows_past_the_packed_fields_are_masked_by_the_reference(scheme: str, monkeypatch) -> None:
    """Rows too long for the span tiling's packed counts go to the reference ops, every call, no fallback."""
    gen = torch.Generator().manual_seed(4)
    ref = masker(scheme, word_table(gen))
    fused = FusedMasker(ref, compile=False)
    monkeypatch.setattr("trainer.fused_masking.MAX_SPAN_ROW", 24)
    ids, sids = ragged(gen, 3, 24, separator_every=5), torch.arange(3)
    real, calls = fused.fn, []
    fused.fn = lambda *a: calls.append(a) or real(*a)  # counts the fused calls
    assert_same(ref(ids, sids, epoch=1, seed=2), fused(ids, sids, epoch=1, seed=2), "24 columns: reference")
    assert not calls and fused.fallback is None
    short = ids[:, :23]
    assert_same(ref(short, sids, epoch=1, seed=2), fused(short, sids, epoch=1, seed=2), "23 columns: fused")
    assert len(calls) == 1


def test_make_masker_follows_the_setting() -> None:
    gen = torch.Generator().manual_seed(3)
    ws = word_table(gen)
    args = (MaskingConfig(scheme="span"), V, SPECIALS, MASK_ID, PAD_ID, ws)
    cpu = torch.device("cpu")
    assert type(make_masker(*args, device=cpu, impl="auto")) is Masker  # CPU: compiling costs more than it saves
    assert type(make_masker(*args, device=cpu, impl="reference")) is Masker
    assert type(make_masker(*args, device=cpu, impl="fused")) is FusedMasker
    with pytest.raises(ValueError, match="masking_impl"):
        make_masker(*args, device=cpu, impl="triton")


def test_launches_reads_inductor_output_code() -> None:
    code = "def call(self, args):\n    buf0 = empty_strided_cpu((4, ), (1, ), torch.int64)\n" \
           "    cpp_fused_add_0(arg0_1, buf0)\n    extern_kernels.mm(a, b, out=c)\n" \
           "    triton_poi_fused_mul_1.run(buf0, 4, stream=stream0)\n    return (buf0, )\n"
    kernels, extern = launches(code)
    assert kernels == ["cpp_fused_add_0", "triton_poi_fused_mul_1"] and extern == ["extern_kernels.mm"]
    assert re.search("cpp_fused", code)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("scheme", SCHEMES)
def test_cuda_fused_masking_matches_cpu_reference(scheme: str) -> None:
    """On a GPU (Triton kernels): the CPU reference's masks, bit for bit, in at most 10 kernels a call."""
    from torch._inductor.utils import run_and_get_code

    gen = torch.Generator().manual_seed(13)
    ws = word_table(gen)
    ref = masker(scheme, ws)
    fused = FusedMasker(masker(scheme, ws)).to("cuda")
    ids, sids = ragged(gen, 32, 512, separator_every=97), torch.arange(32) * 7919
    got, codes = run_and_get_code(lambda: fused(ids.cuda(), sids.cuda(), epoch=1, seed=5))
    assert fused.fallback is None, fused.fallback
    assert_same(ref(ids, sids, epoch=1, seed=5), {k: v.cpu() for k, v in got.items()}, "cuda")
    kernels, extern = launches(codes[0])
    assert 1 <= len(kernels) <= 10 and not extern, (kernels, extern)
