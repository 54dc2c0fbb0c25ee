"""The trainer as a newcomer meets it: --help and its flags, what a run says at start and as it goes,
the evaluation at the end, the model card of its export and the plot of its metrics."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.config import TrainConfig
from schemas.errors import UserError
from schemas.manifest import valid_fraction_for_empty

REPO = Path(__file__).resolve().parent.parent


def parse(*argv: str):
    from trainer.args import parse_train_args

    return parse_train_args(list(argv))


def resolved(*argv: str) -> TrainConfig:
    from trainer.train import build_train_config

    args = parse(*argv)
    return build_train_config(args, args.set, require_data=False)


# ------------------------------------------------------------------ flags


def test_run_mlm_flags_set_their_config_keys_and_set_still_wins() -> None:
    cfg = resolved("--learning_rate", "1e-4", "--warmup_steps", "50", "--lr_scheduler_type", "cosine",
                   "--mlm_probability", "0.3", "--gradient_accumulation_steps", "4", "--eval_steps", "200",
                   "--save_steps", "500", "--save_total_limit", "2", "--logging_steps", "5", "--precision", "bf16",
                   "--seed", "7", "--max_steps", "900", "--no-resume", "--masking", "span", "--model_size", "small",
                   "--optim", "lamb", "--weight_decay", "0.02")
    assert (cfg.optim.lr, cfg.optim.warmup_steps, cfg.optim.schedule, cfg.optim.name) == (1e-4, 50, "cosine", "lamb")
    assert (cfg.masking.rate, cfg.masking.scheme, cfg.model.size, cfg.optim.weight_decay) == (0.3, "span", "small", 0.02)
    assert (cfg.gradient_accumulation, cfg.eval_every, cfg.checkpoint_every, cfg.keep_last) == (4, 200, 500, 2)
    assert (cfg.log_every, cfg.precision, cfg.seed, cfg.steps, cfg.resume) == (5, "bf16", 7, 900, False)
    # Later wins: a recipe, then the flags, then --set.
    cfg = resolved("--recipe", "cpu", "--lr", "1e-3", "--set", "optim.lr=3e-3", "--mask_rate", "0.2")
    assert cfg.optim.lr == 3e-3 and cfg.masking.rate == 0.2 and cfg.model.hidden == 128
    assert resolved("--recipe", "cpu").optim.lr == 2e-3  # an unset flag leaves the recipe's value
    assert resolved("--max_tokens", "1000000").max_tokens == 1_000_000
    # a large count as people write it (and as the run's own lines print it)
    for written in ("2e9", "2B", "2_000_000_000", "2,000,000,000", "2000M", "2g"):
        assert resolved("--max_tokens", written).max_tokens == 2_000_000_000, written
    assert resolved("--max_tokens", "1.5M").max_tokens == 1_500_000
    # Hugging Face's names of the same choices
    assert resolved("--optim", "adamw_torch", "--recipe", "albert-base").optim.name == "adamw"
    assert resolved("--optim", "adamw_torch_fused").optim.name == "adamw"
    assert resolved("--lr_scheduler_type", "constant_with_warmup").optim.schedule == "constant"
    with pytest.raises(SystemExit):
        parse("--optim", "adafactor")  # no such optimizer here: argparse's line names the choices


def test_every_recipe_checkpoints_before_its_last_step() -> None:
    """A paper's recipe (500k steps, days of GPU time) kept its one checkpoint, and its one evaluation, for the
    last step: one crash lost the whole run, and no valid loss showed before the end. Every recipe, and a run
    with no recipe, now checkpoints and evaluates along the way."""
    from trainer.recipes import recipe_names

    for name in recipe_names():
        cfg = resolved("--recipe", name)
        assert 0 < cfg.checkpoint_every < cfg.steps, (name, cfg.checkpoint_every, cfg.steps)
        assert 0 < cfg.eval_every < cfg.steps, (name, cfg.eval_every, cfg.steps)  # its valid curve as it goes
    no_recipe = resolved("--steps", "5000")  # the config's defaults
    assert (no_recipe.checkpoint_every, no_recipe.eval_every) == (1000, 1000)


def test_resume_from_checkpoint_continues_a_run_under_run_mlms_name(tmp_path) -> None:
    run = tmp_path / "r1"
    (run / "checkpoints").mkdir(parents=True)
    for step in (10, 20):
        (run / "checkpoints" / f"ckpt-{step:08d}.pt").write_bytes(b"")
    for given in (run, run / "checkpoints", run / "checkpoints" / "ckpt-00000020.pt"):
        cfg = resolved("--resume_from_checkpoint", str(given), "--no-resume")
        assert (cfg.output, cfg.resume) == (str(run), True), given
    assert resolved("--resume_from_checkpoint", str(run), "--output", str(run)).output == str(run)
    with pytest.raises(UserError, match=r"resumes from the newest checkpoint .*\(ckpt-00000020\.pt\)"):
        resolved("--resume_from_checkpoint", str(run / "checkpoints" / "ckpt-00000010.pt"))
    with pytest.raises(UserError, match="but --output is"):
        resolved("--resume_from_checkpoint", str(run), "--output", str(tmp_path / "other"))
    # a mistyped path, or a folder with nothing to resume, does not start a run over
    (tmp_path / "empty").mkdir()
    for nothing in (tmp_path / "r2", tmp_path / "empty"):
        with pytest.raises(UserError, match=rf"--resume_from_checkpoint {nothing}: no checkpoint in "
                                            rf"{nothing}/checkpoints to resume from \(to start a new run there, "
                                            r"give --output\)"):
            resolved("--resume_from_checkpoint", str(nothing))


def test_a_train_config_key_spelled_wrong_is_answered_like_a_flag(tmp_path) -> None:
    from schemas.errors import UserError

    cfg = tmp_path / "train.yaml"
    cfg.write_text("optim:\n  lrr: 0.001\nstepz: 10\n")
    with pytest.raises(UserError) as e:
        resolved("--config", str(cfg))
    assert "optim.lrr: unknown key (did you mean lr?)" in str(e.value), e.value
    assert "stepz: unknown key (did you mean steps?)" in str(e.value) and "Extra inputs" not in str(e.value)


def test_steps_and_max_tokens_together_is_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        parse("--steps", "10", "--max_tokens", "1000")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--steps or --max_tokens" in err


def test_help_shows_defaults_config_keys_and_every_set_key() -> None:
    res = subprocess.run([sys.executable, "-m", "trainer.train", "--help"], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert res.returncode == 0 and res.stderr == ""
    text = " ".join(res.stdout.split())  # argparse wraps help at the terminal's width
    for shown in ("--lr, --learning_rate FLOAT", "[optim.lr; default 0.0005]", "--mask_rate, --mlm_probability",
                  "[masking.rate; default 0.15]", "--gradient_accumulation, --gradient_accumulation_steps INT",
                  "--eval_every, --eval_steps INT", "--checkpoint_every, --save_steps INT", "--resume, --no-resume",
                  "--precision {auto,fp32,bf16,fp16}", "[precision; default auto]", "[seed; default 0]",
                  "--steps, --max_steps INT", "[steps; default 100]", "--max_tokens COUNT",
                  "--schedule, --lr_scheduler_type {linear,cosine,constant}", "--print-config",
                  "--resume_from_checkpoint RUN"):
        assert shown in text, shown
    keys = res.stdout.split("every config key", 1)[1]
    from trainer.recipes import valid_keys

    for key in valid_keys():  # each key --set takes is listed, sections as section.{key ...}
        assert key.rsplit(".", 1)[-1] in keys, key


def test_schedules() -> None:
    from trainer.optim import lr_schedule

    cosine, constant, linear = (lr_schedule(n, 2, 10) for n in ("cosine", "constant", "linear"))
    assert [cosine(s) for s in (0, 1, 2)] == [0.5, 1.0, 1.0]
    assert cosine(6) == pytest.approx(0.5) and cosine(10) == pytest.approx(0.0)
    assert [constant(s) for s in (0, 1, 5, 10)] == [0.5, 1.0, 1.0, 1.0]
    assert linear(6) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="unknown schedule"):
        lr_schedule("step", 2, 10)


# ------------------------------------------------------------------ what a run says


def test_short_batches_count_in_the_length_line_and_in_max_tokens_steps(small_corpus) -> None:
    """Where the train batches hold less than batch_size on average (trainer.train.train_batches: partitions
    smaller than a batch), a step's sequences and tokens, and so max_tokens' steps, count what they hold; a
    mix says how often it reads each of its corpora."""
    from shardforge.storage.contract import load_manifest
    from trainer.describe import (
        Batches,
        RunShape,
        full_batches,
        length_line,
        mean_sequence_tokens,
        plan_steps,
    )

    manifest, _ = load_manifest(small_corpus[0])
    cfg = TrainConfig.model_validate({"data": small_corpus[0], "max_tokens": 100_000, "batch_size": 256})
    mean = mean_sequence_tokens(manifest)
    train_tokens = sum(s.tokens for s in manifest.shards_of("train"))
    held = Batches(32.0, 32 * mean, ((1.0, train_tokens),), short=True)
    full, short = plan_steps(cfg, full_batches(cfg, manifest), 1, 1), plan_steps(cfg, held, 1, 1)
    assert full.steps == math.ceil(100_000 / (256 * mean)) and short.steps == math.ceil(100_000 / (32 * mean))
    shape = RunShape(params=1, device="cpu", precision="fp32", compiled=False, world_size=1, accum=1,
                     vocab_size=400, batches=held)
    assert f"length: {short.steps} steps (max_tokens 100,000) x ~32 sequences (~" in length_line(short, manifest, shape)
    assert " x 256 sequences (~" in length_line(full, manifest, RunShape(**{**shape.__dict__, "batches": None}))
    budget = cfg.model_copy(update={"tokens_per_batch": 65_536})
    line = length_line(budget, manifest, RunShape(**{**shape.__dict__, "batches": Batches(
        None, 2000.0, ((1.0, train_tokens),), short=True)}))
    assert " x ~2,000 tokens (short of the budget) a step" in line, line
    assert " x 65,536 tokens (budget) a step" in length_line(budget, manifest, RunShape(**{**shape.__dict__,
                                                                                          "batches": None}))
    mixed = Batches(32.0, 1000.0, ((0.5, 10_000), (0.5, 100_000)))
    line = length_line(cfg.model_copy(update={"steps": 100}), manifest, RunShape(**{**shape.__dict__,
                                                                                    "batches": mixed}))
    assert "= ~100,000 tokens, 0.5 to 5.0 passes over the mixed corpora's train splits" in line, line
    even = Batches(32.0, 1000.0, ((0.5, 50_000), (0.5, 50_000)))
    line = length_line(cfg.model_copy(update={"steps": 100}), manifest, RunShape(**{**shape.__dict__,
                                                                                    "batches": even}))
    assert line.endswith("= ~100,000 tokens, 1.0 passes over each mixed corpus's train split"), line


def test_the_description_names_the_run_and_max_tokens_sets_the_steps(small_corpus) -> None:
    from shardforge.storage.contract import load_manifest
    from trainer.describe import RunShape, describe_run, full_batches, plan_steps, tokens_per_step

    root, _ = small_corpus
    manifest, _ = load_manifest(root)
    cfg = TrainConfig.model_validate({"data": "https://alice:s3cret@example.com/corpus", "output": "gs://b/runs/r1",
                                      "max_tokens": 100_000, "batch_size": 8, "eval_every": 50,
                                      "masking": {"rate": 0.4}, "eval_masking": {"rate": 0.15}})
    per_step = tokens_per_step(full_batches(cfg, manifest), 2, 3)
    train = manifest.shards_of("train")
    assert per_step == pytest.approx(8 * 2 * 3 * sum(s.tokens for s in train) / sum(s.samples for s in train))
    planned = plan_steps(cfg, full_batches(cfg, manifest), 2, 3)
    assert planned.steps == math.ceil(100_000 / per_step) and plan_steps(planned.model_copy(
        update={"max_tokens": None}), full_batches(cfg, manifest), 2, 3).steps == planned.steps
    lines = describe_run(planned, manifest, RunShape(params=1_234_567, device="cuda:0", precision="bf16",
                                                      compiled=True, world_size=2, accum=3, vocab_size=400))
    text = "\n".join(lines)
    assert "s3cret" not in text and "example.com/corpus" in text, text
    assert "1.23M parameters" in lines[0] and "cuda:0 x 2 processes, precision bf16" in lines[1]
    assert "torch.compile on, reference masking ops" in lines[1]
    fused = describe_run(planned.model_copy(update={"compile_mode": "reduce-overhead"}), manifest, RunShape(
        params=1, device="cuda:0", precision="bf16", compiled=True, world_size=1, accum=1, vocab_size=400,
        masking="fused"))
    assert "torch.compile on (reduce-overhead), fused masking ops" in fused[1], fused[1]
    regional = describe_run(planned.model_copy(update={"compile_mode": "reduce-overhead", "compile_scope": "layers"}),
                            manifest, RunShape(params=1, device="cuda:0", precision="bf16", compiled=True,
                                               world_size=1, accum=1, vocab_size=400))
    assert "torch.compile on (reduce-overhead, by layers)" in regional[1], regional[1]
    assert f"length: {planned.steps:,} steps (max_tokens 100,000) x 48 sequences" in lines[3]
    assert "2 processes, 3 micro-batches" in lines[3] and "full:" not in lines[3]
    from trainer.describe import length_line, mean_sequence_tokens

    doc = manifest.model_copy(update={"packing_rule": "doc_sentences"})
    shape = RunShape(params=1, device="cpu", precision="fp32", compiled=False, world_size=1, accum=1, vocab_size=400)
    assert length_line(planned, doc, shape).endswith(
        f"doc_sentences sequences hold {mean_sequence_tokens(doc):.0f} of {doc.max_seq_len} tokens on average, "
        f"so a batch is ~{100 * mean_sequence_tokens(doc) / doc.max_seq_len:.0f}% full: RoBERTa grows the batch to "
        f"a full one's tokens (--tokens_per_batch {8 * doc.max_seq_len})")
    assert "full:" not in length_line(planned.model_copy(update={"tokens_per_batch": 4096}), doc, shape)
    assert "masking token 40% (evaluated at token 15%)" in lines[4]
    # eval_every 50 of a 27-step run: the last step is its one evaluation (it read "every 50 steps and at step 27")
    assert planned.steps < 50 and lines[5].startswith(f"evaluation: at step {planned.steps}, ")
    assert "token 15% masking" in lines[5]
    from trainer.describe import eval_line as said_eval
    from trainer.describe import output_line

    often = planned.model_copy(update={"eval_every": 10, "checkpoint_every": 10})
    assert said_eval(often, manifest).startswith(f"evaluation: every 10 steps and at step {planned.steps}, ")
    assert "checkpoints (every 10 steps and at the end" in output_line(often)
    assert "checkpoints (at the end" in output_line(planned.model_copy(update={"checkpoint_every": 1000}))
    # A corpus without a valid split: the repack that gives it one (~1,000 masked tokens at the run's rate).
    no_valid = manifest.model_copy(update={"shards": manifest.shards_of("train"),
                                           "totals": {"train": manifest.totals["train"]}})
    local = planned.model_copy(update={"data": "/data/corpus"})
    train_totals = manifest.totals["train"]
    want = valid_fraction_for_empty(train_totals.tokens, train_totals.documents, 0.4)  # the run's masking rate
    assert said_eval(local, no_valid) == (
        "evaluation: none (the corpus has no valid split; repack it: shardforge repack --tokenized /data/corpus "
        f"--output NEW --valid_fraction {want:.2g})")
    each = planned.model_copy(update={"eval_every": 1, "checkpoint_every": 1, "log_every": 1})
    assert said_eval(each, manifest).startswith(f"evaluation: every step and at step {planned.steps}, ")
    assert "checkpoints (every step and at the end" in output_line(each) and output_line(each).endswith("a line every step")
    # A run no longer than log_every logs its first and last step only (it said "a line every 10 steps").
    assert output_line(planned.model_copy(update={"log_every": planned.steps})).endswith(
        "a line at the first and last step")
    assert "gs://b/runs/r1/checkpoints" in lines[6] and "TensorBoard" not in lines[6]  # remote: no event files
    from trainer.describe import eval_line

    assert ", 1 valid batch, " in eval_line(planned.model_copy(update={"eval_batches": 1}), manifest)
    # An eval_batches above what the split holds is said as the whole split, with the batches it holds:
    # those one pass of a process's valid loader yields.
    from trainer.loader import ShardLoader
    from trainer.train import valid_batches

    valid = ShardLoader(root, "valid", batch_size=8, shuffle_buffer=1, epochs=1, allow_idle=True)
    held = valid_batches(valid)
    assert held == sum(1 for _ in valid) and valid_batches(None) is None
    assert (f", the whole valid split ({held} batches a process; eval_batches 1,000 asks for more), MLM "
            in eval_line(planned.model_copy(update={"eval_batches": 1000}), manifest, held))
    assert f", {held} valid batches, " in eval_line(planned.model_copy(update={"eval_batches": held}), manifest, held)
    # A whole split too small for a steady loss says so, and where a larger one comes from.
    whole = planned.model_copy(update={"eval_batches": 1000})  # evaluated at 15% (eval_masking)
    tiny = manifest.model_copy(update={"shards": [s.model_copy(update={"tokens": 441}) if s.split == "valid"
                                                  else s for s in manifest.shards]})
    valid_tokens = sum(s.tokens for s in tiny.shards_of("valid"))
    small = eval_line(whole, tiny, held)
    masked = round(valid_tokens * 0.15)
    head = (f"masking; the split's {valid_tokens:,} tokens give ~{masked:,} masked: a noisy loss (repack it: "
            "shardforge repack --tokenized https://example.com/corpus --output NEW --valid_fraction ")  # redacted
    assert head in small and small.endswith(")"), small
    # the fraction scaled to ~1,000 masked tokens, rounded up to two digits
    fraction = float(small.split(head, 1)[1][:-1])
    needed = tiny.config["packing"]["valid_fraction"] * 1000 / masked
    assert needed <= fraction <= needed * 1.1 and len(f"{fraction:g}".lstrip("0.")) <= 2, (needed, fraction)
    assert sum(s.tokens for s in manifest.shards_of("valid")) * 0.15 > 1000
    assert "noisy" not in eval_line(whole, manifest, held)
    assert "noisy" not in eval_line(planned.model_copy(update={"eval_batches": 1}), tiny, held)  # a part of it


def test_a_run_describes_itself_before_the_optimizer_logs_from_step_one_and_evaluates_at_the_end(
        small_corpus, tmp_path, caplog, monkeypatch) -> None:
    """One short run: the description is out before the optimizer is built (its import of torch._dynamo is
    the slow part of the start); a progress line with tokens/s and ETA comes at step 1; the loader's
    start-up (a first batch 1 s late) is its own number, not step 1's data wait; with eval_every 0 the
    last step evaluates, and the end line says so."""
    import time

    import trainer.train as train_mod
    from trainer.loader import ShardLoader
    from trainer.loggers import read_metrics

    before_optimizer: list[str] = []
    build_optimizer = train_mod.build_optimizer

    def watched(*args, **kw):
        before_optimizer.extend(r.getMessage() for r in caplog.records)
        return build_optimizer(*args, **kw)

    slow_start = {"train": True}
    iterate = ShardLoader.__iter__

    def late_first_batch(self):
        if self.split == "train" and slow_start["train"]:
            slow_start["train"] = False
            time.sleep(1.0)
        yield from iterate(self)

    monkeypatch.setattr(train_mod, "build_optimizer", watched)
    monkeypatch.setattr(ShardLoader, "__iter__", late_first_batch)
    root, _ = small_corpus
    out = str(tmp_path / "run")
    caplog.set_level(logging.INFO, logger="shardforge.train")
    res = train_mod.train(TrainConfig.model_validate({
        "data": root, "output": out, "steps": 3, "batch_size": 4, "device": "cpu", "log_every": 1,
        "eval_batches": 2, "model": {"size": "tiny"}, "masking": {"rate": 0.3}}))
    said = "\n".join(before_optimizer)
    for start in ("model: size=tiny", "device: cpu, precision fp32, torch.compile off, reference masking ops",
                  f"corpus: {root}", "length: 3 steps x 4 sequences",
                  "evaluation: at step 3, 2 valid batches", f"output: checkpoints {out}/checkpoints"):
        assert start in said, (start, said)
    lines = [r.getMessage() for r in caplog.records]
    step1 = next(line for line in lines if line.startswith("step 1/3 "))
    # No time left at step 1 (its one-time costs would make it many times too long); from step 2 on, one.
    assert "tok/s" in step1 and " eta " not in step1
    assert " eta " in next(line for line in lines if line.startswith("step 2/3 "))
    assert any(line.startswith("step 3/3 ") and "| eval loss" in line and "30% masked" in line for line in lines)
    rows = read_metrics(out)
    assert rows[0]["data_startup_s"] >= 1.0 and rows[0]["data_wait_share"] < 0.5, rows[0]
    assert "eval_loss" in rows[-1] and rows[-1]["eval_mask_rate"] == 0.3 and rows[-1]["mask_rate"] == 0.3
    assert all("eval_loss" not in r for r in rows[:-1]) and all(r["flops_per_s"] > 0 for r in rows)
    assert all("mlm_loss" not in r for r in rows)  # the loss is MLM alone: no second name for it
    assert res["eval"]["step"] == 3 and res["eval"]["eval_loss"] == rows[-1]["eval_loss"]


# ------------------------------------------------------------------ the model card


def card_for(tmp_path: Path, records: list[dict], step: int, manifest: dict | None = None, **cfg) -> str:
    from trainer.model_card import model_card

    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = TrainConfig.model_validate({"data": "/home/someone/data/corpus", "output": str(run),
                                         "init": "/home/someone/models/roberta-base", **cfg})
    return model_card(config, {"step": step}, str(run), "roberta", manifest)


def test_the_card_says_why_an_evaluation_is_missing(tmp_path) -> None:
    rec = [{"step": s, "tokens_per_s": 10.0, "step_time": 1.0} for s in range(1, 31)]
    stopped = card_for(tmp_path, rec, 30, steps=60, eval_every=200)
    assert "final eval loss: not recorded (the run stopped at step 30 of 60; it evaluates every 200 steps and " \
           "at its last step)" in stopped
    assert "- steps: 30 of 60 planned" in stopped and "eval_every was 0" not in stopped
    assert "evaluation was off: eval_batches=0" in card_for(tmp_path, rec, 30, steps=30, eval_batches=0)
    no_valid = {"shards": [{"split": "train"}], "totals": {}, "tokenizer": {}}
    assert "the corpus has no valid split" in card_for(tmp_path, rec, 30, no_valid, steps=30)


def test_the_card_names_no_local_folder_and_states_what_eval_loss_measures(tmp_path) -> None:
    rec = [{"step": 1, "tokens_per_s": 10.0, "step_time": 1.0},
           {"step": 2, "tokens_per_s": 10.0, "step_time": 1.0, "eval_loss": 4.5}]
    manifest = {"config": {"clean": {"english_only": True, "languages": ["en", "de"]}}, "tokenizer": {},
                "shards": [{"split": "valid"}],
                "totals": {"train": {"samples": 215, "tokens": 104957, "shards": 3},
                           "valid": {"samples": 1, "tokens": 441, "shards": 1}}}
    card = card_for(tmp_path, rec, 2, manifest, steps=2, eval_batches=3, masking={"rate": 0.4},
                    eval_masking={"rate": 0.15, "scheme": "whole_word"},
                    trackers={"mlflow_tracking_uri": "file:///home/someone/mlruns"})
    head = card.split("---")[1]
    assert "pipeline_tag: fill-mask" in head and "license: other" in head and 'language: ["en", "de"]' in head
    assert "/home/someone" not in card and str(tmp_path) not in card
    assert "started from: roberta-base\n" in card and "- corpus: corpus\n" in card
    assert "final eval loss: 4.5000 (step 2)" in card
    assert "- train: 215 sequences, 104,957 tokens, 3 shards\n" in card and "- valid: 1 sequence, 441 tokens, 1 shard\n" in card
    assert "MLM cross-entropy in nats" in card and "first 3 batches" in card
    assert "evaluation masking rate: 15% of tokens masked (whole_word masking" in card
    assert "training masking: 40% of tokens masked" in card
    assert 'pipeline("fill-mask", model="PATH_OR_HUB_ID")' in card and "split_special_tokens=True" in card
    from trainer.model_card import model_card

    cfg = TrainConfig.model_validate({"data": "gs://u:pw@bucket/corpus"})
    other = model_card(cfg, {"step": 0}, str(tmp_path / "none"), "bert", {"config": {"clean": {"english_only": False}}},
                       "apache-2.0", ["fr"])
    assert "license: apache-2.0" in other and 'language: ["fr"]' in other and "pw" not in other
    assert "- corpus: gs://" in other and "metrics.jsonl was not found" in other
    assert "left out" not in card and "left out" not in other  # nothing trained that the export drops
    heads = model_card(TrainConfig.model_validate({"data": "c", "model": {"sentence_head": "sop", "span_boundary": True}}),
                       {"step": 0}, str(tmp_path / "none"), "albert", None)
    assert "- left out: the SOP head and its pooler and the span boundary (SBO) head, trained for pretraining " \
           "only" in heads


# ------------------------------------------------------------------ the plot


def test_the_plot_has_its_mfu_panel_and_labels_each_loss_with_its_masking_rate() -> None:
    from trainer.plot import label, plan_panels

    rows = [{"step": s, "loss": 5.0, "lr": 1e-3, "tokens_per_s": 100.0, "data_wait_share": 0.0,
             "flops_per_s": 1e9, "mask_rate": 0.4} for s in (1, 2)]
    rows.append({"step": 2, "eval_loss": 4.0, "eval_mask_rate": 0.15})
    titles = [t for t, _ in plan_panels(rows)]
    mfu = next(t for t in titles if t.startswith("MFU"))
    assert "peak FLOP/s is unknown" in mfu and ["flops_per_s"] in [k for _, k in plan_panels(rows)]
    assert ("model FLOPs utilization", ["mfu"]) in plan_panels([{**r, "mfu": 0.3} for r in rows[:2]])
    assert any(t.startswith("MFU: not logged") for t, _ in plan_panels([{"step": 1, "loss": 1.0}]))
    assert label(rows, "loss") == "training loss, 40% masked"
    assert label(rows, "eval_loss") == "eval loss (MLM), 15% masked"
    assert label([{"step": 1, "loss": 1.0}], "loss") == "training loss"
    # A sentence head's evaluated accuracy is drawn beside its training accuracy (it was left out).
    pairs = [{"step": 2, "mlm_acc": 0.1, "sentence_acc": 0.6}, {"step": 2, "eval_mlm_acc": 0.1, "eval_sentence_acc": 0.7}]
    assert ("accuracy", ["mlm_acc", "eval_mlm_acc", "sentence_acc", "eval_sentence_acc"]) in plan_panels(pairs)
    assert label(pairs, "eval_sentence_acc") == "eval sentence head accuracy"
    heads = [{"step": 1, "loss": 8.3, "mlm_loss": 7.6, "mask_rate": 0.15}]
    assert ("loss (nats)", ["loss", "mlm_loss"]) in plan_panels(heads)
    assert (label(heads, "loss"), label(heads, "mlm_loss")) == ("training loss (all heads), 15% masked",
                                                                "training loss (MLM), 15% masked")


def test_plot_says_nothing_about_matplotlib_caches(tmp_path) -> None:
    """A first plot on a machine whose matplotlib has no cache (and no writable config folder) printed
    'Matplotlib is building the font cache' (after 5 s: here at once) and a temporary-folder note."""
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "loss": 5.0 - s / 10, "tokens_seen": 100 * s} for s in range(1, 4)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "file").write_text("")
    config = tmp_path / "file" / "mplconfig"  # no folder can be made there: matplotlib falls back on a fresh
    # temporary one, so it builds its font cache (as on a first use)
    probe = ("import threading, sys\n"
             "Timer = threading.Timer\n"
             "threading.Timer = lambda delay, fn, *a, **k: Timer(0, fn, *a, **k)  # the 5 s grace: none\n"
             "from shardforge.cli import main\n"
             "sys.exit(main(['plot', sys.argv[1]]))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLCONFIGDIR": str(config)}
    res = subprocess.run([sys.executable, "-c", probe, str(run)], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == str(run / "plots.png"), res.stderr
    assert res.stderr == "", res.stderr



def test_a_max_tokens_run_resumed_with_steps_of_another_size_says_where_it_would_end(
        small_corpus, tmp_path, caplog) -> None:
    """--max_tokens plans its steps for the run's own steps; resumed with half the gradient accumulation, the
    steps left are planned afresh for the smaller steps, so the run would end ~20 % over max_tokens: said in
    one line with the --steps that ends near it (and not said where the run ends within 5 % of it)."""
    from trainer.checkpoint import token_budget_line
    from trainer.loggers import read_metrics
    from trainer.train import train

    root, _ = small_corpus
    out = str(tmp_path / "run")
    base = {"data": root, "output": out, "max_tokens": 8_000, "batch_size": 4, "device": "cpu",
            "eval_batches": 0, "model": {"size": "tiny"}}
    train(TrainConfig.model_validate({**base, "gradient_accumulation": 2, "stop_at": 4}))
    seen = read_metrics(out)[-1]["tokens_seen"]
    caplog.set_level(logging.WARNING, logger="trainer.checkpoint")
    train(TrainConfig.model_validate({**base, "gradient_accumulation": 1, "stop_at": 5}))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("--max_tokens")]
    assert len(lines) == 1, caplog.text
    assert f"the 4 steps before took {seen:,} tokens, so the run would end at ~" in lines[0], lines[0]
    assert "instead of --max_tokens (the schedule then ends at that step)" in lines[0]
    cfg = TrainConfig.model_validate(base).model_copy(update={"steps": 20})
    assert token_budget_line(cfg, 10, 4_000) is None  # 10 steps of 400 left: 8,000
    line = token_budget_line(cfg, 10, 6_000, 14)
    assert line == ("--max_tokens 8,000 planned 20 steps of this run's size (the checkpoint's run: 14; the "
                    "learning-rate schedule now ends at step 20); the 10 steps before took 6,000 tokens, so the run "
                    "would end at ~10,000 tokens (125% of max_tokens); to end near max_tokens, give --steps 15 "
                    "instead of --max_tokens (the schedule then ends at that step)"), line


def test_a_warmup_ratio_run_resumed_longer_keeps_the_warmup_it_did(small_corpus, tmp_path, caplog) -> None:
    """warmup_ratio makes the warmup steps from the run's steps; a run resumed with more steps (or with
    --max_tokens planned for steps of another size) keeps the checkpoint's warmup, the one it did, instead of
    being refused as if the user had changed optim.warmup_steps; its learning rate goes on from there."""
    from trainer.checkpoint import load_checkpoint
    from trainer.loggers import read_metrics
    from trainer.optim import lr_schedule
    from trainer.train import train

    root, _ = small_corpus
    out = str(tmp_path / "run")
    base = {"data": root, "output": out, "batch_size": 4, "device": "cpu", "eval_batches": 0,
            "model": {"size": "tiny"}, "optim": {"warmup_ratio": 0.2, "lr": 1e-3}}
    train(TrainConfig.model_validate({**base, "steps": 10, "stop_at": 3}))  # warmup: 2 steps
    caplog.set_level(logging.INFO, logger="trainer.checkpoint")
    train(TrainConfig.model_validate({**base, "steps": 20, "stop_at": 5}))  # the ratio alone: 4
    assert "warmup_ratio 0.2: the schedule keeps the checkpoint's 2 warmup steps (of this run's 20 steps the " \
           "ratio makes 4)" in caplog.text, caplog.text
    want, ratio = lr_schedule("linear", 2, 20), lr_schedule("linear", 4, 20)
    rows = {r["step"]: r["lr"] for r in read_metrics(out)}  # a step's record: the rate after its update
    for step in (4, 5):
        assert rows[step] == pytest.approx(1e-3 * want(step)), rows
        assert rows[step] != pytest.approx(1e-3 * ratio(step)), rows  # the schedule the ratio alone makes
    from trainer.checkpoint import list_checkpoints

    assert load_checkpoint(list_checkpoints(out)[-1][1])["config"]["optim"]["warmup_steps"] == 2
    # A warmup_steps the user sets apart from the ratio is a change, refused as any other.
    with pytest.raises(UserError, match=r"optim\.warmup_steps 2 -> 7"):
        train(TrainConfig.model_validate({**base, "steps": 20, "optim": {"warmup_ratio": 0.2, "warmup_steps": 7,
                                                                          "lr": 1e-3}}))


def test_a_finished_run_resumed_longer_says_where_its_learning_rate_goes_on(small_corpus, tmp_path, caplog) -> None:
    """A run continued with a larger --steps goes on under a schedule that ends at the new steps: a decayed
    rate rises again. The resume says so with both rates; a resume with the same steps says nothing."""
    from trainer.checkpoint import schedule_change
    from trainer.loggers import read_metrics
    from trainer.optim import lr_schedule
    from trainer.train import train

    root, _ = small_corpus
    out = str(tmp_path / "run")
    base = {"data": root, "output": out, "batch_size": 4, "device": "cpu", "eval_batches": 0,
            "model": {"size": "tiny"}, "optim": {"warmup_steps": 2, "lr": 1e-3}}
    caplog.set_level(logging.INFO, logger="trainer.checkpoint")
    train(TrainConfig.model_validate({**base, "steps": 6, "stop_at": 4}))
    train(TrainConfig.model_validate({**base, "steps": 6, "stop_at": 5}))  # the same steps: nothing to say
    assert "resumed from" in caplog.text and "schedule" not in caplog.text, caplog.text
    train(TrainConfig.model_validate({**base, "steps": 6}))  # finished: lr 0 after step 6
    train(TrainConfig.model_validate({**base, "steps": 10}))
    after = 1e-3 * lr_schedule("linear", 2, 10)(6)
    assert (f"the learning-rate schedule (linear) now ends at step 10, where the checkpoint's run planned 6: step 7 "
            f"trains at lr {after:.3g}, where the run's schedule gave 0 (the rate follows this run's --steps from "
            "here)") in caplog.text, caplog.text
    rows = {r["step"]: r["lr"] for r in read_metrics(out)}  # a step's record: the rate after its update
    assert rows[6] == 0 and rows[7] == pytest.approx(1e-3 * lr_schedule("linear", 2, 10)(7)), rows
    constant = TrainConfig.model_validate({**base, "steps": 10, "optim": {"warmup_steps": 2, "schedule": "constant"}})
    assert schedule_change(constant, 6, 6) is None  # past the warmup a constant rate does not move
    assert schedule_change(constant.model_copy(update={"steps": 6}), 6, 4) is None  # nothing left to train


def test_a_warmup_the_run_never_leaves_is_said_at_the_start(small_corpus, tmp_path, caplog) -> None:
    """A recipe's warmup (roberta-base: 24,000 steps) kept with a short --steps makes the learning rate rise
    the whole run and stop short of its peak: one warning at the start, with what it ends at; none where the
    warmup ends before the run does. A one-step run says "1 step". An ALBERT embedding wider than the
    hidden size (an albert recipe's E 128 kept with --model_size tiny, H 64) is said the same way."""
    from schemas.config import ModelConfig
    from shardforge.storage.contract import load_manifest
    from trainer.describe import RunShape, length_line, long_warmup, wide_embedding
    from trainer.train import train

    root, _ = small_corpus
    caplog.set_level(logging.WARNING, logger="shardforge.train")
    train(TrainConfig.model_validate({"data": root, "output": str(tmp_path / "run"), "steps": 2, "batch_size": 4,
                                      "device": "cpu", "eval_batches": 0,
                                      "model": {"size": "tiny", "embedding_size": 128, "share": "all"},
                                      "optim": {"warmup_steps": 8, "lr": 1e-3}}))
    wide = [r.getMessage() for r in caplog.records if r.getMessage().startswith("model.embedding_size")]
    assert len(wide) == 1 and wide[0].startswith(
        "model.embedding_size 128 is above the hidden size 64: ALBERT factorizes the embedding to E < H to save "
        "parameters, and this one adds "), wide
    assert wide[0].endswith("--set model.embedding_size=null ties it to the hidden size, or give one under 64"), wide
    for model in ({"size": "tiny"}, {"size": "tiny", "embedding_size": 32}, {"size": "tiny", "embedding_size": 64}):
        assert wide_embedding(ModelConfig.model_validate(model), 400) is None, model
    from trainer.model import Encoder

    counts = [Encoder(ModelConfig(size="tiny", **kw), 400).num_params() for kw in ({"embedding_size": 128}, {})]
    assert f"adds {counts[0] - counts[1]:,} " in wide_embedding(ModelConfig(size="tiny", embedding_size=128), 400)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("warmup_steps")]
    assert said == ["warmup_steps 8 is not under the run's 2 steps: the learning rate rises the whole run and ends "
                    "at 25.00% of its peak lr 0.001; a shorter run wants a shorter warmup: --warmup_steps under "
                    "--steps, or --warmup_ratio (RoBERTa warmed up over 24,000 of 500,000 steps: 0.048)"], said
    cfg = TrainConfig.model_validate({"data": root, "steps": 9, "optim": {"warmup_steps": 8}})
    assert long_warmup(cfg) is None
    assert long_warmup(cfg.model_copy(update={"steps": 8})) == (  # the peak at the last step: said as such
        "warmup_steps 8 is not under the run's 8 steps: the learning rate rises the whole run and reaches its peak "
        "lr 0.0005 only at the last step and never decays; a shorter run wants a shorter warmup: --warmup_steps "
        "under --steps, or --warmup_ratio (RoBERTa warmed up over 24,000 of 500,000 steps: 0.048)")
    manifest, _ = load_manifest(root)
    shape = RunShape(params=1, device="cpu", precision="fp32", compiled=False, world_size=1, accum=1, vocab_size=400)
    assert length_line(cfg.model_copy(update={"steps": 1}), manifest, shape).startswith("length: 1 step x ")
    assert not [r for r in caplog.records if r.getMessage().startswith("a step takes")]  # 4 sequences a step


