"""Errors a user can cause: the CLIs print these as one line, without a trace."""


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
