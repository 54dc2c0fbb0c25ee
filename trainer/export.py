"""Export a trained Encoder as a Hugging Face folder (issue #8).

The folder holds ``config.json``, ``model.safetensors``, the tokenizer
(``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``)
and a copy of the SentencePiece model (``spm.model``), or for a byte-level BPE
corpus ``vocab.json`` + ``merges.txt`` beside its ``tokenizer.json`` (loadable
by ``RobertaTokenizerFast`` and ``AutoTokenizer``). ``transformers`` loads
it as:

- ``XLMRobertaForMaskedLM`` for the RoBERTa variant (E = H, no sharing): our
  positions already follow fairseq/HF RoBERTa's offset, so tensors map 1:1.
- ``AlbertForMaskedLM`` otherwise (factorized E < H and/or sharing). ALBERT
  numbers positions from 0 while we start real tokens at pad_id+1, so its
  position table is ours shifted by pad_id+1 rows (exact for right-padded
  input, which is what HF tokenizers produce). Sharing "all" becomes one
  ALBERT layer group; any other sharing is unrolled into one group per layer
  (the same function, stored once per layer).

Pretraining-only heads (NSP/SOP, SpanBERT SBO) are not exported: the HF
masked-LM classes have no place for them.

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
``<s> A </s> B </s>`` with segment ids 0 and 1 for an ALBERT export), with
``add_prefix_space`` on, so ids equal the corpus's.

One deliberate difference: ``<mask>`` (and any other user-defined piece) is
matched first and the text on each side is encoded on its own, as
transformers does for added tokens, so ``"the <mask> sat"`` gives
``▁the <mask> ▁sat`` where sentencepiece gives ``▁the ▁ <mask> ▁sat``.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Any

import torch

from schemas import SPECIAL_TOKENS
from schemas.config import ModelConfig
from storage import join, makedirs, read_bytes, write_bytes_atomic, write_text_atomic
from trainer.model import Encoder, ModelDims, resolve_dims

XLM_ROBERTA = "xlm-roberta"
ALBERT = "albert"
# hfinit (#20.2): the architectures a run started from a Hugging Face model (--init) is exported as.
ROBERTA = "roberta"
BERT = "bert"
ARCHITECTURES = (XLM_ROBERTA, ROBERTA, BERT, ALBERT)


# ================================================================= weights


def choose_architecture(dims: ModelDims) -> str:
    """XLM-RoBERTa for the plain RoBERTa shape, ALBERT for factorized or shared models."""
    return XLM_ROBERTA if not dims.factorized and dims.share == "none" else ALBERT


def _qkv(model: Encoder, i: int) -> tuple[torch.Tensor, ...]:
    """(q_w, k_w, v_w, q_b, k_b, v_b) of layer i, split from the fused projection."""
    attn = model.attn[i % len(model.attn)]
    return (*attn.qkv.weight.chunk(3, dim=0), *attn.qkv.bias.chunk(3, dim=0))


def _roberta_tensors(model: Encoder) -> dict[str, torch.Tensor]:
    e, p = model.embed, "roberta.embeddings."
    t = {
        p + "word_embeddings.weight": e.word.weight,
        p + "position_embeddings.weight": e.position.weight,
        p + "token_type_embeddings.weight": e.token_type.weight,
        p + "LayerNorm.weight": e.ln.weight,
        p + "LayerNorm.bias": e.ln.bias,
    }
    for i in range(model.dims.layers):
        a, f, p = model.attn[i % len(model.attn)], model.ffn[i % len(model.ffn)], f"roberta.encoder.layer.{i}."
        qw, kw, vw, qb, kb, vb = _qkv(model, i)
        t.update({
            p + "attention.self.query.weight": qw, p + "attention.self.query.bias": qb,
            p + "attention.self.key.weight": kw, p + "attention.self.key.bias": kb,
            p + "attention.self.value.weight": vw, p + "attention.self.value.bias": vb,
            p + "attention.output.dense.weight": a.out.weight, p + "attention.output.dense.bias": a.out.bias,
            p + "attention.output.LayerNorm.weight": a.ln.weight, p + "attention.output.LayerNorm.bias": a.ln.bias,
            p + "intermediate.dense.weight": f.fc1.weight, p + "intermediate.dense.bias": f.fc1.bias,
            p + "output.dense.weight": f.fc2.weight, p + "output.dense.bias": f.fc2.bias,
            p + "output.LayerNorm.weight": f.ln.weight, p + "output.LayerNorm.bias": f.ln.bias,
        })
    h = model.lm_head
    t.update({
        "lm_head.dense.weight": h.dense.weight, "lm_head.dense.bias": h.dense.bias,
        "lm_head.layer_norm.weight": h.ln.weight, "lm_head.layer_norm.bias": h.ln.bias,
        "lm_head.bias": h.bias,
        # Tied in HF too; written out so loaders that do not tie still get the right head.
        "lm_head.decoder.weight": e.word.weight, "lm_head.decoder.bias": h.bias,
    })
    return t


# hfinit (#20.2): BERT's names, from RoBERTa's (trainer/hf_init.py loads through the same mapping).
_BERT_HEAD = {"lm_head.dense.": "cls.predictions.transform.dense.",
              "lm_head.layer_norm.": "cls.predictions.transform.LayerNorm.",
              "lm_head.decoder.": "cls.predictions.decoder.", "lm_head.bias": "cls.predictions.bias"}


def _bert_tensors(model: Encoder) -> dict[str, torch.Tensor]:
    """RoBERTa's layers under ``bert.``, the LM head under ``cls.predictions``, positions numbered from 0
    (as ALBERT's: the table is ours shifted by pad_id+1 rows)."""
    out = {}
    for name, t in _roberta_tensors(model).items():
        if name.startswith("roberta."):
            name = "bert." + name[len("roberta."):]
        else:
            old = next(o for o in _BERT_HEAD if name.startswith(o))
            name = _BERT_HEAD[old] + name[len(old):]
        out[name] = t
    out["bert.embeddings.position_embeddings.weight"] = model.embed.position.weight[model.dims.pad_id + 1:]
    return out


def hf_tensors(model: Encoder, arch: str) -> dict[str, torch.Tensor]:
    """Hugging Face name -> our tensor (a parameter or a view of one) for the architecture: the one
    mapping both the export and the import of a Hugging Face model (trainer/hf_init.py) use."""
    if arch in (XLM_ROBERTA, ROBERTA):
        return _roberta_tensors(model)
    return _bert_tensors(model) if arch == BERT else _albert_tensors(model)


def _albert_tensors(model: Encoder) -> dict[str, torch.Tensor]:
    d, e, p = model.dims, model.embed, "albert.embeddings."
    t = {
        p + "word_embeddings.weight": e.word.weight,
        # ALBERT's position ids are 0, 1, ...; ours for the same tokens are pad_id+1, pad_id+2, ...
        p + "position_embeddings.weight": e.position.weight[d.pad_id + 1:],
        p + "token_type_embeddings.weight": e.token_type.weight,
        p + "LayerNorm.weight": e.ln.weight,
        p + "LayerNorm.bias": e.ln.bias,
    }
    if e.project is not None:
        proj_w, proj_b = e.project.weight, e.project.bias
    else:  # ALBERT always has the E -> H mapping; E = H makes it the identity.
        proj_w, proj_b = torch.eye(d.hidden), torch.zeros(d.hidden)
    t["albert.encoder.embedding_hidden_mapping_in.weight"] = proj_w
    t["albert.encoder.embedding_hidden_mapping_in.bias"] = proj_b
    for g in range(1 if d.share == "all" else d.layers):
        a, f = model.attn[g % len(model.attn)], model.ffn[g % len(model.ffn)]
        p = f"albert.encoder.albert_layer_groups.{g}.albert_layers.0."
        qw, kw, vw, qb, kb, vb = _qkv(model, g)
        t.update({
            p + "attention.query.weight": qw, p + "attention.query.bias": qb,
            p + "attention.key.weight": kw, p + "attention.key.bias": kb,
            p + "attention.value.weight": vw, p + "attention.value.bias": vb,
            p + "attention.dense.weight": a.out.weight, p + "attention.dense.bias": a.out.bias,
            p + "attention.LayerNorm.weight": a.ln.weight, p + "attention.LayerNorm.bias": a.ln.bias,
            p + "ffn.weight": f.fc1.weight, p + "ffn.bias": f.fc1.bias,
            p + "ffn_output.weight": f.fc2.weight, p + "ffn_output.bias": f.fc2.bias,
            p + "full_layer_layer_norm.weight": f.ln.weight, p + "full_layer_layer_norm.bias": f.ln.bias,
        })
    h = model.lm_head
    t.update({
        "predictions.dense.weight": h.dense.weight, "predictions.dense.bias": h.dense.bias,
        "predictions.LayerNorm.weight": h.ln.weight, "predictions.LayerNorm.bias": h.ln.bias,
        "predictions.bias": h.bias,
        "predictions.decoder.weight": e.word.weight, "predictions.decoder.bias": h.bias,
    })
    return t


def hf_config(dims: ModelDims, arch: str, special_ids: dict[str, int] | None = None) -> dict[str, Any]:
    """config.json contents for the chosen architecture (special_ids: the tokenizer's, default ours)."""
    special_ids = special_ids or SPECIAL_TOKENS
    common = {
        "vocab_size": dims.vocab_size,
        "hidden_size": dims.hidden,
        "num_hidden_layers": dims.layers,
        "num_attention_heads": dims.heads,
        "intermediate_size": dims.intermediate,
        "hidden_act": dims.hidden_act,  # "gelu": exact (erf), as F.gelu; "gelu_new": tanh form
        "hidden_dropout_prob": dims.dropout,
        "attention_probs_dropout_prob": dims.dropout,
        "type_vocab_size": dims.type_vocab_size,
        "initializer_range": 0.02,
        "layer_norm_eps": dims.layer_norm_eps,
        "pad_token_id": dims.pad_id,
        "bos_token_id": special_ids["<s>"],
        "eos_token_id": special_ids["</s>"],
        "tie_word_embeddings": True,
        "dtype": "float32",
    }
    if arch in (XLM_ROBERTA, ROBERTA):
        cls = "XLMRobertaForMaskedLM" if arch == XLM_ROBERTA else "RobertaForMaskedLM"
        return {"architectures": [cls], "model_type": arch, **common,
                "max_position_embeddings": dims.max_positions, "position_embedding_type": "absolute"}
    if arch == BERT:  # positions from 0, as ALBERT's
        return {"architectures": ["BertForMaskedLM"], "model_type": "bert", **common,
                "max_position_embeddings": dims.max_seq_len, "position_embedding_type": "absolute"}
    return {"architectures": ["AlbertForMaskedLM"], "model_type": "albert", **common,
            "embedding_size": dims.embedding_size,
            "max_position_embeddings": dims.max_seq_len,
            "num_hidden_groups": 1 if dims.share == "all" else dims.layers,
            "inner_group_num": 1,
            "classifier_dropout_prob": dims.dropout}


# ================================================================= tokenizer


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, i
        shift += 7


def _proto_fields(buf: bytes) -> dict[int, list[Any]]:
    """Top-level fields of a protobuf message: number -> values (ints or bytes)."""
    fields: dict[int, list[Any]] = {}
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, i = _varint(buf, i)
        elif wire == 1:
            val, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            val, i = buf[i:i + n], i + n
        elif wire == 5:
            val, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        fields.setdefault(num, []).append(val)
    return fields


def spm_normalizer_spec(model_bytes: bytes) -> dict[str, Any]:
    """precompiled_charsmap, add_dummy_prefix, remove_extra_whitespaces of an spm model file.

    ModelProto.normalizer_spec is field 3; in NormalizerSpec, precompiled_charsmap
    is field 2 and the two flags are fields 3 and 4 (both default true).
    """
    spec = _proto_fields(model_bytes).get(3, [b""])[0]
    f = _proto_fields(spec)
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
    trainer = _proto_fields(_proto_fields(model_bytes).get(2, [b""])[0])
    mtype = int(trainer.get(3, [1])[0])  # proto default: UNIGRAM
    return _MODEL_TYPES.get(mtype, f"type{mtype}")


def spm_pieces(model_bytes: bytes) -> list[SpmPiece]:
    """The vocabulary in id order: ModelProto.pieces is field 1; in it piece = 1, score = 2 (float32),
    type = 3 (default NORMAL). Read from the file because the sentencepiece API cannot tell a
    user-defined piece from a normal one."""
    out = []
    for raw in _proto_fields(model_bytes).get(1, []):
        f = _proto_fields(raw)
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


def build_tokenizer_json(model_bytes: bytes, arch: str = XLM_ROBERTA) -> str:
    """tokenizer.json (HF tokenizers format) giving the SentencePiece model's ids.

    A unigram model becomes a tokenizers Unigram with the same pieces and scores;
    a BPE model becomes a tokenizers BPE with merge rules derived from its pieces
    (see bpe_merges). ValueError for a model it cannot reproduce.
    """
    import sentencepiece as spm
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers
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
    if spec["precompiled_charsmap"]:
        tok.normalizer = normalizers.Precompiled(spec["precompiled_charsmap"])
    prepend = "always" if spec["add_dummy_prefix"] else "never"
    metaspace = pre_tokenizers.Metaspace(replacement=_SPACE, prepend_scheme=prepend, split=True)
    # spm strips and collapses whitespace (remove_extra_whitespaces); splitting on it does the same.
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), metaspace])
                         if spec["remove_extra_whitespaces"] else metaspace)
    # Decode as sentencepiece does: byte pieces back to characters, then whitespace, then drop the
    # dummy prefix once. (Metaspace's decoder after Fuse loses every space but the first.)
    steps = [decoders.Replace(_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence(steps + [decoders.Strip(" ", 1, 0)] if spec["add_dummy_prefix"] else steps)
    # Special tokens are matched before normalization, as sentencepiece does for <mask>.
    tok.add_special_tokens([AddedToken(name, special=True, normalized=False) for name in SPECIAL_TOKENS])
    # Other user-defined pieces (a reused model's) are matched whole in the normalized text, as sentencepiece
    # does; left in the vocabulary alone, the model would only ever spell them out.
    tok.add_tokens([AddedToken(p.piece, special=False, normalized=True) for p in pieces
                    if p.type == PIECE_USER_DEFINED and p.piece not in SPECIAL_TOKENS])
    tok.post_processor = _pair_template(arch)
    return tok.to_str(pretty=True)


def _pair_template(arch: str) -> Any:
    """The post-processor: RoBERTa's <s> A </s> </s> B </s> (one segment type) or BERT/ALBERT's with type 1."""
    from tokenizers import processors

    bos, eos = "<s>", "</s>"
    if arch == XLM_ROBERTA:
        pair = f"{bos} $A {eos} {eos} $B {eos}"
    else:
        pair = f"{bos}:0 $A:0 {eos}:0 $B:1 {eos}:1"
    return processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=pair,
        special_tokens=[(bos, SPECIAL_TOKENS[bos]), (eos, SPECIAL_TOKENS[eos])])


def build_byte_bpe_files(data: bytes, arch: str = XLM_ROBERTA) -> dict[str, str]:
    """tokenizer.json, vocab.json and merges.txt of a byte-level BPE corpus tokenizer (schemas.tokenizer_files).

    The trained file is kept (its RobertaProcessing already gives RoBERTa's pair
    template); an ALBERT export gets segment ids for the pair. vocab.json and
    merges.txt are the GPT-2 files that RobertaTokenizer (slow) reads too.
    """
    from tokenizers import Tokenizer

    from schemas.tokenizer_files import ByteBPETokenizer

    ByteBPETokenizer(data)  # special ids and byte-level BPE checked
    tok = Tokenizer.from_str(data.decode("utf-8"))
    if arch != XLM_ROBERTA:
        tok.post_processor = _pair_template(arch)
    spec = json.loads(tok.to_str())
    vocab = dict(sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1]))
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    return {"tokenizer.json": tok.to_str(pretty=True),
            "vocab.json": json.dumps(vocab, ensure_ascii=False) + "\n",
            "merges.txt": "#version: 0.2\n" + "".join(m + "\n" for m in merges)}


