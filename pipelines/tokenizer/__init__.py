"""The tokenizer: trained on a bounded, deterministic sample of the clean corpus (SentencePiece unigram /
BPE, or byte-level BPE), stored beside the corpus, and applied to every document in batches
(design: docs/tokenizer.md). Imports the records, coders and the local runner's batching; no stage.
"""
