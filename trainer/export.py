"""Export a trained Encoder as a Hugging Face folder.

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

The tokenizer files come from ``trainer.hf_tokenizer``; this module maps the
weights and writes the folder.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch

from schemas import SPECIAL_TOKENS
from schemas.config import ModelConfig, TrainConfig
from shardforge.storage import join, makedirs, read_bytes, write_bytes_atomic, write_text_atomic
from trainer.hf_tokenizer import ALBERT, XLM_ROBERTA, tokenizer_files
from trainer.model import Encoder, ModelDims, resolve_dims

# The architectures a run can be exported as; a run started from a Hugging Face model (--init) keeps that model's.
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


# BERT's names, from RoBERTa's (trainer/hf_init.py loads through the same mapping).
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
        "attention_probs_dropout_prob": dims.attention_dropout,
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
    # A run started from a Hugging Face model records its architecture in the config.
    arch = architecture or (cfg.architecture if cfg.architecture != "auto" else choose_architecture(dims))
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; use one of {', '.join(ARCHITECTURES)}")
    if arch != ALBERT and dims.factorized:
        raise ValueError("a factorized embedding (E != H) can only be exported as ALBERT")
    from trainer.hf_files import check_exportable

    check_exportable(dims, arch)

    tok = tokenizer_files(read_bytes(spm_model_path), arch, dims.max_seq_len, dims.type_vocab_size)
    if tok.vocab_size != dims.vocab_size:
        raise ValueError(f"the tokenizer has {tok.vocab_size} pieces but the model has "
                         f"vocab_size {dims.vocab_size}")

    tensors = hf_tensors(model, arch)
    # Own contiguous fp32 CPU copies: safetensors refuses tensors that share storage (tied weights).
    tensors = {k: v.detach().to("cpu", torch.float32).clone().contiguous() for k, v in tensors.items()}

    makedirs(out_dir)
    write_text_atomic(join(out_dir, "config.json"), json.dumps(hf_config(dims, arch, tok.special_ids), indent=2) + "\n")
    write_bytes_atomic(join(out_dir, "model.safetensors"), save_safetensors(tensors, metadata={"format": "pt"}))
    for name, content in tok.files.items():
        if isinstance(content, bytes):
            write_bytes_atomic(join(out_dir, name), content)
        else:
            write_text_atomic(join(out_dir, name), content)


def checkpoint_config(state: Any, url: str) -> Any:
    """The TrainConfig a loaded checkpoint records, or one line saying why the file is not a checkpoint."""
    from schemas.config import TrainConfig
    from schemas.configfile import parse_config
    from schemas.errors import UserError

    if not isinstance(state, dict) or not isinstance(state.get("config"), dict) or \
            not isinstance(state.get("model"), dict):
        raise UserError(f"{url} is not a shardforge checkpoint: it holds no training config and model")
    if not isinstance(state.get("manifest"), (str, type(None))):
        raise UserError(f"{url} is not a shardforge checkpoint: its tokenizer record is not a sha256")
    return parse_config(TrainConfig, state["config"], what=f"checkpoint {url}: its training config")


def checkpoint_model(state: dict[str, Any], cfg: Any, url: str) -> Encoder:
    """The checkpoint's model, in eval mode. Its shape (the config, vocab_size, pad_id) is checked
    against the tensors the file holds before any memory is allocated for it: a hostile vocab_size
    builds nothing, and tensors that do not fit are one line, not load_state_dict's list."""
    from schemas.errors import UserError

    # An existing model's pad id (BERT: 0) is recorded by runs that know it; 1 otherwise.
    vocab, pad = state.get("vocab_size"), state.get("pad_id", 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (vocab, pad)) or vocab < 1:
        raise UserError(f"{url} is not a shardforge checkpoint: vocab_size {vocab!r} / pad_id {pad!r}")
    held = {k: tuple(v.shape) for k, v in state["model"].items() if isinstance(v, torch.Tensor)}
    with torch.device("meta"):  # shapes only
        wanted = {k: tuple(v.shape) for k, v in Encoder(cfg.model, vocab, pad_id=pad).state_dict().items()}
    if held != wanted or len(held) != len(state["model"]):
        odd = sorted(set(wanted) ^ set(state["model"])) or sorted(k for k in wanted if held.get(k) != wanted[k])
        raise UserError(f"{url}: its tensors are not those of the model its config describes ({len(held)} tensors "
                        f"for {len(wanted)}; first difference: {odd[0]!r}): a corrupt or foreign checkpoint")
    model = Encoder(cfg.model, vocab, pad_id=pad)
    model.load_state_dict(state["model"])
    return model.eval()


