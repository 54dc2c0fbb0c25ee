"""What every command's process shares, whichever half it runs: ``run`` (a user's mistake is one line and
exit 2, anything else a redacted traceback; Ctrl-C a line of what is left), ``args`` (the strict flag
parser: no abbreviations, unknown flags named with a suggestion; its types for counts and sizes as people
write them), ``redact`` (no credential in a message, traceback or log record) and ``words`` (a count and
its noun: "1 shard", "2,048 shards").

Imports the contract's errors and ``shardforge.storage`` only: both halves import this room, so it loads neither.
"""