def _special_tokens_map() -> dict[str, str]:
    return {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
            "cls_token": "<s>", "pad_token": "<pad>", "mask_token": "<mask>"}


# ================================================================= export


def export_hf(model: Encoder, cfg: ModelConfig, spm_model_path: str, out_dir: str,
              architecture: str | None = None) -> None:
    """Write a Hugging Face folder (config, safetensors weights, tokenizer) to out_dir (any fsspec URL).

    spm_model_path: the corpus's tokenizer file, a SentencePiece model or a
    byte-level BPE tokenizer.json (told apart by content).

    architecture: "xlm-roberta" or "albert" (default: chosen from the model's
    shape by choose_architecture). XLM-RoBERTa cannot express a factorized
    embedding or an E -> H projection, so those models must go to ALBERT.
    """
    from safetensors.torch import save as save_safetensors

    dims = model.dims
    if dims.vocab_size != model.embed.word.num_embeddings:
        raise ValueError("model and its dims disagree on the vocabulary size")
    if resolve_dims(cfg, dims.vocab_size, dims.pad_id) != dims:
        raise ValueError("cfg does not describe this model (its resolved dims differ)")
    # hfinit (#20.2): a run started from a Hugging Face model records its architecture in the config.
    arch = architecture or (cfg.architecture if cfg.architecture != "auto" else choose_architecture(dims))
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; use one of {', '.join(ARCHITECTURES)}")
    if arch != ALBERT and dims.factorized:
        raise ValueError("a factorized embedding (E != H) can only be exported as ALBERT")
    from trainer.hf_files import check_exportable

    check_exportable(dims, arch)

    from schemas.tokenizer_files import BYTE_BPE, HF_JSON, load_tokenizer, tokenizer_kind

    spm_bytes = read_bytes(spm_model_path)
    kind = tokenizer_kind(spm_bytes)
    byte_bpe = kind == BYTE_BPE
    special_ids = None
    # Built (and special ids validated) before anything is written.
    if kind == HF_JSON:  # hfinit (#20.2): an existing model's tokenizer.json, written as it is
        from trainer.hf_files import hf_json_tokenizer_files

        tok_files = hf_json_tokenizer_files(spm_bytes, dims.max_seq_len)
        foreign = load_tokenizer(spm_bytes)
        n_pieces, special_ids = foreign.vocab_size, foreign.special_ids
    elif byte_bpe:
        tok_files = build_byte_bpe_files(spm_bytes, arch)
        from tokenizers import Tokenizer

        n_pieces = Tokenizer.from_str(tok_files["tokenizer.json"]).get_vocab_size(with_added_tokens=True)
    else:
        tok_files = {"tokenizer.json": build_tokenizer_json(spm_bytes, arch)}
        n_pieces = len(json.loads(tok_files["tokenizer.json"])["model"]["vocab"])
    if n_pieces != dims.vocab_size:
        raise ValueError(f"the tokenizer has {n_pieces} pieces but the model has "
                         f"vocab_size {dims.vocab_size}")

    tensors = hf_tensors(model, arch)
    # Own contiguous fp32 CPU copies: safetensors refuses tensors that share storage (tied weights).
    tensors = {k: v.detach().to("cpu", torch.float32).clone().contiguous() for k, v in tensors.items()}

    makedirs(out_dir)
    write_text_atomic(join(out_dir, "config.json"), json.dumps(hf_config(dims, arch, special_ids), indent=2) + "\n")
    write_bytes_atomic(join(out_dir, "model.safetensors"), save_safetensors(tensors, metadata={"format": "pt"}))
    for name, text in tok_files.items():
        write_text_atomic(join(out_dir, name), text)
    if kind == HF_JSON:  # its tokenizer_config / special_tokens_map came with tok_files
        return
    specials = _special_tokens_map()
    tok_cfg: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": dims.max_seq_len,
                               "clean_up_tokenization_spaces": False, **specials}
    if byte_bpe:
        # The corpus encodes every sentence with a leading space (pipelines.tokenizer.train_byte_bpe).
        # transformers' RobertaTokenizer always applies RoBERTa's pair template, so an ALBERT export
        # (segment ids) names the generic class, which follows tokenizer.json's template.
        tok_cfg.update(add_prefix_space=True, trim_offsets=True,
                       tokenizer_class="RobertaTokenizer" if arch == XLM_ROBERTA else "PreTrainedTokenizerFast")
    write_text_atomic(join(out_dir, "tokenizer_config.json"), json.dumps(tok_cfg, indent=2) + "\n")
    write_text_atomic(join(out_dir, "special_tokens_map.json"), json.dumps(specials, indent=2) + "\n")
    if not byte_bpe:
        write_bytes_atomic(join(out_dir, "spm.model"), spm_bytes)


