"""The subcommands of ``shardforge`` that belong to neither half: ``demo`` (the whole path on a generated
corpus), ``inspect``, ``validate`` and ``status`` (reading a corpus), and ``synth`` (the generated corpus).

The top of the house: a command may import either half, and only when it runs (``shardforge/cli.py``
dispatches by name). Nothing imports this room but the dispatcher and the tests.
"""
