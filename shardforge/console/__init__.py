"""What every command's process shares, whichever half it runs: ``run`` (a user's mistake is one line and
exit 2, anything else a redacted traceback; Ctrl-C a line of what is left), ``args`` (the strict flag
parser: no abbreviations, unknown flags named with a suggestion) and ``redact`` (no credential in a
message, traceback or log record).

Imports the contract's errors and ``shardforge.storage`` only: both halves import this room, so it loads neither.
"""
