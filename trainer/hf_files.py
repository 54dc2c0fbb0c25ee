"""What a Hugging Face export of a continued-pretraining run holds besides its weights.

``trainer.export`` writes the weights through ``hf_tensors``; this module adds
the two things an existing model's architecture and tokenizer need: the check
that the model's activations can be expressed by the chosen class, and the
tokenizer files of an ``hf_json`` corpus (the model's own ``tokenizer.json``, as the
build encoded with it, with a ``tokenizer_config.json`` naming its special tokens and inputs).
Kept apart from ``trainer.hf_init`` (which imports the export's mapping) so
that the export never imports the importer.
"""

from __future__ import annotations

import json
from typing import Any

from trainer.model import ModelDims

# The classes whose LM head applies exact (erf) GELU whatever the config's hidden_act says.
_ERF_HEAD = ("roberta", "xlm-roberta")


def check_exportable(dims: ModelDims, arch: str) -> None:
    """ValueError where transformers' class for `arch` would compute another function than this model.

    RoBERTa's LM head always uses exact GELU (``modeling_roberta``: ``gelu(x)``);
    BERT's and ALBERT's apply the config's ``hidden_act`` in the head too.
    """
    if arch in _ERF_HEAD and dims.lm_head_act != "gelu":
        raise ValueError(f"a {arch} export has an exact-GELU LM head; this model's is {dims.lm_head_act}")
    if arch not in _ERF_HEAD and dims.lm_head_act != dims.hidden_act:
        raise ValueError(f"a {arch} export applies hidden_act={dims.hidden_act} in the LM head too; "
                         f"this model's head uses {dims.lm_head_act}")


def tokenizer_config(max_len: int, specials: dict[str, Any], token_types: bool) -> dict[str, Any]:
    """The tokenizer_config.json fields every export writes (then a kind's own ones).

    ``split_special_tokens`` false: a special token's exact string in the input is that token, as
    transformers' tokenizers and the fill-mask pipeline expect (the build encoded it as text;
    ``split_special_tokens=True`` gives the shards' ids). ``model_input_names`` lists
    ``token_type_ids`` where the model takes segment ids (``token_types``), so ``tok(a, b)`` gives
    segment B its type as pretraining did.
    """
    names = ["input_ids", "token_type_ids", "attention_mask"] if token_types else ["input_ids", "attention_mask"]
    return {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len,
            "clean_up_tokenization_spaces": False, "split_special_tokens": False, "model_input_names": names,
            **specials}


def hf_json_tokenizer_files(data: bytes, max_len: int, token_types: bool) -> dict[str, str]:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json for an hf_json tokenizer.

    The special tokens are named by role as transformers' fast tokenizers expect
    (cls/sep/pad/mask/unk, plus bos/eos for RoBERTa-style ``<s>``/``</s>``), so
    ``AutoTokenizer`` gives the model's own ids and its pair template. The tokenizer.json is the
    given one as the build encoded the corpus with it (``schemas.tokenizer_files.text_only_spec``:
    the same ids, but a special token's string written in text stays text when transformers splits
    special tokens). ``split_special_tokens`` is false, as in the model's own Hugging Face
    tokenizer: a special token's exact string in the input is that token (``[MASK]`` for the
    fill-mask pipeline); ``split_special_tokens=True`` encodes a document as the shards hold it
    (docs/tokenizer.md).

    The export sees the model's tokenizer.json only (the corpus's copy), not the rest of its folder,
    so what the model's tokenizer_config.json would add comes from the model and that file:
    ``model_input_names`` lists ``token_type_ids`` where the model takes segment ids
    (``token_types``: BERT and ALBERT), and ``do_lower_case`` is written where the normalizer says
    whether it lowercases. The class stays the generic ``PreTrainedTokenizerFast``, which follows
    tokenizer.json as written (a model-specific class of transformers 5 rebuilds parts of the pipeline).
    """
    from schemas.tokenizer_files import load_tokenizer, text_only_spec

    roles = load_tokenizer(data).special_tokens
    specials: dict[str, Any] = {"cls_token": roles["<s>"], "sep_token": roles["</s>"],
                                "pad_token": roles["<pad>"], "mask_token": roles["<mask>"]}
    if "<unk>" in roles:
        specials["unk_token"] = roles["<unk>"]
    if roles["<s>"] == "<s>":  # RoBERTa / XLM-R also name them bos / eos
        specials.update(bos_token=roles["<s>"], eos_token=roles["</s>"])
    source = json.loads(data)
    tok_cfg = tokenizer_config(max_len, specials, token_types)
    lower = lowercases(source.get("normalizer"))
    if lower is not None:
        tok_cfg["do_lower_case"] = lower
    spec = text_only_spec(source, roles.values())
    return {"tokenizer.json": json.dumps(spec, ensure_ascii=False, indent=2),
            "tokenizer_config.json": json.dumps(tok_cfg, indent=2) + "\n",
            "special_tokens_map.json": json.dumps(specials, indent=2) + "\n"}


def lowercases(normalizer: dict[str, Any] | None) -> bool | None:
    """Whether a tokenizer.json normalizer lowercases: a ``BertNormalizer``'s ``lowercase`` or a ``Lowercase``
    step (in a ``Sequence`` too); None when it has neither (nothing to say)."""
    if not isinstance(normalizer, dict):
        return None
    kind = normalizer.get("type")
    if kind == "Lowercase":
        return True
    if kind == "BertNormalizer":
        return bool(normalizer.get("lowercase", True))
    if kind == "Sequence":
        found = [lowercases(n) for n in normalizer.get("normalizers") or []]
        found = [f for f in found if f is not None]
        return any(found) if found else None
    return None
