"""The trainer's command lines, without torch: ``--help`` and flag mistakes are answered before the
trainer imports torch (seconds on a cold start), by ``python -m trainer.train``, ``shardforge train`` and
``shardforge export``.

Every flag of the trainer but the corpus, recipe and config file sets one key of the train config
(``CONFIG_FLAGS``; the names a Hugging Face ``run_mlm.py`` user types are accepted too:
``--learning_rate``, ``--mlm_probability``, ``--output_dir``, ``--bf16``, ...). A run_mlm flag with no
equivalent here (``--num_train_epochs``, ``--do_eval``, ...: ``trainer.runmlm_flags``) is one line saying what
to give instead, exit 2. ``--help`` shows each flag's config key and default (read from
``schemas.config`` only when help is printed) and lists every key ``--set`` takes.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shardforge.console.args import (
    ArgumentParser,
    at_least,
    between,
    count,
    option_strings,
    unknown_args_message,
)
from trainer.runmlm_flags import HF_CONFIG_ELSEWHERE, HF_CONFIG_KEYS, NO_EQUIVALENT, OTHER_WORDS, NoEquivalent

DESCRIPTION = """Train an encoder on a shardforge corpus: stream shards, mask on the device, step, log, checkpoint.

    python -m trainer.train --data out/corpus --steps 1000 --lr 5e-4 --warmup_steps 100
    python -m trainer.train --recipe cpu --data out/corpus --output runs/cpu
    torchrun --nproc_per_node 8 -m trainer.train --data gs://corpus/v1 --output gs://runs/r1 --config train.yaml

Settings apply in this order, later wins: --recipe, --config, the flags below, --set KEY=VALUE.
The defaults shown are the train config's own; a recipe or config file sets its own values
(--print-config prints what a run will use). A rerun into the same --output resumes it.
Hugging Face run_mlm.py's flag names work too (each flag's second name); one with no equivalent here
(--num_train_epochs, --max_seq_length, --do_eval, ...) says what to give instead, as do the build's
flags and other trainers' words (--max_seq_len, --rule, --epochs, --dropout, --num_gpus, ...).
"""


# Hugging Face TrainingArguments' names for what a choice here means (`--optim adamw_torch` is torch's AdamW,
# fused on CUDA here as there; `constant_with_warmup` is this schedule's constant, which follows the warmup).
HF_OPTIMIZERS = {"adamw_torch": "adamw", "adamw_torch_fused": "adamw"}
HF_SCHEDULES = {"constant_with_warmup": "constant"}


def hf_name(names: dict[str, str]) -> Callable[[str], str]:
    """A flag's type that reads Hugging Face's name of a choice as the choice (others pass on to the check)."""
    def read(text: str) -> str:
        return names.get(text, text)
    return read


@dataclass(frozen=True)
class ConfigFlag:
    """A flag that sets one train config key (``key``, dotted for sections)."""

    names: tuple[str, ...]
    key: str
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    const: Any = None  # given: the flag alone means this value (``--torch_compile`` is ``--compile true``)
    metavar: str | None = None

    @property
    def dest(self) -> str:
        """The attribute parse_args gives it: its first name."""
        return self.names[0].lstrip("-")


def bool_value(text: str) -> bool:
    """A boolean flag's optional value as Hugging Face's parser reads it (true/false, yes/no, 1/0)."""
    if text.lower() in ("true", "t", "yes", "y", "1"):
        return True
    if text.lower() in ("false", "f", "no", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(f"true or false, not {text!r}")


def compile_value(text: str) -> bool | str:
    """``--compile``'s value: auto, or a boolean as ``bool_value`` reads it."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return bool_value(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"true, false or auto, not {text!r}") from None


