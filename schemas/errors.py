"""Errors a user can cause: the CLIs print these as one line, without a trace."""


class UserError(Exception):
    """A problem with the user's input (config, URL, manifest), not a bug."""
