"""Continue pretraining an existing Hugging Face model (``--init PATH``).

A folder written by transformers (``config.json`` + ``model.safetensors``, a
sharded ``model.safetensors.index.json``, or ``pytorch_model.bin`` read with
``weights_only=True``) of one of ``RobertaForMaskedLM``,
``XLMRobertaForMaskedLM``, ``BertForMaskedLM`` or ``AlbertForMaskedLM``
becomes our ``Encoder``:

1. ``init_model_config`` turns its config.json into a ``ModelConfig`` (the
   shape, and what the families differ in: LayerNorm eps, GELU variant,
   token-type rows, ALBERT's factorized embedding and layer groups,
   positions). ``resolve_init`` applies it to a run's config.
2. ``load_hf_weights`` copies the tensors in through the export's own name
   mapping (``trainer.export.hf_tensors``), used in reverse: that mapping
   hands out our parameters (or views of them: the fused q/k/v, the shifted
   position table), so a copy into its entries fills the model. An entry that
   is not part of the model (ALBERT's E -> H mapping when E = H, which we do
   not have) must hold what the model implies (the identity), else refused.

What differs between the families, and how it is handled:

- Positions. RoBERTa / XLM-R number real tokens from padding_idx+1 (fairseq),
  as our Embeddings does: tables map 1:1. BERT and ALBERT number from 0: our
  table gets pad_id+1 leading rows and theirs after (as the ALBERT export
  does), exact for right-padded input (what our loader gives).
- Token types: RoBERTa has 1 (XLM-R 1), BERT / ALBERT 2: ``type_vocab_size``.
- LayerNorm eps: RoBERTa 1e-5, BERT / ALBERT 1e-12: ``layer_norm_eps``.
- GELU: BERT / RoBERTa exact (erf), ALBERT ``gelu_new`` (tanh): ``hidden_act``.
  RoBERTa's LM head is always exact GELU; BERT's and ALBERT's use hidden_act:
  ``lm_head_act``.
- ALBERT: factorized embedding E < H (``embedding_size``), one layer group
  shared by all layers (``share="all"``) or one group per layer; other
  groupings (inner_group_num > 1, or layers spread over fewer groups) are refused.
- Refused with one line: relative position embeddings, decoders, untied
  output embeddings, other activations, other classes.

The corpus must be built with the model's tokenizer (``--tokenizer
PATH/tokenizer.json``: kind ``hf_json``): its vocabulary size and pad id must
be the model's (``check_corpus``), and one of the folder's tokenizer files
must be the one the manifest records (its sha256), or the folder's
tokenizer.json must give every id the corpus tokenizer's token
(``check_tokenizer``; ``init_tokenizer_check: false`` skips it).
"""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import torch

from schemas.config import MODEL_SIZES, ModelConfig, TrainConfig
from schemas.errors import UserError
from schemas.manifest import Manifest
from shardforge.storage import exists, join, read_bytes, sha256_bytes
from shardforge.storage.contract import folder_kind, load_manifest, open_tokenizer
from trainer.export import ALBERT, BERT, ROBERTA, XLM_ROBERTA, hf_tensors
from trainer.model import Encoder

log = logging.getLogger("shardforge.hf_init")

# transformers class -> our architecture name (trainer.export).
CLASSES = {"RobertaForMaskedLM": ROBERTA, "XLMRobertaForMaskedLM": XLM_ROBERTA,
           "BertForMaskedLM": BERT, "AlbertForMaskedLM": ALBERT}
MODEL_TYPES = {"roberta": ROBERTA, "xlm-roberta": XLM_ROBERTA, "bert": BERT, "albert": ALBERT}
# config.json hidden_act -> ours. gelu_pytorch_tanh is the same tanh form as gelu_new.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new"}
# Names in a transformers file that are not weights of the masked-LM model (buffers, unused heads).
IGNORED_SUFFIXES = ("position_ids", "token_type_ids")
IGNORED_PARTS = (".pooler.", "seq_relationship", "sop_classifier")


