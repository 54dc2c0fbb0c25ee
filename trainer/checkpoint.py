"""Checkpoints on any fsspec URL: atomic, last-k retention, safe loading.

A checkpoint is one ``torch.save`` blob ``ckpt-{step:08d}.pt`` under
``{run}/checkpoints/``, written through a temporary name and moved into place,
so a crash mid-write never leaves a torn file under a real name. Everything in
it is tensors and plain Python containers, so it loads with
``torch.load(weights_only=True)`` — nothing is unpickled.

``CheckpointManager`` (torchtitan's shape) is handed the run's stateful
objects and owns what is saved (model, optimizer, schedule, loader position,
every rank's RNG state, the config), when (``save(step, force)``), what is
kept (the newest ``keep_last``) and how a run resumes (``load()``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import math
import posixpath
import re
import warnings
from typing import Any

import torch

from schemas.config import ModelConfig, TrainConfig
from schemas.errors import UserError
from schemas.run_folder import DIGEST_SUFFIX
from shardforge.console.words import counted
from shardforge.storage import (
    get_fs,
    join,
    read_bytes,
    redact_url,
    redact_urls,
    remove_stale_tmps,
    retry,
    write_bytes_atomic,
)
from trainer.distributed import Dist, gather_rng, restore_rng
from trainer.loader import ShardLoader
from trainer.mixing import MixedLoader, gather_loader_state
from trainer.model import resolve_dims
from trainer.optim import lr_schedule
from trainer.run_folder import checkpoint_dir, list_checkpoints

log = logging.getLogger(__name__)


def save_checkpoint(run: str, step: int, state: dict[str, Any], keep_last: int = 3) -> str:
    """Write state atomically as checkpoint `step`; keep only the newest keep_last up to it. Checkpoints of
    later steps are of a timeline the run went back from (it resumed from an older one: they did not load)
    and are removed: never this one."""
    buf = io.BytesIO()
    torch.save(state, buf)
    url = join(checkpoint_dir(run), f"ckpt-{step:08d}.pt")
    data = buf.getvalue()
    # The blob's sha256 beside it, written first: load_checkpoint refuses a blob whose bytes changed
    # (torch.load checks no data CRC, so flipped bytes loaded as damaged weights).
    write_bytes_atomic(url + DIGEST_SUFFIX, hashlib.sha256(data).hexdigest().encode())
    write_bytes_atomic(url, data)
    if keep_last > 0:
        fs, _ = get_fs(url)
        found = list_checkpoints(run)
        upto = [u for s, u in found if s <= step]
        for old in [u for s, u in found if s > step] + upto[:-keep_last]:
            for gone in (old, old + DIGEST_SUFFIX):
                _, p = get_fs(gone)
                with contextlib.suppress(FileNotFoundError):
                    retry(lambda p=p: fs.rm(p), f"remove {gone}")
    return url


def recorded_digest(url: str) -> str | None:
    """The sha256 written beside a checkpoint (None for one written before digests were)."""
    try:
        return read_bytes(url + DIGEST_SUFFIX).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return None


def load_checkpoint(url: str) -> dict[str, Any]:
    """Load a checkpoint with weights_only=True (no arbitrary unpickling)."""
    try:
        data = read_bytes(url)
    except FileNotFoundError:
        raise UserError(f"checkpoint not found: {url}") from None
    digest = recorded_digest(url)
    if digest is not None and hashlib.sha256(data).hexdigest() != digest:
        raise UserError(f"{url} is not a loadable shardforge checkpoint: its bytes do not match the sha256 "
                        f"recorded when it was written ({posixpath.basename(url)}{DIGEST_SUFFIX}): damaged on disk "
                        "or in transit")
    try:
        with warnings.catch_warnings():  # torch's notes on a foreign pickle protocol: the refusal says it
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - corrupt or foreign file
        raise UserError(f"{url} is not a loadable shardforge checkpoint: {why_unloadable(e)}") from None


def why_unloadable(e: BaseException) -> str:
    """torch.load's refusal in one line, without its advice to load the file with weights_only=False."""
    text = str(e)
    named = re.search(r"GLOBAL (\S+)", text)
    if named or "weights_only" in text:
        what = f"it names {named.group(1)}, which no checkpoint holds" if named else "it does not load as one"
        return f"{what}; refused without running any of it (a corrupt or hostile file, or not a shardforge checkpoint)"
    return " ".join(text.split())[:300] or type(e).__name__


