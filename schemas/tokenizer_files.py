"""Tokenizer files of any kind, read the same way by the build, the trainer, the tools and the export.

Three kinds (recorded as ``manifest.tokenizer.kind``):

- ``sentencepiece``: a SentencePiece model (unigram or BPE), ``tokenizer/spm.model``.
  Words start at pieces beginning with U+2581 (``▁``).
- ``byte_bpe``: a byte-level BPE (RoBERTa / GPT-2 style) in the Hugging Face
  ``tokenizers`` JSON format, ``tokenizer/tokenizer.json``. Words start at
  tokens beginning with U+0120 (``Ġ``, the byte-level form of a space).

- ``hf_json``: any other Hugging Face ``tokenizer.json`` (an existing model's:
  RoBERTa's byte-level BPE, BERT's WordPiece, ALBERT's / XLM-R's
  SentencePiece-based Unigram), used as it is to continue pretraining that
  model (docs/continued-pretraining.md). Its special ids are the model's own
  (BERT's ``[CLS]`` is 101, not 0): the roles ``<s> </s> <pad> <unk> <mask>``
  are found in the file (``ROLE_NAMES``, the post-processor's cls/sep) and
  recorded in the manifest's ``special_ids`` / ``special_tokens``, which the
  data job and the trainer then follow. Word starts follow the file's model:
  WordPiece's inverse rule (a token starts a word unless it begins with the
  continuation prefix ``##``), ``Ġ`` for byte-level BPE, ``▁`` for Metaspace.
  Each sentence is encoded as it reads in running text, after a space, so a
  sentence's first word is the same token as anywhere else.

In every kind a special token also starts a word, and so does the token after
one. The kind is read from the file itself (a tokenizers file is JSON, a
SentencePiece model is a protobuf whose first byte is never ``{``; a JSON file
is ``byte_bpe`` only when it is byte-level BPE with shardforge's fixed special
ids), so a reused file is handled by what it is, not by what a config says.
The libraries are imported only when a file of their kind is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from schemas import SPECIAL_TOKENS
from schemas.errors import UserError

SENTENCEPIECE = "sentencepiece"
BYTE_BPE = "byte_bpe"
HF_JSON = "hf_json"
KINDS = (SENTENCEPIECE, BYTE_BPE, HF_JSON)
# Where a build stores a trained tokenizer, relative to the corpus root.
MODEL_PATHS = {SENTENCEPIECE: "tokenizer/spm.model", BYTE_BPE: "tokenizer/tokenizer.json",
               HF_JSON: "tokenizer/tokenizer.json"}
WORD_START_MARKERS = {SENTENCEPIECE: "\u2581", BYTE_BPE: "\u0120"}
WORD_START_RULES = {
    SENTENCEPIECE: "piece starts with U+2581 or is a special token",
    BYTE_BPE: "token starts with U+0120 (byte-level space) or is a special token",
}
# hf_json: the names a role's token goes by in the tokenizers of RoBERTa / XLM-R (first) and BERT / ALBERT.
ROLE_NAMES: dict[str, tuple[str, ...]] = {
    "<s>": ("<s>", "[CLS]"), "</s>": ("</s>", "[SEP]"), "<pad>": ("<pad>", "[PAD]"),
    "<unk>": ("<unk>", "[UNK]"), "<mask>": ("<mask>", "[MASK]"),
}
REQUIRED_ROLES = ("<s>", "</s>", "<pad>", "<mask>")  # packing and masking need these; <unk> is optional


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def proto_fields(buf: bytes) -> dict[int, list[Any]]:
    """Fields of one protobuf message: number -> its values in order (ints for varints, bytes otherwise).

    Read from the wire format, no schema needed: a SentencePiece model file is a ``ModelProto``,
    and sentencepiece 0.2.3's generated proto module does not load under the protobuf < 7 that
    Beam pins. Raises ``ValueError`` on a truncated or unsupported message.
    """
    fields: dict[int, list[Any]] = {}
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, i = _varint(buf, i)
        elif wire in (1, 2, 5):
            if wire == 2:
                n, i = _varint(buf, i)
            else:
                n = 8 if wire == 1 else 4
            if i + n > len(buf):
                raise ValueError("truncated field")
            val, i = buf[i: i + n], i + n
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        fields.setdefault(num, []).append(val)
    return fields


def _is_json(data: bytes) -> bool:
    return data[:64].lstrip()[:1] == b"{"


def _is_own_byte_bpe(spec: dict) -> bool:
    """A byte-level BPE whose special tokens have shardforge's fixed ids and that adds the prefix space
    (pipelines.tokenizer.train.train_byte_bpe); any other is an existing model's (hf_json)."""
    pre = json.dumps(spec.get("pre_tokenizer"))
    if (spec.get("model") or {}).get("type") != "BPE" or "ByteLevel" not in pre \
            or '"add_prefix_space": true' not in pre:
        return False
    added = {t.get("content"): t.get("id") for t in spec.get("added_tokens") or []}
    return all(added.get(name) == want for name, want in SPECIAL_TOKENS.items())


