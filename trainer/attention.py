"""How attention runs for a batch: the unpadded (varlen) layout and the attention kernel, picked on the host.

Three paths give the same losses and gradients (docs/models.md, "Fast paths"):

- **no mask** (every row full-length): SDPA without a mask;
- **masked** (ragged rows, ``unpad: false``): SDPA with a boolean key mask;
- **unpadded** (ragged rows): every layer runs on the T real tokens only,
  packed as [T, H], and attention is variable-length over the packed tokens
  with the rows' cumulative lengths (``cu_seqlens``): no padding FLOPs, no
  per-layer gather back to [B, L], no host sync.

Which kernel runs is decided on the host from what is static about a batch
(device, dtype, head size, path), never from device values, and recorded
(``Choice``; the trainer logs each new one, the GPU benchmark tabulates them):

| path | CUDA | CPU |
|---|---|---|
| no mask / masked | SDPA restricted to the chosen backend (``sdpa_kernel``): the first of flash, memory-efficient, math, cuDNN (torch's own order) that accepts the shape, or the one asked for | SDPA as torch picks |
| unpadded | ``flash``: FlashAttention-2's varlen kernel (``aten._flash_attention_forward`` with ``cu_seqlens``, dropout included) for fp16 / bf16; ``efficient``: the memory-efficient varlen kernel otherwise (fp32) | ``padded``: the packed q, k, v scattered back to [B, L] for one masked SDPA call, the output gathered to the packed tokens, where B·L² <= T² (many rows: 40 rows, 3,071 tokens padded to 128, 17 ms against 168 for ``dense``, forward and backward); ``dense``: one SDPA call over the packed tokens with a block-diagonal (same-sequence) mask; ``nested``: exact attention per sequence (nested tensors) once the packed batch is too long for a [T, T] mask |

**Bucketing.** A compiled step sees new shapes with every token-budget batch.
``unpad(mask, bucket=n)`` rounds the packed token count up to a multiple of
``n`` with a *filler* sequence (it reads a padding position, attends only to
itself and carries no label: losses and gradients are unchanged), so the
packed tensors take a bounded set of sizes; batch.py also pads the rows to a
multiple of 64 columns and marks the batch dimensions dynamic, so a compiled
model compiles once for every batch instead of once per shape (counted in
tests/test_compile_shapes.py).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# The unpadded path's CPU kernel: a [T, T] same-sequence mask up to this many packed tokens, else per sequence.
DENSE_MAX_TOKENS = 4096
ROW_BUCKET = 64  # a compiled step's rows are padded to a multiple of this many columns
TOKEN_BUCKET = 64  # ... and its packed token count rounded up to a multiple of this (< ROW_BUCKET: see unpad)

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
AUTO_ORDER = ("flash", "efficient", "math", "cudnn")  # torch's default priority (torch._C._get_sdp_priority_order)


class Unpadded(NamedTuple):
    """Where the real tokens of a padded [B, L] batch are: the layout of the unpadded path.

    Build it with ``unpad(attention_mask)`` (on the host: no device sync) and
    move it with ``.to(device)``.
    """

    indices: torch.Tensor  # [T'] int64: flat positions (in B*L) of the real tokens, row-major, then the filler's
    offsets: torch.Tensor  # [n+1] int64: cumulative sequence lengths (the rows, then the filler if any)
    max_seqlen: int  # longest sequence, in tokens
    packed_index: torch.Tensor  # [B*L] int64: each position's row in the packed [T'] tokens, -1 at padding
    cu_seqlens: torch.Tensor | None = None  # offsets as int32: the varlen kernels' layout
    doc: torch.Tensor | None = None  # [T'] int64: the sequence of each packed token (the dense path's mask)
    backend: str = "nested"  # the kernel attention runs on (``plan``; the table in the module docstring)
    real_tokens: int = -1  # T, the packed tokens before the filler (-1: no filler)
    rows: int = 0  # B, the rows of the padded batch (the ``padded`` kernel's layout)

    def to(self, device: torch.device | str) -> Unpadded:
        """The same layout on another device."""
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return self._replace(indices=move(self.indices), offsets=move(self.offsets),
                             packed_index=move(self.packed_index), cu_seqlens=move(self.cu_seqlens),
                             doc=move(self.doc))


def unpad(attention_mask: torch.Tensor, bucket: int = 0, doc: bool = True) -> Unpadded:
    """The packed layout of a [B, L] mask (1 = real token). Every row must hold at least one real token.

    ``doc=False`` leaves out the per-token sequence ids, which only the CPU kernels read (``dense``).

    ``bucket > 1`` rounds the packed length up to a multiple of ``bucket`` with one filler sequence
    that reads a padding position (a full batch has none: it is never bucketed). The filler is
    shorter than ``bucket``, so with ``bucket <= L`` it is never the longest sequence.
    """
    mask = attention_mask.to(torch.bool)
    lengths = mask.sum(1)
    if bool((lengths == 0).any()):
        raise ValueError("unpad: a row has no real tokens")
    flat = mask.reshape(-1)
    indices = flat.nonzero().squeeze(1)
    real = indices.numel()
    packed_index = torch.full_like(flat, -1, dtype=torch.long)
    packed_index[indices] = torch.arange(real, device=mask.device)
    seqs = lengths
    fill = -real % bucket if bucket > 1 else 0
    if fill and not bool(flat.all()):
        spare = int((~flat).nonzero()[0, 0])  # a padding position: pad id, pad position, no label
        indices = torch.cat([indices, torch.full((fill,), spare, dtype=torch.long, device=mask.device)])
        seqs = torch.cat([lengths, lengths.new_tensor([fill])])
    offsets = torch.zeros(seqs.numel() + 1, dtype=torch.long, device=mask.device)
    offsets[1:] = torch.cumsum(seqs, 0)
    seq_of = torch.repeat_interleave(torch.arange(seqs.numel(), device=mask.device), seqs) if doc else None
    return Unpadded(indices, offsets, int(seqs.max()), packed_index, offsets.to(torch.int32), seq_of,
                    real_tokens=real if indices.numel() != real else -1, rows=mask.shape[0])


# ------------------------------------------------------------------ choosing the kernel


class Choice(NamedTuple):
    """One recorded attention decision: for what (path, device, dtype, head size) which kernel runs."""

    path: str  # "no mask" | "masked" | "unpadded"
    device: str
    dtype: str
    head_dim: int
    backend: str

    def __str__(self) -> str:
        return f"{self.path} attention on {self.device} ({self.dtype}, head size {self.head_dim}): {self.backend}"


@functools.lru_cache(maxsize=64)
def _sdpa_eligible(device: torch.device, dtype: torch.dtype, heads: int, head_dim: int, length: int,
                   masked: bool, dropout: float) -> tuple[str, ...]:
    """The SDPA backends torch accepts for this shape on CUDA, in AUTO_ORDER (its own eligibility checks)."""
    q = torch.empty(1, heads, length, head_dim, device=device, dtype=dtype)
    mask = torch.ones(1, 1, 1, length, dtype=torch.bool, device=device) if masked else None
    params = torch.backends.cuda.SDPAParams(q, q, q, mask, dropout, False, False)
    checks = {"flash": torch.backends.cuda.can_use_flash_attention,
              "efficient": torch.backends.cuda.can_use_efficient_attention,
              "cudnn": torch.backends.cuda.can_use_cudnn_attention}
    return tuple(b for b in AUTO_ORDER if b == "math" or checks[b](params, False))


def flash_varlen_ok(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """FlashAttention-2's varlen kernel: an Ampere or newer GPU, fp16 / bf16, head size a multiple of 8 up to 256."""
    return (device.type == "cuda" and dtype in (torch.float16, torch.bfloat16) and head_dim % 8 == 0
            and head_dim <= 256 and torch.cuda.get_device_capability(device) >= (8, 0))


