"""trainer.model: shapes, positions, masking, the masked-only head, SBO, sentence heads, FLOPs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from schemas import PAD_ID
from schemas.config import ModelConfig
from trainer.masking import IGNORE_INDEX
from trainer.model import SIZES, Encoder, ModelDims, flops_per_token, resolve_dims

V = 120

VARIANTS = {
    "roberta": {},
    "albert": {"embedding_size": 32, "share": "all", "sentence_head": "sop"},
    "spanbert": {"span_boundary": True},
    "albert_sbo_nsp": {"embedding_size": 16, "share": "attention", "sentence_head": "nsp", "span_boundary": True},
}


def _model(seed: int = 0, **kw) -> Encoder:
    torch.manual_seed(seed)
    return Encoder(ModelConfig(dropout=0.0, **kw), V)


def _batch(seed: int = 1, B: int = 3, L: int = 24) -> dict[str, torch.Tensor]:
    """Right-padded ids, ~15% labels, and span boundaries that stay inside each row."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, L), generator=g)
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, L - 7:] = 0
    mask[2, L - 3:] = 0
    ids[mask == 0] = PAD_ID
    picked = (torch.rand(B, L, generator=g) < 0.2) & (mask == 1)
    picked[:, 0] = False
    picked[0, 5] = picked[0, 7] = True
    labels = torch.where(picked, ids, torch.full_like(ids, IGNORE_INDEX))
    pos = torch.arange(L).expand(B, L)
    left = (pos - 1 - torch.randint(0, 3, (B, L), generator=g)).clamp(min=0)
    right = (pos + 1 + torch.randint(0, 3, (B, L), generator=g)).clamp(max=L - 1)
    left[0, 7] = -1  # a predicted token outside any span: no SBO term for it
    return {"input_ids": ids, "attention_mask": mask, "labels": labels, "span_left": left, "span_right": right,
            "sentence_labels": torch.tensor([0, 1, 1])}


# ------------------------------------------------------------------ dims


def test_resolve_dims_sizes_and_overrides() -> None:
    d = resolve_dims(ModelConfig(size="base"), 50265)
    assert (d.hidden, d.layers, d.heads, d.intermediate, d.embedding_size) == (768, 12, 12, 3072, 768)
    assert SIZES["large"] == {"hidden": 1024, "layers": 24, "heads": 16, "intermediate": 4096}
    d = resolve_dims(ModelConfig(size="tiny", hidden=96, heads=3, embedding_size=16, sentence_head="sop"), V)
    assert (d.hidden, d.heads, d.head_dim, d.embedding_size, d.type_vocab_size) == (96, 3, 32, 16, 2)
    assert d.factorized and d.max_seq_len == 512
    assert resolve_dims(ModelConfig(), V).type_vocab_size == 1  # RoBERTa: one segment type
    with pytest.raises(ValueError, match="divisible"):
        resolve_dims(ModelConfig(hidden=100, heads=3), V)


def test_parameter_counts_follow_sharing() -> None:
    d = resolve_dims(ModelConfig(), V)
    H, Im, E, P = d.hidden, d.intermediate, d.embedding_size, d.max_positions
    layer = (3 * H * H + 3 * H) + (H * H + H) + 2 * H + (H * Im + Im) + (Im * H + H) + 2 * H
    emb = V * E + P * E + 1 * E + 2 * E
    head = H * E + E + 2 * E + V
    m = _model()
    assert m.num_params() == emb + d.layers * layer + head
    assert m.num_params(non_embedding=True) == d.layers * layer + 2 * E + head
    shared = _model(share="all", layers=6)
    assert shared.num_params() == emb + layer + head  # one layer's weights however deep
    assert len(_model(share="attention").attn) == 1 and len(_model(share="attention").ffn) == d.layers
    assert len(_model(share="ffn").ffn) == 1 and len(_model(share="ffn").attn) == d.layers


# ------------------------------------------------------------------ embeddings / attention


