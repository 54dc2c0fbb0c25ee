"""Train an encoder on a shardforge corpus: stream shards, mask on the device, step, log, checkpoint.

    python -m trainer.train --data out/corpus --steps 100
    torchrun --nproc_per_node 8 -m trainer.train --data gs://corpus/v1 --output gs://runs/r1 --config train.yaml

`setup()` resolves the config, joins the process group and builds what the
loop needs (a `Run`: model, optimizer, precision, loaders, maskers, checkpoints,
metrics), resuming from the run's latest checkpoint. `train()` is then the whole
loop, top to bottom: data -> mask -> forward -> loss -> backward -> step -> log
-> checkpoint. trainer/step.py holds its parts: the `Run`, the `Feed` that takes
the batches (with mask ahead, `masking_overlap`, it masks the next one on a side
stream while a step computes) and one optimizer step, whose losses weigh every
target of the global batch alike.
Concerns with their own state live in their own modules:
distributed (process group, device, RNG per rank), loader, masking, batch (the
forward of one batch, mask ahead), model, optim, evaluate, checkpoint (the
CheckpointManager), metrics (the step record and progress text) and loggers
(where records go).
"""

from __future__ import annotations

import sys

from trainer.args import check_train_args, config_key_names, flag_names, flag_settings, parse_train_args

if __name__ == "__main__":  # --help, flag mistakes and a --data that is no corpus: before torch is imported
    check_train_args(sys.argv[1:])

import argparse
import contextlib
import logging
import math
import os
import posixpath
import re
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from schemas import MASK_ID, PAD_ID
from schemas.config import PAIR_RULES, MaskingConfig, TrainConfig
from schemas.errors import UserError
from schemas.manifest import Manifest
from schemas.run_folder import CKPT_DIR
from shardforge.console.run import TRAIN_INTERRUPTED, run_cli
from shardforge.console.words import counted
from shardforge.storage import exists, join, redact_url
from shardforge.storage.contract import load_manifest, open_tokenizer, probed_kind, repack_hint
from trainer import distributed, fused_masking
from trainer.batch import overlap_on
from trainer.checkpoint import CheckpointManager, latest_checkpoint
from trainer.describe import (
    Batches,
    RunShape,
    describe_run,
    long_warmup,
    plan_steps,
    step_over_corpus,
    wide_embedding,
)
from trainer.evaluate import evaluate
from trainer.hf_init import check_corpus, load_init, resolve_init
from trainer.loader import ShardLoader
from trainer.loader.plan import Plan
from trainer.loggers import open_loggers, trim_metrics
from trainer.masking import Masker
from trainer.memory import device_memory, out_of_memory_line, out_of_memory_said
from trainer.metrics import RunCounters, TrainMetrics, device_peak_flops
from trainer.mixing import MixedLoader, describe, mix_record, mixed_loader, parse_mix_arg
from trainer.model import Encoder, flops_per_token, resolve_dims
from trainer.optim import build_optimizer, lr_schedule
from trainer.precision import Precision, compile_enabled, maybe_compile
from trainer.preempt import Preemption
from trainer.recipes import check_packing, config_yaml, resolve_train_config
from trainer.run_folder import checkpoint_dir
from trainer.step import Feed, Run, train_step

log = logging.getLogger("shardforge.train")
# The run's description (trainer/describe.py): on stdout from the command line, with its end line;
# log lines, progress and warnings go to stderr.
describe_log = logging.getLogger("shardforge.train.run")


# ------------------------------------------------------------------ setup helpers

def vocab_tables(manifest: Manifest, root: str) -> tuple[int, torch.Tensor]:
    """(vocab size, word-start table) from the corpus's tokenizer file (any kind: schemas.tokenizer_files)."""
    info = manifest.tokenizer
    tok = open_tokenizer(manifest, root)  # the same opener validate uses: a valid corpus trains
    # Each tokenizer kind says which tokens start a word (WordPiece: the inverse rule).
    table = torch.tensor(tok.word_starts(), dtype=torch.bool)
    table[[i for i in info.special_ids.values() if 0 <= i < len(table)]] = True
    return len(table), table


