"""Tokenizer files of either kind, read the same way by the build, the trainer, the tools and the export.

Two kinds (recorded as ``manifest.tokenizer.kind``):

- ``sentencepiece``: a SentencePiece model (unigram or BPE), ``tokenizer/spm.model``.
  Words start at pieces beginning with U+2581 (``▁``).
- ``byte_bpe``: a byte-level BPE (RoBERTa / GPT-2 style) in the Hugging Face
  ``tokenizers`` JSON format, ``tokenizer/tokenizer.json``. Words start at
  tokens beginning with U+0120 (``Ġ``, the byte-level form of a space).

In both, a special token also starts a word, and so does the token after one.
The kind is read from the file itself (a tokenizers file is JSON, a
SentencePiece model is a protobuf whose first byte is never ``{``), so a reused
file is handled by what it is, not by what a config says. Special ids are
fixed (``schemas.SPECIAL_TOKENS``) and checked on load. The libraries are
imported only when a file of their kind is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from schemas import SPECIAL_TOKENS
from schemas.errors import UserError

SENTENCEPIECE = "sentencepiece"
BYTE_BPE = "byte_bpe"
KINDS = (SENTENCEPIECE, BYTE_BPE)
# Where a build stores a trained tokenizer, relative to the corpus root.
MODEL_PATHS = {SENTENCEPIECE: "tokenizer/spm.model", BYTE_BPE: "tokenizer/tokenizer.json"}
WORD_START_MARKERS = {SENTENCEPIECE: "\u2581", BYTE_BPE: "\u0120"}
WORD_START_RULES = {
    SENTENCEPIECE: "piece starts with U+2581 or is a special token",
    BYTE_BPE: "token starts with U+0120 (byte-level space) or is a special token",
}


def tokenizer_kind(data: bytes) -> str:
    """``byte_bpe`` for a tokenizers JSON file, ``sentencepiece`` otherwise (by content)."""
    return BYTE_BPE if data[:64].lstrip()[:1] == b"{" else SENTENCEPIECE


def kind_of_model_type(model_type: str) -> str:
    """The file kind a config's ``tokenizer.model_type`` trains: byte_bpe, or sentencepiece."""
    return BYTE_BPE if model_type == BYTE_BPE else SENTENCEPIECE


class LoadedTokenizer:
    """A tokenizer file of either kind behind one small interface (encode, decode, pieces)."""

    kind: str
    vocab_size: int

    def encode(self, sentences: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        """Token ids of each sentence, no special tokens added."""
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        """Text of the ids (SentencePiece drops <s> </s> <pad>; tokenizers keeps every special token)."""
        raise NotImplementedError

    def pieces(self) -> list[str]:
        """Every id's piece / token string, in id order."""
        raise NotImplementedError


class SentencePieceTokenizer(LoadedTokenizer):
    """A SentencePiece model (unigram or BPE, byte fallback or not)."""

    kind = SENTENCEPIECE

    def __init__(self, data: bytes):
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor()
        try:
            sp.LoadFromSerializedProto(data)
        except (RuntimeError, OSError, ValueError) as e:
            raise UserError(f"tokenizer: not a SentencePiece model ({e})") from None
        for piece, want in SPECIAL_TOKENS.items():
            got = sp.piece_to_id(piece)
            if got != want or sp.id_to_piece(want) != piece:
                raise UserError(f"tokenizer: {piece} has id {got}, shardforge needs {want} "
                                f"(special ids must be {SPECIAL_TOKENS}; train with pipelines.tokenizer)")
        self.sp = sp
        self.vocab_size = sp.get_piece_size()

    def encode(self, sentences: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        return self.sp.encode(list(sentences), out_type=int, num_threads=num_threads) if sentences else []

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode([int(i) for i in ids])

    def pieces(self) -> list[str]:
        return [self.sp.id_to_piece(i) for i in range(self.vocab_size)]


class ByteBPETokenizer(LoadedTokenizer):
    """A byte-level BPE in the tokenizers JSON format (pipelines.tokenizer.train_byte_bpe)."""

    kind = BYTE_BPE

    def __init__(self, data: bytes):
        from tokenizers import Tokenizer

        try:
            spec = json.loads(data)
            tok = Tokenizer.from_str(data.decode("utf-8"))
        except Exception as e:  # json's ValueError, or tokenizers' own Exception
            raise UserError(f"tokenizer: not a tokenizers JSON file ({str(e)[:120]})") from None
        model_type = (spec.get("model") or {}).get("type")
        if model_type != "BPE" or "ByteLevel" not in json.dumps(spec.get("pre_tokenizer")):
            raise UserError(f"tokenizer: a tokenizers file must be a byte-level BPE (model BPE with a "
                            f"ByteLevel pre-tokenizer) to be used here; this one is {model_type}")
        for piece, want in SPECIAL_TOKENS.items():
            got = tok.token_to_id(piece)
            if got != want:
                raise UserError(f"tokenizer: {piece} has id {got}, shardforge needs {want} "
                                f"(special ids must be {SPECIAL_TOKENS}; train with pipelines.tokenizer)")
        self.tok = tok
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)

    def encode(self, sentences: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        # tokenizers parallelizes a batch on its own thread pool (TOKENIZERS_PARALLELISM /
        # RAYON_NUM_THREADS); ids never depend on it.
        batch = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        return [e.ids for e in batch(list(sentences), add_special_tokens=False)] if sentences else []

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def pieces(self) -> list[str]:
        return [self.tok.id_to_token(i) or "" for i in range(self.vocab_size)]


def load_tokenizer(data: bytes) -> LoadedTokenizer:
    """The tokenizer in `data` (either kind, by content); UserError unless its special ids are shardforge's."""
    if tokenizer_kind(data) == BYTE_BPE:
        return ByteBPETokenizer(data)
    return SentencePieceTokenizer(data)