def tokenizer_kind(data: bytes) -> str:
    """The file's kind by content: ``sentencepiece`` (not JSON), ``byte_bpe`` (shardforge's own byte-level BPE)
    or ``hf_json`` (any other tokenizers JSON file)."""
    if not _is_json(data):
        return SENTENCEPIECE
    try:
        spec = json.loads(data)
    except ValueError:
        return BYTE_BPE  # not valid JSON: ByteBPETokenizer says so in one line
    return BYTE_BPE if isinstance(spec, dict) and _is_own_byte_bpe(spec) else HF_JSON


def kind_of_model_type(model_type: str) -> str:
    """The file kind a config's ``tokenizer.model_type`` trains: byte_bpe, or sentencepiece."""
    return BYTE_BPE if model_type == BYTE_BPE else SENTENCEPIECE


class LoadedTokenizer:
    """A tokenizer file of any kind behind one small interface (encode, decode, pieces, word starts)."""

    kind: str
    vocab_size: int
    # role (<s> </s> <pad> <unk> <mask>) -> id and -> token string; shardforge's fixed ones unless hf_json.
    special_ids: dict[str, int] = dict(SPECIAL_TOKENS)
    special_tokens: dict[str, str] = {name: name for name in SPECIAL_TOKENS}
    word_start_rule: str = ""

    def encode(self, sentences: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        """Token ids of each sentence, no special tokens added."""
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        """Text of the ids (SentencePiece drops <s> </s> <pad>; tokenizers keeps every special token)."""
        raise NotImplementedError

    def pieces(self) -> list[str]:
        """Every id's piece / token string, in id order."""
        raise NotImplementedError

    def word_starts(self) -> list[bool]:
        """Per id: does this token start a word (whole-word / span / n-gram masking)? Specials excluded here:
        the trainer marks them (and the token after one) itself."""
        marker = WORD_START_MARKERS[self.kind]
        return [p.startswith(marker) for p in self.pieces()]


class SentencePieceTokenizer(LoadedTokenizer):
    """A SentencePiece model (unigram or BPE, byte fallback or not)."""

    kind = SENTENCEPIECE
    word_start_rule = WORD_START_RULES[SENTENCEPIECE]

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


def _parse_tokenizers_json(data: bytes) -> tuple[dict[str, Any], Any]:
    """(the JSON spec, a ``tokenizers.Tokenizer``) of a tokenizer.json; a UserError if it is not one."""
    from tokenizers import Tokenizer

    try:
        return json.loads(data), Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:  # json's ValueError, or tokenizers' own Exception
        raise UserError(f"tokenizer: not a tokenizers JSON file ({str(e)[:120]})") from None


class ByteBPETokenizer(LoadedTokenizer):
    """A byte-level BPE in the tokenizers JSON format (pipelines.tokenizer.train.train_byte_bpe)."""

    kind = BYTE_BPE
    word_start_rule = WORD_START_RULES[BYTE_BPE]

    def __init__(self, data: bytes):
        spec, tok = _parse_tokenizers_json(data)
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


class HFJsonTokenizer(LoadedTokenizer):
    """An existing model's Hugging Face tokenizer.json, its special ids as it has them."""

    kind = HF_JSON

    def __init__(self, data: bytes):
        spec, tok = _parse_tokenizers_json(data)
        self.tok = tok
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.special_tokens = _find_roles(spec, tok)
        self.special_ids = {role: int(tok.token_to_id(t)) for role, t in self.special_tokens.items()}
        self._word_start, self.word_start_rule = _word_start_rule(spec)

    def encode(self, sentences: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        # After a space, as in running text: "Ġword" / "▁word", never the sentence-initial variant.
        batch = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        return [e.ids for e in batch([" " + s for s in sentences], add_special_tokens=False)] if sentences else []

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def pieces(self) -> list[str]:
        return [self.tok.id_to_token(i) or "" for i in range(self.vocab_size)]

    def word_starts(self) -> list[bool]:
        return [self._word_start(p) for p in self.pieces()]


def _find_roles(spec: dict, tok) -> dict[str, str]:  # noqa: ANN001 - a tokenizers.Tokenizer
    """role -> token string: the post-processor's cls / sep first, then the usual names (ROLE_NAMES)."""
    roles: dict[str, str] = {}
    post = spec.get("post_processor") or {}
    steps = post.get("processors", [post]) if post.get("type") == "Sequence" else [post]
    for step in steps:
        if step.get("type") in ("RobertaProcessing", "BertProcessing"):
            roles["<s>"], roles["</s>"] = step["cls"][0], step["sep"][0]
        elif step.get("type") == "TemplateProcessing":
            single = [p["SpecialToken"]["id"] for p in step.get("single", []) if "SpecialToken" in p]
            if len(single) >= 2:
                roles["<s>"], roles["</s>"] = single[0], single[-1]
    for role, names in ROLE_NAMES.items():
        if role not in roles:
            found = next((n for n in names if tok.token_to_id(n) is not None), None)
            if found is not None:
                roles[role] = found
    missing = [r for r in REQUIRED_ROLES if r not in roles]
    if missing:
        raise UserError(f"tokenizer: cannot find the token for {', '.join(missing)} in this tokenizer.json "
                        f"(looked for {', '.join(n for r in missing for n in ROLE_NAMES[r])} and the "
                        f"post-processor's cls/sep); packing and masking need them")
    return {r: roles[r] for r in ROLE_NAMES if r in roles}


def _word_start_rule(spec: dict):  # noqa: ANN202 - (predicate on a token string, its description)
    """How this file marks word starts: WordPiece's continuation prefix (inverse), or a start marker."""
    model = spec.get("model") or {}
    pre = json.dumps(spec.get("pre_tokenizer"))
    if model.get("type") == "WordPiece":
        prefix = model.get("continuing_subword_prefix") or "##"
        return (lambda p: not p.startswith(prefix),
                f"token does not start with the WordPiece continuation prefix {prefix!r}, or is a special token")
    if "ByteLevel" in pre:
        return (lambda p: p.startswith("\u0120"),
                "token starts with U+0120 (byte-level space) or is a special token")
    if "Metaspace" in pre:
        steps = spec["pre_tokenizer"].get("pretokenizers", [spec["pre_tokenizer"]])
        mark = next((s.get("replacement", "\u2581") for s in steps if s.get("type") == "Metaspace"), "\u2581")
        return (lambda p: p.startswith(mark), f"token starts with {mark!r} (Metaspace) or is a special token")
    raise UserError(f"tokenizer: cannot tell where words start in this tokenizer.json (model "
                    f"{model.get('type')}, pre-tokenizer without ByteLevel or Metaspace); supported: WordPiece, "
                    "byte-level BPE, SentencePiece-style (Metaspace) BPE / Unigram")


def load_tokenizer(data: bytes) -> LoadedTokenizer:
    """The tokenizer in `data` (any kind, by content). UserError for a sentencepiece / byte_bpe file without
    shardforge's special ids, or an hf_json file without the roles packing and masking need."""
    kind = tokenizer_kind(data)
    if kind == BYTE_BPE:
        return ByteBPETokenizer(data)
    if kind == HF_JSON:
        return HFJsonTokenizer(data)
    return SentencePieceTokenizer(data)