def pick_backend(path: str, device: torch.device, dtype: torch.dtype, heads: int, head_dim: int, length: int,
                 dropout: float, want: str = "auto", packed_tokens: int = 0, rows: int = 0) -> str:
    """The attention kernel for one batch, from static facts only (no device values: no sync).

    ``want``: "auto", or a backend to use where it accepts the shape ("flash", "efficient",
    "cudnn", "math"; the unpadded path takes "flash" or "efficient").
    """
    if path == "unpadded":
        if device.type != "cuda":
            if rows and rows * length * length <= packed_tokens * packed_tokens:
                return "padded"  # B·L² attention scores against T²
            return "dense" if packed_tokens <= DENSE_MAX_TOKENS else "nested"
        if want in ("auto", "flash") and flash_varlen_ok(device, dtype, head_dim):
            return "flash"
        return "efficient"
    if device.type != "cuda":
        return "sdpa"  # CPU: torch picks (its flash CPU kernel or math)
    eligible = _sdpa_eligible(device, dtype, heads, head_dim, length, path == "masked", dropout)
    return want if want in eligible else eligible[0]


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float,
         backend: str | None) -> torch.Tensor:
    """SDPA on [B, heads, L, D], restricted to ``backend`` first when one is named (then torch's order)."""
    if backend not in BACKENDS:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    order = [BACKENDS[backend]] + [BACKENDS[b] for b in AUTO_ORDER if b != backend]
    with sdpa_kernel(order, set_priority=True):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


