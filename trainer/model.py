"""The encoder: RoBERTa, with ALBERT and SpanBERT options, in one readable file.

Reading order: ``SIZES`` and ``ModelDims`` (the resolved shape of a model),
then the parts named after the papers (``Embeddings``, ``SelfAttention``,
``FeedForward``, ``LMHead``, ``SentenceHead``, ``SpanBoundaryHead``), then
``Encoder``, which wires them together and computes the losses.

- RoBERTa (Liu et al. 2019): post-LN Transformer, GELU, learned absolute
  positions with fairseq's offset (real tokens get positions pad_id+1,
  pad_id+2, ...; padding gets pad_id), tied input/output embedding, LM head
  dense -> GELU -> LayerNorm -> tied decoder + bias.
- ALBERT (Lan et al. 2019): factorized embedding (E < H, projected to H),
  cross-layer sharing (all | attention | ffn | none), SOP / NSP head on <s>.
- SpanBERT (Joshi et al. 2019): span-boundary objective (SBO).
- Masked-only LM head: the vocabulary projection runs only at predicted
  positions (about 15% of tokens), which is where most of a small model's
  head FLOPs and activation memory go.

Attention paths (all give the same losses and gradients; trainer/attention.py, docs/models.md):
- masked: ``attention_mask`` [B, L]; SDPA with a boolean mask (the plain path);
- no mask: ``attention_mask=None`` for full-length batches, so SDPA may pick
  the flash kernel (a mask rules it out);
- unpadded: ``unpadded=unpad(attention_mask)`` for ragged batches. Every
  layer runs on the T real tokens only ([T, H], no padding FLOPs) and
  attention is variable-length over the packed tokens (FlashAttention's
  varlen kernel with the cumulative sequence lengths on CUDA).
The kernel is picked on the host (``attention.plan``) and passed in
(``attention_backend``, or the layout's ``backend``).

Without a host sync: with ``predictions`` (a bound on the predicted
positions the host knows: ``Masker.prediction_bound``) the masked-only heads
gather their rows into that static size with a cumsum instead of
``nonzero``, whose data-dependent size makes the host wait for the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from schemas.config import MODEL_SIZES, ModelConfig
from trainer.attention import Unpadded, attention_inputs, sdpa, unpad, varlen_attention
from trainer.masking import IGNORE_INDEX

__all__ = ["SIZES", "Encoder", "ModelDims", "Unpadded", "attention_inputs", "flops_per_token", "resolve_dims",
           "unpad"]

# Named sizes. tiny is for tests; small is BERT-Small (Turc et al. 2019);
# base and large are BERT/RoBERTa's.
SIZES = MODEL_SIZES  # each named size's shape (the contract's table: schemas/config.py)


@dataclass(frozen=True)
class ModelDims:
    """Every dimension and option of a model, resolved from a ModelConfig."""

    vocab_size: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    embedding_size: int
    max_positions: int
    type_vocab_size: int = 1
    share: str = "none"
    dropout: float = 0.1
    attention_dropout: float = 0.1  # on the attention probabilities; ``dropout`` everywhere else
    sentence_head: str = "none"
    span_boundary: bool = False
    masked_only_head: bool = True
    pad_id: int = 1
    layer_norm_eps: float = 1e-5
    hidden_act: str = "gelu"
    lm_head_act: str = "gelu"

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def factorized(self) -> bool:
        """ALBERT's factorized embedding: tokens live in E dims, projected to H."""
        return self.embedding_size != self.hidden

    @property
    def max_seq_len(self) -> int:
        """Longest input: positions pad_id+1 .. max_positions-1 are usable."""
        return self.max_positions - self.pad_id - 1