# Grouped as --help shows them. Flags with a second name take Hugging Face run_mlm.py's spelling too.
CONFIG_FLAGS: dict[str, list[ConfigFlag]] = {
    "length and batch": [
        ConfigFlag(("--steps", "--max_steps"), "steps", "Optimizer steps to train to (the schedule spans them).", int),
        ConfigFlag(("--max_tokens",), "max_tokens", "Train on about this many real tokens instead of --steps "
                   "(2000000000, 2e9 or 2B): the steps follow from the corpus's mean sequence length and the "
                   "global batch.", count, metavar="COUNT"),
        ConfigFlag(("--batch_size", "--per_device_train_batch_size"), "batch_size",
                   "Sequences per micro-batch per process (torchrun: per GPU).", int),
        ConfigFlag(("--gradient_accumulation", "--gradient_accumulation_steps"), "gradient_accumulation",
                   "Micro-batches per optimizer step (unset: as many as global_batch_sequences needs, else 1).", int),
        ConfigFlag(("--tokens_per_batch",), "tokens_per_batch",
                   "Token budget per micro-batch instead of a sequence count (DOC-SENTENCES corpora).", int),
    ],
    "optimizer and schedule": [
        ConfigFlag(("--lr", "--learning_rate"), "optim.lr", "Peak learning rate.", float),
        ConfigFlag(("--warmup_steps",), "optim.warmup_steps", "Steps of linear warmup from 0 to the peak.", int),
        ConfigFlag(("--warmup_ratio",), "optim.warmup_ratio",
                   "Warmup as a share of the run's steps (run_mlm's; when --warmup_steps is 0).", float),
        ConfigFlag(("--schedule", "--lr_scheduler_type"), "optim.schedule",
                   "After the warmup: linear decay to 0, cosine decay to 0, or constant (Hugging Face's "
                   "constant_with_warmup).", hf_name(HF_SCHEDULES), choices=("linear", "cosine", "constant")),
        ConfigFlag(("--optimizer", "--optim"), "optim.name", "AdamW, or LAMB (ALBERT's large batches); "
                   "Hugging Face's adamw_torch and adamw_torch_fused are adamw.", hf_name(HF_OPTIMIZERS),
                   choices=("adamw", "lamb")),
        ConfigFlag(("--weight_decay",), "optim.weight_decay", "Decoupled weight decay (not on biases, LayerNorm).",
                   float),
        ConfigFlag(("--beta1", "--adam_beta1"), "optim.beta1", "The optimizer's first-moment decay (AdamW, LAMB).",
                   float),
        ConfigFlag(("--beta2", "--adam_beta2"), "optim.beta2", "The optimizer's second-moment decay (AdamW, LAMB).",
                   float),
        ConfigFlag(("--eps", "--adam_epsilon"), "optim.eps", "The optimizer's epsilon (AdamW, LAMB).", float),
        ConfigFlag(("--clip_norm", "--max_grad_norm"), "optim.clip_norm",
                   "Clip the gradients' global norm to this (0: no clipping).", float),
    ],
    "model and masking": [
        ConfigFlag(("--model_size",), "model.size", "Encoder size (docs/models.md).",
                   choices=("tiny", "small", "base", "large")),
        ConfigFlag(("--mask_rate", "--mlm_probability"), "masking.rate",
                   "Share of tokens masked in training (evaluation: eval_masking, else the same).", float),
        ConfigFlag(("--masking",), "masking.scheme", "What is masked: tokens, whole words, SpanBERT spans or "
                   "ALBERT n-grams (docs/masking.md).", choices=("token", "whole_word", "span", "ngram")),
    ],
    "evaluation, checkpoints and logs": [
        ConfigFlag(("--eval_every", "--eval_steps"), "eval_every",
                   "Evaluate on the valid split every N steps; the last step always evaluates (0: only it).", int),
        ConfigFlag(("--eval_batches",), "eval_batches", "Valid batches per evaluation (0: no evaluation).", int),
        ConfigFlag(("--checkpoint_every", "--save_steps"), "checkpoint_every",
                   "Checkpoint every N steps; the last step always does (0: only it).", int),
        ConfigFlag(("--keep_last", "--save_total_limit"), "keep_last",
                   "Checkpoints kept, the newest (0: keep every one).", int),
        ConfigFlag(("--log_every", "--logging_steps"), "log_every",
                   "A progress line every N steps, and at the first and last step and each evaluation "
                   "(0: only those; metrics.jsonl has every step).", int),
        ConfigFlag(("--run_name",), "trackers.run_name",
                   "The run's name in W&B and MLflow (none: the --output folder's name).", str),
    ],
    "precision and devices": [
        ConfigFlag(("--precision",), "precision", "auto: bf16 on a GPU that has it, fp16 (+ loss scaling) on one "
                   "without, fp32 on CPU.", choices=("auto", "fp32", "bf16", "fp16")),
        ConfigFlag(("--device",), "device", "auto | cpu | cuda | cuda:N.", str),
        ConfigFlag(("--compile", "--torch_compile"), "compile", "torch.compile the model (auto: on CUDA only); "
                   "the flag alone: true.", compile_value, const=True, metavar="true|false|auto"),
        ConfigFlag(("--activation_checkpointing", "--gradient_checkpointing"), "activation_checkpointing",
                   "Recompute each layer's activations in the backward pass: about one layer's activations in "
                   "memory instead of every layer's, for about a third more compute. The flag alone: true.",
                   bool_value, const=True, metavar="true|false"),
        ConfigFlag(("--ddp_timeout",), "ddp_timeout", "Seconds a rank waits for the others in a collective "
                   "before the run fails (a rank that hung).", float),
        ConfigFlag(("--num_workers", "--dataloader_num_workers"), "num_workers",
                   "DataLoader worker processes per process (0: read in the training process).", int),
        ConfigFlag(("--seed",), "seed", "Seed of the weights, the data order and the masks (a rerun with the "
                   "same seed, corpus and config repeats the run).", int),
    ],
}


