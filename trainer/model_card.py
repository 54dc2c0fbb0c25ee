"""The model card (README.md) of an exported run.

What a reader of the Hugging Face folder needs: the Hub's metadata (``library_name``,
``pipeline_tag: fill-mask``, ``language``, ``license``), where the weights came from
(the model it started from with ``--init``, the class it is exported as), what the run
did (steps of the planned steps, tokens seen, the last evaluation and what its loss
measures: the MLM cross-entropy in nats at the evaluation's masking rate, or why there
is none), how to use it (a plain fill-mask snippet, and how to encode documents as the corpus did),
the corpus (version, tokenizer kind and sha256, packing rule, tokens per split) and
the run's config. Tokens and eval loss come from the run's ``metrics.jsonl`` (the last
record of each step, so steps a resumed run repeated count once); absent values are
written as "not recorded", with the reason when the config or corpus tells it.

The card names no folder of the training machine: a local corpus, ``--init`` model or
run folder is given by its name (``corpus``, not ``/home/me/data/corpus``); remote
URLs are given without credentials.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from schemas.config import MaskingConfig, TrainConfig
from shardforge.console.words import counted, every, number
from shardforge.storage import join, redact_url, write_text_atomic
from trainer.run_folder import read_records

# Our architecture names (trainer.export) -> the transformers class the folder loads as.
CLASS_NAMES = {"roberta": "RobertaForMaskedLM", "xlm-roberta": "XLMRobertaForMaskedLM", "bert": "BertForMaskedLM",
               "albert": "AlbertForMaskedLM"}
# The license a card states unless the export is told one: the weights' terms follow from the corpus's
# and the --init model's, which shardforge does not know.
DEFAULT_LICENSE = "other"

USAGE = '''```python
from transformers import AutoTokenizer, pipeline

fill = pipeline("fill-mask", model="PATH_OR_HUB_ID")
print(fill(f"The capital of France is {fill.tokenizer.mask_token}."))

# The tokenizer reads a special token's exact string in its input (the mask token's, the start and
# separator tokens') as that token (split_special_tokens: false). The training corpus encoded such a
# string written in a document as plain text; to encode documents exactly as pretraining saw them:
tok = AutoTokenizer.from_pretrained("PATH_OR_HUB_ID", split_special_tokens=True)
```'''


def run_folder_of(checkpoint_url: str) -> str:
    """run/checkpoints/ckpt-N.pt -> run."""
    return posixpath.dirname(posixpath.dirname(checkpoint_url.rstrip("/")))


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def public_location(url: str) -> str:
    """A corpus, model or run folder as a card may name it: a local one by its name, a remote URL without
    credentials (gs://bucket/corpus stays; /home/me/data/corpus is "corpus")."""
    if not is_local(url):
        return redact_url(url)
    path = url.removeprefix("file://").rstrip("/")
    if posixpath.basename(path) == "manifest.json":
        path = posixpath.dirname(path)
    return posixpath.basename(path) or "."


def public_config(config: Any) -> Any:
    """The config as the card prints it: every local path by its name, every URL without credentials."""
    if isinstance(config, dict):
        return {k: public_config(v) for k, v in config.items()}
    if isinstance(config, list):
        return [public_config(v) for v in config]
    if isinstance(config, str) and ("://" in config or config.startswith(("/", "~", "."))):
        return public_location(config)
    return config


def last_records(run: str, last_step: int) -> dict[int, dict[str, Any]] | None:
    """step -> the last record of that step up to last_step from metrics.jsonl (None: no readable file)."""
    try:
        rows, _ = read_records(run)  # a torn last line of a killed run is skipped
    except (FileNotFoundError, OSError):
        return None
    # a resumed run's repeat of a step replaces the first
    return {rec["step"]: rec for rec in rows if rec["step"] <= last_step}


def read_metrics(run: str, last_step: int) -> dict[str, Any]:
    """{"tokens_seen", "eval_loss", "eval_step", "found"} from metrics.jsonl (found: the file was readable)."""
    by_step = last_records(run, last_step)
    if by_step is None:
        return {"tokens_seen": None, "eval_loss": None, "eval_step": None, "eval_tokens": None, "found": False}
    tokens = 0.0
    eval_loss = eval_step = eval_tokens = None
    for step in sorted(by_step):
        rec = by_step[step]
        if "tokens" in rec:
            tokens += float(rec["tokens"])
        elif "tokens_per_s" in rec and "step_time" in rec:
            tokens += float(rec["tokens_per_s"]) * float(rec["step_time"])
        if "eval_loss" in rec:
            eval_loss, eval_step = float(rec["eval_loss"]), step
            eval_tokens = rec.get("eval_mlm_tokens")
    return {"tokens_seen": round(tokens) if by_step else None, "eval_loss": eval_loss, "eval_step": eval_step,
            "eval_tokens": eval_tokens, "found": True}


def masking_phrase(m: MaskingConfig) -> str:
    return f"{100 * m.rate:g}% of tokens masked ({m.scheme} masking, {100 * m.mask_prob:g}% <mask> / " \
           f"{100 * m.random_prob:g}% random / the rest kept)"


def eval_lines(cfg: TrainConfig, step: int, m: dict[str, Any], has_valid: bool | None) -> list[str]:
    """The card's evaluation: the loss and what it measures, or why there is none."""
    if m["eval_loss"] is not None:
        masking = cfg.eval_masking or cfg.masking
        over = (f", over {counted(m['eval_tokens'], 'predicted token')}"
                if isinstance(m.get("eval_tokens"), (int, float)) else "")
        return [f"- final eval loss: {m['eval_loss']:.4f} (step {m['eval_step']}{over})",
                f"- eval loss is the MLM cross-entropy in nats, averaged over the predicted tokens of the first "
                f"{counted(cfg.eval_batches, 'batch', 'batches')} of the corpus's valid split (the whole split, where it holds fewer), "
                "at the evaluation masking rate: "
                f"{masking_phrase(masking)}; perplexity is its exp"]
    if not m["found"]:
        why = "the run folder's metrics.jsonl was not found"
    elif not cfg.eval_batches:
        why = "evaluation was off: eval_batches=0"
    elif has_valid is False:
        why = "the corpus has no valid split"
    elif step < cfg.steps and (not cfg.eval_every or step < cfg.eval_every):
        often = f"{every(cfg.eval_every)} and " if cfg.eval_every else ""
        why = f"the run stopped at step {step} of {cfg.steps}; it evaluates {often}at its last step"
    else:
        why = "no evaluation in the run's metrics"
    return [f"- final eval loss: not recorded ({why})"]


def languages(manifest: dict[str, Any] | None) -> list[str]:
    """The languages the corpus's build kept when its language rule was on (clean.languages), else none."""
    clean = ((manifest or {}).get("config") or {}).get("clean") or {}
    langs = clean.get("languages")
    if clean.get("english_only", True) and isinstance(langs, list) and all(isinstance(x, str) for x in langs):
        return list(langs)
    return []


def front_matter(manifest: dict[str, Any] | None, license_id: str | None, language: list[str] | None) -> list[str]:
    """The Hub's YAML metadata block."""
    langs = language or languages(manifest)
    lines = ["---", "library_name: transformers", "pipeline_tag: fill-mask", f"license: {license_id or DEFAULT_LICENSE}"]
    if langs:
        lines.append(f"language: [{', '.join(json.dumps(x) for x in langs)}]")
    return [*lines, "tags: [fill-mask, shardforge]", "---"]


def data_lines(cfg: TrainConfig, manifest: dict[str, Any] | None) -> list[str]:
    lines = [f"- corpus: {public_location(cfg.data)}"]
    lines += [f"- mixed with: {public_location(s.data)}" for s in cfg.mix if s.data != cfg.data]
    if manifest:
        tok = manifest.get("tokenizer", {})
        lines += [f"- manifest version: {manifest.get('version')}",
                  f"- packing rule: {manifest.get('packing_rule')}, max_seq_len {manifest.get('max_seq_len')}",
                  f"- tokenizer: {tok.get('kind')} ({tok.get('model_type')}), vocab {tok.get('vocab_size')}, "
                  f"sha256 {tok.get('sha256')}",
                  f"- special ids: {json.dumps(tok.get('special_ids'), sort_keys=True)}"]
        for split, t in sorted((manifest.get("totals") or {}).items()):
            lines.append(f"- {split}: {counted(t.get('samples'), 'sequence')}, {number(t.get('tokens'))} tokens, "
                         f"{counted(t.get('shards'), 'shard')}")
    return lines


def left_out_heads(cfg: TrainConfig) -> list[str]:
    """The pretraining-only heads the run trained and the export leaves out (a masked-LM class has none)."""
    return ([f"the {cfg.model.sentence_head.upper()} head and its pooler"] if cfg.model.sentence_head != "none"
            else []) + (["the span boundary (SBO) head"] if cfg.model.span_boundary else [])


def left_out_lines(cfg: TrainConfig) -> list[str]:
    """The model card's line naming the heads the export leaves out (none where the run trained none)."""
    heads = left_out_heads(cfg)
    if not heads:
        return []
    return [f"- left out: {' and '.join(heads)}, trained for pretraining only (the masked-LM class has no place "
            "for them; a fine-tuned classifier starts its own head)"]


def model_card(cfg: TrainConfig, state: dict[str, Any], run: str, architecture: str,
               manifest: dict[str, Any] | None, license_id: str | None = None, language: list[str] | None = None) -> str:
    """README.md text of an export: what it says is passed in, but for the run's metrics.jsonl (read once)."""
    step = int(state.get("step", 0))
    m = read_metrics(run, step)
    has_valid = None if not manifest else any(
        isinstance(s, dict) and s.get("split") == "valid" for s in manifest.get("shards") or [])
    cls = CLASS_NAMES.get(architecture, architecture)
    planned = f" of {cfg.steps} planned (stopped early; a rerun into its run folder continues it)" \
        if step < cfg.steps else ""
    lines = [*front_matter(manifest, license_id, language), "",
             f"# {cls} continued with shardforge" if cfg.init else f"# {cls} trained with shardforge",
             "", "A masked language model (an encoder with its MLM head) pretrained with shardforge.",
             "", "## Use it", "", USAGE,
             "", "## Run", "",
             f"- started from: {public_location(cfg.init) if cfg.init else 'random initialization'}",
             f"- exported as: {cls}",
             *left_out_lines(cfg),
             f"- steps: {step}{planned}",
             f"- tokens seen: {number(m['tokens_seen']) if m['tokens_seen'] is not None else 'not recorded'}",
             f"- training masking: {masking_phrase(cfg.masking)}",
             *eval_lines(cfg, step, m, has_valid),
             "", "## Data", "", *data_lines(cfg, manifest)]
    config = public_config(cfg.model_dump(mode="json"))
    lines += ["", "## Recipe (train config)", "", "Local paths are given by their folder's name.", "",
              "```json", json.dumps(config, indent=1, sort_keys=True), "```", ""]
    return "\n".join(lines)


def write_model_card(out_dir: str, cfg: TrainConfig, state: dict[str, Any], checkpoint_url: str,
                     arch: str, license_id: str | None = None, language: list[str] | None = None) -> None:
    """Write README.md into the export folder; the corpus manifest is read when it is still reachable."""
    from schemas.errors import UserError
    from shardforge.storage.contract import load_manifest

    try:
        manifest = load_manifest(cfg.data)[0].model_dump(mode="json")
    except (UserError, OSError):
        manifest = None  # the card says what the checkpoint knows
    write_text_atomic(join(out_dir, "README.md"), model_card(cfg, state, run_folder_of(checkpoint_url), arch, manifest,
                                                             license_id, language))
