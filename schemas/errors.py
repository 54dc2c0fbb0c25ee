"""Errors a user can cause, shared by both halves: the contract says *what* is wrong, the CLI how to show it.

`UserError` is a problem with the user's input (config, URL, manifest, shard),
not a bug. Every layer raises it (the contract's validators, storage, the data
job, the trainer); the command-line layer (`shardforge.console.run.run_cli`) prints
it as one line without a trace, exit 2.
"""

from __future__ import annotations

from collections.abc import Iterator


class UserError(Exception):
    """A problem with the user's input (config, URL, manifest), not a bug."""


def causes(exc: BaseException) -> Iterator[BaseException]:
    """exc, then what caused it (``__cause__``, else ``__context__``), and so on: each once.

    Libraries and runners wrap errors (s3fs re-raises botocore's as OSError, Beam a step's as its
    own): what an error means is often found down this chain."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__