# ------------------------------------------------------------------ attention over packed tokens


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: Unpadded,
                     dropout_p: float) -> torch.Tensor:
    """Bidirectional attention within each packed sequence: q, k, v [T, heads, D] -> [T, heads, D]."""
    if layout.backend == "flash":
        return torch.ops.aten._flash_attention_forward(
            q, k, v, layout.cu_seqlens, layout.cu_seqlens, layout.max_seqlen, layout.max_seqlen, dropout_p,
            False, False)[0]
    if layout.backend == "efficient":
        return torch.ops.aten._efficient_attention_forward(
            q[None], k[None], v[None], None, layout.cu_seqlens, layout.cu_seqlens, layout.max_seqlen,
            layout.max_seqlen, dropout_p, 0, torch.is_grad_enabled() and q.requires_grad)[0][0]
    if layout.backend == "dense":
        same = layout.doc[:, None] == layout.doc[None, :]  # [T, T]: same sequence

        def heads_first(t: torch.Tensor) -> torch.Tensor:
            return t.transpose(0, 1)[None]

        a = F.scaled_dot_product_attention(heads_first(q), heads_first(k), heads_first(v), attn_mask=same,
                                           dropout_p=dropout_p)
        return a[0].transpose(0, 1)
    if layout.backend == "padded":
        return _padded_attention(q, k, v, layout, dropout_p)
    return _nested_attention(q, k, v, layout, dropout_p)


def _padded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: Unpadded,
                      dropout_p: float) -> torch.Tensor:
    """The packed tokens scattered back to their [B, L] places, one SDPA call with the key mask, the
    output gathered back (a filler token reads its padding position's output, which nothing reads)."""
    rows = layout.rows
    length = layout.packed_index.numel() // rows
    real = layout.real_tokens if layout.real_tokens >= 0 else q.shape[0]
    places = layout.indices[:real]

    def padded(t: torch.Tensor) -> torch.Tensor:
        out = t.new_zeros(rows * length, *t.shape[1:]).index_copy(0, places, t[:real])
        return out.view(rows, length, *t.shape[1:]).transpose(1, 2)

    keys = (layout.packed_index >= 0).view(rows, 1, 1, length)
    a = F.scaled_dot_product_attention(padded(q), padded(k), padded(v), attn_mask=keys, dropout_p=dropout_p)
    return a.transpose(1, 2).reshape(rows * length, *q.shape[1:])[layout.indices]


def _nested_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: Unpadded,
                      dropout_p: float) -> torch.Tensor:
    """Nested (jagged) tensors sharing the layout's offsets: exact attention per sequence on CPU."""
    def nested(t: torch.Tensor) -> torch.Tensor:
        return torch.nested.nested_tensor_from_jagged(t, layout.offsets, max_seqlen=layout.max_seqlen,
                                                      min_seqlen=1).transpose(1, 2)

    a = F.scaled_dot_product_attention(nested(q), nested(k), nested(v), dropout_p=dropout_p)
    return a.transpose(1, 2).values()


def attention_inputs(kw: dict, host_mask: torch.Tensor, device: torch.device, unpadded: bool = True,
                     bucket: int = 0) -> dict:
    """Pick the fastest exact attention path for a batch, from its mask on the host (no device sync).

    Full-length batches drop the mask (SDPA may then use the flash kernel);
    ragged ones get the unpadded layout when ``unpadded`` is set (its packed
    length rounded up to a multiple of ``bucket``), else keep the mask.
    ``kw`` holds the model's keyword arguments; a new dict is returned.
    """
    kw = dict(kw)
    if bool(host_mask.all()):
        kw["attention_mask"] = None
    elif unpadded:
        # the CUDA kernels (flash, efficient) read cu_seqlens, never the per-token sequence ids
        kw["unpadded"] = unpad(host_mask, bucket, doc=device.type != "cuda").to(device)
    return kw


def path_of(kw: dict) -> str:
    """The attention path of the model's keyword arguments: "no mask", "masked" or "unpadded"."""
    if kw.get("unpadded") is not None:
        return "unpadded"
    return "no mask" if kw.get("attention_mask") is None else "masked"


def plan(kw: dict, heads: int, head_dim: int, dropout: float, device: torch.device, dtype: torch.dtype,
         want: str = "auto", compiled: bool = False) -> tuple[dict, Choice]:
    """The model's keyword arguments with the attention kernel set (``attention_backend``, or the
    unpadded layout's ``backend``), and the choice to record. A ``compiled`` model's CPU kernel is
    never ``padded``: its sizes are Python ints, one compile each, and its choice varies by batch."""
    path = path_of(kw)
    rows, length = kw["input_ids"].shape
    packed = kw["unpadded"].indices.numel() if path == "unpadded" else 0
    backend = pick_backend(path, device, dtype, heads, head_dim, length, dropout, want, packed,
                           0 if compiled else rows)
    kw = dict(kw)
    if path == "unpadded":
        kw["unpadded"] = kw["unpadded"]._replace(backend=backend)
    else:
        kw["attention_backend"] = backend
    name = str(dtype).removeprefix("torch.")
    return kw, Choice(path, device.type, name, head_dim, backend)
