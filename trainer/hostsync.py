"""Counting what a training step makes the host wait for, on any device (CPU included).

On CUDA an op that copies a value to the host (``.item()``, ``bool(t)``) or
sizes its output by the data (``nonzero``, boolean indexing, ``unique``)
stalls the CPU until the GPU has caught up: the launch queue drains and the
GPU idles while the next kernels are enqueued. ``torch.cuda.set_sync_debug_mode``
reports those, but only on CUDA. ``HostSyncs`` counts the aten ops that would
be one, by name and arguments, under a ``TorchDispatchMode``: it runs on CPU,
so a test can hold a step to zero.

What it cannot see on CPU: a device-to-host copy written as ``.cpu()`` /
``.tolist()`` of a tensor already on the CPU (nothing is dispatched), and a
sync inside a CUDA-only kernel choice. The GPU benchmark counts with
``torch.cuda.set_sync_debug_mode`` as well (``cuda_syncs``).
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that copy a value to the host or size their output by the data: each a host sync on CUDA.
SYNC_OPS = frozenset({"_local_scalar_dense", "is_nonzero", "nonzero", "nonzero_static_if_unbacked", "masked_select",
                      "unique", "_unique", "_unique2", "unique_dim", "unique_consecutive", "equal", "allclose"})
# Boolean-mask indexing runs a nonzero inside the kernel.
BOOL_INDEX_OPS = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})


def is_sync(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether one aten call would make the host wait for a CUDA device."""
    name = func.overloadpacket.__name__
    if name in SYNC_OPS:
        return True
    if name == "repeat_interleave":  # the total length must be read unless given
        return kwargs.get("output_size") is None and (len(args) < 4 or args[3] is None)
    if name in BOOL_INDEX_OPS and len(args) > 1 and isinstance(args[1], (list, tuple)):
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])
    return False


class HostSyncs(TorchDispatchMode):
    """Counts would-be host syncs (``syncs``, by op name: ``by_op``) and all aten ops (``ops``) while active.

    ``paused()`` lets the caller leave out host-side work (reading the host batch) inside the window.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.syncs = 0
        self.by_op: Counter[str] = Counter()
        self.counting = True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.counting:
            self.ops += 1
            if is_sync(func, args, kwargs):
                self.syncs += 1
                self.by_op[func.overloadpacket.__name__] += 1
        return func(*args, **kwargs)

    def paused(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """fn, not counted while it runs."""
        def run(*args: Any, **kwargs: Any) -> Any:
            before, self.counting = self.counting, False
            try:
                return fn(*args, **kwargs)
            finally:
                self.counting = before
        return run


def cuda_syncs(fn: Callable[[], Any]) -> int:
    """Host syncs torch's CUDA sync debug mode reports while fn runs (CUDA only; the device must be idle)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
            torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)