def check_export_folder(out_dir: str, overwrite: bool = False) -> None:
    """UserError when ``out_dir`` is a corpus or a training run (a model written among their files, with
    --overwrite too), or, without ``overwrite``, already holds files: an export replaces config, weights,
    tokenizer and card, and --overwrite is offered where the folder is an earlier export."""
    from schemas.errors import UserError
    from shardforge.storage import get_fs, redact_url
    from shardforge.storage.contract import KIND_WORDS, probed_kind

    fs, path = get_fs(out_dir)
    if not fs.exists(path):
        return
    if not fs.isdir(path):
        raise UserError(f"export output {redact_url(out_dir)} is a file: give a folder")
    kind = probed_kind(out_dir)
    if kind in ("corpus", "run"):
        raise UserError(f"export output {redact_url(out_dir)} is {KIND_WORDS[kind]} folder: a model goes into a "
                        "folder of its own; give a new folder")
    if overwrite:
        return
    held = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False))
    if held:
        shown = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
        again = (", or --overwrite to replace the files an export writes (it is an earlier export)" if kind == "model"
                 else "")
        raise UserError(f"export output {redact_url(out_dir)} already holds {shown}: give a new folder{again}")


def no_checkpoint(folder: str) -> str:
    """Why a folder gives export no checkpoint: a corpus, a folder of runs, or a run that saved none yet."""
    from shardforge.storage.contract import folder_kind, kinds_under

    kind = folder_kind(folder)
    if kind == "corpus":
        return (f"{folder} is a corpus, not a training run: give a run folder (the --output of a run trained on "
                "it) or its checkpoint file (checkpoints/ckpt-NNNNNNNN.pt)")
    if kind == "run":
        return f"no checkpoint in {folder} yet: the run has saved none (`shardforge status {folder}` says where it stands)"
    if kind == "model":
        return (f"{folder} is a Hugging Face model folder already: export makes one from a training run (its folder, "
                "the --output of a run, or a checkpoint file)")
    return f"no checkpoint found in {folder}: give a run folder (the --output of a run){kinds_under(folder)}"


def checkpoint_file(url: str, other: str | None = None) -> str:
    """The checkpoint ``url`` names: a checkpoint file, or a run folder's newest; else one line saying what
    to give (a run folder or its checkpoint file, or ``other``)."""
    from schemas.errors import UserError
    from shardforge.storage import exists
    from trainer.checkpoint import latest_checkpoint

    files = "its checkpoint file (checkpoints/ckpt-NNNNNNNN.pt)"
    give = f"a run folder (the --output of a run), {files} or {other}" if other else \
        f"a run folder (the --output of a run) or {files}"
    if not url.endswith(".pt") and not exists(url):
        raise UserError(f"{url} does not exist: give {give}")
    try:
        found = url if url.endswith(".pt") else latest_checkpoint(url)
    except NotADirectoryError:
        raise UserError(f"{url} is a file but not a checkpoint: give {give}") from None
    if found is None:
        raise UserError(no_checkpoint(url))
    return found


def export_checkpoint(ckpt: str, out_dir: str, tokenizer: str | None = None, license_id: str | None = None,
                      language: list[str] | None = None, overwrite: bool = True) -> str:
    """Export a training checkpoint (file, or run folder: its latest) to a Hugging Face folder (the model
    card's license and language: trainer/model_card.py's defaults unless given). Without ``overwrite``, an
    output folder that holds files is refused (the command line's default). Returns the folder."""
    return export_with_summary(ckpt, out_dir, tokenizer, license_id, language, overwrite)[0]


