"""What a corpus holds on storage and how it gets there: the WebDataset shards and their manifest
(``shards``), the Parquet and JSONL part files of the intermediates (``parts``), and the commit protocol
(``commit``: attempt tags, the conditional create of the manifest, cleanup; docs/architecture.md).
"""