def latest_checkpoint(run: str) -> str | None:
    found = list_checkpoints(run)
    return found[-1][1] if found else None


def load_latest_checkpoint(run: str) -> tuple[str, dict[str, Any]] | None:
    """(url, state) of the newest checkpoint of run that loads; None when the run has none.

    A newer checkpoint that does not load (truncated by a full disk, damaged in
    transit) is skipped with one warning line each, so a run resumes from the
    last good state instead of stopping. When checkpoints exist but none loads,
    that is an error: starting over silently would throw the run away.
    """
    found = list_checkpoints(run)
    skipped: list[str] = []
    for _, url in reversed(found):
        try:
            state = load_checkpoint(url)
        except UserError as e:
            why = str(e).removeprefix(f"{url} is not a loadable shardforge checkpoint: ")
            log.warning("skipping checkpoint %s: it does not load (%s)", url, why)
            skipped.append(url)
            continue
        if not isinstance(state, dict):
            log.warning("skipping checkpoint %s: it holds a %s, not a checkpoint", url, type(state).__name__)
            skipped.append(url)
            continue
        if skipped:
            log.warning("resuming from %s, the newest checkpoint that loads (%d newer skipped)", url, len(skipped))
        return url, state
    if skipped:
        what = "the one checkpoint" if len(skipped) == 1 else f"none of the {len(skipped):,} checkpoints"
        raise UserError(f"{what} in {checkpoint_dir(run)} {'does not load' if len(skipped) == 1 else 'loads'}; move "
                        f"{'it' if len(skipped) == 1 else 'them'} away to start the run over, or train into another "
                        "output")
    return None


# ------------------------------------------------------------------ the manager

