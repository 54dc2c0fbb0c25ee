"""`shardforge evaluate MODEL`: a model's masked-LM loss, perplexity and accuracy on a corpus split.

    shardforge evaluate runs/r1                              # its latest checkpoint, on its corpus's valid split
    shardforge evaluate runs/r1/checkpoints/ckpt-00001000.pt --data gs://corpora/news --split valid --batches 50
    shardforge evaluate models/roberta-base --data out/corpus-roberta-tok   # a Hugging Face folder

The model is a checkpoint (or a run folder: its latest), or a Hugging Face folder (what --init takes,
an export included). The corpus must be built with the model's tokenizer: a checkpoint records its
tokenizer's sha256, a Hugging Face folder is checked as --init checks it. The batches are the trainer's
evaluation batches (trainer/evaluate.py: the split in order, masks keyed by seed + 1), so with the
checkpoint's defaults and ``--batches`` = its ``eval_batches`` the result is the eval_loss the run logged
at that step.

Under torchrun (RANK / WORLD_SIZE set) every rank evaluates its share of the split, as a run's ranks do
(``--batches`` counts each rank's batches, as ``eval_batches`` does), its sums are added over the ranks and
rank 0 prints the result: the whole split on N ranks gives the one-process figures.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardforge.console.words import counted

if TYPE_CHECKING:
    from trainer.distributed import Dist

log = logging.getLogger("shardforge.evaluate")

HF_BATCH_SIZE = 32  # a Hugging Face folder has no batch size of its own
PROGRESS_EVERY_S = 30.0  # a progress line this often while the split is long


@dataclass
class Subject:
    """What is evaluated: the model (eval mode, on the CPU), the config its masking and batches default
    from, where it came from, and the corpus it was trained on (a checkpoint's) or None."""

    model: Any
    cfg: Any  # TrainConfig
    url: str
    kind: str  # "checkpoint" | "hf"
    trained_corpus: str | None
    tokenizer_sha256: str | None  # a checkpoint's record of its tokenizer
    step: int | None = None  # a checkpoint's step


def is_hf_folder(url: str) -> bool:
    from shardforge.storage import exists, join

    return not url.endswith(".pt") and exists(join(url, "config.json"))


def load_checkpoint_subject(url: str) -> Subject:
    """A checkpoint file or run folder (its latest checkpoint): its model, config and tokenizer record."""
    from trainer.checkpoint import load_checkpoint
    from trainer.export import checkpoint_config, checkpoint_file, checkpoint_model

    ckpt = checkpoint_file(url, other="a Hugging Face model folder")
    state = load_checkpoint(ckpt)
    cfg = checkpoint_config(state, ckpt)
    model = checkpoint_model(state, cfg, ckpt)
    step = state.get("step")
    return Subject(model, cfg, ckpt, "checkpoint", cfg.data, state.get("manifest"),
                   step if isinstance(step, int) else None)


def load_hf_subject(url: str, data: str, manifest: Any, vocab_size: int, skip_check: bool) -> Subject:
    """A Hugging Face folder checked against the corpus (vocabulary, pad id, tokenizer) and loaded."""
    from schemas.config import TrainConfig
    from schemas.errors import UserError
    from trainer.hf_init import build_encoder, check_corpus, check_tokenizer, init_model_config

    try:
        check_corpus(url, manifest, vocab_size, what="model")
        if not skip_check:
            check_tokenizer(url, manifest, data, what="model", off="--skip_tokenizer_check")
        cfg = TrainConfig(data=data, init=url, model=init_model_config(url))
        model = build_encoder(url, vocab_size, pad_id=manifest.tokenizer.special_ids.get("<pad>"))
    except UserError as e:  # the loader's lines name the folder as --init takes it
        text = str(e)
        raise UserError(f"model {text.removeprefix('--init ')}" if text.startswith("--init ") else text) from None
    return Subject(model.eval(), cfg, url, "hf", None, None)


def same_vocabulary_as_trained(subject: Subject, manifest: Any, root: str) -> bool:
    """Whether the corpus's tokenizer, another file than the one the checkpoint trained with, gives every id
    the token the trained-on corpus's tokenizer gives it (a converted copy: an export's tokenizer.json)."""
    from shardforge.storage.contract import load_manifest, open_tokenizer

    try:
        trained, trained_root = load_manifest(subject.trained_corpus or "")
        if trained.tokenizer.sha256 != subject.tokenizer_sha256:
            return False
        return open_tokenizer(trained, trained_root).pieces() == open_tokenizer(manifest, root).pieces()
    except Exception:  # noqa: BLE001 - the trained-on corpus is gone or unreadable here: nothing to compare with
        return False


def check_subject(subject: Subject, manifest: Any, root: str, data: str, vocab_size: int) -> None:
    """A checkpoint's tokenizer is the corpus's (the same file, or the same vocabulary), and the corpus's
    sequences fit the model's positions."""
    from schemas.errors import UserError
    from shardforge.storage import redact_url

    have = manifest.tokenizer.sha256
    if subject.kind == "checkpoint":
        if subject.tokenizer_sha256 and subject.tokenizer_sha256 != have and \
                not same_vocabulary_as_trained(subject, manifest, root):
            raise UserError(f"{redact_url(data)} is built with another tokenizer (sha256 {have[:12]}…) than "
                            f"{subject.url} was trained with (sha256 {subject.tokenizer_sha256[:12]}…), and not the same "
                            "vocabulary: its ids mean other tokens; give --data a corpus built with that tokenizer")
        if subject.model.dims.vocab_size != vocab_size:
            raise UserError(f"{subject.url} has a vocabulary of {subject.model.dims.vocab_size}, the corpus's tokenizer "
                            f"{vocab_size}: give --data a corpus built with the checkpoint's tokenizer")
    dims = subject.model.dims
    if manifest.max_seq_len > dims.max_seq_len:
        raise UserError(f"{redact_url(data)}'s sequences are up to {manifest.max_seq_len} tokens; the model takes "
                        f"{dims.max_seq_len}: give a corpus built with --max_seq_len {dims.max_seq_len} or less")


def masking_of(subject: Subject, scheme: str | None, rate: float | None) -> Any:
    """The checkpoint's evaluation masking (a Hugging Face folder: RoBERTa's token masking), with the
    scheme and rate given."""
    masking = subject.cfg.eval_masking or subject.cfg.masking
    given = {k: v for k, v in (("scheme", scheme), ("rate", rate)) if v is not None}
    return masking.model_copy(update=given) if given else masking


class Progress:
    """Takes the batches: counts them and their sequences (not the rows a loader repeats), and says on
    stderr every PROGRESS_EVERY_S how far a long split is (``quiet``: counts only, as ranks but the first do)."""

    def __init__(self, total: int | None, quiet: bool = False):
        self.total, self.done, self.sequences, self.quiet = total, 0, 0, quiet
        self.start = self.last = time.monotonic()

    def __call__(self, it: Iterator[Any]) -> Any:
        batch = next(it)
        self.done += 1
        pad = batch.get("is_pad")
        self.sequences += len(batch["input_ids"]) - (int(pad.sum()) if pad is not None else 0)
        now = time.monotonic()
        if not self.quiet and now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            of = f" of {self.total:,}" if self.total else ""
            log.info("evaluated %d%s batches (%.0f s)", self.done - 1, of, now - self.start)
        return batch


def evaluate_model(model_url: str, data: str | None = None, split: str = "valid", batches: int | None = None,
                   batch_size: int | None = None, masking: str | None = None, mask_rate: float | None = None,
                   seed: int | None = None, device_name: str = "auto", precision: str = "auto",
                   skip_tokenizer_check: bool = False, dd: Dist | None = None) -> dict[str, Any]:
    """The evaluation's result: what was evaluated on what (model, corpus, split, batches, masking) and
    ``eval_loss`` / ``eval_ppl`` / ``eval_mlm_acc`` / ``eval_mlm_tokens`` (and ``eval_sentence_acc`` over
    ``eval_sentence_pairs``). ``dd``: this process's rank and device (``trainer.distributed.setup``, which
    joins torchrun's process group), set up here from ``device_name`` when None."""
    from schemas import MASK_ID, PAD_ID
    from schemas.errors import UserError
    from shardforge.storage import redact_url
    from shardforge.storage.contract import load_manifest
    from trainer.distributed import all_reduce_sum, setup
    from trainer.evaluate import evaluate
    from trainer.loader import ShardLoader
    from trainer.precision import Precision
    from trainer.train import build_maskers, vocab_tables

    hf = is_hf_folder(model_url)
    subject = None if hf else load_checkpoint_subject(model_url)
    if data is None:
        if subject is None:
            raise UserError(f"{model_url} is a Hugging Face folder: give --data, a corpus built with its tokenizer")
        data = subject.trained_corpus
        try:
            manifest, root = load_manifest(data)
        except UserError as e:
            raise UserError(f"{e} (the corpus {subject.url} trained on: give --data CORPUS)") from None
    else:
        manifest, root = load_manifest(data)
    if not manifest.shards_of(split):
        other = "train" if split == "valid" else "valid"
        hint = f"; --split {other} evaluates on its {other} split" if manifest.shards_of(other) else ""
        hint += " (the train split is text the model saw)" if other == "train" and hint else ""
        raise UserError(f"corpus {redact_url(root)} has no {split} split{hint}")
    vocab_size, word_starts = vocab_tables(manifest, root)
    if subject is None:
        subject = load_hf_subject(model_url, data, manifest, vocab_size, skip_tokenizer_check)
    check_subject(subject, manifest, root, data, vocab_size)
    cfg = subject.cfg
    seed = cfg.seed if seed is None else seed
    batch_size = batch_size or (cfg.batch_size if subject.kind == "checkpoint" else HF_BATCH_SIZE)
    scheme = masking_of(subject, masking, mask_rate)
    dd = dd or setup(device_name)
    device = dd.device
    special = manifest.tokenizer.special_ids
    pad_id, mask_id = special.get("<pad>", PAD_ID), special.get("<mask>", MASK_ID)
    # A run's evaluation loader (trainer/train.py), on this process's rank: a split too small for every rank
    # leaves some only padding rows, which count for nothing.
    loader = ShardLoader(data, split, batch_size=batch_size, seed=seed, rank=dd.rank, world_size=dd.world_size,
                         shuffle_buffer=1, epochs=1, allow_idle=True, pin_memory=device.type == "cuda")
    total = loader.steps_per_epoch if batches is None else min(batches, loader.steps_per_epoch)
    # The trainer's evaluation, as a run's config asks for it: these batches, these masks.
    run_cfg = cfg.model_copy(update={"eval_batches": total, "seed": seed, "masking": scheme, "eval_masking": None})
    masker, _ = build_maskers(run_cfg, device, vocab_size, special, word_starts, pad_id, mask_id)
    model = subject.model.to(device)
    prec = Precision(precision, device)  # type: ignore[arg-type]
    started = time.monotonic()
    progress = Progress(total, quiet=not dd.main)
    res = evaluate(model, loader, masker, run_cfg, device, prec.autocast, wait=progress)
    sequences, done = (int(x) for x in all_reduce_sum([progress.sequences, progress.done], device))
    if not res:
        raise UserError(f"no token was masked in the {counted(sequences, 'sequence')} of {redact_url(root)}'s "
                        f"{split} split evaluated ({scheme.scheme} masking at {scheme.rate:g}): give more --batches, "
                        "a larger --batch_size or a higher --mask_rate")
    return {"model": redact_url(subject.url), "data": redact_url(root), "split": split, "batches": done,
            "sequences": sequences, "ranks": dd.world_size,
            "batch_size": batch_size, "masking": scheme.scheme, "mask_rate": scheme.rate, "seed": seed,
            "device": str(device) if dd.world_size == 1 else device.type,  # ranks: cuda:0, cuda:1, ...
            "precision": prec.name, "seconds": round(time.monotonic() - started, 3),
            **({"step": subject.step} if subject.step is not None else {}), **res}


def render(r: dict[str, Any]) -> str:
    from schemas.manifest import FEW_MASKED

    step = f" (step {r['step']})" if "step" in r else ""
    ranks = f" on {r['ranks']} ranks" if r.get("ranks", 1) > 1 else ""
    lines = [f"{r['model']}{step} on {r['data']} ({r['split']} split: {counted(r['sequences'], 'sequence')} "
             f"in {counted(r['batches'], 'batch', 'batches')} of up to {r['batch_size']}{ranks}; "
             f"{r['masking']} masking at {r['mask_rate']:g}, seed {r['seed']}; {r['device']}, {r['precision']})",
             f"  MLM loss {r['eval_loss']:.4f}  perplexity {r['eval_ppl']:.4g}  accuracy "
             f"{100 * r['eval_mlm_acc']:.2f}% of {int(r['eval_mlm_tokens']):,} predicted tokens"]
    if r["eval_mlm_tokens"] < FEW_MASKED:
        lines.append(f"  (under {FEW_MASKED:,} predicted tokens the masking draw alone moves the loss: more batches, "
                     "or a larger valid split, steady it)")
    if "eval_sentence_acc" in r:
        lines.append(f"  sentence head accuracy {100 * r['eval_sentence_acc']:.2f}% of "
                     f"{int(r['eval_sentence_pairs']):,} pairs")
    if math.isinf(r["eval_ppl"]) or r["eval_loss"] >= 50:
        lines.append("  (perplexity capped at e^50)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from shardforge.console.redact import redact_text
    from trainer.args import parse_evaluate_args
    from trainer.distributed import leave, setup, teardown
    from trainer.train import command_logging

    args = parse_evaluate_args(argv)
    with command_logging():
        dd = setup(args.device)  # under torchrun: this rank joins the process group
        try:
            r = evaluate_model(args.model, args.data, args.split, args.batches, args.batch_size, args.masking,
                               args.mask_rate, args.seed, args.device, args.precision, args.skip_tokenizer_check, dd)
        finally:  # and leaves it, also on a refusal
            teardown(dd)
    if dd.main:  # one result, printed by rank 0
        print(redact_text(json.dumps(r, indent=2) if args.json else render(r)))
    return leave(0)  # a torchrun rank ends here (trainer/distributed.py says why)


if __name__ == "__main__":
    from shardforge.console.run import run_cli

    sys.exit(run_cli(lambda: main(sys.argv[1:]), sys.argv[1:]))
