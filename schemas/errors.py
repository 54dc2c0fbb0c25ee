"""Errors a user can cause: the CLIs print these as one line, without a trace."""

from __future__ import annotations

import sys
from collections.abc import Callable


class UserError(Exception):
    """A problem with the user's input (config, URL, manifest), not a bug."""


def find_user_error(exc: BaseException) -> UserError | None:
    """The UserError behind exc, also when a runner (Beam) re-raised it wrapped in its own error."""
    import re

    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, UserError):
            return e
        e = e.__cause__ or e.__context__
    m = re.search(r"(?:UserError|ShardFormatError): (.+?)(?: \[while running|\n|$)", str(exc))
    return UserError(m.group(1)) if m else None


def run_cli(body: Callable[[], int]) -> int:
    """Run a command's body: a user error (also one a runner re-raised wrapped) prints one line, exit 2."""
    try:
        return body()
    except Exception as e:  # noqa: BLE001 - Beam wraps errors raised inside stages
        user = find_user_error(e)
        if user is None:
            raise
        print(f"error: {user}", file=sys.stderr)
        return 2