def test_positions_use_fairseq_offset() -> None:
    m = _model()
    ids = torch.tensor([[0, 9, 9, 2, 1, 1]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    assert m.embed.position_ids(ids, mask).tolist() == [[2, 3, 4, 5, 1, 1]]
    assert m.embed.position_ids(ids, None).tolist() == [[2, 3, 4, 5, 6, 7]]
    assert torch.all(m.embed.position.weight[PAD_ID] == 0) and torch.all(m.embed.word.weight[PAD_ID] == 0)


def test_padding_does_not_change_real_positions() -> None:
    m = _model(**VARIANTS["albert"]).eval()
    ids = torch.randint(5, V, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    padded = torch.cat([ids, torch.full((2, 6), PAD_ID)], 1)
    pmask = torch.cat([mask, torch.zeros(2, 6, dtype=torch.long)], 1)
    with torch.no_grad():
        a = m(ids, mask)["logits"]
        b = m(padded, pmask)["logits"][:, :10]
        c = m(ids, None)["logits"]  # no mask at all means no padding
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a, c, atol=1e-6, rtol=1e-6)


def test_too_long_input_is_rejected() -> None:
    m = _model(max_positions=10)
    with pytest.raises(ValueError, match="exceeds"):
        m(torch.randint(5, V, (1, 9)))
    assert m(torch.randint(5, V, (1, 8)))["logits"].shape == (1, 8, V)


# ------------------------------------------------------------------ losses


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_masked_only_head_matches_full_head(variant: str) -> None:
    """The same loss and the same gradients with and without the masked-only gather."""
    b = _batch()
    full = _model(masked_only_head=False, **VARIANTS[variant])
    masked = _model(masked_only_head=True, **VARIANTS[variant])
    masked.load_state_dict(full.state_dict())
    out_f, out_m = full(**b), masked(**b)
    assert set(out_f) == set(out_m)
    for k in out_f:
        torch.testing.assert_close(out_m[k].float(), out_f[k].float(), atol=1e-5, rtol=0)
    out_f["loss"].backward()
    out_m["loss"].backward()
    gf, gm = dict(full.named_parameters()), dict(masked.named_parameters())
    for name, p in gf.items():
        torch.testing.assert_close(gm[name].grad, p.grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("masked_only", [True, False])
def test_mlm_loss_and_stats_match_reference(masked_only: bool) -> None:
    b = _batch()
    m = _model(masked_only_head=masked_only)
    out = m(**b)
    logits = m(b["input_ids"], b["attention_mask"])["logits"]
    sel = b["labels"] != IGNORE_INDEX
    ref = F.cross_entropy(logits[sel], b["labels"][sel])
    torch.testing.assert_close(out["mlm_loss"], ref, atol=1e-5, rtol=0)
    assert out["mlm_count"].item() == int(sel.sum())
    assert out["mlm_correct"].item() == int((logits[sel].argmax(-1) == b["labels"][sel]).sum())
    assert not out["mlm_loss"].requires_grad and out["loss"].requires_grad
    assert set(out) == {"loss", "mlm_loss", "mlm_correct", "mlm_count"}


@pytest.mark.parametrize("masked_only", [True, False])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_padded_vocabulary_columns_change_nothing(variant: str, masked_only: bool, monkeypatch) -> None:
    """The vocabulary projection padded to a multiple of 64 columns (what an eager CUDA step does): the same
    losses, counts, logits and gradients as without; the padding columns are -inf and take no gradient."""
    import copy

    import trainer.model as model_module

    b = _batch()
    plain = _model(masked_only_head=masked_only, **VARIANTS[variant])
    padded = copy.deepcopy(plain)
    out = plain(**b)
    out["loss"].backward()
    logits = plain(b["input_ids"], b["attention_mask"])["logits"]
    monkeypatch.setattr(model_module, "PADDED_VOCAB_DEVICES", ("cpu",))
    got = padded(**b)
    got["loss"].backward()
    assert set(got) == set(out)
    for k in out:
        if k.endswith(("_count", "_correct")):
            assert torch.equal(got[k], out[k]), k
        else:
            torch.testing.assert_close(got[k], out[k], atol=1e-6, rtol=0, msg=k)
    for (name, p), q in zip(plain.named_parameters(), padded.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-6, rtol=1e-5, msg=name)
    got_logits = padded(b["input_ids"], b["attention_mask"])["logits"]
    assert got_logits.shape == logits.shape == (*b["input_ids"].shape, V)
    torch.testing.assert_close(got_logits, logits, atol=1e-6, rtol=0)
    x = torch.randn(5, padded.dims.embedding_size)
    wide = model_module.decode(x, padded.embed.word.weight, padded.lm_head.bias)
    assert wide.shape == (5, 128) and torch.isneginf(wide[:, V:]).all()


def test_padded_vocabulary_under_autocast_pads_the_cast_weight(monkeypatch) -> None:
    """Under autocast the padding is made in the autocast dtype (bf16), never as a padded fp32 copy of the
    master weight; the loss and the word embedding's gradient are those of the unpadded head under autocast."""
    import copy

    from torch.utils._python_dispatch import TorchDispatchMode

    import trainer.model as model_module

    class Pads(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.dtypes: list[torch.dtype] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            if func is torch.ops.aten.constant_pad_nd.default:
                self.dtypes.append(args[0].dtype)
            return func(*args, **(kwargs or {}))

    b = _batch()
    plain = _model()
    padded = copy.deepcopy(plain)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = plain(**b)
    out["loss"].backward()
    monkeypatch.setattr(model_module, "PADDED_VOCAB_DEVICES", ("cpu",))
    pads = Pads()
    with torch.autocast("cpu", dtype=torch.bfloat16), pads:
        got = padded(**b)
    got["loss"].backward()
    assert pads.dtypes == [torch.bfloat16], pads.dtypes
    torch.testing.assert_close(got["loss"], out["loss"], atol=1e-2, rtol=0)
    w, v = padded.embed.word.weight, plain.embed.word.weight
    assert w.grad.dtype == torch.float32 and w.grad.shape == v.grad.shape
    torch.testing.assert_close(w.grad, v.grad, atol=2e-3, rtol=0)


def test_no_predicted_tokens_gives_zero_loss() -> None:
    b = _batch()
    m = _model(span_boundary=True)
    out = m(b["input_ids"], b["attention_mask"], labels=torch.full_like(b["labels"], IGNORE_INDEX),
            span_left=b["span_left"], span_right=b["span_right"])
    assert out["loss"].item() == 0.0 and out["mlm_count"].item() == 0
    out["loss"].backward()  # still a valid graph


def test_sentence_head_loss() -> None:
    b = _batch()
    m = _model(**VARIANTS["albert"])
    tt = torch.zeros_like(b["input_ids"])
    tt[:, 12:] = 1
    out = m(**b, token_type_ids=tt)
    logits = m(b["input_ids"], b["attention_mask"], token_type_ids=tt)["sentence_logits"]
    ref = F.cross_entropy(logits, b["sentence_labels"])
    torch.testing.assert_close(out["sentence_loss"], ref, atol=1e-6, rtol=0)
    assert out["sentence_count"].item() == 3
    assert out["sentence_correct"].item() == int((logits.argmax(-1) == b["sentence_labels"]).sum())
    torch.testing.assert_close(out["loss"], out["mlm_loss"] + out["sentence_loss"])
    # Segment B has its own embedding, so token types change the result.
    assert not torch.allclose(out["loss"], m(**b)["loss"])


def test_span_boundary_objective_uses_boundary_states() -> None:
    b = _batch()
    m = _model(span_boundary=True)
    out = m(**b)
    # Reference with explicit per-token indexing.
    h = m.encode(b["input_ids"], b["attention_mask"])
    word = m.embed.word.weight
    losses = []
    B, L = b["input_ids"].shape
    for r in range(B):
        for i in range(L):
            lab, lft, rgt = int(b["labels"][r, i]), int(b["span_left"][r, i]), int(b["span_right"][r, i])
            if lab == IGNORE_INDEX or lft < 0:
                continue
            logits = m.sbo_head(h[r, lft][None], h[r, rgt][None], torch.tensor([i - lft]), word)
            losses.append(F.cross_entropy(logits, torch.tensor([lab])))
    ref = torch.stack(losses).mean()
    torch.testing.assert_close(out["sbo_loss"], ref, atol=1e-5, rtol=0)
    assert out["sbo_count"].item() == len(losses) == int((b["labels"] != IGNORE_INDEX).sum()) - 1
    torch.testing.assert_close(out["loss"], out["mlm_loss"] + out["sbo_loss"])
    # Without span boundaries the SBO term is simply absent.
    assert "sbo_loss" not in m(b["input_ids"], b["attention_mask"], labels=b["labels"])


def test_dropout_switch() -> None:
    b = _batch()
    m0 = _model()  # dropout 0
    assert torch.equal(m0(**b)["loss"], m0(**b)["loss"])
    torch.manual_seed(0)
    m1 = Encoder(ModelConfig(dropout=0.3), V)
    assert not torch.equal(m1(**b)["loss"], m1(**b)["loss"])
    m1.eval()
    assert torch.equal(m1(**b)["loss"], m1(**b)["loss"])


def test_attention_dropout_has_its_own_rate() -> None:
    """attention_dropout drops the attention probabilities alone; None takes dropout's rate."""
    b = _batch()
    torch.manual_seed(0)
    only_attention = Encoder(ModelConfig(dropout=0.0, attention_dropout=0.3), V)
    assert {m.p for m in only_attention.modules() if isinstance(m, torch.nn.Dropout)} == {0.0}
    assert not torch.equal(only_attention(**b)["loss"], only_attention(**b)["loss"])
    hidden_only = Encoder(ModelConfig(dropout=0.3, attention_dropout=0.0), V)
    assert {m.p for m in hidden_only.modules() if isinstance(m, torch.nn.Dropout)} == {0.3}
    assert {m.dropout for m in hidden_only.modules() if isinstance(getattr(m, "dropout", None), float)} == {0.0}
    assert Encoder(ModelConfig(dropout=0.2), V).dims.attention_dropout == 0.2


@pytest.mark.parametrize("variant", ["roberta", "albert_sbo_nsp"])
def test_overfits_a_fixed_batch(variant: str) -> None:
    b = _batch()
    m = _model(**VARIANTS[variant])
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    first = None
    for _ in range(40):
        out = m(**b)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
        first = first if first is not None else out["loss"].item()
    assert out["loss"].item() < 0.5 * first


def test_bf16_autocast_runs_on_cpu() -> None:
    b = _batch()
    m = _model(**VARIANTS["albert_sbo_nsp"])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(**b)
    assert torch.isfinite(out["loss"])
    out["loss"].backward()


# ------------------------------------------------------------------ FLOPs


def test_flops_per_token_formula() -> None:
    d = resolve_dims(ModelConfig(size="base"), 50265)
    H, L_, Im, V_, T = 768, 12, 3072, 50265, 512
    n = L_ * (4 * H * H + 2 * H * Im) + H * H + H * V_
    assert flops_per_token(d, T) == 6 * n + 12 * L_ * H * T
    # Sharing saves parameters, not FLOPs; the masked-only head saves head FLOPs.
    shared = resolve_dims(ModelConfig(size="base", share="all"), 50265)
    assert flops_per_token(shared, T) == flops_per_token(d, T)
    assert flops_per_token(d, T) - flops_per_token(d, T, lm_head_fraction=0.15) == pytest.approx(6 * 0.85 * H * V_)
    # Factorized embedding: E x H projection in, H x E + E x V out.
    f = resolve_dims(ModelConfig(size="base", embedding_size=128), 30000)
    n_f = L_ * (4 * H * H + 2 * H * Im) + 128 * H + H * 128 + 128 * 30000
    assert flops_per_token(f, T) == 6 * n_f + 12 * L_ * H * T
    assert isinstance(d, ModelDims)


def test_one_token_type_reads_a_pair_as_one_segment() -> None:
    """RoBERTa's shape (one token type, no sentence head) on a pair corpus's batch: segment B is embedded as
    segment A (its token type ids indexed a one-row table: IndexError), for the padded and unpadded paths."""
    from trainer.model import attention_inputs

    m = _model(seed=3)
    assert m.dims.type_vocab_size == 1
    b = _batch()
    kw = {k: b[k] for k in ("input_ids", "attention_mask", "labels")}
    types = (torch.arange(kw["input_ids"].shape[1]) > 10).long().expand_as(kw["input_ids"])
    for unpadded in (False, True):
        plain = m(**attention_inputs(dict(kw), kw["attention_mask"], torch.device("cpu"), unpadded=unpadded))
        paired = m(**attention_inputs({**kw, "token_type_ids": types}, kw["attention_mask"], torch.device("cpu"),
                                      unpadded=unpadded))
        assert torch.equal(plain["mlm_loss"], paired["mlm_loss"])
    two = _model(seed=3, type_vocab_size=2)  # a model with segment embeddings reads them
    assert not torch.equal(two(**kw)["mlm_loss"], two(**kw, token_type_ids=types)["mlm_loss"])