def export_with_summary(ckpt: str, out_dir: str, tokenizer: str | None = None, license_id: str | None = None,
                        language: list[str] | None = None, overwrite: bool = True) -> tuple[str, list[str]]:
    """export_checkpoint, and the lines the command prints when it is done (export_summary)."""
    from schemas.errors import UserError
    from shardforge.storage import AccessDenied, exists, local_copy
    from shardforge.storage.contract import load_manifest, probed_kind, tokenizer_url
    from trainer.checkpoint import load_checkpoint

    check_export_folder(out_dir, overwrite)
    url = checkpoint_file(ckpt)
    state = load_checkpoint(url)
    cfg = checkpoint_config(state, url)
    if tokenizer is None:
        if "://" not in cfg.data and not os.path.isabs(cfg.data) and not exists(cfg.data):
            # Runs before corpus paths were stored absolute recorded them relative to where they started.
            raise UserError(f"this checkpoint records its corpus as the relative path {cfg.data!r}, which is not "
                            f"under the current directory; run export from the directory the run was started in, "
                            f"or pass --tokenizer URL (the corpus's tokenizer)")
        try:
            manifest, root = load_manifest(cfg.data)
        except AccessDenied as e:  # checkpoints keep no credentials (shardforge.storage.redact_urls)
            raise UserError(f"{e}. A checkpoint records its corpus without credentials: pass --tokenizer URL "
                            "(the corpus's tokenizer file, with the credentials in its URL)") from None
        except UserError as e:  # moved, deleted, out of reach from this machine
            raise UserError(f"{e}; that is the corpus this checkpoint trained on, whose tokenizer an export writes "
                            "beside the model: pass --tokenizer URL (its tokenizer file, or a copy of the "
                            "corpus)") from None
        tokenizer = tokenizer_url(manifest, root)  # the path rule: always inside the corpus
    elif probed_kind(tokenizer) == "corpus":  # a corpus: the tokenizer it was built with
        manifest, root = load_manifest(tokenizer)
        tokenizer = tokenizer_url(manifest, root)
    from shardforge.storage import exists, get_fs, read_bytes, sha256_bytes

    if not exists(tokenizer):
        raise UserError(f"tokenizer not found: {tokenizer}")
    fs, tok_path = get_fs(tokenizer)
    if fs.isdir(tok_path):
        raise UserError(f"tokenizer {tokenizer} is a folder: give the tokenizer file itself "
                        "(the corpus's spm.model or tokenizer.json), or the corpus")
    trained_with = state.get("manifest")  # the sha256 of the tokenizer the run trained with
    if trained_with and sha256_bytes(read_bytes(tokenizer)) != trained_with:
        raise UserError(f"tokenizer {tokenizer} is not the one this checkpoint was trained with "
                        f"(sha256 {trained_with[:12]}…); pass the right one with --tokenizer")
    model = checkpoint_model(state, cfg, url)
    with local_copy(tokenizer) as spm_path:
        export_hf(model, cfg.model, spm_path, out_dir)
    from trainer.model_card import write_model_card  # README.md, the model card

    arch = cfg.model.architecture if cfg.model.architecture != "auto" else choose_architecture(model.dims)
    write_model_card(out_dir, cfg, state, url, arch, license_id, language)
    return out_dir, export_summary(out_dir, url, int(state.get("step", 0)), cfg)


def export_summary(out_dir: str, checkpoint: str, step: int, cfg: TrainConfig) -> list[str]:
    """What an export wrote, read back from the folder: its class and shape (config.json), its files, the
    heads left out, and how to load it (and evaluate it on the corpus the run trained on)."""
    from shardforge.console.words import counted
    from shardforge.storage import get_fs, redact_url
    from trainer.model_card import left_out_heads

    hf = json.loads(read_bytes(join(out_dir, "config.json")))
    fs, path = get_fs(out_dir)
    files = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False))
    weights = sum(fs.size(f"{path}/{name}") for name in files if name.endswith(".safetensors"))
    tokenizer = [name for name in ("spm.model", "tokenizer.json", "vocab.json", "merges.txt") if name in files]
    left = " and ".join(left_out_heads(cfg))
    shown = redact_url(out_dir)
    # transformers loads a local folder (or a Hub id); a bucket's folder is copied down first.
    load = f"AutoModelForMaskedLM.from_pretrained({shown!r})" if "://" not in out_dir else \
        "AutoModelForMaskedLM.from_pretrained(FOLDER) on a local copy of it"
    return [
        f"exported step {step:,} of {redact_url(checkpoint)} to {shown}",
        f"  model      {hf['architectures'][0]}: {counted(hf['num_hidden_layers'], 'layer')}, hidden {hf['hidden_size']}, "
        f"vocab {hf['vocab_size']:,}; weights {weights / 2**20:,.1f} MiB (model.safetensors)"
        + (f"; left out: {left} (pretraining only)" if left else ""),
        f"  tokenizer  {' + '.join(tokenizer)}",
        f"  card       {join(shown, 'README.md')}",
        f"  load it    {load}; shardforge evaluate {shown} --data "
        f"{redact_url(cfg.data)}",
    ]


def main(argv: list[str] | None = None) -> int:
    from shardforge.console.redact import redact_text
    from trainer.args import parse_export_args

    args = parse_export_args(argv)
    for line in export_with_summary(args.checkpoint, args.out, args.tokenizer, args.license, args.language,
                                    overwrite=args.overwrite)[1]:
        print(redact_text(line))
    return 0


if __name__ == "__main__":
    from shardforge.console.run import run_cli

    sys.exit(run_cli(lambda: main(sys.argv[1:]), sys.argv[1:]))
