"""Train an encoder on a shardforge corpus: stream shards, mask on the device, step, log, checkpoint.

    python -m trainer.train --data out/corpus --steps 100
    torchrun --nproc_per_node 8 -m trainer.train --data gs://corpus/v1 --output gs://runs/r1 --config train.yaml

The whole loop is in `train()`, top to bottom: data -> mask -> forward ->
backward -> step -> log -> checkpoint. Concerns with their own state live in
their own modules (data, masking, model, optim, checkpoint, metrics).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import posixpath
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from schemas import MASK_ID, PAD_ID
from schemas.cliargs import ArgumentParser
from schemas.config import PAIR_RULES, ModelConfig, TrainConfig
from schemas.errors import UserError, run_cli
from schemas.manifest import Manifest, load_manifest, open_tokenizer
from schemas.tokenizer_files import WORD_START_MARKERS
from storage import join
from trainer.checkpoint import load_latest_checkpoint, save_checkpoint
from trainer.data import ShardLoader, gather_state_dict
from trainer.loggers import RunCounters, open_loggers
from trainer.masking import Masker, word_start_table
from trainer.metrics import StarvationMonitor, device_peak_flops, progress_bar
from trainer.model import Encoder, flops_per_token, resolve_dims
from trainer.optim import build_optimizer, linear_schedule
from trainer.recipes import check_packing, config_yaml, resolve_train_config

log = logging.getLogger("shardforge.train")


# ------------------------------------------------------------------ setup helpers

@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device_kind: str) -> Dist:
    """torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; without them we run single-process."""
    if "WORLD_SIZE" not in os.environ or int(os.environ["WORLD_SIZE"]) == 1:
        return Dist()
    backend = "nccl" if device_kind == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))


def pick_device(cfg: TrainConfig, local_rank: int) -> torch.device:
    if cfg.device != "auto":
        return torch.device(cfg.device)
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def vocab_tables(manifest: Manifest, root: str) -> tuple[int, torch.Tensor]:
    """(vocab size, word-start table) from the corpus's tokenizer file (SentencePiece or byte-level BPE)."""
    info = manifest.tokenizer
    tok = open_tokenizer(manifest, root)  # the same opener validate uses: a valid corpus trains
    pieces = tok.pieces()
    return len(pieces), word_start_table(pieces, info.special_ids.values(), WORD_START_MARKERS[tok.kind])


def check_heads(cfg: TrainConfig, manifest: Manifest) -> None:
    """The sentence head must match the corpus's packing rule (its labels are NSP or SOP labels)."""
    rule, head = manifest.packing_rule, cfg.model.sentence_head
    if head != "none" and rule not in PAIR_RULES:
        raise UserError(f"model.sentence_head={head} needs a pair-rule corpus (sop, segment_pair_nsp, "
                        f"sentence_pair_nsp); this corpus is packed as {rule} (repack it: pipelines.repack)")
    if rule in PAIR_RULES:
        want = "sop" if rule == "sop" else "nsp"
        if head == "none":
            log.warning("corpus is packed as %s but model.sentence_head=none: its %s labels are ignored",
                        rule, want.upper())
        elif head != want:
            log.warning("model.sentence_head=%s on a %s corpus: the labels mean %s", head, rule, want.upper())


def describe_model(model: ModelConfig, vocab_size: int) -> str:
    """A model's shape in one phrase: size, layers, hidden, heads, vocabulary and the options that add tensors."""
    d = resolve_dims(model, vocab_size)
    extras = [f"{name}={value}" for name, value, default in (
        ("embedding_size", d.embedding_size, d.hidden), ("share", d.share, "none"),
        ("sentence_head", d.sentence_head, "none"), ("span_boundary", d.span_boundary, False),
        ("max_positions", d.max_positions, ModelConfig().max_positions)) if value != default]
    return (f"size={model.size}: {d.layers} layers, hidden {d.hidden}, {d.heads} heads, "
            f"intermediate {d.intermediate}, vocab {d.vocab_size}" + "".join(f", {e}" for e in extras))


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


def micro_batches_per_step(cfg: TrainConfig, world: int, max_len: int) -> int:
    """Gradient accumulation needed to reach the global batch (in sequences or tokens)."""
    per_step = cfg.batch_size * world
    if cfg.global_batch_sequences:
        return max(1, math.ceil(cfg.global_batch_sequences / per_step))
    if cfg.global_batch_tokens:
        tokens = (cfg.tokens_per_batch or cfg.batch_size * max_len) * world
        return max(1, math.ceil(cfg.global_batch_tokens / tokens))
    return 1