def export_checkpoint(ckpt: str, out_dir: str, tokenizer: str | None = None) -> str:
    """Export a training checkpoint (file, or run folder: its latest) to a Hugging Face folder."""
    from schemas.config import TrainConfig
    from schemas.errors import UserError
    from schemas.manifest import load_manifest, tokenizer_url
    from storage import exists, local_copy
    from trainer.checkpoint import latest_checkpoint, load_checkpoint

    url = ckpt if ckpt.endswith(".pt") else latest_checkpoint(ckpt)
    if url is None:
        raise UserError(f"no checkpoint found in {ckpt}")
    state = load_checkpoint(url)
    cfg = TrainConfig.model_validate(state["config"])
    if tokenizer is None:
        if "://" not in cfg.data and not os.path.isabs(cfg.data) and not exists(cfg.data):
            # Runs before corpus paths were stored absolute recorded them relative to where they started.
            raise UserError(f"this checkpoint records its corpus as the relative path {cfg.data!r}, which is not "
                            f"under the current directory; run export from the directory the run was started in, "
                            f"or pass --tokenizer URL (the corpus's tokenizer)")
        manifest, root = load_manifest(cfg.data)
        tokenizer = tokenizer_url(manifest, root)  # the path rule: always inside the corpus
    from storage import read_bytes, sha256_bytes

    trained_with = state.get("manifest")  # the sha256 of the tokenizer the run trained with
    if trained_with and sha256_bytes(read_bytes(tokenizer)) != trained_with:
        raise UserError(f"tokenizer {tokenizer} is not the one this checkpoint was trained with "
                        f"(sha256 {trained_with[:12]}…); pass the right one with --tokenizer")
    # hfinit (#20.2): an existing model's pad id (BERT: 0) is recorded by runs that know it.
    model = Encoder(cfg.model, int(state["vocab_size"]), pad_id=int(state.get("pad_id", 1)))
    model.load_state_dict(state["model"])
    model.eval()
    with local_copy(tokenizer) as spm_path:
        export_hf(model, cfg.model, spm_path, out_dir)
    from trainer.model_card import write_model_card  # hfinit (#20.2): README.md, the model card

    arch = cfg.model.architecture if cfg.model.architecture != "auto" else choose_architecture(model.dims)
    write_model_card(out_dir, cfg, state, url, arch)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    from schemas.cliargs import ArgumentParser
    from schemas.errors import redact_text

    p = ArgumentParser(prog="shardforge export",
                       description="Write a Hugging Face folder (config.json, model.safetensors, "
                                   "tokenizer files) from a shardforge checkpoint.")
    p.add_argument("checkpoint", help="ckpt-NNNNNNNN.pt, or a run folder (its latest checkpoint)")
    p.add_argument("out", help="output folder (local or fsspec URL)")
    p.add_argument("--tokenizer", help="tokenizer file URL: spm.model or a byte-level BPE tokenizer.json "
                                       "(default: the corpus's, from the manifest)")
    args = p.parse_args(argv)
    print(redact_text(export_checkpoint(args.checkpoint, args.out, args.tokenizer)))
    return 0
