"""The trainer's command lines, without torch: ``--help`` and flag mistakes are answered before the
trainer imports torch (seconds on a cold start), by ``python -m trainer.train``, ``shardforge train`` and
``shardforge export``.
"""

from __future__ import annotations

import argparse

from shardforge.console.args import ArgumentParser

DESCRIPTION = """Train an encoder on a shardforge corpus: stream shards, mask on the device, step, log, checkpoint.

    python -m trainer.train --data out/corpus --steps 100
    torchrun --nproc_per_node 8 -m trainer.train --data gs://corpus/v1 --output gs://runs/r1 --config train.yaml
"""


def train_parser() -> ArgumentParser:
    """The trainer's flags (a recipe, a config file, flags and --set overrides: trainer/recipes)."""
    p = ArgumentParser(prog="python -m trainer.train", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="Corpus URL or its manifest.json (local, gs://, s3://).")
    p.add_argument("--mix", action="append", metavar="URL=WEIGHT",
                   help="Mix several corpora (repeat the flag): URL=0.7 is a share of the training tokens, "
                        "URL=x2 repeats a corpus twice as often as its size gives (fairseq upsampling).")
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
    p.add_argument("--init", help="Continue pretraining a Hugging Face model folder (Roberta/XLMRoberta/Bert/"
                                  "AlbertForMaskedLM): its shape and weights (docs/continued-pretraining.md).")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="Override any config field, e.g. --set model.size=base --set masking.scheme=span")
    return p


def parse_train_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed flags; ``--help`` prints and exits 0, a mistake prints one line and exits 2."""
    return train_parser().parse_args(argv)


def export_parser() -> ArgumentParser:
    """``shardforge export``'s flags (``trainer.export``)."""
    p = ArgumentParser(prog="shardforge export",
                       description="Write a Hugging Face folder (config.json, model.safetensors, "
                                   "tokenizer files) from a shardforge checkpoint.")
    p.add_argument("checkpoint", help="ckpt-NNNNNNNN.pt, or a run folder (its latest checkpoint)")
    p.add_argument("out", help="output folder (local or fsspec URL)")
    p.add_argument("--tokenizer", help="tokenizer file URL: spm.model or a byte-level BPE tokenizer.json "
                                       "(default: the corpus's, from the manifest)")
    return p


def parse_export_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``shardforge export``'s parsed flags; ``--help`` prints and exits 0, a mistake prints one line and exits 2."""
    return export_parser().parse_args(argv)
