"""What a run says about itself before it trains: model, device, corpus, length, evaluation, output.

The trainer prints these lines as soon as the model is built, before the slow
part of its start (building the optimizer imports ``torch._dynamo``: seconds,
more on a busy machine) and long before the first step line. ``plan_steps``
turns ``max_tokens`` into steps. Everything here is a pure function of the
resolved config, the corpus's manifest and a few numbers the setup measured,
so the text is tested without training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schemas.config import MaskingConfig, ModelConfig, TrainConfig
from schemas.manifest import FEW_MASKED, Manifest, corpus_root, manifest_url
from shardforge.console.words import counted, every
from shardforge.storage import join, redact_url
from shardforge.storage.contract import more_valid_hint
from trainer.checkpoint import describe_model
from trainer.model import resolve_dims


@dataclass(frozen=True)
class Batches:
    """What a train micro-batch holds on average over an epoch (setup reads it from the loaders' plans)."""

    rows: float | None  # sequences (None: batched by a token budget)
    tokens: float  # real tokens
    corpora: tuple[tuple[float, int], ...]  # (share of the run's tokens, train tokens) of each corpus read
    short: bool = False  # well under batch_size or the budget (a small corpus): the figures are averages


@dataclass(frozen=True)
class RunShape:
    """What setup knows of a run before its optimizer exists."""

    params: int  # the model's parameters (shared ones once)
    device: str  # cpu, cuda:0, ...
    precision: str  # bf16 | fp16 | fp32: what runs
    compiled: bool  # torch.compile on
    world_size: int
    accum: int  # micro-batches per optimizer step
    vocab_size: int
    masking: str = "reference"  # the masker that runs: fused (compiled kernels) or reference (plain ops)
    masking_ahead: bool = False  # masking_overlap: the next batch masked on a side stream (trainer/batch.py)
    batches: Batches | None = None  # what a train batch holds (None: full batches, ``full_batches``)
    valid_batches: int | None = None  # the batches each process's share of the valid split holds


def mean_sequence_tokens(manifest: Manifest) -> float:
    """The train split's real tokens per sequence (its shards' totals), at least 1."""
    shards = manifest.shards_of("train")
    samples = sum(s.samples for s in shards)
    return max(1.0, sum(s.tokens for s in shards) / samples) if samples else 1.0


def full_batches(cfg: TrainConfig, manifest: Manifest) -> Batches:
    """Batches as full as the flags ask: ``batch_size`` sequences of the train split's mean length, or the
    token budget."""
    corpora = ((1.0, sum(s.tokens for s in manifest.shards_of("train"))),)
    if cfg.tokens_per_batch:
        return Batches(None, float(cfg.tokens_per_batch), corpora)
    return Batches(float(cfg.batch_size), cfg.batch_size * mean_sequence_tokens(manifest), corpora)


def sequences_per_step(batches: Batches, world_size: int, accum: int) -> float | None:
    """Sequences an optimizer step takes over every process (None: batches by token budget)."""
    return None if batches.rows is None else batches.rows * world_size * accum


def tokens_per_step(batches: Batches, world_size: int, accum: int) -> float:
    """About how many real tokens an optimizer step takes over every process."""
    return batches.tokens * world_size * accum


def reads_of(batches: Batches, tokens: float) -> list[float]:
    """How many times reading ``tokens`` of the run's real tokens reads each corpus's train split."""
    return [share * tokens / max(split, 1) for share, split in batches.corpora]


def plan_steps(cfg: TrainConfig, batches: Batches, world_size: int, accum: int) -> TrainConfig:
    """The config with ``steps`` set from ``max_tokens`` (unchanged when max_tokens is not set)."""
    if cfg.max_tokens is None:
        return cfg
    steps = max(1, math.ceil(cfg.max_tokens / tokens_per_step(batches, world_size, accum)))
    return cfg.model_copy(update={"steps": steps})


def count(n: float) -> str:
    """1234 -> 1,234; 1234567 -> 1.23M; 2.5e9 -> 2.50B."""
    for size, unit in ((1e9, "B"), (1e6, "M")):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{round(n):,}"


def masking_text(m: MaskingConfig) -> str:
    """token 40%, whole_word 15%, ..."""
    return f"{m.scheme} {100 * m.rate:g}%"


def where(url: str) -> str:
    """A URL as a log line shows it: without credentials."""
    return redact_url(url)


def corpus_line(cfg: TrainConfig, manifest: Manifest) -> str:
    tok = manifest.tokenizer
    parts = []
    for split in ("train", "valid"):
        shards = manifest.shards_of(split)
        if shards:
            parts.append(f"{split} {count(sum(s.tokens for s in shards))} tokens in "
                         f"{counted(sum(s.samples for s in shards), 'sequence')} ({counted(len(shards), 'shard')})")
    mixed = f" and {len(cfg.mix) - 1} more (--mix)" if len(cfg.mix) > 1 else ""
    return (f"corpus: {where(cfg.data)}{mixed} (v{manifest.version}, {manifest.packing_rule}, max_seq_len "
            f"{manifest.max_seq_len}, {tok.kind} {tok.model_type} vocabulary {tok.vocab_size:,}): "
            f"{'; '.join(parts) or 'no train shards'}")


def passes(x: float) -> str:
    """12.3, 0.4, 0.017: how often the run reads its train split."""
    return f"{x:.1f}" if x >= 0.1 else f"{x:.2g}"


def length_line(cfg: TrainConfig, manifest: Manifest, shape: RunShape) -> str:
    b = shape.batches or full_batches(cfg, manifest)
    per_step = tokens_per_step(b, shape.world_size, shape.accum)
    seqs = sequences_per_step(b, shape.world_size, shape.accum)
    about = "~" if b.short else ""  # short batches: an average
    if seqs is not None:
        batch = f"{about}{seqs:,.0f} sequences (~{count(per_step)} tokens)"
    else:
        batch = f"~{count(per_step)} tokens (short of the budget)" if b.short else f"{count(per_step)} tokens (budget)"
    how = []
    if shape.world_size > 1:
        how.append(f"{shape.world_size} processes")
    if shape.accum > 1:
        how.append(f"{shape.accum} micro-batches")
    total = per_step * cfg.steps
    reads = reads_of(b, total)
    low, high = passes(min(reads)), passes(max(reads))
    over = (f"{low} passes over the train split" if len(reads) == 1 else
            f"{low} passes over each mixed corpus's train split" if low == high else
            f"{low} to {high} passes over the mixed corpora's train splits")
    chose = f" (max_tokens {count(cfg.max_tokens)})" if cfg.max_tokens is not None else ""
    split = f" ({', '.join(how)})" if how else ""
    return (f"length: {counted(cfg.steps, 'step')}{chose} x {batch} a step{split} = "
            f"~{count(total)} tokens, "
            f"{over}{short_rows_note(cfg, manifest)}")


SHORT_ROW_RULES = ("doc_sentences", "sentence_pair_nsp")  # rules whose sequences end early by design


def short_rows_note(cfg: TrainConfig, manifest: Manifest) -> str:
    """For a corpus of short sequences batched by count: what a batch holds, and the flag that gives
    RoBERTa's batches of about a full batch's tokens ("" otherwise)."""
    if cfg.tokens_per_batch or manifest.packing_rule not in SHORT_ROW_RULES:
        return ""
    mean = mean_sequence_tokens(manifest)
    return (f"; {manifest.packing_rule} sequences hold {mean:.0f} of {manifest.max_seq_len} tokens on average, "
            f"so a batch is ~{100 * mean / manifest.max_seq_len:.0f}% full: RoBERTa grows the batch to a full one's "
            f"tokens (--tokens_per_batch {cfg.batch_size * manifest.max_seq_len})")


def long_warmup(cfg: TrainConfig) -> str | None:
    """A warning where the warmup is not shorter than the run (a recipe's warmup kept with a short --steps):
    the learning rate then rises the whole run, short of its peak, and never decays; None otherwise."""
    w, steps = cfg.optim.warmup_steps, cfg.steps
    if not w or w < steps:
        return None
    ends = (f"reaches its peak lr {cfg.optim.lr:g} only at the last step and never decays" if w == steps else
            f"ends at {steps / w:.2%} of its peak lr {cfg.optim.lr:g}")
    return (f"warmup_steps {w:,} is not under the run's {counted(steps, 'step')}: the learning "
            f"rate rises the whole run and {ends}; a shorter run wants a shorter warmup: --warmup_steps under "
            "--steps, or --warmup_ratio (RoBERTa warmed up over 24,000 of 500,000 steps: 0.048)")


def step_over_corpus(cfg: TrainConfig, batches: Batches, world_size: int, accum: int) -> str | None:
    """A warning where one optimizer step takes at least a whole train split (a recipe's global batch, sized for
    billions of tokens, kept on a small corpus): every update then reads the corpus once or more, and the
    run's steps are few updates of many passes; None otherwise. Says which setting made the step that big."""
    per_step = tokens_per_step(batches, world_size, accum)
    each = reads_of(batches, per_step)
    reads = max(each)
    tokens = batches.corpora[each.index(reads)][1]
    if reads < 1:
        return None
    seqs = sequences_per_step(batches, world_size, accum)
    took = f"~{seqs:,.0f} sequences (~{count(per_step)} tokens)" if seqs is not None else f"~{count(per_step)} tokens"
    split = "the train split" if len(batches.corpora) == 1 else "the train split of the mixed corpus it reads most"
    under = (f"the split's ~{seqs / reads:,.0f} sequences" if seqs is not None and len(batches.corpora) == 1
             else "the split's sequences")
    recipe = " (a global batch sized for corpora of billions of tokens)"
    if cfg.gradient_accumulation:
        made, fix = f"--gradient_accumulation {cfg.gradient_accumulation}", "a smaller --gradient_accumulation"
    elif accum > 1 and cfg.global_batch_sequences:
        made = f"global_batch_sequences {cfg.global_batch_sequences:,}{recipe}"
        fix = f"--set global_batch_sequences=N well under {under}"
    elif accum > 1 and cfg.global_batch_tokens:
        made = f"global_batch_tokens {cfg.global_batch_tokens:,}{recipe}"
        fix = f"--set global_batch_tokens=N well under its {count(tokens)} tokens"
    else:
        made = f"--tokens_per_batch {cfg.tokens_per_batch}" if cfg.tokens_per_batch else f"--batch_size {cfg.batch_size}"
        made += f" on {world_size} processes" if world_size > 1 else ""
        fix = "smaller micro-batches"
    return (f"a step takes {took}, {reads:.2f}x {split} ({count(tokens)} tokens), so every update reads the whole "
            f"corpus ({counted(cfg.steps, 'update')} in all, over {passes(reads * cfg.steps)} passes); the step's "
            f"size comes from {made}: a corpus this small wants {fix}")


def wide_embedding(model: ModelConfig, vocab_size: int) -> str | None:
    """A warning where ALBERT's factorized embedding is wider than the hidden size (a recipe's embedding_size
    kept with a smaller --model_size): E < H is what saves parameters; E > H adds them. None otherwise."""
    d = resolve_dims(model, vocab_size)
    if d.embedding_size <= d.hidden:
        return None
    e, h = d.embedding_size, d.hidden
    # E-wide word, position and type tables and LayerNorms, the E -> H projection, the head's H -> E
    # transform and LayerNorm; against the same model with E = H (no projection, an H -> H transform).
    extra = (d.vocab_size + d.max_positions + d.type_vocab_size + 4) * (e - h) + 2 * e * h + e - h * h
    return (f"model.embedding_size {d.embedding_size} is above the hidden size {d.hidden}: ALBERT factorizes the "
            f"embedding to E < H to save parameters, and this one adds {count(extra)} (as an ALBERT recipe's "
            f"embedding_size kept with a smaller --model_size does); --set model.embedding_size=null ties it to the "
            f"hidden size, or give one under {d.hidden}")


def optim_line(cfg: TrainConfig) -> str:
    o = cfg.optim
    eval_masking = f" (evaluated at {masking_text(cfg.eval_masking)})" if cfg.eval_masking is not None else ""
    decay = {"linear": "linear decay to 0", "cosine": "cosine decay to 0", "constant": "then constant"}[o.schedule]
    return (f"optimizer: {o.name} lr {o.lr:g}, {o.warmup_steps:,} warmup steps, {decay}; "
            f"masking {masking_text(cfg.masking)}{eval_masking}; seed {cfg.seed}")


def eval_line(cfg: TrainConfig, manifest: Manifest, valid_batches: int | None = None) -> str:
    """``valid_batches``: what each process's share of the valid split holds, where known; an eval_batches
    above it is said as the whole split."""
    if not cfg.eval_batches:
        return "evaluation: off (eval_batches=0)"
    if not manifest.shards_of("valid"):
        hint = "" if cfg.mix else \
            f"; {more_valid_hint(manifest, corpus_root(manifest_url(cfg.data)), 0, cfg.masking.rate)}"
        return f"evaluation: none (the corpus has no valid split{hint})"
    when = f"{every(cfg.eval_every)} and at step {cfg.steps:,}" if 0 < cfg.eval_every < cfg.steps \
        else f"at step {cfg.steps:,}"
    masking = cfg.eval_masking or cfg.masking
    small = ""
    if valid_batches is not None and cfg.eval_batches > valid_batches:
        batches = (f"the whole valid split ({counted(valid_batches, 'batch', 'batches')} a process; "
                   f"eval_batches {cfg.eval_batches:,} asks for more)")
        tokens = sum(s.tokens for s in manifest.shards_of("valid"))
        masked = round(tokens * masking.rate)
        if not cfg.mix and masked < FEW_MASKED:
            hint = more_valid_hint(manifest, corpus_root(manifest_url(cfg.data)), masked)
            small = f"; the split's {tokens:,} tokens give ~{masked:,} masked: a noisy loss ({hint})"
    else:
        batches = counted(cfg.eval_batches, "valid batch", "valid batches")
    return (f"evaluation: {when}, {batches}, MLM cross-entropy (nats) at "
            f"{masking_text(masking)} masking{small}")


def output_line(cfg: TrainConfig) -> str:
    when = f"{every(cfg.checkpoint_every)} and at the end" if 0 < cfg.checkpoint_every < cfg.steps \
        else "at the end"
    resume = "; a rerun resumes from the newest" if cfg.resume else ""
    logs = [f"metrics {where(join(cfg.output, 'metrics.jsonl'))}"]
    if cfg.trackers.tensorboard and ("://" not in cfg.output or cfg.output.startswith("file://")):
        logs.append(f"TensorBoard {where(join(cfg.output, 'tb'))}")
    logs += [name for name, on in (("W&B", cfg.trackers.wandb), ("MLflow", cfg.trackers.mlflow)) if on]
    keep = f"keep {cfg.keep_last}" if cfg.keep_last else "keep all"
    lines = f"a line {every(cfg.log_every)}" if 0 < cfg.log_every < cfg.steps else "a line at the first and last step"
    return (f"output: checkpoints {where(join(cfg.output, 'checkpoints'))} ({when}, {keep}{resume}); "
            f"{', '.join(logs)}; {lines}")


def compile_text(cfg: TrainConfig, shape: RunShape) -> str:
    """torch.compile on (with its mode, where not the default) or off."""
    if not shape.compiled:
        return "off"
    how = [x for x in (cfg.compile_mode if cfg.compile_mode != "default" else "",
                       "by layers" if cfg.compile_scope == "layers" else "") if x]
    return f"on ({', '.join(how)})" if how else "on"


def describe_run(cfg: TrainConfig, manifest: Manifest, shape: RunShape) -> list[str]:
    """The run's description, one line per concern."""
    return [
        f"model: {describe_model(cfg.model, shape.vocab_size)}; {count(shape.params)} parameters"
        + (f", from {where(cfg.init)}" if cfg.init else ""),
        f"device: {shape.device}{f' x {shape.world_size} processes' if shape.world_size > 1 else ''}, precision "
        f"{shape.precision}, torch.compile {compile_text(cfg, shape)}, {shape.masking} masking ops"
        + (" (one batch ahead, on a side stream)" if shape.masking_ahead else "")
        + (", activation checkpointing (each layer recomputed in the backward pass)"
           if cfg.activation_checkpointing else ""),
        corpus_line(cfg, manifest),
        length_line(cfg, manifest, shape),
        optim_line(cfg),
        eval_line(cfg, manifest, shape.valid_batches),
        output_line(cfg),
    ]
