"""The tokenizer file: where a corpus keeps it (by kind), what a SentencePiece model says about itself,
the manifest's record of it, and reading or copying one to reuse (``--tokenizer URL``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pipelines.coders import TokenizedDocumentCoder  # noqa: F401  (registers the coder of TokenizedDocument)
from schemas.config import TokenizerConfig
from schemas.errors import UserError
from schemas.manifest import TokenizerInfo
from schemas.tokenizer_files import (
    BYTE_BPE,
    HF_JSON,
    MODEL_PATHS,
    SENTENCEPIECE,
    WORD_START_RULES,
    SentencePieceTokenizer,
    kind_of_model_type,
    load_tokenizer,
    proto_fields,
    tokenizer_kind,
)
from shardforge.storage import read_bytes, sha256_bytes, unless_swept, write_bytes_atomic

MODEL_PATH = MODEL_PATHS[SENTENCEPIECE]
BYTE_BPE_PATH = MODEL_PATHS[BYTE_BPE]


def model_path(model_type: str) -> str:
    """Where a build writes the tokenizer it trains for this model_type, relative to the corpus root."""
    return MODEL_PATHS[kind_of_model_type(model_type)]


def stored_path(model: bytes) -> str:
    """Where a corpus keeps a copy of this tokenizer file (by its kind), relative to the corpus root."""
    return MODEL_PATHS[tokenizer_kind(model)]


def load_processor(model: bytes):
    """A SentencePieceProcessor for the model bytes; UserError unless the special ids are shardforge's."""
    return SentencePieceTokenizer(model).sp


# ---------------------------------------------------------------- model spec

@dataclass(frozen=True)
class ModelSpec:
    """What a SentencePiece model says about itself (read from its serialized proto)."""

    model_type: str
    byte_fallback: bool
    normalization_rule: str


_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
# Field numbers of sentencepiece_model.proto: ModelProto.trainer_spec = 2, .normalizer_spec = 3;
# TrainerSpec.model_type = 3, .byte_fallback = 35; NormalizerSpec.name = 1.
_F_TRAINER, _F_NORMALIZER = 2, 3
_F_MODEL_TYPE, _F_BYTE_FALLBACK, _F_NORM_NAME = 3, 35, 1


def _last(fields: dict[int, list], number: int, default: object) -> object:
    """A field's value as protobuf reads a non-repeated one: the last occurrence wins."""
    return fields.get(number, [default])[-1]


def model_spec(model: bytes) -> ModelSpec:
    """Model type, byte fallback and normalization rule of a SentencePiece model.

    Parsed from the wire format directly: sentencepiece 0.2.3's generated proto
    module does not load under the protobuf < 7 that Beam pins.
    """
    try:
        top = proto_fields(model)
        trainer = proto_fields(_last(top, _F_TRAINER, b""))  # type: ignore[arg-type]
        norm = proto_fields(_last(top, _F_NORMALIZER, b""))  # type: ignore[arg-type]
        mtype = int(_last(trainer, _F_MODEL_TYPE, 1))  # type: ignore[arg-type]
        name = _last(norm, _F_NORM_NAME, b"")
        return ModelSpec(model_type=_MODEL_TYPES.get(mtype, f"type{mtype}"),
                         byte_fallback=bool(_last(trainer, _F_BYTE_FALLBACK, 0)),
                         normalization_rule=bytes(name).decode("utf-8") if isinstance(name, bytes) else "")
    except (ValueError, TypeError, UnicodeDecodeError) as e:
        raise UserError(f"tokenizer: cannot read the SentencePiece model header ({e})") from None


def tokenizer_info(model: bytes, cfg: TokenizerConfig, path: str) -> TokenizerInfo:
    """The manifest's tokenizer entry; kind, type and normalization come from the file itself (a
    reused model may differ from the config's defaults), falling back to the config."""
    tok = load_tokenizer(model)
    if tok.kind == HF_JSON:
        # An existing model's tokenizer: its own model, normalizer and special ids.
        spec = json.loads(model)
        return TokenizerInfo(path=path, sha256=sha256_bytes(model), kind=HF_JSON,
                             model_type=str((spec.get("model") or {}).get("type", "unknown")).lower(),
                             vocab_size=tok.vocab_size, special_ids=tok.special_ids,
                             special_tokens=tok.special_tokens, normalization_rule="tokenizer.json",
                             word_start_rule=tok.word_start_rule)
    if tok.kind == BYTE_BPE:
        model_type, normalization = BYTE_BPE, "none"  # trained without a normalizer, as RoBERTa
    else:
        spec = model_spec(model)
        model_type = spec.model_type or cfg.model_type
        normalization = spec.normalization_rule or cfg.normalization_rule
    return TokenizerInfo(path=path, sha256=sha256_bytes(model), kind=tok.kind, model_type=model_type,
                         vocab_size=tok.vocab_size, normalization_rule=normalization,
                         word_start_rule=WORD_START_RULES[tok.kind])


def load_model(url: str) -> bytes:
    """Read and validate a tokenizer file to reuse (any kind; special ids checked); one clear error.

    A folder means its tokenizer: a corpus's (the one its manifest names, checked against its sha256: a
    corpus to ``--mix`` with that one), a Hugging Face model folder's ``tokenizer.json``."""
    try:
        model = read_bytes(url)
    except (IsADirectoryError, FileNotFoundError, NotADirectoryError) as e:
        model = _folder_model(url, isinstance(e, IsADirectoryError))
    try:
        load_tokenizer(model)  # validates ids
    except UserError as e:
        raise UserError(f"{e} [model {url}]") from None
    return model


def _folder_model(url: str, is_folder: bool) -> bytes:
    """The tokenizer a folder URL means (see ``load_model``); an object store names a folder by a prefix, so a
    URL that is no file is looked at as one."""
    from shardforge.storage.contract import load_manifest, probed_kind, read_tokenizer_model

    if probed_kind(url) == "corpus":
        manifest, root = load_manifest(url)
        return read_tokenizer_model(manifest, root)
    try:
        return read_bytes(f"{url.rstrip('/')}/tokenizer.json")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        if not is_folder:
            raise UserError(f"tokenizer model not found: {url}") from None
        raise UserError(f"tokenizer model {url} is a folder without a tokenizer.json: give the tokenizer file itself "
                        "(spm.model, tokenizer.json), a corpus (the tokenizer it was built with) or a Hugging Face "
                        "model folder that holds tokenizer.json") from None


def store_model(model: bytes, output: str) -> bytes:
    """Copy a reused model into the corpus (at ``stored_path(model)``) and pass it on.

    A manifest names only files inside its corpus (docs/storage.md), so a
    corpus built with ``--tokenizer URL`` carries its own copy: it trains
    wherever it is read from, whatever the working directory was.
    """
    unless_swept(lambda: write_bytes_atomic(f"{output.rstrip('/')}/{stored_path(model)}", model, create=True),
                 "tokenizer model")
    return model
