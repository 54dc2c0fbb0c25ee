"""shardforge: pretraining data jobs (Apache Beam) and a lean torch trainer for RoBERTa / ALBERT / SpanBERT-style
encoders.

The package holds what both halves share and the command over them, in rooms by layer:

- ``storage/``: object storage over fsspec, and the contract's files read from it (the floor, with ``schemas``);
- ``console/``: what every command's process shares (one-line errors, the strict flag parser, redaction);
- ``cli.py`` and ``commands/``: the ``shardforge`` command, the top of the house.

The halves are the packages ``pipelines`` (never torch) and ``trainer`` (never Beam). This module imports
nothing, so importing ``shardforge.storage`` or ``shardforge.console`` from either half loads neither.
"""

__version__ = "0.1.0"
