"""What a corpus holds on storage and how it gets there: the WebDataset shards and their manifest
(``shards``: the packed groups written as shards, the manifest assembled and committed), the Parquet
and JSONL part files of the intermediates (``parts``), and the commit protocol (``commit``: attempt
tags, the conditional create of the manifest, cleanup; docs/architecture.md).

How documents become packed sequences is ``pipelines.pack`` (its Beam step, ``pipelines.pack.step``,
which ``shards`` runs before writing). ``shards`` imports ``pipelines.pack``; ``parts`` and ``commit``
import nothing of it, so ``pipelines.pack.step`` may use them without a cycle.
"""
