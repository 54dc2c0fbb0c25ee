"""Tokenizer conversion for a Hugging Face export: the corpus's tokenizer file -> transformers' files.

The tokenizer is written from the SentencePiece pieces and scores rather than
by transformers' spm converter, which needs sentencepiece's proto module
(broken under protobuf < 7) and silently builds a wrong vocabulary in
transformers 5.x. What the sentencepiece API does not expose (the model type,
piece types, the normalizer's precompiled character map) is read from the
model file with a few lines of protobuf wire-format parsing. A unigram model
becomes a tokenizers ``Unigram``; a BPE model (byte fallback or not) a
tokenizers ``BPE`` whose merge rules replay SentencePiece's (see
``bpe_merges``), so ids equal sentencepiece's. Models the export cannot
reproduce (pieces spanning whitespace, BPE unused pieces, char/word models)
are refused with a ValueError.

A byte-level BPE corpus's tokenizer is already a tokenizers file: it is
written as trained (RoBERTa's ``<s> A </s></s> B </s>`` template; ALBERT's
``<s> A </s> B </s>`` with segment ids 0 and 1 for an ALBERT export), with the
leading space added where the text starts, so ids equal the corpus's.

Special tokens, as the build encodes text and as masked-LM training saw them
(docs/tokenizer.md, "Special tokens written in text"):

- placed by the caller, a special token's exact string in the input is that
  token (``split_special_tokens`` is false, transformers' default, so that
  ``pipeline("fill-mask", model=folder)`` finds ``<mask>``). It takes the
  whitespace before it and the text after it continues without a new dummy
  prefix, so ``"at the <mask>."`` gives ``▁at ▁the <mask> .``: a masked word as
  the shards hold it, where sentencepiece would give ``▁at ▁the ▁ <mask> .``
  and a plain Metaspace ``▁at ▁the <mask> ▁ .``. Other user-defined pieces (a
  reused model's) are matched whole, as transformers does for added tokens,
  without the lone ``▁`` sentencepiece puts before them;
- written in a document, the build encoded such a string as text. With
  ``split_special_tokens=True`` (a call's argument or ``from_pretrained``'s)
  the export does too: the pre-tokenizer cuts the string after its first
  character as the build does, so ``tok(document)`` gives the shards' ids
  whatever the document holds. transformers cannot split the other special
  tokens' strings while matching ``<mask>``'s (it marks every named token
  special), hence the default that the fill-mask pipeline needs.

``tokenizer_config.json`` names the generic ``PreTrainedTokenizerFast``, which
follows ``tokenizer.json`` as written, and lists ``token_type_ids`` among the
model's inputs for a model with a second token type (a sentence head's), so that
``tok(a, b)`` gives the shards' ``<s> A </s> B </s>`` with segment B as type 1,
as pretraining on pairs used it.

``tokenizer_files`` gives every tokenizer file of an export folder
(``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``,
and ``spm.model`` or ``vocab.json`` + ``merges.txt``); ``trainer.export``
writes them beside the weights.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from schemas import SPECIAL_TOKENS
from schemas.tokenizer_files import proto_fields, sentencepiece_literal_rule

# The two Hugging Face architectures an export targets; the tokenizer's pair template depends on it.
XLM_ROBERTA = "xlm-roberta"
ALBERT = "albert"
# The architectures whose usual configs have a second token type (segment B).
TOKEN_TYPE_ARCHITECTURES = (ALBERT, "bert")
_ROBERTA_PAIR = (XLM_ROBERTA, "roberta")  # <s> A </s></s> B </s>, one token type


def segment_types(arch: str, type_vocab_size: int | None) -> bool:
    """Whether a pair's segment B has type 1: the model has a second type row (type_vocab_size >= 2, as
    a model trained with a sentence head on pair shards), or, where its size is not given, the
    architecture usually has one (ALBERT, BERT)."""
    return type_vocab_size >= 2 if type_vocab_size is not None else arch in TOKEN_TYPE_ARCHITECTURES


def spm_normalizer_spec(model_bytes: bytes) -> dict[str, Any]:
    """precompiled_charsmap, add_dummy_prefix, remove_extra_whitespaces of an spm model file.

    ModelProto.normalizer_spec is field 3; in NormalizerSpec, precompiled_charsmap
    is field 2 and the two flags are fields 3 and 4 (both default true).
    """
    spec = proto_fields(model_bytes).get(3, [b""])[0]
    f = proto_fields(spec)
    return {
        "precompiled_charsmap": f.get(2, [b""])[0],
        "add_dummy_prefix": bool(f.get(3, [1])[0]),
        "remove_extra_whitespaces": bool(f.get(4, [1])[0]),
    }


# SentencePiece.Type values (sentencepiece_model.proto).
PIECE_NORMAL, PIECE_UNKNOWN, PIECE_CONTROL, PIECE_USER_DEFINED, PIECE_UNUSED, PIECE_BYTE = 1, 2, 3, 4, 5, 6
_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
_SPACE = "\u2581"  # SentencePiece's whitespace symbol


@dataclass(frozen=True)
class SpmPiece:
    """One entry of a SentencePiece vocabulary, as stored in the model file."""

    piece: str
    score: float
    type: int  # PIECE_NORMAL, PIECE_CONTROL, ...


def spm_model_type(model_bytes: bytes) -> str:
    """"unigram", "bpe", "word" or "char": ModelProto.trainer_spec (field 2) .model_type (field 3)."""
    trainer = proto_fields(proto_fields(model_bytes).get(2, [b""])[0])
    mtype = int(trainer.get(3, [1])[0])  # proto default: UNIGRAM
    return _MODEL_TYPES.get(mtype, f"type{mtype}")


def spm_pieces(model_bytes: bytes) -> list[SpmPiece]:
    """The vocabulary in id order: ModelProto.pieces is field 1; in it piece = 1, score = 2 (float32),
    type = 3 (default NORMAL). Read from the file because the sentencepiece API cannot tell a
    user-defined piece from a normal one."""
    out = []
    for raw in proto_fields(model_bytes).get(1, []):
        f = proto_fields(raw)
        score = struct.unpack("<f", f[2][0])[0] if 2 in f else 0.0
        out.append(SpmPiece(bytes(f.get(1, [b""])[0]).decode("utf-8"), score, int(f.get(3, [PIECE_NORMAL])[0])))
    return out


def bpe_merges(pieces: list[SpmPiece]) -> list[tuple[str, str]]:
    """Merge rules, best first, that make tokenizers' BPE replay SentencePiece's BPE encoder.

    SentencePiece merges any two adjacent symbols whose concatenation is a normal
    piece, taking the pair with the highest piece score first (a BPE model's
    scores are minus the merge order). So every split of a normal piece into two
    normal pieces is a rule, ranked by the merged piece's score, then its id; the
    splits of one piece follow in the order of their parts' ids. (Sentencepiece
    ranks a piece's splits equally and takes the leftmost; a fixed order can only
    differ when two different splits of one piece are pending at once, which no
    trained or randomly built vocabulary we searched ever produced.)
    """
    ids = {p.piece: i for i, p in enumerate(pieces) if p.type == PIECE_NORMAL}
    rules = []
    for piece, i in ids.items():
        for k in range(1, len(piece)):
            left, right = ids.get(piece[:k]), ids.get(piece[k:])
            if left is not None and right is not None:
                rules.append((-pieces[i].score, i, left, right))
    rules.sort()
    return [(pieces[left].piece, pieces[right].piece) for _, _, left, right in rules]


def _check_bpe(pieces: list[SpmPiece]) -> None:
    """Raise where tokenizers' BPE cannot give SentencePiece's ids for this vocabulary."""
    if any(p.type == PIECE_UNUSED for p in pieces):
        # SentencePiece merges through an unused piece and then splits it back; BPE has no such step.
        raise ValueError("the SentencePiece BPE model has unused pieces, which the Hugging Face BPE "
                         "model cannot reproduce")
    normal = {p.piece for p in pieces if p.type == PIECE_NORMAL}
    for piece in sorted(normal):
        missing = [c for c in piece if c not in normal]
        if missing:
            # BPE starts from single characters: one outside the vocabulary goes to bytes/<unk>
            # at once and can never be merged, where SentencePiece could still merge it.
            raise ValueError(f"the SentencePiece BPE piece {piece!r} contains {missing[0]!r}, which is not "
                             "a piece of its own; the Hugging Face BPE model cannot build it")


def _check_whitespace(pieces: list[SpmPiece]) -> None:
    """Raise if a piece spans a word boundary: the exported pre-tokenizer splits words at whitespace
    (as SentencePiece's default split_by_whitespace training guarantees), so it could never emit one."""
    for p in pieces:
        if p.type in (PIECE_NORMAL, PIECE_USER_DEFINED) and _SPACE in p.piece[1:]:
            raise ValueError(f"the SentencePiece piece {p.piece!r} has whitespace after its first character "
                             "(a model trained with split_by_whitespace=false or "
                             "treat_whitespace_as_suffix=true); the export cannot reproduce it")


def build_tokenizer_json(model_bytes: bytes, arch: str = XLM_ROBERTA, type_vocab_size: int | None = None) -> str:
    """tokenizer.json (HF tokenizers format) giving the SentencePiece model's ids.

    A unigram model becomes a tokenizers Unigram with the same pieces and scores;
    a BPE model becomes a tokenizers BPE with merge rules derived from its pieces
    (see bpe_merges). ValueError for a model it cannot reproduce. The pair template
    follows the architecture and the model's token types (``_pair_template``).
    """
    import sentencepiece as spm
    from tokenizers import AddedToken, Tokenizer, decoders
    from tokenizers.models import BPE, Unigram

    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    for name, want in SPECIAL_TOKENS.items():
        if sp.piece_to_id(name) != want:
            raise ValueError(f"the SentencePiece model maps {name} to {sp.piece_to_id(name)}, expected {want}")
    pieces = spm_pieces(model_bytes)
    if len(pieces) != sp.get_piece_size():
        raise ValueError("could not read the SentencePiece model's pieces")
    _check_whitespace(pieces)
    byte_fallback = any(p.type == PIECE_BYTE for p in pieces)
    model_type = spm_model_type(model_bytes)
    if model_type == "unigram":
        vocab = [(p.piece, 0.0 if p.type == PIECE_CONTROL else p.score) for p in pieces]
        tok = Tokenizer(Unigram(vocab, unk_id=sp.unk_id(), byte_fallback=byte_fallback))
    elif model_type == "bpe":
        _check_bpe(pieces)
        # fuse_unk: sentencepiece reports a run of unknown characters as one <unk>.
        tok = Tokenizer(BPE({p.piece: i for i, p in enumerate(pieces)}, bpe_merges(pieces),
                            unk_token=sp.id_to_piece(sp.unk_id()), fuse_unk=True,
                            byte_fallback=byte_fallback, ignore_merges=False))
    else:
        raise ValueError(f"cannot export a SentencePiece {model_type!r} model (only unigram and bpe)")

    spec = spm_normalizer_spec(model_bytes)
    _text_pipeline(tok, spec, sentencepiece_literal_rule(sp)[0])
    # Decode as sentencepiece does: byte pieces back to characters, then whitespace, then drop the
    # dummy prefix once. (Metaspace's decoder after Fuse loses every space but the first.)
    steps = [decoders.Replace(_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence(steps + [decoders.Strip(" ", 1, 0)] if spec["add_dummy_prefix"] else steps)
    # Special tokens placed in text (split_special_tokens=False) are matched before normalization and take
    # the whitespace before them (lstrip): "the <mask>." is ▁the <mask> ., as the shards hold a masked word.
    tok.add_special_tokens([AddedToken(name, special=True, normalized=False, lstrip=True) for name in SPECIAL_TOKENS])
    # Other user-defined pieces (a reused model's) are matched whole in the normalized text, as sentencepiece
    # does; left in the vocabulary alone, the model would only ever spell them out.
    tok.add_tokens([AddedToken(p.piece, special=False, normalized=True) for p in pieces
                    if p.type == PIECE_USER_DEFINED and p.piece not in SPECIAL_TOKENS])
    tok.post_processor = _pair_template(arch, type_vocab_size)
    return tok.to_str(pretty=True)


def _text_pipeline(tok: Any, spec: dict[str, Any], literal: str) -> None:
    """Normalizer and pre-tokenizer of an exported SentencePiece model: sentencepiece's ids on any text.

    As sentencepiece: the model's character map, then (remove_extra_whitespaces) runs of spaces made
    one and spaces at the end dropped; the dummy prefix ``▁`` only where the text starts
    (Metaspace ``first``), so that the text right after a special token placed in it continues as
    the shards hold it (``<mask>.`` is ``<mask> .``, never ``<mask> ▁ .``) while a space after it still
    starts a word; then the cut that keeps a special token's string written in the text ordinary
    pieces (``literal_special_pattern``), as the build encodes it.
    """
    from tokenizers import Regex, normalizers, pre_tokenizers

    steps = [normalizers.Precompiled(spec["precompiled_charsmap"])] if spec["precompiled_charsmap"] else []
    words = []
    if spec["remove_extra_whitespaces"] and spec["add_dummy_prefix"]:
        steps += [normalizers.Replace(Regex(" {2,}"), " "), normalizers.Replace(Regex(" +\\z"), "")]
    elif spec["remove_extra_whitespaces"]:  # no dummy prefix (not what a build trains): split at whitespace
        words = [pre_tokenizers.WhitespaceSplit()]
    if steps:
        tok.normalizer = normalizers.Sequence(steps)
    prepend = "first" if spec["add_dummy_prefix"] else "never"
    metaspace = pre_tokenizers.Metaspace(replacement=_SPACE, prepend_scheme=prepend, split=True)
    cut = pre_tokenizers.Split(Regex(literal), behavior="merged_with_next")
    tok.pre_tokenizer = pre_tokenizers.Sequence([*words, metaspace, cut])


def _pair_template(arch: str, type_vocab_size: int | None = None) -> Any:
    """The post-processor: RoBERTa's <s> A </s> </s> B </s> (one segment type), or the shards' pair layout
    <s> A </s> B </s> with segment B as type 1 where the model has that type (segment_types), as type 0
    for an ALBERT / BERT export with one type."""
    from tokenizers import processors

    bos, eos = "<s>", "</s>"
    if segment_types(arch, type_vocab_size):
        pair = f"{bos}:0 $A:0 {eos}:0 $B:1 {eos}:1"
    elif arch in _ROBERTA_PAIR:
        pair = f"{bos} $A {eos} {eos} $B {eos}"
    else:
        pair = f"{bos} $A {eos} $B {eos}"
    return processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=pair,
        special_tokens=[(bos, SPECIAL_TOKENS[bos]), (eos, SPECIAL_TOKENS[eos])])


def build_byte_bpe_files(data: bytes, arch: str = XLM_ROBERTA, type_vocab_size: int | None = None) -> dict[str, str]:
    """tokenizer.json, vocab.json and merges.txt of a byte-level BPE corpus tokenizer (schemas.tokenizer_files).

    The trained file is kept (its RobertaProcessing already gives RoBERTa's pair
    template) but for where the leading space goes: the corpus encodes each sentence
    after a space, and ByteLevel's ``add_prefix_space`` would add one after every
    special token placed in the text too (``<mask>.`` as ``<mask> Ġ .``, never seen in
    training). A Metaspace step whose "space" is a space adds it only where the text
    starts (``prepend_scheme: first``), then ByteLevel runs without its own. Any other
    pair layout than RoBERTa's (``_pair_template``) replaces the trained one.
    vocab.json and merges.txt are the GPT-2 files that RobertaTokenizer (slow) reads too.
    """
    from tokenizers import Tokenizer, pre_tokenizers

    from schemas.tokenizer_files import ByteBPETokenizer

    ByteBPETokenizer(data)  # special ids and byte-level BPE checked
    tok = Tokenizer.from_str(data.decode("utf-8"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement=" ", prepend_scheme="first", split=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    if arch not in _ROBERTA_PAIR or segment_types(arch, type_vocab_size):
        tok.post_processor = _pair_template(arch, type_vocab_size)
    spec = json.loads(tok.to_str())
    vocab = dict(sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1]))
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    return {"tokenizer.json": tok.to_str(pretty=True),
            "vocab.json": json.dumps(vocab, ensure_ascii=False) + "\n",
            "merges.txt": "#version: 0.2\n" + "".join(m + "\n" for m in merges)}


def _special_tokens_map() -> dict[str, str]:
    return {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
            "cls_token": "<s>", "pad_token": "<pad>", "mask_token": "<mask>"}


@dataclass(frozen=True)
class TokenizerFiles:
    """An export's tokenizer files (name -> contents) and the vocabulary size they define."""

    files: dict[str, str | bytes]
    vocab_size: int
    special_ids: dict[str, int] | None = None  # an hf_json tokenizer's own ids (None: shardforge's)


def tokenizer_files(data: bytes, arch: str, max_seq_len: int, type_vocab_size: int | None = None) -> TokenizerFiles:
    """Every tokenizer file of an export folder from the corpus's tokenizer file (any kind).

    Built (and special ids validated) before anything is written. A
    SentencePiece model is converted to tokenizer.json and copied as spm.model;
    a byte-level BPE tokenizer.json is kept, with vocab.json and merges.txt; a
    foreign tokenizer.json (hf_json) is kept as it is, with its own special ids.

    type_vocab_size: the model's. With a second type, a pair is the shards' <s> A </s> B </s> with
    segment B as type 1, and ``token_type_ids`` is among the tokenizer's outputs; with one, a pair
    has no segment ids. Where it is not given, an existing model's tokenizer (hf_json) takes its
    architecture's usual token types (BERT, ALBERT), and ours the pair template of the architecture
    without ``token_type_ids`` among the outputs: an ALBERT-shaped model trained without a
    sentence head has a single type, which a segment id of 1 would overrun.
    """
    from schemas.tokenizer_files import BYTE_BPE, HF_JSON, load_tokenizer, tokenizer_kind

    kind = tokenizer_kind(data)
    if kind == HF_JSON:  # an existing model's tokenizer.json (--init): written as it is
        from trainer.hf_files import hf_json_tokenizer_files

        foreign = load_tokenizer(data)
        token_types = segment_types(arch, type_vocab_size)
        return TokenizerFiles(dict(hf_json_tokenizer_files(data, max_seq_len, token_types)), foreign.vocab_size,
                              foreign.special_ids)
    byte_bpe = kind == BYTE_BPE
    files: dict[str, str | bytes]
    if byte_bpe:
        from tokenizers import Tokenizer

        files = dict(build_byte_bpe_files(data, arch, type_vocab_size))
        n_pieces = Tokenizer.from_str(str(files["tokenizer.json"])).get_vocab_size(with_added_tokens=True)
    else:
        files = {"tokenizer.json": build_tokenizer_json(data, arch, type_vocab_size)}
        n_pieces = len(json.loads(files["tokenizer.json"])["model"]["vocab"])
    specials = _special_tokens_map()
    from trainer.hf_files import tokenizer_config

    tok_cfg = tokenizer_config(max_seq_len, specials, type_vocab_size is not None and type_vocab_size >= 2)
    if byte_bpe:
        # The corpus encodes every sentence with a leading space (pipelines.tokenizer.train.train_byte_bpe).
        # The generic class follows tokenizer.json (its pre-tokenizer and pair template); transformers 5's
        # RobertaTokenizer rebuilds RoBERTa's own pipeline from vocab and merges, which puts a space
        # after every special token placed in the text.
        tok_cfg.update(add_prefix_space=True, trim_offsets=True)
    files["tokenizer_config.json"] = json.dumps(tok_cfg, indent=2) + "\n"
    files["special_tokens_map.json"] = json.dumps(specials, indent=2) + "\n"
    if not byte_bpe:
        files["spm.model"] = data
    return TokenizerFiles(files, n_pieces)