# The keys that combine with --init (a run's own dropout); the others are the shape --init takes from the model.
HF_RUN_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob")


def hf_overrides(text: str) -> list[str]:
    """--config_overrides' ``key=value,...`` as ``model.X=value`` items (applied as --set items are, before
    the user's own); ValueError naming the item for a malformed one or a key the encoder has not."""
    items = []
    for item in text.split(","):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key or not value.strip():
            raise ValueError(f"expects KEY=VALUE,... (run_mlm's form), got {item.strip()!r}")
        if key in HF_CONFIG_ELSEWHERE:
            raise ValueError(f"{key}: {HF_CONFIG_ELSEWHERE[key]}")
        if key not in HF_CONFIG_KEYS:
            raise ValueError(f"{key}: no such key here; it takes {', '.join(HF_CONFIG_KEYS)}")
        items.append(f"{HF_CONFIG_KEYS[key]}={value.strip()}")
    return items


# run_mlm's precision switches: --bf16 is --precision bf16, --fp16 is --precision fp16 (a value of false: unset).
PRECISION_SWITCHES = ("bf16", "fp16")


def config_flags() -> list[ConfigFlag]:
    """Every ConfigFlag, in --help's order."""
    return [f for group in CONFIG_FLAGS.values() for f in group]


def config_key_names() -> dict[str, str]:
    """A train config key's other names, as a config file or --set item may write them: each flag's names
    (``lr``, ``learning_rate``, ``max_steps`` -> ``optim.lr``, ``steps``) and the Hugging Face config keys
    (``num_hidden_layers``, ``model.num_hidden_layers`` -> ``model.layers``). Only an unknown key is looked up."""
    names = {name[2:]: f.key for f in config_flags() for name in f.names if name[2:] != f.key}
    for hf, key in HF_CONFIG_KEYS.items():
        names[hf] = names[f"model.{hf}"] = key
    return names


def config_default(key: str) -> Any:
    """The train config's default for a dotted key (imports the contract: only when help is printed)."""
    from pydantic import BaseModel

    from schemas.config import TrainConfig

    model: Any = TrainConfig
    *sections, name = key.split(".")
    for s in sections:
        model = model.model_fields[s].annotation
    field = model.model_fields[name]
    value = field.get_default(call_default_factory=True)
    return value.model_dump() if isinstance(value, BaseModel) else value


