"""The unpadded path's CPU kernels (``padded``, ``dense``, ``nested``) give the masked path's losses and
gradients, the bucketing filler included, and ``plan`` picks ``padded`` where B·L² <= T²."""

from __future__ import annotations

import pytest
import torch
from test_fastpath import assert_same, batch, inputs_for, loss_and_grads, model

from trainer.attention import attention_inputs, pick_backend, plan, unpad

CPU = torch.device("cpu")


@pytest.mark.parametrize("bucket", [0, 16], ids=["exact", "with a filler"])
@pytest.mark.parametrize("backend", ["padded", "dense", "nested"])
@pytest.mark.parametrize("variant", ["roberta", "albert_sbo_nsp"])
def test_every_cpu_kernel_of_the_unpadded_path_matches_the_masked_path(variant: str, backend: str,
                                                                       bucket: int) -> None:
    b = batch()
    m = model(variant)
    kw = inputs_for(m, b)
    plain = loss_and_grads(m, kw)
    fast_kw = attention_inputs(kw, b["attention_mask"], CPU, bucket=bucket)
    layout = fast_kw["unpadded"]
    assert (layout.real_tokens >= 0) == bool(bucket) and layout.rows == b["input_ids"].shape[0]
    fast_kw["unpadded"] = layout._replace(backend=backend)
    assert_same(plain, loss_and_grads(m, fast_kw))


def test_plan_picks_padded_where_it_computes_fewer_scores() -> None:
    heads, head_dim = 4, 16

    def picked(rows: int, length: int, real: list[int]) -> str:
        mask = (torch.arange(length)[None, :] < torch.tensor(real)[:, None]).long()
        kw = attention_inputs({"input_ids": torch.zeros(rows, length, dtype=torch.long), "attention_mask": mask},
                              mask, CPU)
        return plan(kw, heads, head_dim, 0.0, CPU, torch.float32)[1].backend

    assert picked(40, 128, [75] * 40) == "padded"  # 40 x 128² = 655k scores against 3,000² = 9M
    assert picked(4, 512, [500, 10, 10, 10]) == "dense"  # 4 x 512² = 1M against 530² = 281k
    # 64 rows padded to 2,048 for 5,000 tokens: more scores padded, and too many tokens for a [T, T] mask.
    assert pick_backend("unpadded", CPU, torch.float32, heads, head_dim, 2048, 0.0, packed_tokens=5000,
                        rows=64) == "nested"


def test_the_cuda_layout_leaves_out_what_only_the_cpu_kernels_read() -> None:
    """On CUDA the unpadded path runs flash or efficient, which read cu_seqlens: the layout carries no
    per-token sequence ids there (one tensor fewer to build and copy per batch)."""
    mask = (torch.arange(32)[None, :] < torch.tensor([32, 7, 20, 1])[:, None]).long()
    full, lean = unpad(mask, 16), unpad(mask, 16, doc=False)
    assert lean.doc is None and full.doc is not None
    for a, b in zip(full._replace(doc=None), lean, strict=True):
        assert (a == b).all() if isinstance(a, torch.Tensor) else a == b
    assert full.doc.tolist() == [i for i, n in enumerate([32, 7, 20, 1, 4]) for _ in range(n)]
    cuda = torch.device("cuda", 0)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for want in ("auto", "flash", "efficient"):
            # an fp32 pick never asks the device; the half-precision ones do when there is one
            if dtype != torch.float32 and not torch.cuda.is_available():
                continue
            assert pick_backend("unpadded", cuda, dtype, 4, 16, 64, 0.0, want, packed_tokens=64,
                                rows=4) in ("flash", "efficient")
