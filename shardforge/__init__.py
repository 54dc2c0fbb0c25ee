"""The `shardforge` command: glue over the data job (pipelines) and the trainer."""

__version__ = "0.1.0"