def set_keys_text(width: int = 100) -> str:
    """Every key --set takes, grouped by section (the epilog of --help)."""
    from trainer.recipes import valid_keys

    top = [k for k in valid_keys() if "." not in k]
    sections: dict[str, list[str]] = {}
    for k in valid_keys():
        if "." in k:
            head, rest = k.split(".", 1)
            sections.setdefault(head, []).append(rest)
    lines = ["every config key (--set KEY=VALUE; --print-config prints them all with the values a run uses):"]
    for words in (" ".join(top), *(f"{s}.{{{' '.join(keys)}}}" for s, keys in sections.items())):
        lines += textwrap.wrap(words, width, initial_indent="  ", subsequent_indent="      ", break_on_hyphens=False)
    return "\n".join(lines)


class TrainHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each config flag's names once before its value (``--lr, --learning_rate FLOAT``), its key and default."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        return f"{', '.join(action.option_strings)} {self._format_args(action, self._get_default_metavar_for_optional(action))}"

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        key = getattr(action, "config_key", None)
        if key is not None:
            default = config_default(key)
            shown = "none" if default is None else json.dumps(default) if isinstance(default, (list, dict)) else default
            text += f" [{key}; default {shown}]"
        return text.replace("%", "%%")  # argparse %-formats help: none of ours has a placeholder


class TrainParser(ArgumentParser):
    """The trainer's parser: --help ends with every --set key (worked out only when help is printed), and an
    unknown flag's suggestion is a flag that works (none of NO_EQUIVALENT or OTHER_WORDS)."""

    def format_help(self) -> str:
        self.epilog = set_keys_text()
        return super().format_help()

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            answered = {*NO_EQUIVALENT, *OTHER_WORDS}
            self.error(unknown_args_message(extra, [s for s in option_strings(self) if s not in answered]))
        return ns


