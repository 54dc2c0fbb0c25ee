"""`shardforge`: the command line over both halves.

    shardforge demo                 synthetic corpus -> build -> train a few steps -> summary
    shardforge build ...            = python -m pipelines.build ...
    shardforge train ...            = python -m trainer.train ...
    shardforge inspect URL          manifest summary, decoded samples, length histogram
    shardforge validate URL         check every shard against the manifest
    shardforge plot RUN             loss / lr / throughput curves to PNG
    shardforge export CKPT OUT      Hugging Face folder from a checkpoint
    shardforge evaluate MODEL       MLM loss / perplexity / accuracy of a checkpoint or HF folder on a corpus
    shardforge repack ...           = python -m pipelines.repack ...
    shardforge serve ...            = python -m pipelines.serve ...
    shardforge status URL           versions, pending files and lag of a served corpus; where a run stands
    shardforge --version

Each subcommand imports only the half it needs, so `build` never loads torch
and `train` never loads Beam.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Callable

from shardforge import __version__
from shardforge.console.args import set_invoked_as
from shardforge.console.run import exit_if_stdout_closed, run_cli

# name -> (module, function, one-line help); modules are imported on use.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("shardforge.commands.demo", "main", "Run the whole path end to end on a generated corpus."),
    "build": ("pipelines.jobs.build", "main", "Build a corpus (Beam): raw text -> shards + manifest."),
    "repack": ("pipelines.jobs.repack", "main", "New packing rule from a corpus's tokenized intermediate."),
    "train": ("trainer.train", "main", "Train an encoder on a corpus."),
    "inspect": ("shardforge.commands.inspect", "main", "Show a corpus: manifest summary, samples, lengths."),
    "validate": ("shardforge.commands.validate", "main", "Check every shard against the manifest."),
    "plot": ("trainer.plot", "main", "Plot a run's metrics to PNG."),
    "export": ("trainer.export", "main", "Export a checkpoint to a Hugging Face folder."),
    "evaluate": ("trainer.evaluate_cli", "main", "A model's MLM loss, perplexity and accuracy on a corpus split."),
    "serve": ("pipelines.jobs.serve", "main", "Watch raw files; append each new batch as a corpus version."),
    "status": ("shardforge.commands.status", "main", "Versions, pending files and ingest lag of a served corpus; where a training run stands."),
}


# name -> (module, function) that checks a command's flags without its heavy imports (torch, Beam), so
# that --help (and for train, flag mistakes) is answered at once; the command's own main parses them again.
EARLY_PARSERS: dict[str, tuple[str, str]] = {"train": ("trainer.args", "check_train_args"),
                                             "export": ("trainer.args", "parse_export_args"),
                                             "evaluate": ("trainer.args", "parse_evaluate_args"),
                                             "build": ("pipelines.flags", "build_help"),
                                             "repack": ("pipelines.flags", "repack_help"),
                                             "serve": ("pipelines.flags", "serve_help")}


def _entry(name: str) -> Callable[[list[str]], int]:
    module, func, _ = COMMANDS[name]
    return getattr(importlib.import_module(module), func)


def main(argv: list[str] | None = None) -> int:
    """`shardforge COMMAND ...`: dispatch to the command's own main (which parses the rest strictly)."""
    as_program = argv is None
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="shardforge", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"shardforge {__version__}")
    parser.add_argument("command", choices=sorted(COMMANDS), help="subcommand (see above); COMMAND --help for its flags")
    if not argv or argv[0] in ("-h", "--help"):
        with exit_if_stdout_closed():
            parser.print_help()
            sys.stdout.flush()
        return 0
    if argv[0] == "--version":
        print(f"shardforge {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        what = "flag" if name.startswith("-") else "command"
        close = difflib.get_close_matches(name, [*COMMANDS, "--version", "--help"], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        print(f"error: unknown {what} {name!r}{hint}; commands: {', '.join(sorted(COMMANDS))} "
              "(see shardforge --help)", file=sys.stderr)
        return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    set_invoked_as(f"shardforge {name}")  # usage lines say what the user typed
    try:
        if name in EARLY_PARSERS:
            module, func = EARLY_PARSERS[name]
            # train's and export's exit on --help and on mistakes; build's, repack's and serve's say True
            # where they answered --help and exit on a mistaken flag or value
            if getattr(importlib.import_module(module), func)(rest) is True:
                return 0
        if COMMANDS[name][0].startswith("pipelines."):  # the flags are right; now the runner, before Beam
            from pipelines.localrunner.preflight import before_beam, exit_if_unrunnable

            # As the program (argv from the command line) a local build leaves out the Beam
            # integrations it never uses; called in-process with an argv, the caller's imports stay.
            (before_beam if as_program else exit_if_unrunnable)(rest)
        return run_cli(lambda: int(_entry(name)(rest) or 0), rest)
    finally:
        set_invoked_as(None)


if __name__ == "__main__":
    sys.exit(main())
