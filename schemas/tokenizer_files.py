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

Text is text: a special token's string written in a document (``<mask>``,
``</s>``, BERT's ``[SEP]``, a SentencePiece byte piece's name ``<0x41>``) is
encoded as ordinary pieces by every kind, so special ids appear only where
packing puts them. ``literal_special_pattern`` is the one rule all kinds and the
Hugging Face export share: a piece boundary right after the string's first
character, so no piece can ever be the special token itself (``<`` then
``mask>`` is encoded as text; docs/tokenizer.md, "Special tokens written in text").

In every kind a special token also starts a word, and so does the token after
one. The kind is read from the file itself (a tokenizers file is JSON, a
SentencePiece model is a protobuf whose first byte is never ``{``; a JSON file
is ``byte_bpe`` only when it is byte-level BPE with shardforge's fixed special
ids), so a reused file is handled by what it is, not by what a config says.
The libraries are imported only when a file of their kind is loaded.
"""

from __future__ import annotations

import copy
import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise
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
    SENTENCEPIECE: "piece starts with U+2581 or with a Han or kana character, or is a special token",
    BYTE_BPE: "token starts with U+0120 (byte-level space) or with the bytes of a Han or kana character, or is a "
              "special token",
}
# Scripts written without spaces between words: Han ideographs, hiragana and katakana (full and half
# width). Each character is a word of its own where words are counted (the data job) or masked whole
# (the trainer), as BERT's tokenizer splits Han characters apart.
UNSPACED_RANGES = ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),
                   (0xFF66, 0xFF9F), (0x20000, 0x2FA1F))
UNSPACED = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in UNSPACED_RANGES) + "]")


def starts_unspaced(piece: str) -> bool:
    """Whether a piece's text begins with a character of ``UNSPACED``."""
    return UNSPACED.match(piece) is not None


def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's character -> byte: the printable bytes stand for themselves, the other 68 for
    U+0100 onwards in byte order (GPT-2's alphabet, which RoBERTa's and ours use)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(0x100 + i): b for i, b in enumerate(others)}}


_BYTE_OF = _byte_level_alphabet()


def byte_level_starts_unspaced(token: str) -> bool:
    """Whether a byte-level token's bytes begin a character of ``UNSPACED``: the character whole, or
    the first bytes of one whose every completion is in it (a token may hold part of a character)."""
    data = bytes(_BYTE_OF.get(c, 0) for c in token[:4])
    if not data or data[0] < 0xC2:
        return False
    size = 2 if data[0] < 0xE0 else 3 if data[0] < 0xF0 else 4
    head = data[:size]
    try:
        lo = ord((head + b"\x80" * (size - len(head))).decode("utf-8"))
        hi = ord((head + b"\xbf" * (size - len(head))).decode("utf-8"))
    except UnicodeDecodeError:  # not a character's first bytes
        return False
    return any(a <= lo and hi <= b for a, b in UNSPACED_RANGES)
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


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2)."""
    out, n = bytearray(), len(payload)
    for value in ((number << 3) | 2, n):
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out) + payload


def _without_fields(buf: bytes, drop: set[int]) -> bytes:
    """The message's bytes with every occurrence of the fields in `drop` removed (the rest as they were)."""
    out, i = bytearray(), 0
    while i < len(buf):
        start = i
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            _, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            i += n
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if key >> 3 not in drop:
            out += buf[start:i]
    return bytes(out)


# ---------------------------------------------------------------- special tokens written in text

# SentencePiece's byte pieces are named <0x00> ... <0xFF>; sentencepiece never matches the name in text.
_BYTE_PIECE_TAIL = "0x[0-9A-F]{2}>"


_REGEX_SYNTAX = frozenset(".^$*+?()[]{}|\\#-/")


def _literal_escape(text: str) -> str:
    """`text` as a literal in a regex that Python's ``re`` and the Oniguruma engine of ``tokenizers`` read alike
    (only the characters with a meaning are escaped: Oniguruma reads some other escapes, ``\\<``, as anchors)."""
    return "".join("\\" + c if c in _REGEX_SYNTAX else c for c in text)


def literal_special_pattern(tokens: Iterable[str], byte_pieces: bool = False) -> str | None:
    """The regex of the boundary every kind puts inside a special token's string written in text.

    It matches the rest of each string right after its first character (``(?<=<)mask>``); encoding
    cuts the text at the start of every match, so the pieces on either side are ordinary ones and
    the special token itself can never come out of text. ``byte_pieces`` adds SentencePiece's byte
    piece names (``<0x41>``), which a Hugging Face Unigram would otherwise match. Strings of one
    character, or with whitespace (which no pre-token holds), need no boundary. None if nothing is left.
    Read by ``re`` in the build and by the ``Split`` pre-tokenizer of an exported tokenizer.json.
    """
    names = sorted({t for t in tokens if len(t) > 1 and not any(c.isspace() or c == "\u2581" for c in t)},
                   key=lambda t: (-len(t), t))
    alts = [f"(?<={_literal_escape(t[0])}){_literal_escape(t[1:])}" for t in names]
    if byte_pieces:
        alts.append(f"(?<=<){_BYTE_PIECE_TAIL}")
    return "|".join(alts) or None


