"""Arrow schemas of the data job's Parquet intermediates.

``clean/part-*.parquet``: documents after cleaning and dedupe (re-tokenize from here).
``tokenized/part-*.parquet``: one row per document, sentences as token-id lists
(repack starts here: new packing rules never redo cleaning, dedupe or tokenizing).
Only the data job imports this module (it needs pyarrow).
"""

from __future__ import annotations

import pyarrow as pa

CLEAN_DIR = "clean"
TOKENIZED_DIR = "tokenized"

CLEAN_SCHEMA = pa.schema([
    pa.field("doc_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("text", pa.large_string(), nullable=False),
    pa.field("url", pa.string()),
    pa.field("title", pa.string()),
    pa.field("date", pa.string()),
    # Added in clean/2 (additive): the language the clean stage detected and its score in [0, 1].
    pa.field("language", pa.string()),
    pa.field("language_score", pa.float64()),
], metadata={"shardforge.schema": "clean/2"})

TOKENIZED_SCHEMA = pa.schema([
    pa.field("doc_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("sentences", pa.list_(pa.list_(pa.int32())), nullable=False),
    pa.field("num_tokens", pa.int64(), nullable=False),
], metadata={"shardforge.schema": "tokenized/1"})
