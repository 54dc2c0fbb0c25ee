"""A compiled model on token-budget (DOC-SENTENCES) batches compiles a bounded number of times.

Every such batch has its own shape: a different number of rows, of lengths, of real tokens.
``trainer.batch.prepare`` pads a compiled model's rows to a multiple of ``ROW_BUCKET`` columns,
rounds the unpadded path's packed tokens to a multiple of ``TOKEN_BUCKET`` and marks the varying
sizes dynamic, so dynamo compiles the step once for the first shape and once more, dynamic, for
the rest, whatever the batches. Counted here with a backend that only counts the graphs dynamo
hands it (what inductor would compile), forward and backward run as the trainer runs them, and
with dynamo's own fallback (``automatic_dynamic_shapes``: a size that changed is made dynamic on
the next compile) switched off: it cannot make a Python int dynamic (the longest sequence, which
the CUDA varlen kernel takes), so the bound must come from the buckets and marks, and without them
every batch compiles anew.
"""

from __future__ import annotations

import random

import pytest
import torch
from test_mask_ahead import masker
from test_step_levers import encoder, host_batch

import trainer.batch as batch_mod
from trainer.batch import forward, prepare
from trainer.precision import Precision

CPU = torch.device("cpu")


def doc_sentences_batches(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Token-budget batches: 3-9 rows of 8-120 tokens each, padded to their longest row (as the loader)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        lengths = [rng.randint(8, 120) for _ in range(rng.randint(3, 9))]
        out.append(host_batch(lengths, max(lengths), seed=rng.randrange(1000)))
    return out


def compiles(model_kw: dict, batches: list[dict[str, torch.Tensor]], bucketed: bool = True) -> int:
    """How many graphs dynamo compiles for the forward over ``batches`` (backward run too)."""
    torch._dynamo.reset()
    graphs: list[torch.fx.GraphModule] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(gm)
        return gm.forward

    model = torch.compile(encoder(**model_kw), backend=counting)
    m = masker("token")
    prec = Precision("fp32", CPU)
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False, cache_size_limit=64):
        for i, host in enumerate(batches):
            batch = prepare(model, m, host, CPU, epoch=0, seed=i)
            assert batch.bucketed == bucketed
            forward(model, batch, CPU, prec.autocast)["loss"].backward()
    return len(graphs)


@pytest.mark.parametrize("model_kw", [{}, {"span_boundary": True}], ids=["roberta", "sbo"])
def test_doc_sentences_batches_compile_a_bounded_number_of_times(model_kw: dict) -> None:
    batches = doc_sentences_batches(12)
    assert len({tuple(b["input_ids"].shape) for b in batches}) >= 10  # shapes all over the place
    assert compiles(model_kw, batches) <= 2  # the first shape, then one dynamic graph for all


def test_without_the_buckets_every_batch_compiles(monkeypatch) -> None:
    """The control: the same batches without the buckets and dynamic marks compile once each."""
    batches = doc_sentences_batches(12)
    monkeypatch.setattr(batch_mod, "is_compiled", lambda model: False)
    assert compiles({}, batches, bucketed=False) == len(batches)
