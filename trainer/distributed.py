"""The process group, this rank's device, the few collectives the loop needs, and RNG state per rank.

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; without them a run is one
process and every collective here is the identity. The device is decided
once, in ``setup``: the process group's backend, the loader's pinning and the
collectives all follow from it.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from schemas.errors import UserError
from shardforge.console.words import counted


@dataclass
class Dist:
    """This process's place in the run: rank, world size, local rank and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def main(self) -> bool:
        """Rank 0: the one that writes checkpoints, metrics and logs."""
        return self.rank == 0

    @property
    def collective_device(self) -> torch.device:
        """Where collective tensors live: the GPU under NCCL, else the CPU (gloo)."""
        return self.device if self.device.type == "cuda" else torch.device("cpu")

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's copy of a same-shaped tensor (on the CPU)."""
        if self.world_size == 1:
            return [t]
        dev = self.collective_device
        parts = [torch.empty_like(t, device=dev) for _ in range(self.world_size)]
        dist.all_gather(parts, t.to(dev))
        return [p.cpu() for p in parts]

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over ranks in place (a tensor on ``collective_device``; queued, no host sync on GPUs)."""
        if self.world_size > 1:
            dist.all_reduce(t)
        return t

    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on one (ranks may see SIGTERM at different steps)."""
        return self.any_each([flag])[0]

    def any_each(self, flags: list[bool]) -> list[bool]:
        """Each flag true on every rank when it is true on one: one collective for all of them."""
        if self.world_size == 1:
            return list(flags)
        t = torch.tensor([int(f) for f in flags], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [bool(x) for x in t.tolist()]

    def barrier(self) -> None:
        """Wait for every rank (no-op in one process)."""
        if self.world_size > 1:
            dist.barrier()


def check_cuda(requested: str, index: int) -> None:
    """UserError (one line) when the requested GPU is not there: a CPU build of torch, no driver or
    device, or fewer GPUs than the index (torch's own errors are an AttributeError of its C module
    on a CPU build, and an "invalid device ordinal" from the driver)."""
    # ROCm builds drive AMD GPUs through the same "cuda" device type: torch.version.hip, not .cuda
    hip = getattr(torch.version, "hip", None)
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else f"ROCm {hip}" if hip else None
    if build is None:
        raise UserError(f"--device {requested}: this torch ({torch.__version__}) is a CPU build; install a CUDA "
                        "build of torch, or run with --device cpu (or auto)")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if index >= count:
        have = counted(count, "visible GPU") if count else "no GPU visible (driver, device, " \
               "or CUDA_VISIBLE_DEVICES)"
        raise UserError(f"--device {requested}: GPU {index} is not there: {have}; torch {torch.__version__} "
                        f"({build})")


def pick_device(requested: str, local_rank: int) -> torch.device:
    """The device of this rank: cfg.device, or with "auto" the rank's GPU when there is one, else the CPU."""
    if requested != "auto":
        device = torch.device(requested)
        # "cuda" without an index means this rank's GPU (torch.cuda.set_device refuses an index-less device)
        return torch.device("cuda", local_rank) if device.type == "cuda" and device.index is None else device
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


_joined = False  # this process joined a process group (``setup``; ``leave`` reads it)


def setup(requested_device: str, timeout_s: float | None = None) -> Dist:
    """Decide the device once, join the process group (NCCL on GPUs, gloo on CPUs) and bind the GPU.
    ``timeout_s``: how long a collective waits for every rank before it fails (None: torch's default)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0")) if world > 1 else 0
    device = pick_device(requested_device, local_rank)
    if device.type == "cuda":
        check_cuda(requested_device, device.index or 0)
        torch.cuda.set_device(device)
    if world == 1:
        return Dist(device=device)
    if not dist.is_initialized():
        timeout = {} if timeout_s is None else {"timeout": datetime.timedelta(seconds=timeout_s)}
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo", **timeout)
    global _joined
    _joined = True
    quiet_replica_logs(dist.get_rank())
    return Dist(dist.get_rank(), dist.get_world_size(), local_rank, device)


# The loggers of this project's code a training process runs: its own modules log under their
# module names (trainer.checkpoint, shardforge.storage.retry), the loop under "shardforge.train".
OWN_LOGGERS = ("shardforge", "trainer")


def quiet_replica_logs(rank: int) -> None:
    """On every rank but 0, this project's loggers pass warnings and errors only: the information
    lines (which attention kernel, where a run stands) come once, from rank 0, and any rank's warnings
    still show (Hugging Face's Trainer does the same with ``log_level_replica``). Only the commands'
    level (INFO, ``trainer.train.command_logging``) or none is raised: a level one of them was
    given on purpose (DEBUG) is left alone."""
    for name in OWN_LOGGERS:
        ours = logging.getLogger(name)
        if rank != 0 and ours.level in (logging.NOTSET, logging.INFO):
            ours.setLevel(logging.WARNING)


# How gloo and NCCL word a collective that waited past the process group's timeout.
_TIMED_OUT = re.compile(r"Timed out waiting \d+ms|collective operation timeout|Watchdog caught", re.I)


def collective_timeout(e: BaseException, timeout_s: float) -> UserError | None:
    """The one line for a collective that waited ``timeout_s`` for the other ranks (``e``: what torch
    raised), or None when e is something else."""
    if not (dist.is_available() and dist.is_initialized() and _TIMED_OUT.search(str(e))):
        return None
    return UserError(f"rank {dist.get_rank()} of {dist.get_world_size()}: a collective waited {timeout_s:g} s "
                     "(ddp_timeout) for the other ranks: one of them hung or died, and its own log says why "
                     "(where a rank does long work the others wait for, raise --ddp_timeout)")


def teardown(dd: Dist) -> None:
    """Leave the process group (when this run joined one), every rank past the loop's last collective.
    Under DDP the group's threads outlive this (``leave`` says what the process's exit does about it)."""
    if dd.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def leave(code: int) -> int:
    """The exit of a rank process: ``code`` back to the caller in a process that never joined a group;
    in one that did, the output flushed and the process ended at once with ``code`` (``os._exit``).

    Why not the interpreter's own exit: DistributedDataParallel keeps the process group alive past
    ``destroy_process_group`` (torch 2.13, gloo: its two work threads and its transport thread still
    run after it, and the group holds ten more references than before the wrapper was made, none
    that Python's gc can find), so the interpreter tears itself down with those threads running. Under
    load, one rank of a 2-process gloo run that had finished and checkpointed was seen to abort there
    ("terminate called without an active exception"), reported to torchrun as a failed rank. The
    mechanism that fits: a C++ thread that needs the GIL once teardown has begun is ended by Python
    with ``pthread_exit``, whose unwinding through a noexcept frame calls ``std::terminate``.
    Everything the run writes is closed before this point (metrics, trackers, checkpoints, DataLoader
    workers); what is left is buffered output and the log handlers, flushed here.
    """
    if not _joined:
        return code
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can be written to it
            pass
    os._exit(code)


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Element-wise sums over ranks in float64 (the values themselves without a process group)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return values
    dev = device if device.type == "cuda" else torch.device("cpu")
    total = torch.tensor(values, dtype=torch.float64, device=dev)
    dist.all_reduce(total)
    return total.cpu().tolist()


# ------------------------------------------------------------------ RNG state per rank

def gather_rng(dd: Dist) -> dict[str, list[torch.Tensor]]:
    """The generator states of all ranks (index = rank); uint8 tensors, safe for weights_only loading.

    A collective: every rank calls it (dropout draws differ by rank, so each
    rank's stream is saved).
    """
    rng = {"cpu": dd.all_gather(torch.get_rng_state())}
    if dd.device.type == "cuda":
        rng["cuda"] = dd.all_gather(torch.cuda.get_rng_state(dd.device))
    return rng


def restore_rng(rng: dict[str, Any], dd: Dist, fallback_seed: int) -> None:
    """This rank's saved generator state; a new rank (the world grew) gets a fresh seeded stream."""
    cpu = rng["cpu"] if isinstance(rng["cpu"], list) else [rng["cpu"]]
    if dd.rank < len(cpu):
        torch.set_rng_state(cpu[dd.rank])
        cuda = rng.get("cuda")
        if dd.device.type == "cuda" and cuda is not None:
            cuda = cuda if isinstance(cuda, list) else [cuda]
            if dd.rank < len(cuda):
                torch.cuda.set_rng_state(cuda[dd.rank], dd.device)
    else:
        torch.manual_seed(fallback_seed)