def _not_a_model(path: str) -> str:
    """Why a folder without config.json is not what --init takes, in the user's terms."""
    kind = folder_kind(path)
    if kind == "run":
        return (f"a training run folder, not a Hugging Face model folder: export it first (`shardforge export {path} "
                f"HF`) and give --init HF, or continue that run itself with --output {path} (a rerun resumes it)")
    if kind == "corpus":
        return "a corpus, not a Hugging Face model folder (a corpus is what --data takes)"
    return "no config.json (expected a Hugging Face model folder)"


def read_hf_config(path: str) -> dict[str, Any]:
    """The folder's config.json; UserError when it is missing or not JSON."""
    url = join(path, "config.json")
    try:
        return json.loads(read_bytes(url))
    except FileNotFoundError:
        raise UserError(f"--init {path}: {_not_a_model(path)}") from None
    except ValueError as e:
        raise UserError(f"--init {url}: not JSON ({e})") from None


def hf_architecture(config: dict[str, Any], path: str = "") -> str:
    """roberta | xlm-roberta | bert | albert, from ``architectures`` (or ``model_type``); UserError otherwise."""
    classes = config.get("architectures") or []
    for c in classes:
        if c in CLASSES:
            return CLASSES[c]
    if not classes and config.get("model_type") in MODEL_TYPES:
        return MODEL_TYPES[config["model_type"]]
    raise UserError(f"--init {path}: {', '.join(classes) or config.get('model_type')} is not supported; "
                    f"supported: {', '.join(CLASSES)}")


def hf_pad_id(config: dict[str, Any], arch: str) -> int:
    """The model's pad id: config.json's pad_token_id, else the family's (RoBERTa 1, BERT / ALBERT 0)."""
    pad = config.get("pad_token_id")
    return int(pad) if pad is not None else (1 if arch in (ROBERTA, XLM_ROBERTA) else 0)