def resolve_dims(cfg: ModelConfig, vocab_size: int, pad_id: int = 1) -> ModelDims:
    """The named size with the config's overrides applied, validated."""
    base = SIZES[cfg.size]
    hidden = cfg.hidden or base["hidden"]
    heads = cfg.heads or base["heads"]
    dims = ModelDims(
        vocab_size=vocab_size,
        hidden=hidden,
        layers=cfg.layers or base["layers"],
        heads=heads,
        intermediate=cfg.intermediate or base["intermediate"],
        embedding_size=cfg.embedding_size or hidden,
        max_positions=cfg.max_positions,
        # BERT/ALBERT give segment B its own embedding; RoBERTa has one type.
        type_vocab_size=cfg.type_vocab_size or (2 if cfg.sentence_head != "none" else 1),
        share=cfg.share,
        dropout=cfg.dropout,
        attention_dropout=cfg.dropout if cfg.attention_dropout is None else cfg.attention_dropout,
        sentence_head=cfg.sentence_head,
        span_boundary=cfg.span_boundary,
        masked_only_head=cfg.masked_only_head,
        pad_id=pad_id,
        layer_norm_eps=cfg.layer_norm_eps,
        hidden_act=cfg.hidden_act,
        lm_head_act=cfg.lm_head_act,
    )
    if dims.sentence_head != "none" and dims.type_vocab_size < 2:
        raise ValueError("a sentence head needs type_vocab_size >= 2 (segment B has type 1)")
    if vocab_size <= pad_id:
        raise ValueError(f"vocab_size {vocab_size} must exceed pad_id {pad_id}")
    if dims.hidden % dims.heads:
        raise ValueError(f"hidden {dims.hidden} is not divisible by heads {dims.heads}")
    if dims.max_seq_len < 1:
        raise ValueError(f"max_positions {dims.max_positions} leaves no room after the pad offset")
    return dims


# ================================================================= parts


def activation(name: str):  # noqa: ANN201 - a tensor -> tensor function
    """GELU as a model names it: "gelu" exact (erf), "gelu_new" the tanh approximation (ALBERT, GPT-2)."""
    if name == "gelu_new":
        return lambda x: F.gelu(x, approximate="tanh")
    return F.gelu


class Embeddings(nn.Module):
    """Token + position + token-type embeddings, LayerNorm, dropout (+ ALBERT's E->H projection)."""

    def __init__(self, d: ModelDims):
        super().__init__()
        self.pad_id = d.pad_id
        self.word = nn.Embedding(d.vocab_size, d.embedding_size, padding_idx=d.pad_id)
        self.position = nn.Embedding(d.max_positions, d.embedding_size, padding_idx=d.pad_id)
        self.token_type = nn.Embedding(d.type_vocab_size, d.embedding_size)
        self.ln = nn.LayerNorm(d.embedding_size, eps=d.layer_norm_eps)
        self.drop = nn.Dropout(d.dropout)
        self.project = nn.Linear(d.embedding_size, d.hidden) if d.factorized else None

    def position_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """fairseq/HF RoBERTa positions: pad_id+1, pad_id+2, ... for real tokens, pad_id for padding."""
        if attention_mask is None:
            pos = torch.arange(input_ids.shape[1], device=input_ids.device) + self.pad_id + 1
            return pos.expand_as(input_ids)
        mask = attention_mask.to(torch.long)
        return torch.cumsum(mask, dim=1) * mask + self.pad_id

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                token_type_ids: torch.Tensor | None) -> torch.Tensor:
        """Embeddings of tokens of any shape ([B, L] padded or [T] packed), with their positions."""
        x = self.word(input_ids) + self.position(position_ids)
        # One token type (RoBERTa's): a pair corpus's segment B is embedded as segment A, as a model
        # without segment embeddings reads a pair.
        if token_type_ids is None or self.token_type.num_embeddings == 1:
            x = x + self.token_type.weight[0]  # all segment A, without materializing zeros
        else:
            x = x + self.token_type(token_type_ids.to(torch.long))
        x = self.drop(self.ln(x))
        return self.project(x) if self.project is not None else x