class CheckpointManager:
    """Saves and restores a run: handed the stateful objects, it decides what is saved and when.

    Every rank calls ``save`` and ``load`` (saving gathers every rank's loader
    position and RNG state, both collectives); only the main rank writes.
    """

    def __init__(self, cfg: TrainConfig, dd: Dist, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: Any, loader: ShardLoader | MixedLoader, vocab_size: int, tokenizer_sha256: str,
                 precision: Any = None, pad_id: int | None = None, counters: Any = None, accum: int = 1):
        self.cfg, self.dd, self.accum = cfg, dd, accum
        self.model, self.optimizer, self.scheduler, self.loader = model, optimizer, scheduler, loader
        self.vocab_size, self.tokenizer_sha256 = vocab_size, tokenizer_sha256
        self.precision = precision  # trainer.precision.Precision: the fp16 loss scaler's state
        self.counters = counters  # trainer.metrics.RunCounters: tokens seen, smoothed loss
        self.pad_id = pad_id  # recorded: export rebuilds the model with it (BERT's is 0)

    def load(self) -> int:
        """Restore the newest checkpoint that loads (when cfg.resume); the step to continue from (0: none).

        Without resume, a run folder that holds checkpoints is refused: the new run's checkpoints would
        sit among the old run's, and retention (the newest keep_last by step) would remove the new ones.
        """
        if self.dd.main:  # a checkpoint write cut by SIGKILL leaves a full-size temporary: remove it
            remove_stale_tmps(checkpoint_dir(self.cfg.output))
        if not self.cfg.resume:
            held = list_checkpoints(self.cfg.output)
            if held:
                raise UserError(f"--no-resume: {checkpoint_dir(self.cfg.output)} holds {counted(len(held), 'checkpoint')} of an "
                                f"earlier run (up to step {held[-1][0]}); a new run there would mix with them: train "
                                "into a new --output, or remove that folder first")
            return 0
        found = load_latest_checkpoint(self.cfg.output)
        if not found:
            return 0
        url, state = found
        check_same_model(self.model, state, url, self.cfg, self.vocab_size)
        self._keep_warmup(state)
        check_same_optimizer(state, url, self.cfg)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self._load_loader(state, url)
        step = int(state["step"])
        restore_rng(state["rng"], self.dd, self.cfg.seed + self.dd.rank + step)
        if self.precision is not None:
            self.precision.load_state_dict(state.get("scaler"))
        if self.counters is not None:
            self.counters.load_state_dict(state.get("counters", {}))
        if self.dd.main:
            log.info("resumed from %s at step %d", url, step)
            stretched = schedule_change(self.cfg, step, state.get("config", {}).get("steps"))
            if stretched:
                log.warning("%s", stretched)
            saved, now = state.get("step_batch"), self.step_batch()
            if isinstance(saved, dict) and step_batch_size(saved) != step_batch_size(now):
                log.warning("this run's steps take %s; %s took %s: the schedule and the optimizer's state go on as "
                            "saved (to keep the batch: --set global_batch_sequences=..., or --gradient_accumulation)",
                            describe_step_batch(now), posixpath.basename(url), describe_step_batch(saved))
                budget = token_budget_line(self.cfg, step, self.counters.tokens_seen if self.counters else None,
                                           state.get("config", {}).get("steps"))
                if budget:
                    log.warning("%s", budget)
        return step

    def _keep_warmup(self, state: dict[str, Any]) -> None:
        """A warmup from ``warmup_ratio`` (the same ratio as the checkpoint's) keeps the checkpoint's warmup
        steps: this run's may count other steps (a longer --steps, or --max_tokens planned for steps of
        another size), and the warmup the run did is the one its schedule goes on from. ``self.cfg`` and the
        scheduler take it; the run reads its config back from here."""
        saved = state.get("config", {}).get("optim")
        now = self.cfg.optim
        if not isinstance(saved, dict) or now.warmup_ratio is None or saved.get("warmup_ratio") != now.warmup_ratio:
            return
        if now.warmup_steps != math.ceil(now.warmup_ratio * self.cfg.steps):  # set apart from the ratio
            return
        warmup = int(saved.get("warmup_steps", now.warmup_steps))
        if warmup == now.warmup_steps:
            return
        if self.dd.main:
            log.info("warmup_ratio %g: the schedule keeps the checkpoint's %d warmup steps (of this run's %d steps "
                     "the ratio makes %d)", now.warmup_ratio, warmup, self.cfg.steps, now.warmup_steps)
        self.cfg = self.cfg.model_copy(update={"optim": now.model_copy(update={"warmup_steps": warmup})})
        self.scheduler.lr_lambdas = [lr_schedule(now.schedule, warmup, self.cfg.steps)
                                     for _ in self.scheduler.lr_lambdas]

    def step_batch(self) -> dict[str, Any]:
        """What one optimizer step takes: ranks, micro-batches per step and the micro-batch (saved, compared
        on resume: a changed world size or accumulation changes the global batch mid-run)."""
        return {"world_size": self.dd.world_size, "accumulation": self.accum, "batch_size": self.cfg.batch_size,
                "tokens_per_batch": self.cfg.tokens_per_batch}

    def _load_loader(self, state: dict[str, Any], url: str) -> None:
        """The loader's position; with ``switch_corpus``, a checkpoint of another corpus leaves this corpus's
        loader at its start (the checkpoint's own corpus resumes exactly, as always)."""
        before = str(state.get("config", {}).get("data", ""))
        try:
            self.loader.load_state_dict(state["loader"])
        except UserError:
            if not (self.cfg.switch_corpus and before != redact_url(self.cfg.data)):
                raise
            if self.dd.main:
                log.warning("switch_corpus: %s trained on %s; this run goes on from its step on %s, read from "
                            "its start", url, before, redact_url(self.cfg.data))

    def due(self, step: int) -> bool:
        """Whether step is a checkpoint_every step."""
        every = self.cfg.checkpoint_every
        return bool(every) and step % every == 0

    def save(self, step: int, force: bool = False, loader: Any = None) -> str | None:
        """Checkpoint step when it is due (or force); the URL written on the main rank, else None.
        ``loader``: the loader position to save (anything with ``state_dict``), if not the live loader's."""
        if not (force or self.due(step)):
            return None
        # a collective: every rank's partitions, for elastic resume
        loader_state = gather_loader_state(self.loader if loader is None else loader)
        rng = gather_rng(self.dd)  # a collective too: one RNG state per rank (dropout differs by rank)
        if not self.dd.main:
            return None
        return save_checkpoint(self.cfg.output, step, {
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "loader": loader_state, "rng": rng, "step": step,
            "config": redact_urls(self.cfg.model_dump(mode="json")), "vocab_size": self.vocab_size,  # no credentials
            "manifest": self.tokenizer_sha256, "step_batch": self.step_batch(),
            **({"scaler": self.precision.state_dict()} if self.precision is not None else {}),
            **({"pad_id": self.pad_id} if self.pad_id is not None else {}),
            **({"counters": self.counters.state_dict()} if self.counters is not None else {}),
        }, self.cfg.keep_last)