def train_parser() -> ArgumentParser:
    """The trainer's flags (a recipe, a config file, flags and --set overrides: trainer/recipes)."""
    p = TrainParser(prog="python -m trainer.train", description=DESCRIPTION, formatter_class=TrainHelpFormatter)
    p.add_argument("--data", "--corpus", help="Corpus URL or its manifest.json (local, gs://, s3://, http://): what "
                                              "`python -m pipelines.build` wrote. Required.")
    p.add_argument("--mix", action="append", metavar="URL=WEIGHT",
                   help="Mix several corpora (repeat the flag): URL=0.7 is a share of the training tokens, "
                        "URL=x2 repeats a corpus twice as often as its size gives (fairseq upsampling).")
    p.add_argument("--output", "--output_dir", help="Run folder URL: checkpoints, metrics.jsonl, TensorBoard logs "
                                                    "(default runs/run). A run folder that holds checkpoints is "
                                                    "resumed from its newest.")
    p.add_argument("--recipe", help="Named recipe of a paper (roberta-base, albert-large, spanbert-base, cpu, ...: "
                                    "docs/recipes.md); --config, flags and --set override it.")
    p.add_argument("--config", help="Train config YAML/JSON (examples/train.yaml); flags override it.")
    p.add_argument("--print-config", action="store_true",
                   help="Print the resolved config (recipe + config + flags + --set) as YAML and exit.")
    p.add_argument("--init", "--model_name_or_path",
                   help="Continue pretraining a Hugging Face model folder (Roberta/XLMRoberta/Bert/"
                        "AlbertForMaskedLM): its shape and weights (docs/continued-pretraining.md); a local or "
                        "fsspec folder, never a Hub name (nothing is downloaded).")
    p.add_argument("--config_overrides", metavar="KEY=VALUE,...",
                   help="run_mlm's: Hugging Face config keys of the model's shape, e.g. num_hidden_layers=6,"
                        "attention_probs_dropout_prob=0 (keys: " + ", ".join(HF_CONFIG_KEYS) + "); each sets "
                        "its model.* key, as --set does, before --set's own items.")
    p.add_argument("--follow", action="store_true", default=None,
                   help="Follow a served corpus: adopt its latest version at every epoch boundary.")
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=None,
                   help="Resume from the newest checkpoint in --output (the default); --no-resume starts over "
                        "there. To continue a run, give its --output.")
    p.add_argument("--resume_from_checkpoint", metavar="RUN", default=None,
                   help="Continue the run in this folder (or its checkpoints/ folder, or its newest "
                        "ckpt-N.pt): --output RUN with --resume, under run_mlm's name.")
    for title, flags in CONFIG_FLAGS.items():
        group = p.add_argument_group(title)
        for f in flags:
            extra: dict[str, Any] = {"nargs": "?", "const": f.const} if f.const is not None else {}
            metavar = f.metavar or (f.type.__name__.upper() if f.type in (int, float) else None)
            action = group.add_argument(*f.names, dest=f.dest, type=f.type, choices=f.choices, help=f.help,
                                        metavar=metavar, **extra)
            action.config_key = f.key  # type: ignore[attr-defined]
        if title == "precision and devices":
            for name in PRECISION_SWITCHES:
                action = group.add_argument(f"--{name}", nargs="?", const=True, default=None, type=bool_value,
                                            metavar="true|false", help=f"--precision {name}, under run_mlm's name.")
                action.config_key = "precision"  # type: ignore[attr-defined]
            action = group.add_argument("--use_cpu", "--no_cuda", nargs="?", const=True, default=None,
                                        type=bool_value, metavar="true|false",
                                        help="--device cpu, under Hugging Face's names.")
            action.config_key = "device"  # type: ignore[attr-defined]
    # torch.distributed.launch passes each process --local-rank N (and sets LOCAL_RANK, which is what is read).
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    for name in (*NO_EQUIVALENT, *OTHER_WORDS):
        p.add_argument(name, action=NoEquivalent)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="Override any config key, e.g. --set model.dropout=0.0 --set masking.span_p=0.2 "
                        "(keys: the list below).")
    return p


def parse_train_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed flags; ``--help`` prints and exits 0, a mistake prints one line and exits 2."""
    p = train_parser()
    args = p.parse_args(argv)
    if args.steps is not None and args.max_tokens is not None:
        p.error("give --steps or --max_tokens, not both")
    if args.config_overrides is not None:
        try:
            args.config_overrides = hf_overrides(args.config_overrides)
        except ValueError as e:
            p.error(f"--config_overrides: {e}")
        shape = [hf for hf, key in HF_CONFIG_KEYS.items() if hf not in HF_RUN_KEYS
                 and any(item.startswith(key + "=") for item in args.config_overrides)]
        if args.init and shape:
            p.error(f"--config_overrides {', '.join(shape)}: --init takes the model's shape from its folder; "
                    f"with --init it takes only {' and '.join(HF_RUN_KEYS)}")
    switched = [name for name in PRECISION_SWITCHES if getattr(args, name)]
    if len(switched) > 1:
        p.error("give --bf16 or --fp16, not both")
    if switched:  # --bf16 / --fp16 set precision as --precision does
        if args.precision not in (None, switched[0]):
            p.error(f"give --{switched[0]} or --precision {args.precision}, not both")
        args.precision = switched[0]
    if args.use_cpu:
        if args.device not in (None, "cpu"):
            p.error(f"give --use_cpu or --device {args.device}, not both")
        args.device = "cpu"
    return args


def check_train_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``parse_train_args``, then, for the command before it imports torch (seconds): a local --data that
    is no corpus (a raw file, a folder without a manifest, nothing) is one line and exit 2 at once, in
    the words the trainer would use later (``shardforge.storage.contract.load_manifest``)."""
    import os
    import sys

    args = parse_train_args(argv)
    check_config_early(args)
    data = args.data
    if args.print_config or not data or ("://" in data and not data.startswith("file://")):
        return args
    path = data.removeprefix("file://")
    if os.path.isfile(os.path.join(path, "manifest.json")) or (path.endswith(".json") and os.path.isfile(path)):
        return args  # a corpus, as far as a look can tell: the trainer reads it
    from schemas.errors import UserError
    from shardforge.console.run import user_error_line
    from shardforge.storage.contract import load_manifest

    try:  # a served corpus's root passes; anything else says what it is
        load_manifest(data if data.startswith("file://") else os.path.abspath(data))  # as the trainer names it
    except UserError as e:
        print(user_error_line(str(e)), file=sys.stderr)
        raise SystemExit(2) from None
    except Exception:  # noqa: BLE001 - anything else is the trainer's to say, through its own error handling
        pass
    return args


