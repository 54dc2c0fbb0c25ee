"""How every command runs: a user error is one line (exit 2), anything else a redacted traceback (exit 1).

Every ``__main__`` of the data job, the trainer and the `shardforge` command
runs its body through `run_cli`. Importing this module costs nothing: it loads
neither half (tests/test_boundaries.py).
"""

from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Callable

from schemas.errors import UserError
from shardforge.redact import install_log_redaction, redact_text, refuse_url_credentials, register_secrets


def find_user_error(exc: BaseException) -> UserError | None:
    """The UserError behind exc, also when a runner (Beam) re-raised it wrapped in its own error."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, UserError):
            return e
        e = e.__cause__ or e.__context__
    m = re.search(r"(?:UserError|ShardFormatError): (.+?)(?: \[while running|\n|$)", str(exc))
    return UserError(m.group(1)) if m else None


def user_error_line(message: str) -> str:
    """The one line a CLI prints for a user error (credentials redacted)."""
    return f"error: {redact_text(message)}"


def run_cli(body: Callable[[], int], argv: list[str] | None = None) -> int:
    """Run a command's body: a user error (also one a runner re-raised wrapped) prints one line, exit 2.

    Any other exception is a bug or an infrastructure failure: its traceback is
    printed with credentials redacted, exit 1. argv: the command's arguments when
    they are not this process's (an in-process call), for their credentials to be masked.
    """
    install_log_redaction()
    args = sys.argv[1:] + list(argv or [])
    register_secrets(args)
    try:
        refuse_url_credentials(args)
        return body()
    except Exception as e:  # noqa: BLE001 - Beam wraps errors raised inside stages
        user = find_user_error(e)
        if user is not None:
            print(user_error_line(str(user)), file=sys.stderr)
            return 2
        print(redact_text("".join(traceback.format_exception(e))).rstrip("\n"), file=sys.stderr)
        return 1