class StepStats:
    """Sums of a step's micro-batch outputs, kept on the device: one host sync per step, not per micro-batch."""

    KEYS = ("mlm_correct", "mlm_count", "sentence_correct", "sentence_count")

    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self.tokens = 0

    def add(self, out: dict[str, torch.Tensor], tokens: int, scale: float) -> None:
        self._acc("loss", out["loss"].detach().float() * scale)
        for k in self.KEYS:
            if k in out:
                self._acc(k, out[k].detach().float())
        self.tokens += tokens

    def add_value(self, key: str, value: torch.Tensor) -> None:
        """A device scalar read back with the step's one sync (e.g. the gradient norm)."""
        self._acc(key, value.detach().float())

    def _acc(self, key: str, value: torch.Tensor) -> None:
        self._sums[key] = self._sums[key] + value if key in self._sums else value

    def values(self) -> dict[str, float]:
        """Host values (the one sync); missing keys are 0."""
        keys = list(self._sums)
        host = torch.stack([self._sums[k].reshape(()) for k in keys]).cpu().tolist() if keys else []
        vals = dict.fromkeys(("loss", *self.KEYS), 0.0)
        vals.update(zip(keys, host, strict=True))
        return vals


def model_inputs(batch: dict[str, torch.Tensor], masked: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    kw = {"input_ids": masked["input_ids"], "attention_mask": batch["attention_mask"], "labels": masked["labels"]}
    if "token_type_ids" in batch:
        kw["token_type_ids"] = batch["token_type_ids"]
    if "sentence_labels" in batch:
        kw["sentence_labels"] = batch["sentence_labels"]
    if "span_left" in masked:
        kw["span_left"], kw["span_right"] = masked["span_left"], masked["span_right"]
    return kw


def real_tokens(host: dict[str, torch.Tensor]) -> int:
    """Tokens of the batch's real rows (not the rows the loader repeats to keep ranks in step)."""
    mask = host["attention_mask"]
    if "is_pad" in host:
        mask = mask[~host["is_pad"].bool()]
    return int(mask.sum())


def drop_padding_rows(batch: dict[str, torch.Tensor], masked: dict[str, torch.Tensor]) -> None:
    """Rows the loader repeats to keep ranks in step (is_pad) carry no loss: each sample counts once per epoch."""
    pad = batch.get("is_pad")
    if pad is None:
        return
    rows = pad.bool().unsqueeze(1)
    masked["labels"] = masked["labels"].masked_fill(rows, -100)
    if "sentence_labels" in batch:
        batch["sentence_labels"] = batch["sentence_labels"].masked_fill(pad.bool(), -100)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


class Preemption:
    """SIGTERM (preemption) sets a flag; the loop checkpoints at the end of the step and exits."""

    def __init__(self) -> None:
        self.requested = False
        self._old = None

    def __enter__(self) -> Preemption:
        with contextlib.suppress(ValueError):  # not the main thread
            self._old = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


# ------------------------------------------------------------------ RNG state per rank

def _all_gather(t: torch.Tensor, dd: Dist, device: torch.device) -> list[torch.Tensor]:
    """Every rank's copy of a same-shaped tensor (on the CPU), via the process group's device."""
    if dd.world_size == 1:
        return [t]
    dev = device if device.type == "cuda" else torch.device("cpu")
    parts = [torch.empty_like(t, device=dev) for _ in range(dd.world_size)]
    dist.all_gather(parts, t.to(dev))
    return [p.cpu() for p in parts]


def gather_rng(dd: Dist, device: torch.device) -> dict[str, list[torch.Tensor]]:
    """The generator states of all ranks (index = rank); uint8 tensors, safe for weights_only loading."""
    rng = {"cpu": _all_gather(torch.get_rng_state(), dd, device)}
    if device.type == "cuda":
        rng["cuda"] = _all_gather(torch.cuda.get_rng_state(device), dd, device)
    return rng


def restore_rng(rng: dict[str, Any], dd: Dist, device: torch.device, fallback_seed: int) -> None:
    """This rank's saved generator state; a new rank (the world grew) gets a fresh seeded stream."""
    cpu = rng["cpu"] if isinstance(rng["cpu"], list) else [rng["cpu"]]
    if dd.rank < len(cpu):
        torch.set_rng_state(cpu[dd.rank])
        cuda = rng.get("cuda")
        if device.type == "cuda" and cuda is not None:
            cuda = cuda if isinstance(cuda, list) else [cuda]
            if dd.rank < len(cuda):
                torch.cuda.set_rng_state(cuda[dd.rank], device)
    else:
        torch.manual_seed(fallback_seed)


# ------------------------------------------------------------------ evaluation

@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: ShardLoader, masker: Masker, cfg: TrainConfig,
             device: torch.device, autocast: Any) -> dict[str, float]:
    """MLM loss / accuracy / perplexity (and sentence-head accuracy) on the valid split."""
    model.eval()
    s = StepStats()
    n = 0
    # The loader continues from its state: rewind it afterwards so that every evaluation
    # sees the same first eval_batches batches (not the next ones, and never an exhausted split).
    start = loader.state_dict()
    it = iter(loader)
    try:
        for batch in it:
            tokens = real_tokens(batch)  # on the host batch: no device sync
            batch = to_device(batch, device)
            masked = masker(batch["input_ids"], batch["sample_ids"], epoch=0, seed=cfg.seed + 1)
            drop_padding_rows(batch, masked)
            with autocast():
                out = model(**model_inputs(batch, masked))
            s.add(out, tokens, 1.0)
            n += 1
            if n >= cfg.eval_batches:
                break
    finally:
        it.close()  # shut the loader's readers (and workers) down now
        loader.load_state_dict(start)
        model.train()
    v = s.values()
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        keys = sorted(v)  # every rank evaluates its own share of the split: combine them
        dev = device if device.type == "cuda" else torch.device("cpu")
        total = torch.tensor([v[k] for k in keys] + [float(n)], dtype=torch.float64, device=dev)
        dist.all_reduce(total)
        *sums, n_all = total.cpu().tolist()
        v, n = dict(zip(keys, sums, strict=True)), int(n_all)
    if n == 0:
        return {}
    loss = v["loss"] / n
    res = {"eval_loss": loss, "eval_ppl": math.exp(min(loss, 50.0)),
           "eval_mlm_acc": v["mlm_correct"] / max(v["mlm_count"], 1.0)}
    if v["sentence_count"]:
        res["eval_sentence_acc"] = v["sentence_correct"] / v["sentence_count"]
    return res


