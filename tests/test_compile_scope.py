"""``compile_scope: layers`` (trainer/precision.py): regional compilation, each block and the LM head compiled
in place instead of the whole model.

On CPU with dynamo + AOTAutograd (the graphs inductor would lower; ``aot_eager``): the same losses and
gradients as eager on the masked, no-mask and unpadded paths; one compile serves every layer (the graphs do
not grow with the layer count); the model stays itself (plain state_dict keys) and counts as compiled, so
the loop buckets its batches' shapes. Inductor's own code, whole model against by layers, with its compile
times: benchmarks/bench_compile_scope.py (CPU or GPU).
"""

from __future__ import annotations

import pytest
import torch
from test_fastpath import assert_same, batch, inputs_for, loss_and_grads, model

from trainer.attention import attention_inputs
from trainer.precision import compiled_regions, is_compiled, maybe_compile

CPU = torch.device("cpu")


def graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def paths(m: torch.nn.Module) -> list[tuple[str, dict]]:
    """The model's inputs on each attention path: ragged rows masked and unpadded, full rows without a mask."""
    ragged, full = batch(), batch(lengths=(12, 12, 12))
    out = []
    for b, how in ((ragged, "masked"), (ragged, "unpadded"), (full, "no mask")):
        kw = inputs_for(m, b)
        if how != "masked":
            kw = attention_inputs(kw, b["attention_mask"], CPU)
            assert ("unpadded" in kw) == (how == "unpadded")
        out.append((how, kw))
    return out


@pytest.mark.parametrize("variant", ["albert_sbo_nsp"])  # a shared block, factorized embeddings, every head
def test_layers_scope_matches_eager_on_every_path(variant: str) -> None:
    torch._dynamo.reset()
    eager = model(variant)
    regional = maybe_compile(model(variant), True, CPU, backend="aot_eager", scope="layers")
    # is_compiled is the loop's test (trainer.batch.prepare): bucketed shapes, as for a whole-model compile
    assert regional is not eager and not hasattr(regional, "_orig_mod") and is_compiled(regional)
    assert regional.state_dict().keys() == eager.state_dict().keys()
    before = graphs()
    for _, kw in paths(eager):
        assert_same(loss_and_grads(eager, kw), loss_and_grads(regional, kw), atol=2e-5, rtol=1e-4)
    assert graphs() > before  # really compiled, not silently eager


def test_one_compile_serves_every_layer() -> None:
    """Two layers or five: the same graphs (the block's code is compiled once and reused by each layer)."""
    counts = []
    for layers in (2, 5):
        torch._dynamo.reset()
        from torch._dynamo.utils import counters

        counters.clear()
        m = maybe_compile(model("roberta", layers=layers), True, CPU, backend="aot_eager", scope="layers")
        assert len(compiled_regions(m)) == 2 * layers + 1
        _, kw = paths(m)[2]  # full rows, no mask
        loss_and_grads(m, kw)
        counts.append(graphs())
    assert counts[0] == counts[1], counts


def test_shared_blocks_are_compiled_once_and_the_scope_is_checked() -> None:
    albert = model("albert")  # share: all, one attention and one feed-forward block for every layer
    assert len(compiled_regions(albert)) == 3
    assert maybe_compile(albert, False, CPU, scope="layers") is albert and not is_compiled(albert)
    with pytest.raises(ValueError, match="compile_scope"):
        maybe_compile(albert, True, CPU, scope="blocks")
