"""``ShardLoader``: the public loader (state, resume, following a served corpus) and ``gather_state_dict``."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from schemas.errors import UserError
from schemas.manifest import corpus_root
from schemas.manifest import manifest_url as manifest_url_of
from shardforge import storage
from shardforge.console.words import counted
from shardforge.storage.contract import latest_manifest_url
from trainer.loader.collate import collate
from trainer.loader.plan import Cursor, Plan, ceil_div
from trainer.loader.unit import UnitDataset, identity_collate, iter_unit, worker_init

log = logging.getLogger(__name__)

STATE_VERSION = 1
CORRUPT_POLICIES = ("fail", "skip")
DEFAULT_PARTITIONS = 64  # partitions=None: this many, or one per reader when the run has more readers
# What a state must share with the loader it resumes (partitions too, when the loader fixes them).
_STRICT = ("fingerprint", "split", "seed", "shuffle_buffer", "batch_size", "tokens_per_batch")


class ShardLoader:
    """Batches from a shardforge corpus, sharded over ranks and workers, exactly resumable.

    Iterating yields dicts of tensors: ``input_ids`` int64 [B, L] right-padded
    with the pad id, ``attention_mask`` int64 0/1 [B, L], ``sample_ids`` int64
    [B] (global index of the sample in the corpus: shards in manifest order,
    offset within the shard), ``epoch`` int64 [B], ``is_pad`` bool [B] (rows
    replayed to even out ranks; every other row is seen once per epoch), and
    for pair rules ``token_type_ids`` int64 [B, L] and ``sentence_labels``
    int64 [B]. Iteration continues from the loader's current state (see
    ``state_dict``) and runs ``epochs`` epochs in total (forever when None).

    Every reader (a rank's DataLoader worker, or the rank itself without
    workers) gets data of its own: ``partitions`` (None: 64, or one per reader
    when there are more) are at least the readers, and a split with fewer
    non-empty shards than readers is cut into sample ranges (fixed-size
    batches; see ``Plan``). Where that cannot be done (too few samples, a
    token budget, fixed partitions below the readers) the loader refuses in
    one line, unless ``allow_idle`` (evaluation, which weighs by real tokens):
    then the idle readers only pad.
    """

    def __init__(self, manifest_url: str, split: str = "train", *, batch_size: int | None = 8,
                 tokens_per_batch: int | None = None, seed: int = 0, rank: int = 0, world_size: int = 1,
                 num_workers: int = 0, shuffle_buffer: int = 1000, corrupt_policy: str = "fail",
                 pin_memory: bool = False, epochs: int | None = None, partitions: int | None = None,
                 follow: bool = False, allow_idle: bool = False):
        if corrupt_policy not in CORRUPT_POLICIES:
            raise UserError(f"corrupt_policy must be one of {CORRUPT_POLICIES}, got {corrupt_policy!r}")
        if tokens_per_batch is None and (batch_size is None or batch_size < 1):
            raise UserError("give batch_size >= 1 or tokens_per_batch")
        if tokens_per_batch is not None and tokens_per_batch < 1:
            raise UserError("tokens_per_batch must be >= 1")
        if not 0 <= rank < world_size:
            raise UserError(f"rank {rank} is not in a world of size {world_size}")
        if (partitions is not None and partitions < 1) or shuffle_buffer < 1 or num_workers < 0:
            raise UserError("partitions and shuffle_buffer must be >= 1, num_workers >= 0")
        if epochs is not None and epochs < 0:
            raise UserError("epochs must be >= 0 or None")
        self.follow = follow
        self.split = split
        self.rank, self.world_size = rank, world_size
        self.num_workers = num_workers
        self.units = max(1, num_workers)  # num_workers=0 reads in-process as one unit
        self.readers = world_size * self.units
        self._fixed_partitions = partitions is not None
        self._partitions = partitions if partitions is not None else max(DEFAULT_PARTITIONS, self.readers)
        self._batching = (split, seed, shuffle_buffer, None if tokens_per_batch is not None else batch_size,
                          tokens_per_batch)
        # Following a served corpus: read what `latest` names (manifest-v{N}.json); else the given manifest.
        self._root = corpus_root(manifest_url_of(manifest_url))
        self.manifest_url = latest_manifest_url(self._root) if follow else manifest_url
        self._set_plan(self._make_plan(self.manifest_url))
        if self.plan.total_samples == 0:
            raise UserError(f"{manifest_url} has no {split!r} samples")
        if tokens_per_batch is not None and tokens_per_batch < self.plan.max_seq_len:
            raise UserError(f"tokens_per_batch {tokens_per_batch} is under the corpus's max_seq_len "
                            f"{self.plan.max_seq_len}: a batch holds whole sequences, so a budget a sequence does not "
                            f"fit in leaves batches empty; give tokens_per_batch {self.plan.max_seq_len} or more")
        self._check_readers(allow_idle)
        self.corrupt_policy = corrupt_policy
        self.epochs = epochs
        self.pin_memory = pin_memory
        if pin_memory and not torch.cuda.is_available():
            log.warning("pin_memory=True but no CUDA device is available; not pinning")
            self.pin_memory = False
        self._plan_changed = False
        self._adopted = False  # the plan is a resumed state's layout until the epoch ends
        self.skipped_shards: list[str] = []
        self._epoch = 0
        self._segment = self._full_segment
        self._t = 0  # batches this rank delivered in the current segment
        self._cursors: dict[int, Cursor] = {p: [0, 0, 0, 0] for p in self.own_parts}
        self._pads: dict[int, int] = {}

    # ------------------------------------------------------------ the plan and its readers

    def _make_plan(self, url: str, partitions: int | None = None, readers: int | None = None) -> Plan:
        """The plan of ``url`` for this layout (or for the given partitions and readers: a resumed state's)."""
        split, seed, shuffle_buffer, batch_size, tokens_per_batch = self._batching
        return Plan(url, split, seed, partitions or self._partitions, shuffle_buffer, batch_size, tokens_per_batch,
                    readers=readers or self.readers)

    def _set_plan(self, plan: Plan) -> None:
        self.plan = plan
        self.own_parts = [p for p in range(plan.P) if p % self.world_size == self.rank]
        self._full_segment = plan.segment_batches(self.world_size, self.units, lambda p: plan.part_batches[p])
        self.steps_per_epoch: int = self.units * self._full_segment

    def _check_readers(self, allow_idle: bool) -> None:
        """UserError (one line) when a reader would own no sample: it could only repeat others' data."""
        plan, w, units = self.plan, self.world_size, self.units
        idle = [(r, u) for r in range(w) for u in range(units)
                if not any(plan.part_samples[p] for p in plan.unit_parts(w, units, r, u))]
        if not idle:
            return
        ranks = counted(w, "rank")
        who = f"{counted(self.readers, 'reader')} ({ranks} x {units} DataLoader workers)" if self.num_workers else \
            f"{counted(self.readers, 'reader')} ({ranks}, no DataLoader workers)"
        live = sum(1 for n, *_ in plan.infos if n > 0)
        if self.readers > plan.P:
            why = f"{who} > partitions={plan.P}: raise partitions, or use fewer ranks or num_workers"
        elif plan.T is not None:
            why = (f"{counted(live, 'non-empty shard')} for {who}: with tokens_per_batch a shard is "
                   "read whole by one reader (the manifest counts tokens per shard); use at most "
                   f"{counted(live, 'reader')} (fewer ranks or num_workers), or rebuild with smaller shards "
                   "(shards.target_samples)")
        else:
            why = (f"{counted(plan.total_samples, 'sample')} for {who}; use fewer "
                   "ranks or num_workers")
        if not allow_idle:
            raise UserError(f"split {self.split!r} of {self.manifest_url}: {len(idle)} of {self.readers} readers "
                            f"would get no data of their own: {why}")
        log.warning("split %r: %d of %d readers own no data and only pad (%s)", self.split, len(idle),
                    self.readers, why)

    # ------------------------------------------------------------ iteration

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._epoch

    @property
    def steps_left_in_epoch(self) -> int:
        """Steps until the epoch ends (shorter than steps_per_epoch after an elastic resume)."""
        return self.units * self._segment - self._t

    @property
    def replaying(self) -> bool:
        """True when every unit of this rank has run dry this epoch and only replays (``is_pad`` batches)."""
        return all(self._pads.get(u, 0) > 0 for u in range(self.units))

    def end_epoch(self) -> None:
        """End the epoch here: the next batch is the next epoch's first. For an epoch whose every unit, on
        every rank, only replays: its length comes from the manifest's counts, and a corrupt shard that
        claimed samples it lacks (skipped) would leave it replaying for as long as the claim."""
        self._next_epoch()
        self._plan_changed = True  # the streams restart from the new epoch's start

    def _unit_starts(self) -> list[dict[str, Any]]:
        skipped = {i for i, n in enumerate(self.plan.names) if n in set(self.skipped_shards)}
        starts = []
        for u in range(self.units):
            parts = self.plan.unit_parts(self.world_size, self.units, self.rank, u)
            starts.append({
                "parts": parts, "epoch": self._epoch,
                "cursors": {p: list(self._cursors[p]) for p in parts},
                "pad": self._pads.get(u, 0),
                "done": max(0, ceil_div(self._t - u, self.units)),
                "segment": self._segment, "full_segment": self._full_segment,
                "skipped": skipped,
            })
        return starts

    def _next_epoch(self) -> None:
        self._epoch += 1
        # At an epoch boundary: a followed corpus's latest version (the same one on every rank), and this
        # layout's own plan again after a resumed state's. New versions only append shards, so global
        # sample ids (and hence the keyed masks) of the samples already there do not change.
        latest = _agree_on(latest_manifest_url(self._root)) if self.follow else self.manifest_url
        if latest != self.manifest_url:
            log.info("following corpus: %s -> %s", self.manifest_url, latest)
        if latest != self.manifest_url or self._adopted:
            self._use_manifest(latest)
        self._segment, self._t, self._pads = self._full_segment, 0, {}
        self._cursors = {p: [0, 0, 0, 0] for p in self.own_parts}

    def _use_manifest(self, url: str) -> None:
        """Re-plan on another version of the corpus (same loader arguments, this layout)."""
        self._set_plan(self._make_plan(url))
        self.manifest_url, self._plan_changed, self._adopted = url, True, False

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            self._plan_changed = False
            yield from self._iter_plan()
            if not self._plan_changed:
                return
            # a followed corpus grew at an epoch boundary: restart the streams on the new plan

    def _iter_plan(self) -> Iterator[dict[str, torch.Tensor]]:
        while self._segment == 0 and (self.epochs is None or self._epoch < self.epochs):
            self._next_epoch()  # an elastic resume can leave an empty remainder
        if self.epochs is not None and self._epoch >= self.epochs:
            return
        self._plan_changed = False  # the streams below start on the plan now in place
        starts = self._unit_starts()
        source: Iterator[dict[str, Any]]
        if self.num_workers == 0:
            source = iter_unit(self.plan, 0, starts[0], self.corrupt_policy, self.epochs)
        else:
            ds = UnitDataset(self.plan, starts, self._t % self.units, self.corrupt_policy, self.epochs)
            # collate_fn=identity_collate: keep the packed numpy batch as it is (see pack).
            # generator: the DataLoader draws its workers' base seed from it, not from torch's global
            # RNG, which a resumed run restores: a draw there would shift every dropout mask after it.
            source = iter(DataLoader(ds, batch_size=None, num_workers=self.num_workers,
                                     collate_fn=identity_collate, worker_init_fn=worker_init,
                                     generator=torch.Generator().manual_seed(self.plan.seed)))
        try:
            for packed in source:
                pad_id = self.plan.pad_id
                self._advance(packed.pop("_meta"))
                batch = collate(packed, pad_id)
                if self.pin_memory:
                    batch = {k: v.pin_memory() for k, v in batch.items()}
                yield batch
                if self._plan_changed:
                    return
        except GeneratorExit:  # the consumer closed the stream: the workers shut down in turn
            raise
        except BaseException:  # an error or an interrupt (SIGTERM's Preempted, Ctrl-C) while waiting for data
            _stop_workers(source)
            raise
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()
            del source  # shuts DataLoader workers down

    def _advance(self, meta: dict[str, Any]) -> None:
        if meta["epoch"] != self._epoch:
            raise RuntimeError(f"loader out of step: batch of epoch {meta['epoch']} in epoch {self._epoch}")
        part = meta["part"]
        if part is not None:
            self._cursors[part[0]] = list(part[1:])
        self._pads[meta["unit"]] = meta["pad"]
        for name in meta["skipped"]:
            if name not in self.skipped_shards:
                log.warning("skipping corrupt shard %s (%d skipped so far)", name, len(self.skipped_shards) + 1)
                self.skipped_shards.append(name)
        self._t += 1
        if self._t >= self.units * self._segment:
            self._next_epoch()

    # ------------------------------------------------------------ state

    def _config(self) -> dict[str, Any]:
        p = self.plan
        return {"fingerprint": p.fingerprint, "split": p.split, "seed": p.seed, "partitions": p.P,
                "shuffle_buffer": p.K, "batch_size": p.B, "tokens_per_batch": p.T, "split_readers": p.readers}

    def state_dict(self) -> dict[str, Any]:
        """This rank's position: plain ints, strings and lists (safe for torch.load(weights_only=True)).

        It covers only this rank's partitions: to resume on a different world
        size, merge the states of all ranks (``merge_state_dicts`` or, under
        torch.distributed, ``gather_state_dict``).
        """
        return {
            "version": STATE_VERSION, **self._config(), "manifest": self.manifest_url.rsplit("/", 1)[-1],
            "world_size": self.world_size, "num_workers": self.units, "ranks": [self.rank],
            "epoch": self._epoch, "segment_batches": self._segment, "step_in_segment": self._t,
            "cursors": [[p, *self._cursors[p]] for p in sorted(self._cursors)],
            "pads": [[self.rank, u, n] for u, n in sorted(self._pads.items())],
            "skipped_shards": list(self.skipped_shards),
        }

    @staticmethod
    def merge_state_dicts(states: list[dict[str, Any]]) -> dict[str, Any]:
        """One state from the states of several ranks of the same step (any order)."""
        if not states:
            raise UserError("no loader states to merge")
        first = states[0]
        same = ("version", "fingerprint", "split", "seed", "partitions", "shuffle_buffer", "batch_size",
                "tokens_per_batch", "split_readers", "world_size", "num_workers", "epoch", "segment_batches",
                "step_in_segment")
        for s in states[1:]:
            diff = [k for k in same if s.get(k) != first.get(k)]
            if diff:
                raise UserError(f"loader states are not from one step of one run (differ in {diff})")
        cursors: dict[int, list[int]] = {}
        for s in states:
            for c in s["cursors"]:
                if c[0] in cursors and cursors[c[0]] != c:
                    raise UserError(f"loader states disagree on partition {c[0]}")
                cursors[c[0]] = list(c)
        skipped = sorted({n for s in states for n in s["skipped_shards"]})
        return {**{k: first.get(k) for k in same},
                "ranks": sorted({r for s in states for r in s["ranks"]}),
                "cursors": [cursors[p] for p in sorted(cursors)],
                "pads": sorted(list(x) for s in states for x in s["pads"]),
                "skipped_shards": skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a state: exactly the same batches when the world size and worker
        count are unchanged, else every remaining sample of the epoch exactly once."""
        if state.get("version") != STATE_VERSION:
            raise UserError(f"loader state version {state.get('version')} is not {STATE_VERSION}")
        recorded = state.get("manifest")
        if self.follow and recorded and recorded != self.manifest_url.rsplit("/", 1)[-1]:
            # resume on the corpus version the checkpoint was reading (immutable), not today's latest
            self._use_manifest(storage.join(self._root, recorded))
            self._plan_changed = False
        mine = self._config()
        diff = [k for k in (*_STRICT, *(("partitions",) if self._fixed_partitions else ())) if state.get(k) != mine[k]]
        batching = [k for k in diff if k in ("batch_size", "tokens_per_batch")]
        if batching and batching == diff:
            was = ", ".join(f"{k} {state.get(k)}" for k in batching)
            raise UserError(f"this run's batches are cut at {was}, and it is resumed with "
                            f"{', '.join(f'{k} {mine[k]}' for k in batching)}: a run keeps its micro-batch for its "
                            f"life (it decides which samples share a batch); resume with {was} (to take fewer rows "
                            "at once, start a run with a smaller batch_size and more gradient_accumulation)")
        if diff:
            raise UserError(f"loader state is from a different corpus or loader config (differs in {diff}); "
                            "resume with the same manifest, split, seed, partitions, shuffle_buffer and batching "
                            "(to go on with the run on another corpus, read from its start: --set switch_corpus=true)")
        self._adopt_layout(state)
        cursors = {c[0]: list(c[1:]) for c in state["cursors"]}
        known = set(self.plan.names)
        self.skipped_shards = [n for n in state["skipped_shards"] if n in known]
        self._epoch = int(state["epoch"])
        same_layout = (state["world_size"] == self.world_size and state["num_workers"] == self.units
                       and self.rank in state["ranks"])
        if same_layout:
            self._cursors = {p: cursors[p] for p in self.own_parts}
            self._segment = int(state["segment_batches"])
            self._t = int(state["step_in_segment"])
            self._pads = {u: n for r, u, n in state["pads"] if r == self.rank}
            return
        missing = [p for p in range(self.plan.P) if p not in cursors]
        if missing:
            raise UserError(f"loader state covers ranks {state['ranks']} only (partitions {missing[:8]}... "
                            "missing): to resume on another world size, merge the states of all ranks "
                            "(ShardLoader.merge_state_dicts or gather_state_dict)")
        self._cursors = {p: cursors[p] for p in self.own_parts}
        # A new layout starts a remainder segment: every unit yields as many batches
        # as the fullest new unit has left, so ranks still take equal steps.
        self._segment = self.plan.segment_batches(
            self.world_size, self.units, lambda p: max(0, self.plan.part_batches[p] - cursors[p][0]))
        self._t = 0
        self._pads = {}


    def _adopt_layout(self, state: dict[str, Any]) -> None:
        """Plan with the state's partitions and pieces (they follow the layout it was taken on) until the
        epoch ends: its cursors mean positions in that plan. Partitions the loader fixes stay fixed."""
        partitions = state.get("partitions")
        readers = int(state.get("split_readers") or 1)  # a state without the key never split a shard
        if self._fixed_partitions or not isinstance(partitions, int) or partitions < 1:
            partitions = self.plan.P
        if (partitions, readers) == (self.plan.P, self.plan.readers):
            return
        plan = self._make_plan(self.manifest_url, partitions, readers)
        if (plan.P, plan.readers, plan.part_pieces) != (self.plan.P, self.plan.readers, self.plan.part_pieces):
            self._set_plan(plan)
            self._adopted = True


def _stop_workers(source: Any) -> None:
    """End a DataLoader's workers at once: they may be stuck in a read that never returns, and the
    DataLoader's own shutdown waits 5 s for each worker in turn before it kills it.

    Their pids leave torch's SIGCHLD check first, as the DataLoader's own shutdown does before it
    kills a worker: a worker that had not yet set its signal handlers (just forked, on a busy
    machine) dies of the SIGTERM, and the check would then raise "DataLoader worker (pid N) is
    killed by signal: Terminated" in this process at its next SIGCHLD: in place of the error being
    handled, or in unrelated code later while the iterator lives on in that error's traceback."""
    if getattr(source, "_worker_pids_set", False):  # torch's attributes of a multi-process iterator
        from torch.utils.data._utils import signal_handling

        signal_handling._remove_worker_pids(id(source))
        source._worker_pids_set = False
    for w in getattr(source, "_workers", ()):
        with contextlib.suppress(Exception):
            if w.is_alive():
                w.terminate()  # a worker whose handlers are set exits 0 on its parent's SIGTERM


def _collective_device(group: Any = None) -> torch.device:
    """Where the group's collective tensors live: this rank's GPU under NCCL, else the CPU."""
    import torch.distributed as dist

    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" \
        else torch.device("cpu")


def _agree_on(value: str) -> str:
    """Rank 0's value on every rank (a collective when torch.distributed is initialized)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    device = _collective_device()
    data = value.encode("utf-8")
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)  # UTF-8 bytes in uint8 tensors: nothing is pickled
    buf = torch.zeros(int(size.item()), dtype=torch.uint8, device=device)
    if dist.get_rank() == 0:
        buf.copy_(torch.tensor(list(data), dtype=torch.uint8))
    dist.broadcast(buf, src=0)
    return bytes(buf.cpu().tolist()).decode("utf-8")


def gather_state_dict(loader: ShardLoader, group: Any = None) -> dict[str, Any]:
    """The merged loader state of all ranks (a collective: every rank must call it).

    States travel as JSON bytes in uint8 tensors (never pickled). Without an
    initialized process group this is ``loader.state_dict()``.
    """
    import torch.distributed as dist

    local = loader.state_dict()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return local
    device = _collective_device(group)
    data = torch.tensor(list(json.dumps(local).encode("utf-8")), dtype=torch.uint8, device=device)
    n = dist.get_world_size(group)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(n)]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64, device=device), group=group)
    width = int(max(s.item() for s in sizes))
    padded = torch.zeros(width, dtype=torch.uint8, device=device)
    padded[: data.numel()] = data
    bufs = [torch.zeros(width, dtype=torch.uint8, device=device) for _ in range(n)]
    dist.all_gather(bufs, padded, group=group)
    states = [json.loads(bytes(b[: int(s.item())].cpu().tolist()).decode("utf-8")) for b, s in zip(bufs, sizes, strict=True)]
    return ShardLoader.merge_state_dicts(states)