# ------------------------------------------------------------------ the loop

def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run training to cfg.steps (resuming from the run's latest checkpoint); returns a summary."""
    kind = "cuda" if (cfg.device == "auto" and torch.cuda.is_available()) or cfg.device.startswith("cuda") else "cpu"
    dd = init_distributed(kind)
    device = pick_device(cfg, dd.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(cfg.seed + dd.rank)

    manifest, root = load_manifest(cfg.data)
    if not manifest.shards_of("train"):
        raise UserError(f"corpus {root} has no train shards")
    check_packing(cfg, manifest.packing_rule, root)  # recipes (#20): the rule the recipe trains on
    check_heads(cfg, manifest)
    vocab_size, word_starts = vocab_tables(manifest, root)
    special = manifest.tokenizer.special_ids
    pad_id, mask_id = special.get("<pad>", PAD_ID), special.get("<mask>", MASK_ID)

    model = Encoder(cfg.model, vocab_size, pad_id=pad_id).to(device)
    dims = resolve_dims(cfg.model, vocab_size)
    raw_model = model
    if cfg.compile:
        model = torch.compile(model)  # type: ignore[assignment]
    if dd.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = build_optimizer(raw_model, cfg.optim)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(cfg.optim.warmup_steps, cfg.steps))
    masker = Masker(cfg.masking, vocab_size, special.values(), mask_id=mask_id, pad_id=pad_id,
                    word_starts=word_starts).to(device)
    use_bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and device.type == "cuda")

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16)

    loader = ShardLoader(cfg.data, "train", batch_size=None if cfg.tokens_per_batch else cfg.batch_size,
                         tokens_per_batch=cfg.tokens_per_batch, seed=cfg.seed, rank=dd.rank,
                         world_size=dd.world_size, num_workers=cfg.num_workers, shuffle_buffer=cfg.shuffle_buffer,
                         corrupt_policy=cfg.corrupt_shards, pin_memory=device.type == "cuda", follow=cfg.follow)
    valid = None
    if cfg.eval_every and manifest.shards_of("valid"):
        valid = ShardLoader(cfg.data, "valid", batch_size=cfg.batch_size, seed=cfg.seed, rank=dd.rank,
                            world_size=dd.world_size, shuffle_buffer=1, epochs=1)

    step = 0
    counters = RunCounters(cfg.trackers.loss_smoothing)  # tokens seen, smoothed loss (#20)
    found = load_latest_checkpoint(cfg.output) if cfg.resume else None
    if found:
        ckpt, state = found
        check_same_model(raw_model, state, ckpt, cfg, vocab_size)
        raw_model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        loader.load_state_dict(state["loader"])
        step = int(state["step"])
        counters.load_state_dict(state.get("counters", {}))
        restore_rng(state["rng"], dd, device, cfg.seed + dd.rank + step)
        if dd.main:
            log.info("resumed from %s at step %d", ckpt, step)

    def checkpoint() -> None:
        loader_state = gather_state_dict(loader)  # a collective: every rank's partitions, for elastic resume
        rng = gather_rng(dd, device)  # a collective too: one RNG state per rank (dropout differs by rank)
        if not dd.main:
            return
        save_checkpoint(cfg.output, step, {
            "model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "loader": loader_state, "rng": rng, "step": step,
            "config": cfg.model_dump(mode="json"), "vocab_size": vocab_size,
            "manifest": manifest.tokenizer.sha256, "counters": counters.state_dict(),
        }, cfg.keep_last)

    accum = micro_batches_per_step(cfg, dd.world_size, manifest.max_seq_len)
    # The masked-only head projects to the vocabulary only at predicted positions: count what runs.
    flops_tok = flops_per_token(dims, manifest.max_seq_len,
                                lm_head_fraction=cfg.masking.rate if cfg.model.masked_only_head else 1.0)
    peak = device_peak_flops(torch.cuda.get_device_name(device) if device.type == "cuda" else None)
    metrics = open_loggers(cfg, enabled=dd.main)  # metrics.jsonl, TensorBoard, W&B / MLflow (#20)
    starvation = StarvationMonitor()
    first_loss = last_loss = None
    it = iter(loader)
    bar = progress_bar(cfg.steps, step, enabled=dd.main and sys.stderr.isatty())
    model.train()
    with Preemption() as preempt:
        while step < cfg.steps and not (cfg.stop_at is not None and step >= cfg.stop_at):
            t0 = time.perf_counter()
            wait = 0.0
            s = StepStats()
            for micro in range(accum):
                tw = time.perf_counter()
                host = next(it)
                wait += time.perf_counter() - tw
                # Scalars read from the host batch: reading them after the copy would sync the device.
                epoch, tokens = int(host["epoch"][0]), real_tokens(host)
                batch = to_device(host, device)
                masked = masker(batch["input_ids"], batch["sample_ids"], epoch=epoch, seed=cfg.seed)
                drop_padding_rows(batch, masked)
                sync = contextlib.nullcontext()
                if dd.world_size > 1 and micro < accum - 1:
                    sync = model.no_sync()  # type: ignore[operator]
                with sync:  # no gradient all-reduce until the last micro-batch
                    with autocast():
                        out = model(**model_inputs(batch, masked))
                    (out["loss"] / accum).backward()
                s.add(out, tokens, 1.0 / accum)
            # The norm is logged every step; with no clipping (RoBERTa) an infinite max leaves the gradients as they are.
            grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.optim.clip_norm or math.inf)
            s.add_value("grad_norm", grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if device.type == "cuda":
                torch.cuda.synchronize()
            v = s.values()
            dt = time.perf_counter() - t0
            tokens = s.tokens * dd.world_size
            record = {"step": step, "loss": v["loss"], "lr": scheduler.get_last_lr()[0],
                      "mlm_acc": v["mlm_correct"] / max(v["mlm_count"], 1.0), "tokens_per_s": tokens / dt,
                      "step_time": dt, "data_wait_share": wait / dt, "epoch": epoch, "grad_norm": v["grad_norm"]}
            record.update(counters.update(v["loss"], tokens))
            if v["sentence_count"]:
                record["sentence_acc"] = v["sentence_correct"] / v["sentence_count"]
            if peak:
                record["mfu"] = flops_tok * tokens / dt / (peak * dd.world_size)
            starvation.update(record["data_wait_share"])
            first_loss = v["loss"] if first_loss is None else first_loss
            last_loss = v["loss"]
            if valid is not None and step % cfg.eval_every == 0:
                record.update(evaluate(model, valid, masker, cfg, device, autocast))
            metrics.log(record)
            if dd.main and (step % cfg.log_every == 0 or step == cfg.steps):
                metrics.flush()
                log.info("step %d loss %.4f lr %.2e tok/s %.0f wait %.0f%%", step, v["loss"], record["lr"],
                         record["tokens_per_s"], 100 * record["data_wait_share"])
            postfix = {"loss": f"{v['loss']:.3f}", "tok/s": f"{record['tokens_per_s']:.0f}",
                       "wait": f"{100 * record['data_wait_share']:.0f}%"}
            if "mfu" in record:
                postfix["mfu"] = f"{100 * record['mfu']:.0f}%"
            bar.set_postfix(postfix)
            bar.update(1)
            stop = preempt.requested or (cfg.stop_at is not None and step >= cfg.stop_at)
            if dd.world_size > 1:  # ranks may see SIGTERM at different steps: stop together
                flag = torch.tensor([int(stop)], device=device)
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                stop = bool(flag.item())
            if (cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or step == cfg.steps or stop:
                checkpoint()
            if stop:
                if dd.main:
                    why = f"stop_at={cfg.stop_at}" if cfg.stop_at is not None and step >= cfg.stop_at else "SIGTERM"
                    log.warning("%s: checkpoint saved at step %d, exiting", why, step)
                break
    it.close()  # shut DataLoader workers down now, not whenever the generator is collected
    bar.close()
    metrics.close()
    if dd.world_size > 1:
        dist.barrier()
    return {"steps": step, "first_loss": first_loss, "last_loss": last_loss, "output": cfg.output,
            "params": raw_model.num_params(), "accumulation": accum, "world_size": dd.world_size}


# ------------------------------------------------------------------ CLI

def build_train_config(args: argparse.Namespace, overrides: list[str], require_data: bool = True) -> TrainConfig:
    """Recipe -> --config -> flags -> --set (trainer/recipes)."""
    flags = {k: getattr(args, k) for k in ("data", "output", "steps", "batch_size", "seed", "num_workers",
                                           "tokens_per_batch", "device", "follow")}
    return resolve_train_config(getattr(args, "recipe", None), args.config, flags, overrides, require_data)


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m trainer.train", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="Corpus URL or its manifest.json (local, gs://, s3://).")
    p.add_argument("--output", help="Run folder URL: metrics, checkpoints (default runs/run).")
    p.add_argument("--recipe", help="Named recipe of a paper (roberta-base, albert-large, spanbert-base, cpu, ...: "
                                    "docs/recipes.md); --config, flags and --set override it.")
    p.add_argument("--config", help="Train config YAML/JSON (flags override it).")
    p.add_argument("--print-config", action="store_true",
                   help="Print the resolved config (recipe + config + flags + --set) as YAML and exit.")
    p.add_argument("--steps", type=int, help="Optimizer steps to train to.")
    p.add_argument("--batch_size", type=int, help="Sequences per micro-batch per rank.")
    p.add_argument("--tokens_per_batch", type=int, help="Token budget per micro-batch (DOC-SENTENCES).")
    p.add_argument("--num_workers", type=int, help="DataLoader workers per rank.")
    p.add_argument("--seed", type=int)
    p.add_argument("--follow", action="store_true", default=None,
                   help="Follow a served corpus: adopt its latest version at every epoch boundary.")
    p.add_argument("--device", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="Override any config field, e.g. --set model.size=base --set masking.scheme=span")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return run_cli(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if args.print_config:
        print(config_yaml(build_train_config(args, args.set, require_data=False)), end="")
        return 0
    summary = train(build_train_config(args, args.set))
    if int(os.environ.get("RANK", "0")) == 0:
        if summary["first_loss"] is None:
            print(f"nothing to do: the run is already at step {summary['steps']}")
        else:
            print(f"trained to step {summary['steps']}: loss {summary['first_loss']:.4f} -> "
                  f"{summary['last_loss']:.4f}; checkpoints in {join(summary['output'], 'checkpoints')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