def step_batch_size(b: dict[str, Any]) -> tuple[int, str]:
    """(size, unit) of a step's global batch from a ``step_batch`` record."""
    tokens = b.get("tokens_per_batch")
    per = int(tokens or b.get("batch_size") or 0)
    return per * int(b.get("accumulation") or 1) * int(b.get("world_size") or 1), "tokens" if tokens else "sequences"


def token_budget_line(cfg: TrainConfig, step: int, seen: int | None, planned: Any = None) -> str | None:
    """Where a run planned by ``max_tokens`` resumes with steps of another size: the steps it has left were
    planned for this run's steps, those before took the checkpoint's, so the run would end well off
    max_tokens (over 5 %): what it would take, and the ``--steps`` that ends near it. None otherwise.
    ``planned``: the steps the checkpoint's run had planned (its config's), where recorded."""
    if cfg.max_tokens is None or not seen or step >= cfg.steps:
        return None
    per_step = cfg.max_tokens / cfg.steps  # what max_tokens' plan gives this run's steps, about
    total = seen + (cfg.steps - step) * per_step
    if abs(total / cfg.max_tokens - 1) <= 0.05:
        return None
    near = step + max(1, math.ceil((cfg.max_tokens - seen) / per_step))
    before = (f" (the checkpoint's run: {int(planned):,}; the learning-rate schedule now ends at step "
              f"{cfg.steps:,})" if isinstance(planned, int) and planned != cfg.steps else "")
    return (f"--max_tokens {cfg.max_tokens:,} planned {cfg.steps:,} steps of this run's size{before}; the {step:,} steps "
            f"before took {seen:,} tokens, so the run would end at ~{total:,.0f} tokens "
            f"({total / cfg.max_tokens:.0%} of max_tokens); to end near max_tokens, give --steps {near:,} "
            "instead of --max_tokens (the schedule then ends at that step)")


def describe_step_batch(b: dict[str, Any]) -> str:
    """``32 sequences (2 ranks x 16 x 1 micro-batches)``."""
    size, unit = step_batch_size(b)
    per = b.get("tokens_per_batch") or b.get("batch_size")
    return f"{size} {unit} ({b.get('world_size')} ranks x {per} x {b.get('accumulation')} micro-batches)"


def describe_model(model: ModelConfig, vocab_size: int) -> str:
    """A model's shape in one phrase: size, layers, hidden, heads, vocabulary and the options that add tensors."""
    d = resolve_dims(model, vocab_size)
    extras = [f"{name}={value}" for name, value, default in (
        ("embedding_size", d.embedding_size, d.hidden), ("share", d.share, "none"),
        ("sentence_head", d.sentence_head, "none"), ("span_boundary", d.span_boundary, False),
        ("max_positions", d.max_positions, ModelConfig().max_positions)) if value != default]
    return (f"size={model.size}: {counted(d.layers, 'layer')}, hidden {d.hidden}, {counted(d.heads, 'head')}, "
            f"intermediate {d.intermediate}, vocab {d.vocab_size}" + "".join(f", {e}" for e in extras))


