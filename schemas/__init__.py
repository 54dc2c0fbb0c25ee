"""The contract between shardforge's data job and its trainer.

Everything here is plain Python + pydantic + numpy (+ fsspec), so both halves
can import it: ``pipelines`` never imports torch, ``trainer`` never imports
apache_beam, and they meet only in these modules.
"""

SCHEMA_VERSION = 1

# Fixed special-token ids (fairseq / RoBERTa order, <mask> right after).
# The tokenizer job trains SentencePiece with exactly these ids and the
# manifest records them; the trainer reads them from the manifest. A corpus
# encoded with an existing model's tokenizer.json (kind hf_json,
# schemas.tokenizer_files) records that model's ids under these role names
# instead (BERT: "<s>" -> [CLS] 101); packing, loader and masker follow the
# manifest, so these constants are only the default of shardforge's own kinds.
SPECIAL_TOKENS: dict[str, int] = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4}
BOS_ID = SPECIAL_TOKENS["<s>"]
PAD_ID = SPECIAL_TOKENS["<pad>"]
EOS_ID = SPECIAL_TOKENS["</s>"]
UNK_ID = SPECIAL_TOKENS["<unk>"]
MASK_ID = SPECIAL_TOKENS["<mask>"]