def check_heads(cfg: TrainConfig, manifest: Manifest, root: str) -> None:
    """The sentence head must match the corpus's packing rule (its labels are NSP or SOP labels)."""
    rule, head = manifest.packing_rule, cfg.model.sentence_head
    if head != "none" and rule not in PAIR_RULES:
        want = "sop" if head == "sop" else "segment_pair_nsp"
        raise UserError(f"model.sentence_head={head} needs a pair-rule corpus (sop, segment_pair_nsp, "
                        f"sentence_pair_nsp); this corpus is packed as {rule} ({repack_hint(manifest, root, {'--rule': want})}; "
                        "or --set model.sentence_head=none)")
    if rule in PAIR_RULES:
        want = "sop" if rule == "sop" else "nsp"
        if head == "none":
            log.warning("corpus is packed as %s but model.sentence_head=none: its %s labels are ignored%s",
                        rule, want.upper(), "" if (cfg.model.type_vocab_size or 1) > 1 else
                        " (and with one token type, segment B is embedded as segment A)")
        elif head != want:
            log.warning("model.sentence_head=%s on a %s corpus: the labels mean %s", head, rule, want.upper())


def check_positions(cfg: TrainConfig, manifest: Manifest, vocab_size: int, pad_id: int) -> None:
    """One line, before any work, when the corpus's sequences are longer than the model's positions take."""
    dims = resolve_dims(cfg.model, vocab_size, pad_id)
    if manifest.max_seq_len > dims.max_seq_len:
        need = manifest.max_seq_len + pad_id + 1
        source = f"the --init model's {dims.max_positions}" if cfg.init else f"model.max_positions {dims.max_positions}"
        raise UserError(f"corpus sequences are up to {manifest.max_seq_len} tokens; this model takes "
                        f"{dims.max_seq_len} ({source}): --set model.max_positions={need}, or a corpus built "
                        f"with --max_seq_len {dims.max_seq_len}")


def micro_batches_per_step(cfg: TrainConfig, world: int, max_len: int) -> tuple[int, str | None]:
    """(gradient accumulation, a note when the global batch asked for is not what the steps take).

    As set, else what reaches the global batch, else 1. ``global_batch_sequences`` counts sequences of up
    to ``max_len`` tokens: with a token budget per micro-batch (``tokens_per_batch``, DOC-SENTENCES'
    batches) it is that many full-length sequences' tokens, as RoBERTa counts its batches. A global batch
    that the micro-batches of all ranks do not divide is rounded up, and the note says to what.
    """
    if cfg.gradient_accumulation:
        return cfg.gradient_accumulation, None
    if cfg.global_batch_sequences:
        asked, unit, per_micro = cfg.global_batch_sequences, "sequences", cfg.batch_size
        if cfg.tokens_per_batch:
            asked, unit, per_micro = cfg.global_batch_sequences * max_len, "tokens", cfg.tokens_per_batch
    elif cfg.global_batch_tokens:
        asked, unit, per_micro = cfg.global_batch_tokens, "tokens", cfg.tokens_per_batch or cfg.batch_size * max_len
    else:
        return 1, None
    accum = max(1, math.ceil(asked / (per_micro * world)))
    took = accum * per_micro * world
    note = None if took == asked else (
        f"global batch: {asked} {unit} asked; {counted(world, 'rank')} x {per_micro} x {counted(accum, 'micro-batch', 'micro-batches')} "
        f"take {took} "
        f"per step (rounded up: a global batch that {per_micro * world} divides is taken exactly)")
    return accum, note


# ------------------------------------------------------------------ setup