class SelfAttention(nn.Module):
    """Multi-head self-attention with a residual and post-LayerNorm."""

    def __init__(self, d: ModelDims):
        super().__init__()
        self.heads = d.heads
        self.dropout = d.attention_dropout  # the probabilities'; the output's is ``drop``
        self.qkv = nn.Linear(d.hidden, 3 * d.hidden)  # one matmul for q, k, v (rows: q, then k, then v)
        self.out = nn.Linear(d.hidden, d.hidden)
        self.drop = nn.Dropout(d.dropout)
        self.ln = nn.LayerNorm(d.hidden, eps=d.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | Unpadded | None,
                backend: str | None = None) -> torch.Tensor:
        """x [B, L, H] with a boolean key mask (or None: no padding), or x [T, H] packed with its layout.

        backend: the SDPA backend of the padded paths (attention.pick_backend; None: torch picks).
        """
        p = self.dropout if self.training else 0.0
        if isinstance(mask, Unpadded):
            T, H = x.shape
            # The varlen kernels take q, k, v [T, heads, D] with unit stride last: one copy into [3, T, heads, D].
            q, k, v = self.qkv(x).view(T, 3, self.heads, H // self.heads).transpose(0, 1).contiguous()
            a = varlen_attention(q, k, v, mask, p).reshape(T, H)
        else:
            B, L, H = x.shape
            q, k, v = self.qkv(x).view(B, L, 3, self.heads, H // self.heads).permute(2, 0, 3, 1, 4)
            a = sdpa(q, k, v, mask, p, backend).transpose(1, 2).reshape(B, L, H)
        return self.ln(x + self.drop(self.out(a)))


class FeedForward(nn.Module):
    """Position-wise FFN (H -> I -> H, GELU) with a residual and post-LayerNorm."""

    def __init__(self, d: ModelDims):
        super().__init__()
        self.fc1 = nn.Linear(d.hidden, d.intermediate)
        self.fc2 = nn.Linear(d.intermediate, d.hidden)
        self.drop = nn.Dropout(d.dropout)
        self.ln = nn.LayerNorm(d.hidden, eps=d.layer_norm_eps)
        self.act = activation(d.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x + self.drop(self.fc2(self.act(self.fc1(x)))))


# The vocabulary projection's columns are padded to this multiple on the devices named here (eagerly; a
# compiled graph is left to inductor, which pads shapes itself): a row stride of 50,265 half-precision
# values (RoBERTa's vocabulary) is not 16-byte aligned, and cuBLAS then runs all three of the head's
# products in its slowest kernels (on an H200: 4.8 ms of a 44 ms eager base step).
VOCAB_MULTIPLE = 64
PADDED_VOCAB_DEVICES = ("cuda",)


def decode(x: torch.Tensor, word_weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Logits ``x @ word_weight.T + bias`` [N, V], or [N, V'] (V' = V rounded up to VOCAB_MULTIPLE) where the
    columns are padded: the extra ones are -inf, so a softmax, cross-entropy or argmax over them is the
    unpadded one's (their gradients are zero); ``logits[..., :V]`` is the unpadded result."""
    extra = -word_weight.shape[0] % VOCAB_MULTIPLE
    if not extra or x.device.type not in PADDED_VOCAB_DEVICES or torch.compiler.is_compiling():
        return F.linear(x, word_weight, bias)
    if torch.is_autocast_enabled(x.device.type):
        # Pad in the dtype autocast casts to, not the fp32 master weight: half the bytes padded, and one
        # cast of the [V, E] weight instead of one of the padded copy.
        dtype = torch.get_autocast_dtype(x.device.type)
        word_weight, bias = word_weight.to(dtype), bias.to(dtype)
    weight = F.pad(word_weight, (0, 0, 0, extra))
    return F.linear(x, weight, torch.cat([bias, bias.new_full((extra,), float("-inf"))]))


class LMHead(nn.Module):
    """RoBERTa's LM head: dense -> GELU -> LayerNorm -> decoder tied to the word embedding, + bias (``decode``:
    its logits may carry -inf padding columns)."""

    def __init__(self, d: ModelDims):
        super().__init__()
        self.dense = nn.Linear(d.hidden, d.embedding_size)  # H -> E, so ALBERT's E < H ties too
        self.ln = nn.LayerNorm(d.embedding_size, eps=d.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(d.vocab_size))
        self.act = activation(d.lm_head_act)

    def forward(self, h: torch.Tensor, word_weight: torch.Tensor) -> torch.Tensor:
        # The decoder is the word embedding itself (passed in, so it is registered once).
        return decode(self.ln(self.act(self.dense(h))), word_weight, self.bias)


class SentenceHead(nn.Module):
    """NSP / SOP classifier on the <s> state: pooler (dense + tanh), dropout, 2-way linear."""

    def __init__(self, d: ModelDims):
        super().__init__()
        self.pooler = nn.Linear(d.hidden, d.hidden)
        self.drop = nn.Dropout(d.dropout)
        self.classifier = nn.Linear(d.hidden, 2)

    def forward(self, cls: torch.Tensor) -> torch.Tensor:
        """Logits [B, 2] from the <s> states [B, H]."""
        return self.classifier(self.drop(torch.tanh(self.pooler(cls))))


class SpanBoundaryHead(nn.Module):
    """SpanBERT's SBO: predict a span token from the two boundary states and its position in the span.

    y = LN(GELU(W2 LN(GELU(W1 [x_left; x_right; p_rel])))), then logits with the
    shared output embedding and this head's own bias. W2 maps to E so the
    decoder can share the (possibly factorized) word embedding.
    """

    def __init__(self, d: ModelDims):
        super().__init__()
        # Relative positions are bounded by the sequence length; no clipping needed.
        self.rel_position = nn.Embedding(d.max_positions, d.hidden)
        self.fc1 = nn.Linear(3 * d.hidden, d.hidden)
        self.ln1 = nn.LayerNorm(d.hidden, eps=d.layer_norm_eps)
        self.fc2 = nn.Linear(d.hidden, d.embedding_size)
        self.ln2 = nn.LayerNorm(d.embedding_size, eps=d.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(d.vocab_size))

    def forward(self, left: torch.Tensor, right: torch.Tensor, rel: torch.Tensor,
                word_weight: torch.Tensor) -> torch.Tensor:
        rel = rel.clamp(0, self.rel_position.num_embeddings - 1)
        x = torch.cat([left, right, self.rel_position(rel)], dim=-1)
        x = self.ln1(F.gelu(self.fc1(x)))
        x = self.ln2(F.gelu(self.fc2(x)))
        return decode(x, word_weight, self.bias)


# ================================================================= encoder


def _masked_ce(logits: torch.Tensor, targets: torch.Tensor,
               denominator: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, correct count, target count) over targets != IGNORE_INDEX: the loss is the targets' summed
    cross-entropy over their own count (the batch's mean), or over ``denominator`` when given (the batch's
    share of a larger batch's mean); 0 when nothing is predicted."""
    active = targets != IGNORE_INDEX
    count = active.sum()
    # Sum / max(count, 1) instead of a mean: a batch with no predictions gives 0, not NaN.
    loss = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")
    loss = loss / (count.clamp(min=1) if denominator is None else denominator)
    correct = ((logits.argmax(-1) == targets) & active).sum()
    return loss, correct.detach(), count.detach()


# The losses a batch's targets feed, in the order of ``target_counts`` and of ``loss_denominators``.
LOSS_TERMS = ("mlm", "sentence", "sbo")


def sbo_active(flat_labels: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """The span-boundary loss's targets: predicted tokens inside a span with both boundaries."""
    return (flat_labels != IGNORE_INDEX) & (left >= 0) & (right >= 0)


def target_counts(labels: torch.Tensor, sentence_labels: torch.Tensor | None = None,
                  span_left: torch.Tensor | None = None, span_right: torch.Tensor | None = None,
                  **_: object) -> torch.Tensor:
    """How many targets each of LOSS_TERMS has in a batch (float32 [3], on the batch's device, no sync):
    what a step sums over its micro-batches and ranks to weigh every target of the global batch alike.
    Takes the model's keyword arguments."""
    zero = labels.new_zeros((), dtype=torch.float32)
    mlm = (labels != IGNORE_INDEX).sum().float()
    sentence = (sentence_labels != IGNORE_INDEX).sum().float() if sentence_labels is not None else zero
    sbo = zero
    if span_left is not None and span_right is not None:
        sbo = sbo_active(labels.reshape(-1), span_left.reshape(-1), span_right.reshape(-1)).sum().float()
    return torch.stack([mlm, sentence, sbo])


def predicted_rows(active: torch.Tensor, flat_labels: torch.Tensor,
                   size: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(flat positions, their labels) of the active positions, in order.

    size None: exactly the active ones (``nonzero``: the host waits for the device to learn the
    count). size n: n rows without a sync: the k active positions (k <= n, which the caller
    guarantees), then n - k rows at position 0 whose label is IGNORE_INDEX (no loss, zero gradient).
    """
    if size is None:
        idx = active.nonzero().squeeze(1)
        return idx, flat_labels.index_select(0, idx)
    n = max(1, int(size))
    rank = torch.cumsum(active, 0) - 1
    slot = torch.where(active & (rank < n), rank, n)  # the spare slot n takes the rest
    idx = torch.zeros(n + 1, dtype=torch.long, device=active.device)
    idx = idx.scatter(0, slot, torch.arange(active.numel(), device=active.device))[:n]
    filled = torch.arange(n, device=active.device) < active.sum()
    return idx, torch.where(filled, flat_labels.index_select(0, idx), IGNORE_INDEX)


class Encoder(nn.Module):
    """A RoBERTa / ALBERT / SpanBERT-style encoder with its pretraining heads and losses."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, pad_id: int = 1):
        super().__init__()
        self.cfg = cfg
        self.dims = d = resolve_dims(cfg, vocab_size, pad_id)
        self.embed = Embeddings(d)
        # ALBERT sharing: one module reused by every layer instead of one per layer.
        n_attn = 1 if d.share in ("all", "attention") else d.layers
        n_ffn = 1 if d.share in ("all", "ffn") else d.layers
        self.attn = nn.ModuleList(SelfAttention(d) for _ in range(n_attn))
        self.ffn = nn.ModuleList(FeedForward(d) for _ in range(n_ffn))
        self.lm_head = LMHead(d)
        self.sentence_head = SentenceHead(d) if d.sentence_head != "none" else None
        self.sbo_head = SpanBoundaryHead(d) if d.span_boundary else None
        self.apply(self._init_weights)
        # Activation checkpointing (TrainConfig.activation_checkpointing): set by the trainer, not part of the
        # model's shape; each layer's activations are recomputed in the backward pass.
        self.checkpoint_layers = False

    def _init_weights(self, m: nn.Module) -> None:
        # BERT's initialization: N(0, 0.02) weights, zero biases, zero padding rows.
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None,
               attention_backend: str | None = None) -> torch.Tensor:
        """Final hidden states: [B, L, H], or [T, H] for the packed tokens when ``unpadded`` is given.

        attention_mask None means no padding. With ``unpadded`` (from
        ``unpad(attention_mask)``), the mask is still needed for the positions.
        attention_backend: the SDPA backend of the padded paths (None: torch picks).
        """
        if input_ids.shape[1] > self.dims.max_seq_len:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds the model's {self.dims.max_seq_len}")
        positions = self.embed.position_ids(input_ids, attention_mask)
        mask: torch.Tensor | Unpadded | None
        if unpadded is None:
            h = self.embed(input_ids, positions, token_type_ids)
            # SDPA boolean mask: True = may attend. Broadcast over heads and queries.
            mask = attention_mask[:, None, None, :].to(torch.bool) if attention_mask is not None else None
        else:
            if attention_mask is None:
                raise ValueError("unpadded needs the attention_mask it was built from (for the positions)")
            idx = unpadded.indices

            def pack(t: torch.Tensor) -> torch.Tensor:
                return t.reshape(-1).index_select(0, idx)

            h = self.embed(pack(input_ids), pack(positions), pack(token_type_ids) if token_type_ids is not None
                           else None)
            mask = unpadded
        recompute = self.checkpoint_layers and torch.is_grad_enabled()
        for i in range(self.dims.layers):
            if recompute:  # keeps h; the layer runs again in the backward pass, with the same dropout masks
                h = checkpoint(self.layer, i, h, mask, attention_backend, use_reentrant=False,
                               determinism_check="none")  # its check reads sizes a nested tensor lacks
            else:
                h = self.layer(i, h, mask, attention_backend)
        return h

    def layer(self, i: int, h: torch.Tensor, mask: torch.Tensor | Unpadded | None,
              attention_backend: str | None) -> torch.Tensor:
        """Transformer block ``i``: attention, then the feed-forward (ALBERT's shared ones where shared)."""
        h = self.attn[i % len(self.attn)](h, mask, attention_backend)
        return self.ffn[i % len(self.ffn)](h)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, token_type_ids: torch.Tensor | None = None,
                sentence_labels: torch.Tensor | None = None, span_left: torch.Tensor | None = None,
                span_right: torch.Tensor | None = None, unpadded: Unpadded | None = None,
                attention_backend: str | None = None, predictions: int | None = None,
                loss_denominators: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Losses and detached stats when labels are given; otherwise logits.

        labels: int64 [B, L], IGNORE_INDEX (-100) where not predicted. sentence_labels: [B]
        (NSP: 1 = random next; SOP: 1 = swapped, as the data job writes them).
        span_left / span_right: [B, L] positions of the boundary tokens of the
        span each predicted token belongs to (-1 where there is no span).
        unpadded: the packed layout of attention_mask (``unpad``): every layer
        then runs on real tokens only; same losses (``attention_inputs`` picks).
        predictions: at least the number of labels (``Masker.prediction_bound``): the masked-only
        heads then gather that many rows without a host sync; None gathers exactly (``nonzero``).
        loss_denominators: float [3], one per LOSS_TERMS: each loss sums its targets' cross-entropy over
        this instead of over the batch's own count (a training step's micro-batches weigh every target of
        the global batch alike); None: each loss is the batch's own mean.
        """
        h = self.encode(input_ids, attention_mask, token_type_ids, unpadded, attention_backend)
        B, L = input_ids.shape
        H = h.shape[-1]
        word = self.embed.word.weight
        if unpadded is None:
            flat_h = h.reshape(B * L, H)

            def rows(flat_idx: torch.Tensor) -> torch.Tensor:
                return flat_idx
        else:
            flat_h = h  # [T, H]: padded flat positions map through packed_index

            def rows(flat_idx: torch.Tensor) -> torch.Tensor:
                # clamp: a (never produced) boundary on padding must not index out of range
                return unpadded.packed_index.index_select(0, flat_idx).clamp(min=0)

        out: dict[str, torch.Tensor] = {}
        firsts = torch.arange(B, device=h.device) * L  # flat index of each row's <s>
        if labels is None:
            if unpadded is not None:  # back to [B, L, H]; padding states are zeros
                real = unpadded.real_tokens if unpadded.real_tokens >= 0 else flat_h.shape[0]
                flat_h = flat_h.new_zeros(B * L, H).index_copy(0, unpadded.indices[:real], flat_h[:real])
            out["logits"] = self.lm_head(flat_h, word)[:, :word.shape[0]].reshape(B, L, -1)
            if self.sentence_head is not None:
                out["sentence_logits"] = self.sentence_head(flat_h.index_select(0, firsts))
            return out

        flat_labels = labels.reshape(B * L)
        # One denominator per loss (LOSS_TERMS order), or each loss over its own targets.
        mlm_d, sentence_d, sbo_d = loss_denominators.unbind() if loss_denominators is not None else (None,) * 3
        if self.dims.masked_only_head:
            # Gather the predicted positions first: the vocabulary projection then
            # costs (#masked x E x V) instead of (B x L x E x V).
            idx, targets = predicted_rows(flat_labels != IGNORE_INDEX, flat_labels, predictions)
            mlm_loss, correct, count = _masked_ce(self.lm_head(flat_h.index_select(0, rows(idx)), word), targets, mlm_d)
        else:
            # (The unpadded layout's filler reads a padding position: its label is IGNORE_INDEX.)
            head_labels = flat_labels if unpadded is None else flat_labels.index_select(0, unpadded.indices)
            mlm_loss, correct, count = _masked_ce(self.lm_head(flat_h, word), head_labels, mlm_d)
        loss = mlm_loss
        out.update(mlm_loss=mlm_loss.detach(), mlm_correct=correct, mlm_count=count)

        if self.sentence_head is not None and sentence_labels is not None:
            s_loss, s_correct, s_count = _masked_ce(self.sentence_head(flat_h.index_select(0, rows(firsts))),
                                                    sentence_labels.reshape(-1).long(), sentence_d)
            loss = loss + s_loss
            out.update(sentence_loss=s_loss.detach(), sentence_correct=s_correct, sentence_count=s_count)

        if self.sbo_head is not None and span_left is not None and span_right is not None:
            sbo_loss, sbo_correct, sbo_count = self._sbo(flat_h, rows, flat_labels, span_left, span_right, L,
                                                         predictions, sbo_d)
            loss = loss + sbo_loss
            out.update(sbo_loss=sbo_loss.detach(), sbo_correct=sbo_correct, sbo_count=sbo_count)

        out["loss"] = loss
        return out

    def _sbo(self, flat_h: torch.Tensor, rows, flat_labels: torch.Tensor, span_left: torch.Tensor,  # noqa: ANN001
             span_right: torch.Tensor, L: int, predictions: int | None,
             denominator: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """SpanBERT's span-boundary loss over the predicted tokens with both boundaries: (loss, correct, count)."""
        left, right = span_left.reshape(-1), span_right.reshape(-1)
        idx, targets = predicted_rows(sbo_active(flat_labels, left, right), flat_labels, predictions)
        row = torch.div(idx, L, rounding_mode="floor") * L  # flat index of the row's first token
        # Clamp: a boundary outside the row must not index another row (or fault on GPU).
        l_pos = left.index_select(0, idx).clamp(0, L - 1)
        r_pos = right.index_select(0, idx).clamp(0, L - 1)
        logits = self.sbo_head(flat_h.index_select(0, rows(row + l_pos)), flat_h.index_select(0, rows(row + r_pos)),
                               (idx - row - l_pos).clamp(min=0), self.embed.word.weight)  # i - span_left
        return _masked_ce(logits, targets, denominator)

    def num_params(self, non_embedding: bool = False) -> int:
        """Unique parameters (shared layers count once); non_embedding drops the embedding tables."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= sum(e.weight.numel() for e in (self.embed.word, self.embed.position, self.embed.token_type))
        return n


def flops_per_token(dims: ModelDims, seq_len: int, lm_head_fraction: float = 1.0) -> float:
    """Training FLOPs per token (forward + backward): 6 N + 12 L H T, as in PaLM appendix B.

    N counts the weights multiplied per token, per layer *application* (a layer
    shared by all L layers still costs L layers of FLOPs): embedding projection
    (if E != H), per layer 4 H^2 + 2 H I, LM head H E + E V. The vocabulary
    projection E V is scaled by lm_head_fraction (the share of positions it
    runs at: 1 for the full head, the mask rate for the masked-only head).
    Embedding lookups, biases, LayerNorm and the SBO / sentence heads are left
    out (small). The attention term 12 L H T counts QK^T and AV at full
    (non-causal) length. See docs/models.md.
    """
    h, e = dims.hidden, dims.embedding_size
    n = dims.layers * (4 * h * h + 2 * h * dims.intermediate) + h * e + lm_head_fraction * e * dims.vocab_size
    if dims.factorized:
        n += e * h
    return 6.0 * n + 12.0 * dims.layers * h * seq_len
