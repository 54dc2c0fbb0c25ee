"""Running out of memory: one line that says what did not fit and what to change.

A run that needs more memory than its device has (the ``roberta-base`` recipe's 128-sequence
micro-batches on a 24 GB card, a long-sequence corpus, a large model) ends in one line (exit 2), not in
torch's traceback: where (the device and its memory), when (setting up, or the step and its micro-batch
shape), what the step's fixed part takes (weights, gradients and the optimizer's two moments, AdamW's or
LAMB's: 16 bytes a parameter in fp32), and the flags that halve the micro-batch while the optimizer step
keeps its size. CUDA's allocator raises ``torch.OutOfMemoryError``, the CPU's a RuntimeError naming its
allocator; a compiled step may wrap either (inductor's errors keep the original as their cause).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator

import torch

from schemas.config import TrainConfig
from schemas.errors import UserError

# Words of the CPU allocator's failure ("DefaultCPUAllocator: can't allocate memory: you tried to allocate N
# bytes"); CUDA's is torch.OutOfMemoryError.
CPU_ALLOCATOR_FAILED = re.compile(r"CPUAllocator: (can't allocate memory|not enough memory)")
# fp32 weights, their gradients and the optimizer's two moments (AdamW and LAMB both keep two).
FIXED_BYTES_PER_PARAM = 16
GIB = 2**30


def is_out_of_memory(e: BaseException | None) -> bool:
    """Whether ``e``, or an exception it was raised from or during, is an allocator's out-of-memory."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, torch.OutOfMemoryError) or CPU_ALLOCATOR_FAILED.search(str(e)):
            return True
        e = e.__cause__ or e.__context__
    return False


@contextlib.contextmanager
def out_of_memory_said(line: Callable[[BaseException], str]) -> Iterator[None]:
    """An allocator's out-of-memory inside the block leaves it as a UserError of ``line(e)`` (read when it
    happens: the step it names is the one that ran out); any other exception passes unchanged."""
    try:
        yield
    except Exception as e:
        if not is_out_of_memory(e):
            raise
        raise UserError(line(e)) from None


def asked_bytes(e: BaseException) -> str | None:
    """The allocation that failed, as torch's message says it ("3.07 GiB"), else None."""
    text = str(e)
    m = re.search(r"Tried to allocate ([\d.]+ [KMGT]?i?B)", text)
    if m:
        return m[1]
    m = re.search(r"tried to allocate (\d+) bytes", text)
    return f"{int(m[1]) / GIB:.2f} GiB" if m else None


def device_memory(device: torch.device) -> tuple[str, int | None]:
    """The device in words with its memory, and that memory in bytes (None for the host's, whose limit may
    be a container's or a ulimit's): ("cuda:0 (NVIDIA A10G, 22.1 GiB)", 23.7e9); ("the CPU (host memory)",
    None)."""
    if device.type != "cuda":
        return f"the {device.type.upper()} (host memory)", None
    props = torch.cuda.get_device_properties(device)
    return f"{device} ({props.name}, {props.total_memory / GIB:.1f} GiB)", props.total_memory


def smaller_batch(cfg: TrainConfig, accum: int) -> str:
    """The flags that halve the micro-batch, and what keeps the optimizer step's size ("": it is one row)."""
    budget = cfg.tokens_per_batch or cfg.batch_size
    if budget < 2:
        return ""
    flag = f"--tokens_per_batch {budget // 2}" if cfg.tokens_per_batch else f"--batch_size {budget // 2}"
    if cfg.gradient_accumulation is None and cfg.global_batch_sequences:
        return (f"give {flag} (gradient accumulation keeps the global batch of {cfg.global_batch_sequences} "
                "sequences)")
    if cfg.gradient_accumulation is None and cfg.global_batch_tokens:
        return f"give {flag} (gradient accumulation keeps the global batch of {cfg.global_batch_tokens} tokens)"
    return f"give {flag} --gradient_accumulation {2 * accum} (the same global batch in twice the micro-batches)"


SMALLER_MODEL = "a smaller model (--model_size, --recipe)"
MORE_MEMORY = "or a device with more memory"
RECOMPUTE = "--activation_checkpointing (the same micro-batch, its activations recomputed: about a third more compute)"


def out_of_memory_line(e: BaseException, cfg: TrainConfig, device: tuple[str, int | None], *,
                       step: int | None = None, accum: int = 1, max_len: int | None = None,
                       params: int | None = None, evaluating: bool = False) -> str:
    """The one line for an out-of-memory ``e`` on ``device`` (``device_memory``'s): during set-up
    (``step`` None), or at ``step`` or the evaluation after the step before it."""
    where, cap = device
    asked = asked_bytes(e)
    if step is None:
        torch_said = f" (torch tried to allocate {asked})" if asked else ""
        return (f"out of memory on {where} setting up the run, before step 1{torch_said}: the model and its "
                f"checkpoint do not fit; {SMALLER_MODEL} {MORE_MEMORY}")
    torch_said = f"; torch tried to allocate {asked}" if asked else ""
    n = cfg.batch_size
    rows = f"{cfg.tokens_per_batch} tokens" if cfg.tokens_per_batch else f"{n} sequence{'s' if n > 1 else ''}"
    longest = f" of up to {max_len} tokens" if max_len and not cfg.tokens_per_batch else ""
    when = f"in the evaluation after step {step - 1}" if evaluating else f"at step {step}"
    line = (f"out of memory on {where} {when} ({accum} micro-batch{'es' if accum > 1 else ''} of {rows}{longest} "
            f"a step{torch_said})")
    if params:
        fixed = params * FIXED_BYTES_PER_PARAM
        if cap and fixed >= 0.8 * cap:
            return (f"{line}: the {params / 1e6:.0f}M parameters' weights, gradients and optimizer state alone "
                    f"take ~{fixed / GIB:.1f} GiB of its {cap / GIB:.1f} GiB; {SMALLER_MODEL} {MORE_MEMORY}")
        line += f"; weights, gradients and optimizer state take ~{fixed / GIB:.1f} GiB, the rest is activations"
    fix = smaller_batch(cfg, accum)
    # Recomputing activations helps a training step (not an evaluation, which keeps none).
    recompute = not evaluating and not cfg.activation_checkpointing
    if not fix:
        return (f"{line}: even one row does not fit; {SMALLER_MODEL}, shorter sequences (shardforge repack "
                f"--max_seq_len), --precision bf16{', --activation_checkpointing' if recompute else ''} "
                f"{MORE_MEMORY}")
    return f"{line}: {fix}" + (f"; or {RECOMPUTE}" if recompute else "")