def test_a_step_that_takes_the_whole_corpus_is_said_at_the_start(small_corpus, tmp_path, caplog) -> None:
    """A recipe's global batch (albert-base: 4,096 sequences) kept on a corpus of fewer sequences makes every
    update read the whole corpus: one warning at the start that names the setting that made the step that
    big and what to change; none where a step is under the train split."""
    from trainer.describe import Batches, step_over_corpus
    from trainer.train import train

    root, manifest = small_corpus
    seqs = sum(s.samples for s in manifest.shards_of("train"))
    caplog.set_level(logging.WARNING, logger="shardforge.train")
    accum = math.ceil(seqs / 32) + 1  # this corpus's partitions hold ~32 sequences: batches of 32
    train(TrainConfig.model_validate({"data": root, "output": str(tmp_path / "run"), "steps": 1, "batch_size": 32,
                                      "gradient_accumulation": accum, "device": "cpu", "eval_batches": 0,
                                      "model": {"size": "tiny"}}))
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("a step takes")]
    assert len(said) == 1 and said[0].endswith(
        f"the step's size comes from --gradient_accumulation {accum}: a corpus this small wants a smaller "
        "--gradient_accumulation"), said
    assert re.search(r"a step takes ~[\d,]+ sequences \(~[\d,]+ tokens\), 1\.\d\dx the train split \([\d,]+ tokens\)"
                     r", so every update reads the whole corpus \(1 update in all, over 1\.\d passes\)", said[0]), said

    def warn(batches: Batches, world: int = 1, accum: int = 1, steps: int = 40, **kw) -> str | None:
        return step_over_corpus(TrainConfig.model_validate({"data": "c", "steps": steps, **kw}), batches, world, accum)

    one = Batches(rows=8.0, tokens=1600.0, corpora=((1.0, 697_425),))
    assert warn(one, accum=512, batch_size=8, global_batch_sequences=4096) == (
        "a step takes ~4,096 sequences (~819,200 tokens), 1.17x the train split (697,425 tokens), so every "
        "update reads the whole corpus (40 updates in all, over 47.0 passes); the step's size "
        "comes from global_batch_sequences 4,096 (a global batch sized for corpora of billions of tokens): a "
        "corpus this small wants --set global_batch_sequences=N well under the split's ~3,487 sequences")
    assert warn(one, accum=511, batch_size=8, global_batch_sequences=4088) is not None
    assert warn(one, accum=435, batch_size=8, global_batch_sequences=3480) is None  # 0.998 of the split
    budget = Batches(rows=None, tokens=8192.0, corpora=((1.0, 500_000),))
    assert warn(budget, accum=64, tokens_per_batch=8192, global_batch_tokens=524_288, steps=3).endswith(
        "comes from global_batch_tokens 524,288 (a global batch sized for corpora of billions of tokens): a corpus "
        "this small wants --set global_batch_tokens=N well under its 500,000 tokens")
    assert warn(one, world=2, batch_size=8, steps=1, accum=1) is None
    wide = Batches(rows=256.0, tokens=51_200.0, corpora=((1.0, 90_000),))
    assert warn(wide, world=2, batch_size=256, steps=1).endswith(
        "the step's size comes from --batch_size 256 on 2 processes: a corpus this small wants smaller micro-batches")
    mixed = Batches(rows=8.0, tokens=1600.0, corpora=((0.9, 5_000_000), (0.1, 50_000)))  # the small one read most
    assert " 3.28x the train split of the mixed corpus it reads most (50,000 tokens)" in warn(
        mixed, accum=1024, batch_size=8, global_batch_sequences=8192)