def _activation(config: dict[str, Any], path: str) -> str:
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise UserError(f"--init {path}: hidden_act={act!r} is not supported (only {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[act]


def init_model_config(path: str, base: ModelConfig | None = None) -> ModelConfig:
    """``base`` (default ModelConfig()) with the shape and options of the model at ``path``.

    UserError for what our Encoder cannot compute exactly (see the module doc), or a config.json
    that lacks a field of the shape. Dropout is the model's unless ``base`` sets its own.
    """
    try:
        return _init_model_config(read_hf_config(path), path, base or ModelConfig())
    except KeyError as e:
        raise UserError(f"--init {path}: config.json has no {e.args[0]!r}") from None


def _init_model_config(c: dict[str, Any], path: str, base: ModelConfig) -> ModelConfig:
    arch = hf_architecture(c, path)
    if c.get("position_embedding_type", "absolute") != "absolute":
        raise UserError(f"--init {path}: position_embedding_type={c['position_embedding_type']!r}; "
                        "only absolute positions are supported")
    if c.get("is_decoder") or c.get("add_cross_attention"):
        raise UserError(f"--init {path}: a decoder / cross-attention model is not an MLM encoder")
    if c.get("tie_word_embeddings", True) is False:
        raise UserError(f"--init {path}: tie_word_embeddings is false; our LM head decodes with the word embedding")
    act = _activation(c, path)
    pad = hf_pad_id(c, arch)
    mpe = int(c["max_position_embeddings"])
    fields: dict[str, Any] = {
        "hidden": int(c["hidden_size"]), "layers": int(c["num_hidden_layers"]),
        "heads": int(c["num_attention_heads"]), "intermediate": int(c["intermediate_size"]),
        "layer_norm_eps": float(c.get("layer_norm_eps", 1e-12)),
        "type_vocab_size": int(c.get("type_vocab_size", 2)),
        "hidden_act": act,
        "architecture": arch,
        "embedding_size": None, "share": "none",
    }
    if arch in (ROBERTA, XLM_ROBERTA):
        # fairseq positions: the table already has the pad_id+1 leading rows; the head is exact GELU.
        fields.update(max_positions=mpe, lm_head_act="gelu")
    else:
        # Positions from 0: our table puts pad_id+1 rows before theirs.
        fields.update(max_positions=mpe + pad + 1, lm_head_act=act)
    if arch == ALBERT:
        fields.update(_albert_fields(c, path))
    if base.dropout == ModelConfig.model_fields["dropout"].default:
        # A run's own dropout wins (its attention's too, unless it sets that apart); else the model's, and the
        # attention probabilities' where the model's differs and the run does not set it.
        fields["dropout"] = float(c.get("hidden_dropout_prob", base.dropout))
        attention = float(c.get("attention_probs_dropout_prob", fields["dropout"]))
        if base.attention_dropout is None and attention != fields["dropout"]:
            fields["attention_dropout"] = attention
    cfg = base.model_copy(update=fields)
    return ModelConfig.model_validate(cfg.model_dump())  # validated: the copy above is not


def _albert_fields(c: dict[str, Any], path: str) -> dict[str, Any]:
    """ALBERT's factorized embedding and layer sharing, in our terms."""
    layers, groups, inner = int(c["num_hidden_layers"]), int(c.get("num_hidden_groups", 1)), \
        int(c.get("inner_group_num", 1))
    if inner != 1 or groups not in (1, layers):
        raise UserError(f"--init {path}: ALBERT with num_hidden_groups={groups}, inner_group_num={inner} is "
                        f"not supported (only one group shared by all layers, or one group per layer)")
    e = int(c.get("embedding_size", c["hidden_size"]))
    return {"embedding_size": e if e != int(c["hidden_size"]) else None, "share": "all" if groups == 1 else "none"}


# Fields --init sets; a user value that differs is a contradiction, not an override.
_SHAPE_FIELDS = ("hidden", "layers", "heads", "intermediate", "embedding_size", "share", "max_positions",
                 "layer_norm_eps", "type_vocab_size", "hidden_act", "lm_head_act", "architecture")


def _recipe_note(cfg: TrainConfig, clash: dict[str, Any], want: ModelConfig) -> str:
    """Which contradicting values the recipe set (settings the user did not type), and the --set items that
    keep the recipe's other settings with the model's shape."""
    if not cfg.recipe:
        return ""
    from trainer.recipes import load_recipe

    shape = load_recipe(cfg.recipe).get("model") or {}
    named = [k for k, v in clash.items() if shape.get(k) == v]
    if not named:
        return ""
    items = []
    for k in named:
        if k == "size":
            same = [n for n, d in MODEL_SIZES.items() if (d["hidden"], d["heads"]) == (want.hidden, want.heads)]
            if not same:
                return (f" (model.size from --recipe {cfg.recipe}, a size this model is not: leave out --recipe "
                        "and give its training settings as flags)")
            items.append(f"--set model.size={same[0]}")
        else:
            items.append(f"--set model.{k}={json.dumps(getattr(want, k))}")
    return (f" ({', '.join('model.' + k for k in named)} from --recipe {cfg.recipe}: to keep its other settings, "
            f"add {' '.join(items)})")


def resolve_init(cfg: TrainConfig) -> TrainConfig:
    """The run config with ``cfg.init``'s model shape (unchanged without --init). Idempotent.

    UserError when the config sets a shape field to another value than the model's (a field at its
    default counts as not set: a config file dumps every field).
    """
    if not cfg.init:
        return cfg
    want = init_model_config(cfg.init, cfg.model)
    fields = ModelConfig.model_fields
    clash = {k: getattr(cfg.model, k) for k in _SHAPE_FIELDS
             if getattr(cfg.model, k) not in (fields[k].default, getattr(want, k))}
    words = [f"model.{k}={v!r} (the model has {getattr(want, k)!r})" for k, v in clash.items()]
    size = cfg.model.size  # a named size other than the model's own (a recipe's base on a base model agrees)
    hidden, heads = MODEL_SIZES[size]["hidden"], MODEL_SIZES[size]["heads"]
    if size != fields["size"].default and (hidden, heads) != (want.hidden, want.heads):
        clash["size"] = size
        words.append(f"model.size={size!r} (hidden {hidden}, {heads} heads; the model has hidden {want.hidden}, "
                     f"{want.heads} heads)")
    if clash:
        raise UserError(f"--init {cfg.init} fixes the model's shape; drop {'; '.join(words)}"
                        + _recipe_note(cfg, clash, want))
    if cfg.model.sentence_head != "none" and (want.type_vocab_size or 1) < 2:
        raise UserError(f"--init {cfg.init}: model.sentence_head={cfg.model.sentence_head} needs two token types "
                        f"(segment B); this model has {want.type_vocab_size}")
    return cfg.model_copy(update={"model": want})


# ---------------------------------------------------------------- weights

def read_hf_weights(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of the folder: model.safetensors, its sharded index, or pytorch_model.bin (weights_only)."""
    from safetensors.torch import load as load_safetensors

    single, index = join(path, "model.safetensors"), join(path, "model.safetensors.index.json")
    if exists(single):
        return load_safetensors(read_bytes(single))
    if exists(index):
        files = sorted(set(json.loads(read_bytes(index))["weight_map"].values()))
        out: dict[str, torch.Tensor] = {}
        for f in files:
            out.update(load_safetensors(read_bytes(join(path, f))))
        return out
    binary = join(path, "pytorch_model.bin")
    if exists(binary):
        try:
            # weights_only: a .bin is a pickle; only tensors and plain containers are accepted.
            state = torch.load(io.BytesIO(read_bytes(binary)), map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - torch's UnpicklingError and friends: one line
            raise UserError(f"--init {binary}: not a plain weights file ({str(e)[:160]})") from None
        return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    raise UserError(f"--init {path}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")


def _normalize_names(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Older files (BERT's TF port) name LayerNorm parameters gamma / beta: transformers' current names."""
    return {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
            for k, v in tensors.items()}


def _ignored(name: str) -> bool:
    return name.endswith(IGNORED_SUFFIXES) or any(p in name for p in IGNORED_PARTS)


@torch.no_grad()
def load_hf_weights(model: Encoder, tensors: dict[str, torch.Tensor], arch: str, path: str = "") -> None:
    """Copy a Hugging Face state dict into ``model`` through ``trainer.export.hf_tensors`` (reversed).

    Names that map to one tensor of ours (tied decoder and word embedding, the
    two names of the LM-head bias) need one of them in the file, and all of
    those present must agree. UserError on a missing tensor, a shape mismatch
    or a tensor the model has no place for.
    """
    tensors = _normalize_names(tensors)
    mapping = hf_tensors(model, arch)
    own = {p.untyped_storage().data_ptr() for p in model.parameters()}
    groups: dict[tuple, list[str]] = {}
    for name, t in mapping.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride())
        groups.setdefault(key, []).append(name)
    for names in groups.values():
        target = mapping[names[0]]
        present = [n for n in names if n in tensors]
        if not present:
            raise UserError(f"--init {path}: the weights lack {names[0]}")
        src = tensors[present[0]]
        if tuple(src.shape) != tuple(target.shape):
            raise UserError(f"--init {path}: {present[0]} has shape {tuple(src.shape)}, the model built from "
                            f"config.json expects {tuple(target.shape)}")
        for other in present[1:]:
            if not torch.equal(tensors[other], src):
                raise UserError(f"--init {path}: {other} differs from {present[0]}, which this model ties")
        if target.untyped_storage().data_ptr() in own:
            target.copy_(src.to(target.dtype))
        elif not torch.allclose(src.float(), target.float(), atol=1e-6):
            # An entry the model implies rather than holds (ALBERT's E -> H mapping when E = H).
            raise UserError(f"--init {path}: {present[0]} is not what this model implies (ALBERT's "
                            "embedding_hidden_mapping_in must be the identity when embedding_size = hidden_size)")
    unused = sorted(n for n in tensors if n not in mapping and not _ignored(n))
    if unused:
        raise UserError(f"--init {path}: {len(unused)} tensors have no place in the model, e.g. {unused[0]}")


def build_encoder(path: str, vocab_size: int | None = None, pad_id: int | None = None,
                  base: ModelConfig | None = None) -> Encoder:
    """An Encoder with the weights of the folder at ``path`` (vocabulary and pad id from its config.json)."""
    c = read_hf_config(path)
    arch = hf_architecture(c, path)
    cfg = init_model_config(path, base)
    pad = pad_id if pad_id is not None else hf_pad_id(c, arch)
    model = Encoder(cfg, vocab_size or int(c["vocab_size"]), pad_id=pad)
    load_hf_weights(model, read_hf_weights(path), arch, path)
    return model


def check_corpus(path: str, manifest: Manifest, vocab_size: int, what: str = "--init") -> None:
    """UserError unless the corpus was built with this model's tokenizer (vocabulary size and pad id); the
    line names the model as ``what`` PATH."""
    c = read_hf_config(path)
    arch = hf_architecture(c, path)
    n = int(c["vocab_size"])
    hint = f"build the corpus with the model's tokenizer (--tokenizer {join(path, 'tokenizer.json')})"
    if n != vocab_size:
        raise UserError(f"{what} {path}: the model has vocab_size {n}, the corpus's tokenizer {vocab_size}; {hint}")
    pad = hf_pad_id(c, arch)
    corpus_pad = manifest.tokenizer.special_ids.get("<pad>")
    if corpus_pad != pad:
        raise UserError(f"{what} {path}: the model's pad_token_id is {pad}, the corpus's <pad> id {corpus_pad}; {hint}")


# Tokenizer files a model folder may hold: transformers' names, and spm.model (a shardforge export's).
TOKENIZER_FILES = ("tokenizer.json", "spm.model", "spiece.model", "sentencepiece.bpe.model")
TOKENIZER_CHECK_OFF = "--set init_tokenizer_check=false"


def _same_vocabulary(data: bytes, corpus: str) -> bool:
    """Whether the tokenizer file ``data`` gives every id the token the corpus's tokenizer gives it."""
    from schemas.tokenizer_files import load_tokenizer

    try:
        theirs = load_tokenizer(data).pieces()
    except UserError:
        return False
    manifest, root = load_manifest(corpus)
    return theirs == open_tokenizer(manifest, root).pieces()


def check_tokenizer(path: str, manifest: Manifest, corpus: str, what: str = "--init",
                    off: str = TOKENIZER_CHECK_OFF) -> None:
    """UserError (one line, the override named) unless the model at ``path`` was trained with the tokenizer
    of the corpus at ``corpus``: one of its TOKENIZER_FILES is the file the manifest records (sha256), or
    its tokenizer.json gives every id the same token (a converted copy, e.g. an export's).

    Vocabulary size and pad id (``check_corpus``) can match by chance: an ALBERT unigram model and a
    WordPiece corpus of 30,000 ids each would train on ids that mean other words."""
    want = manifest.tokenizer.sha256
    found: dict[str, bytes] = {}
    for name in TOKENIZER_FILES:
        try:
            data = read_bytes(join(path, name))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue
        if sha256_bytes(data) == want:
            return
        found[name] = data
    if "tokenizer.json" in found and _same_vocabulary(found["tokenizer.json"], corpus):
        return
    corpus_tok = f"the corpus's {manifest.tokenizer.path} (sha256 {want[:12]}…)"
    skip = f"; if its ids do mean the corpus tokenizer's tokens, {off} skips this check"
    if not found:
        raise UserError(f"{what} {path}: no tokenizer file ({', '.join(TOKENIZER_FILES)}) to check against "
                        f"{corpus_tok}: put the model's tokenizer.json there{skip}")
    have = ", ".join(f"{n} (sha256 {sha256_bytes(d)[:12]}…)" for n, d in found.items())
    raise UserError(f"{what} {path}: the model was trained with another tokenizer than the corpus: its {have} is "
                    f"not {corpus_tok}, nor the same vocabulary; build the corpus with --tokenizer "
                    f"{join(path, 'tokenizer.json')}{skip}")


def load_init(model: Encoder, cfg: TrainConfig, manifest: Manifest) -> None:
    """The train-loop hook: check the corpus's tokenizer against ``cfg.init`` and load its weights into
    ``model`` (setup checked its vocabulary and pad id, ``check_corpus``, before any work)."""
    if not cfg.init:
        raise ValueError("load_init needs cfg.init")
    if cfg.init_tokenizer_check:
        check_tokenizer(cfg.init, manifest, cfg.data)
    else:
        log.warning("--init %s: init_tokenizer_check=false: not checking that the model's tokenizer is the "
                    "corpus's", cfg.init)
    arch = hf_architecture(read_hf_config(cfg.init), cfg.init)
    load_hf_weights(model, read_hf_weights(cfg.init), arch, cfg.init)
    log.info("initialized from %s (%s)", cfg.init, arch)
