"""The data job's drivers and engines: what a command runs, on top of the graph.

- ``build``: a one-shot build (options, attempt tag, one run of the graph, the summary); ``--batch_mb``
  hands it to ``batched``.
- ``batched``: a big input built as a chain of bounded batches, each in its own process (``batch_process``).
- ``ingest``: one batch of new raw files -> one committed version of a versioned corpus.
- ``serve``: the corpus as a service: watch a glob, ingest each new batch.
- ``repack``: a new packing rule from a corpus's tokenized intermediate.

``python -m pipelines.build|repack|serve`` are the thin entry points beside this room. May import
everything in ``pipelines`` below it; nothing in ``pipelines`` imports a job. Light at import (no Beam
here), because a batch's process imports ``batch_process`` before it sets up its allocator.
"""