def build_model(cfg: TrainConfig, dd: distributed.Dist, manifest: Manifest, vocab_size: int,
                pad_id: int) -> tuple[Encoder, torch.nn.Module]:
    """(the Encoder, what the loop calls): compiled when cfg.compile asks, DDP-wrapped over several ranks."""
    device = dd.device
    model = Encoder(cfg.model, vocab_size, pad_id=pad_id).to(device)
    model.checkpoint_layers = cfg.activation_checkpointing
    if cfg.init:  # start from the Hugging Face weights (a resumed run loads its checkpoint after)
        load_init(model, cfg, manifest)
    raw_model = model
    model = maybe_compile(model, cfg.compile, device, mode=cfg.compile_mode, scope=cfg.compile_scope)
    if dd.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    return raw_model, model


def build_maskers(cfg: TrainConfig, device: torch.device, vocab_size: int, special: dict[str, int],
                  word_starts: torch.Tensor, pad_id: int, mask_id: int) -> tuple[Masker, Masker]:
    """(the training masker, the evaluation masker): the same one unless cfg.eval_masking is set."""
    def make_masker(masking: MaskingConfig) -> Masker:  # the reference ops or the fused ones: the same masks
        return fused_masking.make_masker(masking, vocab_size, special.values(), mask_id, pad_id, word_starts,
                                         device=device, impl=cfg.masking_impl)  # type: ignore[return-value]

    masker = make_masker(cfg.masking)
    # eval_masking: e.g. train at 40 % but report the valid loss at the standard 15 %.
    eval_masker = make_masker(cfg.eval_masking) if cfg.eval_masking is not None else masker
    return masker, eval_masker


SHORT_FILL = 0.9  # batches holding less than this share of a full one on average are said at the start


def short_fill(plan: Plan) -> float | None:
    """The share of a full batch (batch_size rows, or the token budget) the split's batches hold on average,
    where it is under SHORT_FILL; else None."""
    fill = plan.batch_fill()
    return fill if fill is not None and fill < SHORT_FILL else None


def short_batches(url: str, plan: Plan) -> str | None:
    """A warning when the split's batches hold well under ``batch_size`` rows (or ``tokens_per_batch``
    tokens) on average (a small corpus in few, small partitions), with the largest power of two that fills
    them; None when they are full enough."""
    fill = short_fill(plan)
    if fill is None:
        return None
    size = plan.T or plan.B
    assert size is not None
    least = plan.max_seq_len if plan.T else 1  # a budget holds one full-length sequence at least
    twos = [1 << k for k in range(size.bit_length() - 1, -1, -1) if 1 << k >= least] or [size]
    fits = next((b for b in twos if (plan.batch_fill(b) or 1) >= SHORT_FILL), twos[-1])
    if plan.T:
        unit, flag, total = "tokens", "tokens_per_batch", plan.total_tokens
        parts = [x for x in plan.part_tokens if x]
        what = f"{total:,} tokens"
    else:
        unit, flag, total = "rows", "batch_size", plan.total_samples
        parts = [n for n in plan.part_samples if n]
        what = f"{total:,} sequences"
    return (f"{redact_url(url)}: train batches will hold ~{fill * size:,.0f} {unit} on average, not {flag} "
            f"{size}: its {what} fall into {counted(len(parts), 'partition')} of "
            f"~{total / len(parts):,.0f} and a batch "
            f"never spans two (docs/loader.md, \"Partitions\"); --{flag} {fits} fills them "
            f"(--gradient_accumulation or a global batch then keeps a step's {'tokens' if plan.T else 'rows'})")


def held_batches(plan: Plan) -> Batches:
    """What one corpus's train batches hold on average: full (batch_size rows of its mean length, or the
    budget) where they hold SHORT_FILL of that or more, else what the loader's plan counts."""
    corpora = ((1.0, plan.total_tokens),)
    fill = short_fill(plan)
    if plan.T is not None:
        return Batches(None, float(plan.T) if fill is None else fill * plan.T, corpora, fill is not None)
    assert plan.B is not None
    if fill is None:
        return Batches(float(plan.B), plan.B * plan.sequence_tokens(), corpora)
    return Batches(fill * plan.B, plan.batch_tokens() or 0.0, corpora, short=True)


