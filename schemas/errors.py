"""Errors a user can cause, shared by both halves: the contract says *what* is wrong, the CLI how to show it.

`UserError` is a problem with the user's input (config, URL, manifest, shard),
not a bug. Every layer raises it (the contract's validators, storage, the data
job, the trainer); the command-line layer (`shardforge.clirun.run_cli`) prints
it as one line without a trace, exit 2.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input (config, URL, manifest), not a bug."""