def schedule_change(cfg: TrainConfig, step: int, saved_steps: Any) -> str | None:
    """A line when a run resumed at step goes on under a schedule that ends elsewhere than the checkpoint's
    run planned (its --steps changed; the schedule is a function of the steps): the learning rate its next
    step trains with, and what the run's own schedule gave there. None where nothing changes (the same
    steps, a constant rate after the warmup, or a run already at its end)."""
    o = cfg.optim
    if not isinstance(saved_steps, int) or saved_steps == cfg.steps or step >= cfg.steps:
        return None
    before = o.lr * lr_schedule(o.schedule, o.warmup_steps, saved_steps)(step)
    after = o.lr * lr_schedule(o.schedule, o.warmup_steps, cfg.steps)(step)
    if math.isclose(before, after, rel_tol=1e-9, abs_tol=1e-12):
        return None
    return (f"the learning-rate schedule ({o.schedule}) now ends at step {cfg.steps:,}, where the checkpoint's run "
            f"planned {saved_steps:,}: step {step + 1:,} trains at lr {after:.3g}, where the run's schedule gave "
            f"{before:.3g} (the rate follows this run's --steps from here)")


# What the optimizer and its schedule resume with from a checkpoint, whatever the config says now.
RESUMED_OPTIM = ("name", "lr", "beta1", "beta2", "eps", "weight_decay", "warmup_steps", "schedule")


def check_same_optimizer(state: dict[str, Any], ckpt: str, cfg: TrainConfig) -> None:
    """UserError when the config changes what the optimizer resumes with (its state and the schedule's
    base rates come from the checkpoint: a new --lr would be printed and recorded, not used; another
    optimizer cannot take the saved state)."""
    saved = state.get("config", {}).get("optim")
    if not isinstance(saved, dict):
        return
    now = cfg.optim.model_dump(mode="json")
    changed = [f"optim.{k} {saved[k]!r} -> {now[k]!r}" for k in RESUMED_OPTIM if k in saved and saved[k] != now[k]]
    if changed:
        raise UserError(
            f"run folder {cfg.output}: {posixpath.basename(ckpt)} (step {int(state['step'])}) resumes its optimizer "
            f"and schedule as saved, and this run changes them ({'; '.join(changed)}): resume with the run's "
            "settings, or start a new run from its weights (shardforge export, then --init) with new ones")


def check_same_model(model: torch.nn.Module, state: dict[str, Any], ckpt: str, cfg: TrainConfig,
                     vocab_size: int) -> None:
    """UserError (what the run folder holds, how to start fresh) when a checkpoint has another model shape.

    Without it, resuming into a run folder of a different model is a 57-line
    size-mismatch traceback from ``load_state_dict``.
    """
    mine, theirs = model.state_dict(), state["model"]
    differ = set(mine) ^ set(theirs) or {k for k in mine if tuple(mine[k].shape) != tuple(theirs[k].shape)}
    if not differ:
        return
    try:
        held = describe_model(ModelConfig.model_validate(state["config"]["model"]), int(state["vocab_size"]))
    except Exception:  # noqa: BLE001 - an older or foreign checkpoint: say what can be said
        held = f"a model of {len(theirs)} tensors"
    raise UserError(
        f"run folder {cfg.output} holds another model: {posixpath.basename(ckpt)} (step {int(state['step'])}) is "
        f"{held}; this run asks for {describe_model(cfg.model, vocab_size)}. To start fresh, train into a new "
        f"--output folder (or delete {join(cfg.output, 'checkpoints')}); to continue that run, give its model "
        "settings (and its corpus)")