def literal_split(pattern: str) -> dict[str, Any]:
    """The tokenizers pre-tokenizer (as tokenizer.json spells it) that cuts text where `pattern` matches."""
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "MergedWithNext", "invert": False}


def _with_pre_tokenizer_step(spec: dict[str, Any], step: dict[str, Any]) -> None:
    """Append `step` to the spec's pre-tokenizer (a Sequence grows by one; none becomes the step)."""
    pre = spec.get("pre_tokenizer")
    if not pre:
        spec["pre_tokenizer"] = step
    elif pre.get("type") == "Sequence":
        pre["pretokenizers"] = [*pre.get("pretokenizers", []), step]
    else:
        spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [pre, step]}


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
        """Token ids of each sentence, no special tokens added; a special token's string written in a
        sentence is text (``literal_special_pattern``), never its id."""
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        """Text of the ids (SentencePiece drops <s> </s> <pad>; tokenizers keeps every special token)."""
        raise NotImplementedError

    def pieces(self) -> list[str]:
        """Every id's piece / token string, in id order."""
        raise NotImplementedError

    def word_starts(self) -> list[bool]:
        """Per id: does this token start a word (whole-word / span / n-gram masking)? Specials excluded here:
        the trainer marks them (and the token after one) itself. A word starts after a space, and at each
        character of a script written without spaces (``UNSPACED``)."""
        marker = WORD_START_MARKERS[self.kind]
        unspaced = byte_level_starts_unspaced if self.kind == BYTE_BPE else starts_unspaced
        return [p.startswith(marker) or unspaced(p) for p in self.pieces()]


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
                                f"(special ids must be {SPECIAL_TOKENS}: train it with SentencePiece's "
                                "--bos_id=0 --pad_id=1 --eos_id=2 --unk_id=3 --user_defined_symbols=<mask>, "
                                "or let the build train one)")
        self.sp = sp
        self.vocab_size = sp.get_piece_size()
        self._data = data
        self._literal: tuple[re.Pattern, Callable[[str], bool]] | None = None  # see _literal_rule
        self._plain = None  # the model without normalization, for normalized text: on first use

    def encode(self, sentences: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        """Token ids of each sentence; a special token's string in the text is text (``literal_special_pattern``)."""
        if not sentences:
            return []
        ids = self.sp.encode(list(sentences), out_type=int, num_threads=num_threads)
        cut, holds = self._literal_rule()
        # Only a sentence holding a special string's first character (or one that normalizes to it: NFKC
        # maps "＜" to "<") can hold the string; the rest keep the library's ids as they are.
        for i in [i for i, s in enumerate(sentences)
                  if holds(s) or (not s.isascii() and holds(unicodedata.normalize("NFKC", s)))]:
            fixed = self._encode_cut(sentences[i], cut)
            if fixed is not None:
                ids[i] = fixed
        return ids

    def _literal_rule(self) -> tuple[re.Pattern, Callable[[str], bool]]:
        """(the cut, a test for a special string's first character in a text), made on first use."""
        if self._literal is None:
            pattern, first = sentencepiece_literal_rule(self.sp)
            if len(first) == 1:  # "<" of the fixed special tokens and the byte pieces: `in` is fastest
                char = first[0]
                holds: Callable[[str], bool] = lambda text: char in text  # noqa: E731
            else:
                search = re.compile("|".join(map(re.escape, first))).search
                holds = lambda text: search(text) is not None  # noqa: E731
            self._literal = (re.compile(pattern), holds)
        return self._literal

    def _encode_cut(self, sentence: str, cut: re.Pattern) -> list[int] | None:
        """The ids of a sentence whose normalized text holds a special string: the normalized text cut where
        the rule says, each part encoded as it stands (no normalization, no dummy prefix). None if no cut."""
        text = self.sp.normalize(sentence)
        cuts = [m.start() for m in cut.finditer(text)]
        if not cuts:
            return None
        if self._plain is None:
            self._plain = _plain_processor(self._data)
        parts = [text[a:b] for a, b in pairwise([0, *cuts, len(text)])]
        return [i for ids in self._plain.encode(parts, out_type=int) for i in ids]

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode([int(i) for i in ids])

    def pieces(self) -> list[str]:
        return [self.sp.id_to_piece(i) for i in range(self.vocab_size)]


def sentencepiece_literal_rule(sp) -> tuple[str, list[str]]:  # noqa: ANN001 - a SentencePieceProcessor
    """(``literal_special_pattern`` of a SentencePiece model, the first characters of its strings).

    The strings sentencepiece never matches in text: control pieces (``<s>``, ``</s>``, ``<pad>``),
    the unknown piece, byte pieces, and ``<mask>`` (a user-defined piece, which sentencepiece would
    match: the cut keeps it out of text). The build and the Hugging Face export cut alike.
    """
    n = sp.get_piece_size()
    names = [*SPECIAL_TOKENS, *(sp.id_to_piece(i) for i in range(n) if sp.is_control(i) or sp.is_unknown(i))]
    has_bytes = any(sp.is_byte(i) for i in range(n))
    pattern = literal_special_pattern(names, byte_pieces=has_bytes)
    assert pattern is not None  # the fixed special tokens are always there
    first = sorted({t[0] for t in names if len(t) > 1} | ({"<"} if has_bytes else set()))
    return pattern, first


# NormalizerSpec (sentencepiece_model.proto): name = 1, add_dummy_prefix = 3, remove_extra_whitespaces = 4,
# escape_whitespaces = 5; ModelProto: normalizer_spec = 3, self_test_data = 4.
_PLAIN_NORMALIZER = _field(1, b"identity") + bytes([3 << 3, 0, 4 << 3, 0, 5 << 3, 1])


def _plain_processor(data: bytes):  # noqa: ANN202 - a SentencePieceProcessor
    """The model with an identity normalizer and no dummy prefix: it encodes text that ``sp.normalize``
    has already normalized (``▁`` for spaces) as the model's own encode would, piece for piece."""
    import sentencepiece as spm

    plain = spm.SentencePieceProcessor()
    plain.LoadFromSerializedProto(_without_fields(data, {3, 4}) + _field(3, _PLAIN_NORMALIZER))
    return plain


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
                                f"(special ids must be {SPECIAL_TOKENS}: train it with these special tokens "
                                "first, in this order, as RoBERTa's is, or let the build train one)")
        # Special tokens in text are text. The byte-level pre-tokenizer already cuts every one of
        # them inside ("<", "mask", ">"), so no merge can rebuild one: no Split step is needed.
        tok.encode_special_tokens = True
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
        from tokenizers import Tokenizer

        spec, tok = _parse_tokenizers_json(data)
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.special_tokens = _find_roles(spec, tok)
        self.special_ids = {role: int(tok.token_to_id(t)) for role, t in self.special_tokens.items()}
        self._word_start, self.word_start_rule = _word_start_rule(spec)
        self.tok = Tokenizer.from_str(json.dumps(text_only_spec(spec, self.special_tokens.values())))
        self.tok.encode_special_tokens = True

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


