"""Argument parsing shared by every entry point: strict flags, one-line errors, the right program name.

- No abbreviations: argparse would take ``--set x=y`` as ``--settle`` when a
  parser knows ``--settle`` but not ``--set``.
- An unknown flag is an error that names it and suggests the closest known
  one (``--vocab-size`` -> ``--vocab_size``), never silently dropped.
- Errors are one line (``error: …``, exit 2), credentials redacted.
- ``prog`` is how the user ran the command: ``shardforge build`` when the
  ``shardforge`` command dispatched it (`invoked_as`), else the module form.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

from shardforge.console.redact import names_a_secret, register_secrets
from shardforge.console.run import exit_if_stdout_closed, user_error_line

_invoked_as: str | None = None


def set_invoked_as(prog: str | None) -> None:
    """Record the program name the user typed (the `shardforge` command sets `shardforge NAME`)."""
    global _invoked_as
    _invoked_as = prog


def invoked_as(default: str) -> str:
    """The program name to show in usage lines: the dispatcher's if one was set, else default."""
    return _invoked_as or default


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag a parser knows (``--output``, ``-h`` …)."""
    return [s for action in parser._actions for s in action.option_strings]


# A flag one command takes, or a word other tools use, and the flags commands here take for the same thing,
# in the order a suggestion tries them: the corpus a command reads is train's --data, repack's --tokenized,
# serve's --corpus; raw text is build's --input, serve's --watch. Spelling alone would answer `build --data`
# with --update, `train --input` with --init, `repack --corpus` with --output, `build --packing` with
# --encoding, `build --model_type` (SentencePiece's) with --disk_type, `train --dtype` with --data,
# `train --clip` with --recipe.
SAME_THING: dict[str, tuple[str, ...]] = {
    "--data": ("--tokenized", "--corpus", "--input"),
    "--corpus": ("--tokenized", "--data"),
    "--tokenized": ("--data",),
    "--input": ("--watch", "--tokenized", "--data"),
    "--watch": ("--input",),
    "--model_name_or_path": ("--init",),
    **dict.fromkeys(("--packing", "--pack", "--packing_rule"), ("--rule",)),
    **dict.fromkeys(("--tokenizer_type", "--model_type"), ("--tokenizer_kind",)),
    **dict.fromkeys(("--min_length", "--min_len"), ("--min_words",)),
    **dict.fromkeys(("--validation_split_percentage", "--validation_split", "--val_fraction"), ("--valid_fraction",)),
    **dict.fromkeys(("--seq_len", "--seq_length", "--block_size", "--tokens_per_sample"), ("--max_seq_len",)),
    **dict.fromkeys(("--dtype", "--mixed_precision"), ("--precision",)),
    **dict.fromkeys(("--clip", "--grad_clip", "--clip_grad_norm", "--gradient_clipping"), ("--max_grad_norm",)),
    "--size": ("--model_size",),
    **dict.fromkeys(("--bf16", "--fp16"), ("--precision",)),  # evaluate's: train takes them as switches too
    **dict.fromkeys(("--max_steps", "--num_batches"), ("--batches",)),  # evaluate's length
    **dict.fromkeys(("--limit", "--num_samples", "--max_samples"), ("--samples", "--batches")),  # inspect's, evaluate's
}


def suggest(flag: str, known: Iterable[str]) -> str | None:
    """The known flag closest to flag (``-``/``_`` spelling differences first, then the flag other
    commands take for the same thing: ``SAME_THING``), or None."""
    known = list(known)
    name = flag.split("=", 1)[0]
    for variant in (name.replace("-", "_"), "--" + name[2:].replace("_", "-")):
        if variant != name and variant in known:
            return variant
    for other in SAME_THING.get(name, ()):
        if other in known:
            return other
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return close[0] if close else None


def closest_choice(value: str, choices: Sequence[str]) -> str | None:
    """The choice a value not among choices most likely meant: the papers' and other tools' spellings
    (``FULL-SENTENCES``, ``SEGMENT-PAIR+NSP``, ``Base``, ``whole-word``) are the names in lower case with
    underscores; then difflib on that spelling."""
    spelled = value.lower().replace("-", "_").replace("+", "_").replace(" ", "_")
    lowered = {choice.lower(): choice for choice in choices}  # `--log_level warn`: WARNING
    close = difflib.get_close_matches(spelled, list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def unknown_args_message(extra: Sequence[str], known: Iterable[str]) -> str:
    """One line naming every unknown flag in extra (with a suggestion each), or the stray arguments."""
    known = list(known)
    flags = [a for a in extra if a.startswith("-") and a not in ("-", "--")]
    if not flags:
        shown = " ".join(extra[:3]) + (f" ... ({len(extra)} in all)" if len(extra) > 3 else "")
        # Files after a flag that takes one: a glob the shell expanded (`--input raw/*.jsonl` unquoted).
        expanded = len(extra) > 0 and all(os.path.exists(a) for a in extra[:20])
        hint = " (a glob the shell expanded? quote it, and the command gets the pattern: 'raw/*.jsonl')" \
            if expanded else ""
        return f"unexpected argument{'s' if len(extra) > 1 else ''}: {shown}{hint}"
    parts = []
    for i, arg in enumerate(extra):
        if arg not in flags:
            continue
        name = arg.split("=", 1)[0]
        hint = _set_hint(arg, extra[i + 1: i + 2], known) or suggest(name, known)
        parts.append(f"{name} (did you mean {hint}?)" if hint else name)
    return f"unknown flag{'s' if len(parts) > 1 else ''}: {', '.join(parts)}"


def _set_hint(arg: str, after: Sequence[str], known: Sequence[str]) -> str | None:
    """``--set model.share=all`` for ``--model.share all`` (or ``--model.share=all``): a config key written as a
    flag, where the command takes ``--set``; its value is the argument after it, if that is no flag, and never
    one of a key that names a credential (``VALUE`` then: the line may land in a log)."""
    name, eq, value = arg.partition("=")
    key = name.lstrip("-")
    if "--set" not in known or "." not in key.strip("."):
        return None
    if not eq:
        value = after[0] if after and not after[0].startswith("-") else "VALUE"
    return f"--set {key}={'VALUE' if names_a_secret(key) else value}"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with no abbreviations, unknown flags as errors with suggestions, and one-line errors."""

    def __init__(self, *args: Any, prog: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, prog=invoked_as(prog) if prog else None, **kwargs)
        self._by_flag: tuple[str, tuple[str, ...]] | None = None

    def add_last_positional(self, name: str, *flags: str, help: str) -> None:
        """The last positional argument, which flags may give instead (``export RUN OUT`` or ``export RUN
        --output OUT``): the words other commands use for the same thing (``--output``, run_mlm's
        ``--output_dir``). Given both ways it is an error; given neither, argparse's ``required`` line."""
        self.add_argument(name, nargs="?", help=f"{help} (or {' / '.join(flags)})")
        self.add_argument(*flags, dest=f"{name}_by_flag", metavar=name.upper(),
                          help=f"{name.upper()}, given as a flag instead")
        self._by_flag = (name, flags)

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        register_secrets(list(sys.argv[1:] if args is None else args))  # before any error can echo them
        return super().parse_known_args(args, namespace)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        if self._by_flag is None:
            ns, extra = self.parse_known_args(args, namespace)
        else:  # an optional positional after a flag (`RUN --tokenizer T OUT`) needs the intermixed parse
            ns, extra = self.parse_known_intermixed_args(args, namespace)
        if extra:
            self.error(unknown_args_message(extra, option_strings(self)))
        if self._by_flag is not None:
            name, flags = self._by_flag
            flagged = vars(ns).pop(f"{name}_by_flag")
            given = getattr(ns, name)
            if given is not None and flagged is not None:
                self.error(f"{name} given twice: {given!r} and {flags[0]} {flagged!r}")
            if given is None and flagged is None:
                self.error(f"the following arguments are required: {name} (or {flags[0]} {name.upper()})")
            setattr(ns, name, given if given is not None else flagged)
        return ns

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """argparse's check of a value against a flag's choices, with the choice it meant added to the line
        (``invalid choice: 'Base' (choose from …) (did you mean base?)``)."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            close = closest_choice(str(value), [str(c) for c in action.choices or ()])
            if close is None:
                raise
            raise argparse.ArgumentError(action, f"{e.message} (did you mean {close}?)") from None

    def print_help(self, file: Any = None) -> None:
        with exit_if_stdout_closed():  # `--help | head`: no BrokenPipeError traceback
            super().print_help(file)

    def error(self, message: str) -> NoReturn:
        """One line on stderr, exit 2 (argparse's default prints the whole usage block first)."""
        self.exit(2, f"{user_error_line(message)} (see {self.prog} --help)\n")


def fail(message: str, prog: str) -> NoReturn:
    """Exit 2 with the same one line an ArgumentParser prints."""
    print(f"{user_error_line(message)} (see {prog} --help)", file=sys.stderr)
    sys.exit(2)



def _bounded(kind: Callable[[str], Any], ok: Callable[[Any], bool], bound: str) -> Callable[[str], Any]:
    """An argparse ``type``: a ``kind`` number for which ``ok`` holds (NaN never does); anything else is the
    flag's one-line error (``argument --bins: must be 1 or more, not 0``). Not a number: argparse's own
    ``invalid int value``."""
    def parse(text: str) -> Any:
        value = kind(text)  # ValueError: argparse says "invalid int value: 'x'"
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {bound}, not {text}")
        return value

    parse.__name__ = getattr(kind, "__name__", "value")
    return parse


def _whole(text: str, number: str, scale: int, what: str, whole: str) -> int:
    """number (digits, a decimal or 2.5e8) times scale as an int; the flag's one-line error where it is no
    number (``what``) or no whole one (``whole``)."""
    try:
        value = int(number) * scale if number.isdigit() else float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value != value or value in (float("inf"), float("-inf")) or value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {whole}")
    return int(value)


_SCALE = {"k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}


def count(text: str) -> int:
    """An argparse ``type`` for a large count as people write one: 2000000, 2,000,000, 2_000_000, 2e6, 2M,
    1.5B (k, M, B or G, T: thousands to trillions). A value that is no whole number is the flag's one-line
    error."""
    raw = text.strip().replace("_", "").replace(",", "")
    scale = _SCALE.get(raw[-1:].lower(), 1) if raw else 1
    return _whole(text, raw[:-1] if scale != 1 else raw, scale, "a count (an integer, or 2e9, 500M, 1.5B)",
                  "a whole count")


_BYTES = re.compile(r"([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*(?:([kKmMgGtT])(i?)[bB]?|[bB])?")
_NOT_BYTES = "a size in bytes (an integer, or 2.5e8, 256MB, 256MiB)"


def byte_size(text: str) -> int:
    """An argparse ``type`` for a size in bytes: 268435456, 2.5e8, 256MB (decimal: 256,000,000), 256MiB
    (binary: 268,435,456), 256M (as MB); K, M, G, T. A size that is no whole number of bytes is the flag's
    one-line error."""
    found = _BYTES.fullmatch(text.strip().replace("_", "").replace(",", ""))
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is not {_NOT_BYTES}")
    number, unit, binary = found.groups()
    power = "kmgt".index(unit.lower()) + 1 if unit else 0
    return _whole(text, number, (1024 if binary else 1000) ** power, _NOT_BYTES, "a whole number of bytes")


def at_least(low: float, kind: Callable[[str], Any] = int) -> Callable[[str], Any]:
    """An argparse ``type``: a ``kind`` number that is ``low`` or more."""
    return _bounded(kind, lambda v: v >= low, f"{low} or more")


def between(low: float, high: float, kind: Callable[[str], Any] = float) -> Callable[[str], Any]:
    """An argparse ``type``: a ``kind`` number strictly between ``low`` and ``high``."""
    return _bounded(kind, lambda v: low < v < high, f"between {low} and {high} (exclusive)")


def above(low: float, kind: Callable[[str], Any] = float) -> Callable[[str], Any]:
    """An argparse ``type``: a ``kind`` number greater than ``low`` (``argument --poll: must be more than 0``)."""
    return _bounded(kind, lambda v: v > low, f"more than {low}")
