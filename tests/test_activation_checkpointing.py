"""Activation checkpointing (``activation_checkpointing``, run_mlm's ``--gradient_checkpointing``).

Each layer keeps only its input for the backward pass and runs again there. Checked on CPU: the same
losses and gradients as without it (with dropout on: the recomputation replays the layer's random
masks), on the padded and the unpadded path and with ALBERT's shared layers; the activations the
backward pass keeps, counted through autograd's saved-tensor hooks, shrink to about one layer's; a
training run with it logs the losses of the run without it, step for step. What it costs and saves on a
GPU (step time, peak memory) is for benchmarks/gpu.sh.
"""

from __future__ import annotations

import pytest
import torch
from test_model import VARIANTS, V, _batch

from schemas.config import ModelConfig
from trainer.model import Encoder, attention_inputs


def model(variant: str, layers: int = 4, dropout: float = 0.2) -> Encoder:
    torch.manual_seed(0)
    return Encoder(ModelConfig(size="tiny", layers=layers, dropout=dropout, **VARIANTS[variant]), V)


def step(m: Encoder, unpadded: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(the loss, every parameter's gradient) of one forward and backward from a fixed RNG state."""
    b = _batch()
    kw = {k: b[k] for k in ("input_ids", "attention_mask", "labels")}
    if m.sentence_head is not None:
        kw["token_type_ids"] = (torch.arange(kw["input_ids"].shape[1]) > 10).long().expand_as(kw["input_ids"])
        kw["sentence_labels"] = b["sentence_labels"]
    if m.sbo_head is not None:
        kw["span_left"], kw["span_right"] = b["span_left"], b["span_right"]
    kw = attention_inputs(kw, kw["attention_mask"], torch.device("cpu"), unpadded=unpadded)
    m.zero_grad(set_to_none=True)
    torch.manual_seed(7)  # the dropout masks
    out = m(**kw)
    out["loss"].backward()
    return out["loss"].detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("variant", ["roberta", "albert", "albert_sbo_nsp"])
@pytest.mark.parametrize("unpadded", [False, True])
def test_same_losses_and_gradients_with_dropout(variant: str, unpadded: bool) -> None:
    m = model(variant)
    loss, grads = step(m, unpadded)
    m.checkpoint_layers = True
    loss_ckpt, grads_ckpt = step(m, unpadded)
    assert torch.equal(loss, loss_ckpt)
    assert grads.keys() == grads_ckpt.keys() and len(grads) > 10
    for name, g in grads.items():
        torch.testing.assert_close(grads_ckpt[name], g, rtol=1e-5, atol=1e-7, msg=name)
    # Another RNG state gives other dropout masks: the comparison above could fail.
    torch.manual_seed(8)
    m.checkpoint_layers = False
    assert not torch.equal(m(**{k: v for k, v in _batch().items() if k in ("input_ids", "labels")})["mlm_loss"],
                           loss)


def saved_bytes(m: Encoder) -> int:
    """Bytes of the tensors autograd keeps for the backward pass during one forward (storage counted once)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    b = _batch(B=8, L=64)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        m(input_ids=b["input_ids"], attention_mask=torch.ones_like(b["input_ids"]), labels=b["labels"])
    return sum(seen.values())


def test_the_backward_pass_keeps_about_one_layers_activations() -> None:
    """Parameters are kept either way (autograd saves them too); what grows with depth is activations."""
    def activations(layers: int, on: bool) -> int:
        m = model("roberta", layers=layers)
        m.checkpoint_layers = on
        return saved_bytes(m) - sum(p.untyped_storage().nbytes() for p in m.parameters())

    off = {n: activations(n, False) for n in (2, 8)}
    on = {n: activations(n, True) for n in (2, 8)}
    per_layer_off = (off[8] - off[2]) / 6
    per_layer_on = (on[8] - on[2]) / 6
    # Without it each layer keeps its activations (~a dozen tensors); with it, its input only.
    assert per_layer_on < 0.15 * per_layer_off, (per_layer_on, per_layer_off)
    assert on[8] < 0.35 * off[8], (on, off)


def test_no_recomputation_without_gradients() -> None:
    """Evaluation (no_grad) runs the layers once, as without checkpointing: nothing to keep."""
    m = model("roberta", dropout=0.0).eval()
    b = _batch()
    with torch.no_grad():
        plain = m(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"])["mlm_loss"]
        m.checkpoint_layers = True
        calls = []
        hook = m.ffn[0].register_forward_hook(lambda *a: calls.append(1))
        ckpt = m(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"])["mlm_loss"]
        hook.remove()
    assert torch.equal(plain, ckpt) and len(calls) == 1


@pytest.mark.slow
def test_a_run_with_it_logs_the_losses_of_the_run_without(small_corpus, tmp_path, caplog) -> None:
    from schemas.config import TrainConfig
    from trainer.loggers import read_metrics
    from trainer.train import train

    def run(name: str, on: bool) -> list[float]:
        out = str(tmp_path / name)
        train(TrainConfig.model_validate({
            "data": small_corpus[0], "output": out, "steps": 3, "batch_size": 8, "device": "cpu", "log_every": 1,
            "model": {"size": "tiny", "dropout": 0.1}, "optim": {"lr": 1e-3, "warmup_steps": 1},
            "activation_checkpointing": on, "eval_batches": 0}))
        return [r["loss"] for r in read_metrics(out)]

    plain = run("plain", False)
    assert "activation checkpointing" not in caplog.text
    with caplog.at_level("INFO", logger="shardforge.train.run"):
        ckpt = run("ckpt", True)
    assert "activation checkpointing (each layer recomputed in the backward pass)" in caplog.text
    assert len(plain) == 3 and plain == pytest.approx(ckpt, rel=1e-5)