def check_config_early(args: argparse.Namespace) -> None:
    """A config mistake (an unknown recipe or key, a value out of range, a --set typo) as one line and exit 2
    before torch is imported (seconds), as the trainer would say it; a run resumed from a checkpoint path
    or mixing corpora is left to the trainer, which resolves those first."""
    import sys

    if getattr(args, "resume_from_checkpoint", None) or getattr(args, "mix", None):
        return
    from schemas.errors import UserError
    from shardforge.console.run import user_error_line
    from trainer.recipes import resolve_train_config

    flags, dotted = flag_settings(args)
    try:
        resolve_train_config(getattr(args, "recipe", None), args.config, flags, [*dotted, *args.set],
                             require_data=not args.print_config, flag_names=flag_names(args),
                             other_names=config_key_names())
    except UserError as e:
        print(user_error_line(str(e)), file=sys.stderr)
        raise SystemExit(2) from None
    except Exception:  # noqa: BLE001 - anything else (an unreachable config URL) is the trainer's to say
        pass


TOP_LEVEL_FLAGS = ("data", "output", "init", "follow", "resume")


def flag_names(args: argparse.Namespace) -> dict[str, str]:
    """Config key -> the flag that set it (its first name), for the keys flags set and --set did not."""
    overridden = {item.split("=", 1)[0].strip() for item in getattr(args, "set", None) or []}
    names = {f.key: f.names[0] for f in config_flags()
             if getattr(args, f.dest, None) is not None and f.key not in overridden}
    for item in getattr(args, "config_overrides", None) or []:
        key = item.split("=", 1)[0]
        if key not in overridden:
            names[key] = "--config_overrides"
    return names