def train_batches(loader: ShardLoader | MixedLoader) -> Batches:
    """What the train batches hold on average (the run's description and max_tokens' steps count by it); a
    mix weighs each corpus's by how often its schedule draws it."""
    if isinstance(loader, ShardLoader):
        return held_batches(loader.plan)
    held = [held_batches(ld.plan) for ld in loader.loaders]
    weights = loader.plan.batch_weights
    budget = any(h.rows is None for h in held)
    return Batches(
        None if budget else sum(w * (h.rows or 0.0) for w, h in zip(weights, held, strict=True)),
        sum(w * h.tokens for w, h in zip(weights, held, strict=True)),
        tuple((share, h.corpora[0][1]) for share, h in zip(loader.plan.token_shares, held, strict=True)),
        short=any(h.short for h in held))


def valid_batches(valid: ShardLoader | MixedLoader | None) -> int | None:
    """The batches this process's share of the valid split holds (a mix: all its corpora's); None: none."""
    if valid is None:
        return None
    if isinstance(valid, MixedLoader):
        return sum(ld.steps_per_epoch for ld in valid.loaders)
    return valid.steps_per_epoch


def build_loaders(cfg: TrainConfig, dd: distributed.Dist,
                  manifest: Manifest) -> tuple[ShardLoader | MixedLoader, ShardLoader | MixedLoader | None]:
    """(the train loader, the valid loader or None): one corpus, or several mixed (trainer/mixing.py)."""
    device = dd.device

    def train_loader(url: str) -> ShardLoader:
        loader = ShardLoader(url, "train", batch_size=None if cfg.tokens_per_batch else cfg.batch_size,
                             tokens_per_batch=cfg.tokens_per_batch, seed=cfg.seed, rank=dd.rank,
                             world_size=dd.world_size, num_workers=cfg.num_workers,
                             shuffle_buffer=cfg.shuffle_buffer, corrupt_policy=cfg.corrupt_shards,
                             pin_memory=device.type == "cuda", follow=cfg.follow)
        short = short_batches(url, loader.plan)
        if short and dd.main:
            log.warning("%s", short)
        return loader

    def valid_loader(url: str) -> ShardLoader:
        # allow_idle: a valid split too small for every rank leaves some ranks only padding (their
        # rows count for nothing in the token-weighted eval_loss) instead of refusing to evaluate.
        return ShardLoader(url, "valid", batch_size=cfg.batch_size, seed=cfg.seed, rank=dd.rank,
                           world_size=dd.world_size, shuffle_buffer=1, epochs=1, allow_idle=True)

    # Several corpora: a deterministic weighted schedule over one loader per corpus (trainer/mixing.py).
    loader: ShardLoader | MixedLoader = train_loader(cfg.data) if not cfg.mix else mixed_loader(
        cfg.mix, "train", train_loader)
    if isinstance(loader, MixedLoader) and dd.main:
        log.info("mixing %s", describe(loader.plan))
    valid: ShardLoader | MixedLoader | None = None
    if cfg.eval_batches and manifest.shards_of("valid"):  # evaluated every eval_every steps and at the last
        valid = valid_loader(cfg.data) if not cfg.mix else mixed_loader(cfg.mix, "valid", valid_loader)
    return loader, valid


