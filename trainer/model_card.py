"""The model card (README.md) of an exported run.

What a reader of the Hugging Face folder needs to know where the weights came
from: the model it started from (``--init``) and the class it is exported as,
the corpus (manifest URL, version, tokenizer kind and sha256, packing rule,
tokens per split), the run's config, the steps trained, the tokens seen and
the last evaluation loss. Tokens and eval loss come from the run's
``metrics.jsonl`` (the last record of each step, so steps a resumed run
repeated count once); absent values are written as "not recorded".
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from schemas.config import TrainConfig
from shardforge.storage import join, read_text, redact_url, write_text_atomic
from trainer.loggers import METRICS_FILE

# Our architecture names (trainer.export) -> the transformers class the folder loads as.
CLASS_NAMES = {"roberta": "RobertaForMaskedLM", "xlm-roberta": "XLMRobertaForMaskedLM", "bert": "BertForMaskedLM",
               "albert": "AlbertForMaskedLM"}


def run_folder_of(checkpoint_url: str) -> str:
    """run/checkpoints/ckpt-N.pt -> run."""
    return posixpath.dirname(posixpath.dirname(checkpoint_url.rstrip("/")))


def read_metrics(run: str, last_step: int) -> dict[str, Any]:
    """{"tokens_seen": int | None, "eval_loss": float | None, "eval_step": int | None} from metrics.jsonl."""
    try:
        text = read_text(join(run, METRICS_FILE))
    except (FileNotFoundError, OSError):
        return {"tokens_seen": None, "eval_loss": None, "eval_step": None}
    by_step: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn last line of a killed run
        step = rec.get("step")
        if isinstance(step, int) and step <= last_step:
            by_step[step] = rec  # a resumed run's repeat of a step replaces the first
    tokens = 0.0
    eval_loss = eval_step = None
    for step in sorted(by_step):
        rec = by_step[step]
        if "tokens" in rec:
            tokens += float(rec["tokens"])
        elif "tokens_per_s" in rec and "step_time" in rec:
            tokens += float(rec["tokens_per_s"]) * float(rec["step_time"])
        if "eval_loss" in rec:
            eval_loss, eval_step = float(rec["eval_loss"]), step
    return {"tokens_seen": round(tokens) if by_step else None, "eval_loss": eval_loss, "eval_step": eval_step}


def model_card(cfg: TrainConfig, state: dict[str, Any], run: str, architecture: str,
               manifest: dict[str, Any] | None) -> str:
    """README.md text of an export (pure: everything it says is passed in)."""
    step = int(state.get("step", 0))
    m = read_metrics(run, step)
    cls = CLASS_NAMES.get(architecture, architecture)
    lines = ["---", "library_name: transformers", "tags: [fill-mask, shardforge]", "---", "",
             f"# {cls} continued with shardforge" if cfg.init else f"# {cls} trained with shardforge",
             "", "## Run", "",
             f"- started from: {redact_url(cfg.init) if cfg.init else 'random initialization'}",
             f"- exported as: {cls}",
             f"- steps: {step}",
             f"- tokens seen: {m['tokens_seen'] if m['tokens_seen'] is not None else 'not recorded'}",
             "- final eval loss: " + (f"{m['eval_loss']:.4f} (step {m['eval_step']})" if m["eval_loss"] is not None
                                      else "not recorded (eval_every was 0)"),
             "", "## Data", "",
             f"- corpus: {redact_url(cfg.data)}"]
    if manifest:
        tok = manifest.get("tokenizer", {})
        lines += [f"- manifest version: {manifest.get('version')}",
                  f"- packing rule: {manifest.get('packing_rule')}, max_seq_len {manifest.get('max_seq_len')}",
                  f"- tokenizer: {tok.get('kind')} ({tok.get('model_type')}), vocab {tok.get('vocab_size')}, "
                  f"sha256 {tok.get('sha256')}",
                  f"- special ids: {json.dumps(tok.get('special_ids'), sort_keys=True)}"]
        for split, t in sorted((manifest.get("totals") or {}).items()):
            lines.append(f"- {split}: {t.get('samples')} sequences, {t.get('tokens')} tokens, {t.get('shards')} shards")
    config = cfg.model_dump(mode="json")
    config["data"] = redact_url(config["data"])
    config["output"] = redact_url(config["output"])
    if config.get("init"):
        config["init"] = redact_url(config["init"])
    lines += ["", "## Recipe (train config)", "", "```json", json.dumps(config, indent=1, sort_keys=True), "```", ""]
    return "\n".join(lines)


def write_model_card(out_dir: str, cfg: TrainConfig, state: dict[str, Any], checkpoint_url: str,
                     arch: str) -> None:
    """Write README.md into the export folder; the corpus manifest is read when it is still reachable."""
    from schemas.errors import UserError
    from shardforge.storage.contract import load_manifest

    try:
        manifest = load_manifest(cfg.data)[0].model_dump(mode="json")
    except (UserError, OSError):
        manifest = None  # the card says what the checkpoint knows
    write_text_atomic(join(out_dir, "README.md"), model_card(cfg, state, run_folder_of(checkpoint_url), arch, manifest))
