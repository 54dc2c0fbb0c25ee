"""What a Hugging Face export of a continued-pretraining run holds besides its weights.

``trainer.export`` writes the weights through ``hf_tensors``; this module adds
the two things an existing model's architecture and tokenizer need: the check
that the model's activations can be expressed by the chosen class, and the
tokenizer files of an ``hf_json`` corpus (the model's own ``tokenizer.json``, as the
build encoded with it, with a ``tokenizer_config.json`` naming its special tokens).
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


def hf_json_tokenizer_files(data: bytes, max_len: int) -> dict[str, str]:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json for an hf_json tokenizer.

    The special tokens are named by role as transformers' fast tokenizers expect
    (cls/sep/pad/mask/unk, plus bos/eos for RoBERTa-style ``<s>``/``</s>``), so
    ``AutoTokenizer`` gives the model's own ids and its pair template. The tokenizer.json is the
    given one as the build encoded the corpus with it (``schemas.tokenizer_files.text_only_spec``:
    the same ids, but a special token's string written in text stays text), and
    ``split_special_tokens`` is on, so that a document encodes to the shards' ids; a caller places a
    special token by its text with ``split_special_tokens=False`` (docs/tokenizer.md).
    """
    from schemas.tokenizer_files import load_tokenizer, text_only_spec

    roles = load_tokenizer(data).special_tokens
    specials: dict[str, Any] = {"cls_token": roles["<s>"], "sep_token": roles["</s>"],
                                "pad_token": roles["<pad>"], "mask_token": roles["<mask>"]}
    if "<unk>" in roles:
        specials["unk_token"] = roles["<unk>"]
    if roles["<s>"] == "<s>":  # RoBERTa / XLM-R also name them bos / eos
        specials.update(bos_token=roles["<s>"], eos_token=roles["</s>"])
    tok_cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len,
               "clean_up_tokenization_spaces": False, "split_special_tokens": True, **specials}
    spec = text_only_spec(json.loads(data), roles.values())
    return {"tokenizer.json": json.dumps(spec, ensure_ascii=False, indent=2),
            "tokenizer_config.json": json.dumps(tok_cfg, indent=2) + "\n",
            "special_tokens_map.json": json.dumps(specials, indent=2) + "\n"}