def text_only_spec(spec: dict[str, Any], roles: Iterable[str]) -> dict[str, Any]:
    """A copy of a tokenizer.json spec that encodes special tokens written in text as text, with ids as before.

    The role tokens (``roles``) are marked special, so that encoding with ``encode_special_tokens``
    (transformers: ``split_special_tokens=True``) leaves every special token's string to the model;
    and the pre-tokenizer ends with a ``Split`` at ``literal_special_pattern``, so that the model cannot
    match one either (a Unigram holds ``[MASK]`` / ``<mask>`` among its pieces, a WordPiece behind a
    whitespace split would find it whole). Text without those strings encodes exactly as before.
    What the build encodes an ``hf_json`` corpus with, and the tokenizer.json its export writes.
    """
    spec = copy.deepcopy(spec)
    names = set(roles)
    for token in spec.get("added_tokens") or []:
        if token.get("content") in names:
            token["special"] = True
    names |= {t.get("content", "") for t in spec.get("added_tokens") or [] if t.get("special")}
    pattern = literal_special_pattern(names)
    if pattern is not None:
        _with_pre_tokenizer_step(spec, literal_split(pattern))
    return spec


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
        return (lambda p: p.startswith("\u0120") or byte_level_starts_unspaced(p), WORD_START_RULES[BYTE_BPE])
    if "Metaspace" in pre:
        steps = spec["pre_tokenizer"].get("pretokenizers", [spec["pre_tokenizer"]])
        mark = next((s.get("replacement", "\u2581") for s in steps if s.get("type") == "Metaspace"), "\u2581")
        return (lambda p: p.startswith(mark) or starts_unspaced(p),
                f"token starts with {mark!r} (Metaspace) or with a Han or kana character, or is a special token")
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
