"""The tokenizer: trained on a bounded, deterministic sample of the clean corpus (SentencePiece unigram /
BPE, or byte-level BPE), stored beside the corpus, and applied to every document in batches
(design: docs/tokenizer.md). The special tokens have fixed ids (``schemas.SPECIAL_TOKENS``); their
strings written in a document are encoded as text (``schemas.tokenizer_files``), so special ids stand only
where packing puts them.

- ``sample``: the training sample, a bounded bottom-k of the documents by content hash;
- ``train``: training (one thread, content-keyed order: the same sample gives the same bytes) and the
  ``TrainTokenizer`` step;
- ``model``: the tokenizer file (its path by kind, its spec, the manifest's record, reuse by URL);
- ``encode``: the ``Tokenize`` step, one library call per batch of sentences.

Imports the records, the coders, the local runner's batching and progress, storage and the contract;
no other stage.
"""