def flag_settings(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """(top-level config keys the flags set, ``key=value`` overrides for the dotted ones); unset flags are left out.

    Works on any namespace holding the flags' dests (a missing one counts as unset).
    """
    top: dict[str, Any] = {k: getattr(args, k, None) for k in TOP_LEVEL_FLAGS}
    dotted: list[str] = []
    for f in config_flags():
        value = getattr(args, f.dest, None)
        if value is None:
            continue
        if "." in f.key:
            dotted.append(f"{f.key}={json.dumps(value)}")
        else:
            top[f.key] = value
    dotted += getattr(args, "config_overrides", None) or []
    return {k: v for k, v in top.items() if v is not None}, dotted


def export_parser() -> ArgumentParser:
    """``shardforge export``'s flags (``trainer.export``)."""
    p = ArgumentParser(prog="python -m trainer.export",
                       description="Write a Hugging Face folder (config.json, model.safetensors, "
                                   "tokenizer files, README.md: the model card) from a shardforge checkpoint.")
    p.add_argument("checkpoint", help="ckpt-NNNNNNNN.pt, or a run folder (its latest checkpoint)")
    p.add_last_positional("out", "--output", "--output_dir", help="output folder (local or fsspec URL)")
    p.add_argument("--tokenizer", help="tokenizer file URL: spm.model or a byte-level BPE tokenizer.json, or a "
                                       "corpus (its tokenizer); checked against the one the checkpoint trained "
                                       "with (default: the run's corpus's, from its manifest)")
    p.add_argument("--license", help="the model card's license: a Hugging Face Hub license id such as apache-2.0 "
                                     "(default: other; the weights' terms follow from the corpus's and --init's)")
    p.add_argument("--language", action="append", metavar="CODE",
                   help="the model card's language (repeat for several; default: the languages the corpus's "
                        "build kept, when its language rule was on)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into an output folder that already holds files, replacing the files an export writes "
                        "(default: refused, so an earlier export or an --init model is never replaced by mistake)")
    return p


def parse_export_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``shardforge export``'s parsed flags; ``--help`` prints and exits 0, a mistake prints one line and exits 2."""
    return export_parser().parse_args(argv)


def evaluate_parser() -> ArgumentParser:
    """``shardforge evaluate``'s flags (``trainer.evaluate_cli``)."""
    p = ArgumentParser(prog="python -m trainer.evaluate_cli",
                       description="A model's masked-LM loss, perplexity and accuracy on a corpus split, on one "
                                   "device (under torchrun: each rank on its share of the split, rank 0 prints the "
                                   "result): a checkpoint (or a run folder: its latest) on the corpus it trained on "
                                   "or another built with its tokenizer, or a Hugging Face folder on a corpus built "
                                   "with its tokenizer. Masks are keyed by --seed + 1, as the trainer's evaluation "
                                   "keys them, so a run's last eval_loss is reproduced with its --eval_batches.")
    p.add_last_positional("model", "--model_name_or_path", help="ckpt-NNNNNNNN.pt, a run folder (its latest "
                          "checkpoint), or a Hugging Face model folder (config.json and weights; local or fsspec URL)")
    p.add_argument("--data", "--corpus", help="the corpus (manifest URL or its folder; default: the corpus the "
                                              "checkpoint trained on; a Hugging Face folder needs it)")
    p.add_argument("--split", choices=("valid", "train"), default="valid",
                   help="which split (default: %(default)s; train is text the model saw)")
    p.add_argument("--batches", "--eval_batches", type=at_least(1), metavar="N",
                   help="evaluate the first N batches (under torchrun: of each rank's share, as eval_batches; "
                        "default: the whole split)")
    p.add_argument("--batch_size", "--per_device_eval_batch_size", type=at_least(1), metavar="N",
                   help="sequences per batch (default: the checkpoint's batch_size; a Hugging Face folder: 32)")
    p.add_argument("--mask_rate", "--mlm_probability", type=between(0, 1), metavar="R",
                   help="share of tokens masked (default: the checkpoint's evaluation masking; a Hugging Face "
                        "folder: token masking at 0.15, with the 80/10/10 rule)")
    p.add_argument("--masking", choices=("token", "whole_word", "span", "ngram"),
                   help="masking scheme (default: the checkpoint's evaluation masking; a Hugging Face folder: "
                        "token): one scheme compares models trained with different ones")
    p.add_argument("--seed", type=int, help="masks are keyed by seed + 1 (default: the checkpoint's seed; else 0)")
    p.add_argument("--device", default="auto", type=device_value,
                   help="auto (a GPU when there is one), cpu, cuda, cuda:N (default: %(default)s)")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                   help="auto: bf16 on a GPU that has it, fp32 on CPU (default: %(default)s)")
    p.add_argument("--skip_tokenizer_check", action="store_true",
                   help="evaluate a Hugging Face folder without checking that its tokenizer is the corpus's "
                        "(only where its ids do mean the corpus tokenizer's tokens)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def device_value(text: str) -> str:
    """An argparse ``type``: a device the trainer places a model on (schemas.config.DEVICE_PATTERN)."""
    import re

    from schemas.config import DEVICE_PATTERN, device_error

    if not re.fullmatch(DEVICE_PATTERN, text):
        raise argparse.ArgumentTypeError(device_error(text))
    return text


def parse_evaluate_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``shardforge evaluate``'s parsed flags; ``--help`` prints and exits 0, a mistake prints one line and exits 2."""
    return evaluate_parser().parse_args(argv)