def build_metrics(cfg: TrainConfig, dd: distributed.Dist, manifest: Manifest, vocab_size: int,
                  step: int) -> TrainMetrics:
    """The step records, log lines and progress bar of a run starting at `step` (main rank writes)."""
    device = dd.device
    dims = resolve_dims(cfg.model, vocab_size)
    return TrainMetrics(
        open_loggers(cfg, enabled=dd.main), enabled=dd.main, total_steps=cfg.steps, start_step=step, log_every=cfg.log_every,
        world_size=dd.world_size, show_bar=sys.stderr.isatty(),
        mask_rate=cfg.masking.rate, eval_mask_rate=(cfg.eval_masking or cfg.masking).rate,
        # The masked-only head projects to the vocabulary only at predicted positions: count what runs.
        flops_per_token=flops_per_token(dims, manifest.max_seq_len,
                                        lm_head_fraction=cfg.masking.rate if cfg.model.masked_only_head else 1.0),
        peak_flops=device_peak_flops(torch.cuda.get_device_name(device) if device.type == "cuda" else None),
        combine=lambda values: distributed.all_reduce_sum(values, device))  # one collective per step


def setup(cfg: TrainConfig) -> Run:
    """Resolve the config, join the process group, build everything the loop needs and resume.

    Order matters for reproducibility: the seed is set before the model's weights are drawn.
    """
    dd = distributed.setup(cfg.device, cfg.ddp_timeout)  # the device is decided here, once
    device = dd.device
    torch.manual_seed(cfg.seed + dd.rank)
    cfg = resolve_init(cfg)  # --init fixes the model's shape (trainer/hf_init.py)

    manifest, root = load_manifest(cfg.data)
    if not manifest.shards_of("train"):
        raise UserError(f"corpus {root} has no train shards")
    if exists(join(cfg.output, "manifest.json")):  # a committed corpus never changes
        raise UserError(f"--output {redact_url(cfg.output)} is a corpus (it holds manifest.json); a run writes its "
                        "checkpoints and metrics into its --output: give a run folder of its own")
    if probed_kind(cfg.output) == "model":  # an --init model, an export
        raise UserError(f"--output {redact_url(cfg.output)} is a Hugging Face model folder; a run writes its "
                        "checkpoints and metrics into its --output: give a run folder of its own")
    check_packing(cfg, manifest, root)  # the rule the recipe trains on (trainer/recipes)
    check_heads(cfg, manifest, root)
    vocab_size, word_starts = vocab_tables(manifest, root)
    special = manifest.tokenizer.special_ids
    pad_id, mask_id = special.get("<pad>", PAD_ID), special.get("<mask>", MASK_ID)
    if cfg.init:  # the model's vocabulary against the corpus's first: a wrong corpus is the likelier mistake
        check_corpus(cfg.init, manifest, vocab_size)
    check_positions(cfg, manifest, vocab_size, pad_id)
    accum, note = micro_batches_per_step(cfg, dd.world_size, manifest.max_seq_len)
    if note and dd.main:
        log.warning("%s", note)
    loader, valid = build_loaders(cfg, dd, manifest)  # a corpus no rank can read is refused before the description
    batches = train_batches(loader)
    cfg = plan_steps(cfg, batches, dd.world_size, accum)  # max_tokens -> steps (trainer/describe.py)
    if cfg.optim.warmup_ratio is not None and cfg.optim.warmup_steps == 0:  # Hugging Face's warmup_ratio
        warmup = math.ceil(cfg.optim.warmup_ratio * cfg.steps)
        cfg = cfg.model_copy(update={"optim": cfg.optim.model_copy(update={"warmup_steps": warmup})})
    for note in filter(None, (long_warmup(cfg), step_over_corpus(cfg, batches, dd.world_size, accum),
                              wide_embedding(cfg.model, vocab_size))):
        if dd.main:
            log.warning("%s", note)

    raw_model, model = build_model(cfg, dd, manifest, vocab_size, pad_id)
    prec = Precision(cfg.precision, device)  # autocast + fp16 loss scaler (trainer/precision.py)
    masker, eval_masker = build_maskers(cfg, device, vocab_size, special, word_starts, pad_id, mask_id)
    if dd.main:  # what the run is, before the optimizer: building one imports torch._dynamo (seconds)
        shape = RunShape(params=raw_model.num_params(), device=str(device), precision=prec.name,
                         compiled=compile_enabled(cfg.compile, device), world_size=dd.world_size, accum=accum,
                         vocab_size=vocab_size,
                         masking="fused" if isinstance(masker, fused_masking.FusedMasker) else "reference",
                         masking_ahead=overlap_on(cfg.masking_overlap, device), batches=batches,
                         valid_batches=valid_batches(valid))
        for line in describe_run(cfg, manifest, shape):
            describe_log.info("%s", line)
    optimizer = build_optimizer(raw_model, cfg.optim)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_schedule(cfg.optim.schedule, cfg.optim.warmup_steps, cfg.steps))

    counters = RunCounters(cfg.trackers.loss_smoothing)  # tokens seen, smoothed loss (trainer/metrics.py)
    checkpoints = CheckpointManager(cfg, dd, model=raw_model, optimizer=optimizer, scheduler=scheduler,
                                    loader=loader, vocab_size=vocab_size,
                                    tokenizer_sha256=manifest.tokenizer.sha256, precision=prec,
                                    pad_id=pad_id, counters=counters, accum=accum)
    step = checkpoints.load()
    cfg = checkpoints.cfg  # a resumed warmup_ratio keeps the checkpoint's warmup steps (trainer/checkpoint.py)
    if dd.main and trim_metrics(cfg.output, step):  # records of steps the run goes back over (or a dead run's)
        log.info("metrics.jsonl: dropped the records after step %d, which this run logs again", step)
    metrics = build_metrics(cfg, dd, manifest, vocab_size, step)
    return Run(cfg=cfg, dd=dd, model=model, raw_model=raw_model, optimizer=optimizer, scheduler=scheduler,
               prec=prec, masker=masker, eval_masker=eval_masker, loader=loader, valid=valid, counters=counters,
               checkpoints=checkpoints, metrics=metrics, accum=accum, step=step, max_len=manifest.max_seq_len)


# ------------------------------------------------------------------ the loop

def stopped_at(cfg: TrainConfig, step: int) -> bool:
    """Whether the run pauses here (stop_at: a checkpoint, then exit, before the run's last step)."""
    return cfg.stop_at is not None and step >= cfg.stop_at


def evaluation_due(cfg: TrainConfig, step: int) -> bool:
    """Every eval_every steps, and at the run's last step (what the model card reports)."""
    return step == cfg.steps or bool(cfg.eval_every) and step % cfg.eval_every == 0


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run training to cfg.steps (resuming from the run's latest checkpoint); returns a summary."""
    with out_of_memory_said(lambda e: out_of_memory_line(e, cfg, device_memory(distributed.pick_device(
            cfg.device, int(os.environ.get("LOCAL_RANK", "0")))))):
        run = setup(cfg)
    cfg, dd, device, step, accum = run.cfg, run.dd, run.dd.device, run.step, run.accum
    model, raw_model, scheduler, prec = run.model, run.raw_model, run.scheduler, run.prec
    metrics, checkpoints = run.metrics, run.checkpoints
    model.train()
    signalled = False  # stopped by SIGTERM (this rank's or a peer's), not by reaching steps or stop_at
    skipped = 0  # steps' worth of micro-batches that were repeats only on every rank
    evaluating = False  # for the out-of-memory line: the step, or the evaluation after it
    with Preemption() as preempt, out_of_memory_said(lambda e: out_of_memory_line(
            e, cfg, device_memory(device), step=step + 1, accum=accum, max_len=run.max_len,
            params=raw_model.num_params(), evaluating=evaluating)):
        feed = Feed(run, preempt)
        if step < cfg.steps and not stopped_at(cfg, step):
            feed.take()  # the first batch, before the first step's clock: the loader's start-up is no data wait
            metrics.started(feed.waited())
        t0: float | None = None
        while step < cfg.steps and not stopped_at(cfg, step):
            t0 = time.perf_counter() if t0 is None else t0  # a step with no data is timed with the next
            s = train_step(run, feed)  # trainer/step.py: micro-batches, losses over the global batch, update
            if s is None:  # every rank's micro-batches were repeats only: no step (SIGTERM still stops the run)
                feed.ahead(boundary=True)
                skipped += 1
                paused = False
            else:
                step += 1
                if step < cfg.steps and not stopped_at(cfg, step):
                    feed.ahead(boundary=True)  # the next step's first batch, masked while this step computes
                if device.type == "cuda":
                    torch.cuda.synchronize()
                record = metrics.record(step, s, scheduler.get_last_lr()[0], t0, feed.waited(), s.epoch)
                t0 = None
                record.update(run.counters.update(record["loss"], metrics.step_tokens))
                record.update(mix_record(feed.position()))
                if run.valid is not None and evaluation_due(cfg, step):
                    evaluating = True
                    record.update(evaluate(model, run.valid, run.eval_masker, cfg, device, prec.autocast,
                                           wait=preempt.next))
                    evaluating = False
                metrics.log(record)
                paused = stopped_at(cfg, step)
            # Ranks may see SIGTERM at different steps: they stop together.
            stop = dd.any(preempt.requested or paused)
            if s is not None or stop:
                checkpoints.save(step, force=step == cfg.steps or stop, loader=feed.position())
            if stop:
                signalled = not paused
                if dd.main:
                    log.warning("%s: checkpoint saved at step %d, exiting",
                                f"stop_at={cfg.stop_at}" if paused else "SIGTERM", step)
                break
    feed.close()
    metrics.close()
    if skipped and dd.main:
        log.info("%s every rank's micro-batches were rows repeated to keep the ranks in step (an "
                 "epoch's end): no optimizer step for those", "once" if skipped == 1 else f"{skipped:,} times")
    if not preempt.abandoned:  # a rank that left a stalled data wait may have peers inside a collective
        dd.barrier()
    distributed.teardown(dd)
    return {"steps": step, "first_loss": metrics.first_loss, "last_loss": metrics.last_loss, "output": cfg.output,
            "params": raw_model.num_params(), "accumulation": accum, "world_size": dd.world_size,
            "preempted": preempt.abandoned, "signalled": signalled or preempt.abandoned, "eval": metrics.last_eval,
            "total_steps": cfg.steps}


# ------------------------------------------------------------------ CLI

def run_to_resume(path: str, output: str | None) -> str:
    """The run folder ``--resume_from_checkpoint PATH`` continues: PATH itself, the run of its checkpoints/
    folder, or the run of its newest checkpoint (a run resumes from its newest: an older one is refused)."""
    run, name = path.rstrip("/"), posixpath.basename(path.rstrip("/"))
    if re.fullmatch(r"ckpt-\d{8}\.pt", name):
        run = posixpath.dirname(posixpath.dirname(run)) or "."
        newest = latest_checkpoint(run)
        if newest is None or posixpath.basename(newest) != name:
            raise UserError(f"--resume_from_checkpoint {path}: a run resumes from the newest checkpoint in its "
                            f"checkpoints/ folder ({posixpath.basename(newest) if newest else 'none there'}); to go "
                            f"on from {name}, copy it into the checkpoints/ folder of a new --output")
    elif name == CKPT_DIR:
        run = posixpath.dirname(run) or "."
    if output is not None and output.rstrip("/") != run:
        raise UserError(f"--resume_from_checkpoint {path} continues the run in {run}, but --output is {output}: "
                        "give one of them")
    if latest_checkpoint(run) is None:  # a mistyped path must not start a run over
        raise UserError(f"--resume_from_checkpoint {path}: no checkpoint in {checkpoint_dir(run)} to resume from "
                        "(to start a new run there, give --output)")
    return run


def build_train_config(args: argparse.Namespace, overrides: list[str], require_data: bool = True) -> TrainConfig:
    """Recipe -> --config -> flags -> --set (trainer/recipes); --mix and --init as flags.

    A flag of a section's key (``--lr``: optim.lr) applies as a --set item before the user's own.
    """
    flags, dotted = flag_settings(args)  # trainer/args.py: each flag's config key
    if getattr(args, "resume_from_checkpoint", None):
        flags.update(output=run_to_resume(args.resume_from_checkpoint, flags.get("output")), resume=True)
    if getattr(args, "mix", None):
        flags["mix"] = [parse_mix_arg(m) for m in args.mix]
    return resolve_train_config(getattr(args, "recipe", None), args.config, flags, [*dotted, *overrides],
                                require_data, flag_names=flag_names(args), other_names=config_key_names())


# torch's notices about its own API that every run of the unpadded path on CPU printed (its nested
# tensors, once per process): nothing a user of the trainer can act on.
TORCH_NOTICES = ("The PyTorch API of nested tensors is in prototype stage",)
TORCH_NOTICE_LOGGERS = ("torch.fx._symbolic_trace",)  # "is_fx_tracing will return true for both ..."


def quiet_torch_notices() -> None:
    for message in TORCH_NOTICES:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    for name in TORCH_NOTICE_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


@contextlib.contextmanager
def command_logging() -> Iterator[None]:
    """A command's log on stderr: this project's lines (``distributed.OWN_LOGGERS``) from INFO, the
    libraries' from WARNING (a library's INFO, such as gcsfs's note on its experimental features at
    import, is not the run's news), and the torch notices above left out. The levels of this
    project's loggers are put back after, for an in-process caller."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    levels = {name: logging.getLogger(name).level for name in distributed.OWN_LOGGERS}
    for name in levels:
        logging.getLogger(name).setLevel(logging.INFO)
    quiet_torch_notices()
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def main(argv: list[str] | None = None) -> int:
    args = parse_train_args(argv)
    out = logging.StreamHandler(sys.stdout)
    out.setFormatter(logging.Formatter("%(message)s"))
    describe_log.addHandler(out)
    describe_log.propagate = False
    try:
        with command_logging():
            code = run_cli(lambda: _run(args), interrupted=TRAIN_INTERRUPTED)
    finally:  # an in-process caller's logging is as it was
        describe_log.removeHandler(out)
        describe_log.propagate = True
    return distributed.leave(code)  # a torchrun rank ends here (trainer/distributed.py says why)


PREEMPTED_EXIT = 143  # 128 + SIGTERM, as a shell reports a process SIGTERM ended: not done, rerun to resume


def _run(args: argparse.Namespace) -> int:
    if args.print_config:
        print(config_yaml(build_train_config(args, args.set, require_data=False)), end="")
        return 0
    cfg = build_train_config(args, args.set)
    try:
        summary = train(cfg)
    except RuntimeError as e:  # a collective that waited ddp_timeout for a rank that hung: one line
        timed_out = distributed.collective_timeout(e, cfg.ddp_timeout)
        if timed_out is None:
            raise
        raise timed_out from None
    main_rank = int(os.environ.get("RANK", "0")) == 0
    if summary["signalled"]:  # a scheduler must not take a preempted run for a finished one
        if main_rank:
            saved = "its last checkpoint" if summary["preempted"] else f"the checkpoint of step {summary['steps']}"
            print(f"preempted (SIGTERM) at step {summary['steps']} of {summary['total_steps']}: run the same command "
                  f"again to resume from {saved}")
        return PREEMPTED_EXIT
    if main_rank:
        if summary["first_loss"] is None:
            print(f"nothing to do: the run is already at step {summary['steps']}")
        else:
            ev = summary["eval"]
            at = f"; eval loss {ev['eval_loss']:.4f} at step {ev['step']}" if ev else ""
            print(f"trained to step {summary['steps']}: loss {summary['first_loss']:.4f} -> "
                  f"{summary['last_loss']:.4f}{at}; checkpoints in {join(summary['output'], 'checkpoints')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
