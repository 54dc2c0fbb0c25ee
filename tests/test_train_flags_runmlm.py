"""Hugging Face run_mlm.py / TrainingArguments flag names on the trainer's command line: the ones with an
equivalent set its config key, the rest are one line saying what to give instead (trainer/args.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from probes import import_probe

from schemas.config import TrainConfig

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def parse(*argv: str):
    from trainer.args import parse_train_args

    return parse_train_args(list(argv))


def resolved(*argv: str) -> TrainConfig:
    from trainer.train import build_train_config

    args = parse(*argv)
    return build_train_config(args, args.set, require_data=False)


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one stderr line of a parse that exits 2."""
    with pytest.raises(SystemExit) as e:
        parse(*argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err.strip()


def test_run_mlm_second_names_set_their_config_keys(tmp_path) -> None:
    model = str(tmp_path / "roberta-base")  # a local --init folder is taken as an absolute path
    cfg = resolved("--output_dir", "runs/r7", "--model_name_or_path", model, "--adam_beta1", "0.8",
                   "--adam_beta2", "0.999", "--adam_epsilon", "1e-8", "--max_grad_norm", "0.5")
    assert (cfg.output, cfg.init) == ("runs/r7", model)
    assert (cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.clip_norm) == (0.8, 0.999, 1e-8, 0.5)
    # The own names set the same keys; --set still wins over both.
    cfg = resolved("--output", "o", "--init", model, "--beta1", "0.7", "--beta2", "0.9", "--eps", "1e-7",
                   "--clip_norm", "2", "--set", "optim.beta2=0.95")
    assert (cfg.output, cfg.init, cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.clip_norm) == (
        "o", model, 0.7, 0.95, 1e-7, 2.0)
    assert resolved("--max_grad_norm", "0").optim.clip_norm == 0.0  # HF's 0: no clipping (ours too)
    # Unset, they leave the recipe's values.
    cpu = resolved("--recipe", "cpu")
    assert resolved("--recipe", "cpu", "--lr", "1e-3").optim.model_dump(exclude={"lr"}) == \
        cpu.optim.model_dump(exclude={"lr"})


def test_resume_from_checkpoint_agrees_with_output_dir(tmp_path) -> None:
    run = tmp_path / "r1"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "ckpt-00000010.pt").write_bytes(b"")
    cfg = resolved("--output_dir", str(run), "--resume_from_checkpoint", str(run))
    assert cfg.output == str(run) and cfg.resume is True


@pytest.mark.parametrize("argv, precision", [
    (["--bf16"], "bf16"),
    (["--fp16"], "fp16"),
    (["--bf16", "True"], "bf16"),  # HF's parser takes an optional boolean value
    (["--fp16=true"], "fp16"),
    (["--bf16", "false"], "auto"),  # as if not given
    (["--bf16", "--precision", "bf16"], "bf16"),
    (["--fp16", "false", "--precision", "fp32"], "fp32"),
    (["--bf16", "--steps", "5"], "bf16"),  # the next flag is not taken for a value
])
def test_bf16_and_fp16_set_precision(argv: list[str], precision: str) -> None:
    assert resolved(*argv).precision == precision


@pytest.mark.parametrize("written, says", [("2x", "'2x' is not a count (an integer, or 2e9, 500M, 1.5B)"),
                                            ("1.5", "'1.5' is not a whole count"), ("1e400", "is not a whole count")])
def test_a_count_that_is_no_whole_number_is_one_line(capsys: pytest.CaptureFixture[str], written: str,
                                                     says: str) -> None:
    assert refused(capsys, "--data", "d", "--max_tokens", written).startswith("error: argument --max_tokens: ")
    assert says in refused(capsys, "--data", "d", "--max_tokens", written)


@pytest.mark.parametrize("argv, line", [
    (["--bf16", "--fp16"], "give --bf16 or --fp16, not both"),
    (["--precision", "fp32", "--bf16"], "give --bf16 or --precision fp32, not both"),
    (["--fp16", "--precision", "bf16"], "give --fp16 or --precision bf16, not both"),
    (["--bf16", "maybe"], "argument --bf16: true or false, not 'maybe'"),
])
def test_bf16_and_fp16_mistakes_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], line: str) -> None:
    assert line in refused(capsys, *argv)


NO_EQUIVALENT_LINES = {
    "--num_train_epochs": "--steps or --max_tokens",
    "--max_seq_length": "set by the corpus: build it (or shardforge repack it) with --max_seq_len",
    "--overwrite_output_dir": "to start over, give a new --output (or remove its checkpoints/)",
    "--do_train": "training always runs; evaluation is --eval_every N and --eval_batches N",
    "--do_eval": "every --eval_every steps and at the last step on --eval_batches valid batches",
    "--per_device_eval_batch_size": "evaluation batches are --batch_size sequences",
    "--report_to": "--set trackers.wandb=true or trackers.mlflow=true",
    "--logging_dir": "the logs go into --output",
    "--auto_find_batch_size": "one line naming the --batch_size to give",
    "--eval_strategy": "every --eval_every (--eval_steps) steps and at the last step",
    "--evaluation_strategy": "every --eval_every (--eval_steps) steps and at the last step",
    "--save_strategy": "every --checkpoint_every (--save_steps) steps and at the last step",
    "--logging_strategy": "every --log_every (--logging_steps) steps",
    "--max_eval_samples": "--eval_batches batches of the valid split",
    "--max_train_samples": "--steps or --max_tokens",
    "--train_file": "`shardforge build --input FILES --output CORPUS` makes one from text files",
    "--validation_file": "the valid split is the corpus's (the build's --valid_fraction)",
    "--dataset_name": "nothing is downloaded",
    "--dataset_config_name": "nothing is downloaded",
    "--tokenizer_name": "build the corpus with --tokenizer PATH",
    "--model_type": "come with their --recipe",
    "--line_by_line": "--rule doc_sentences for one document per sequence",
    "--pad_to_max_length": "batches are padded to their longest sequence",
    "--preprocessing_num_workers": "shardforge build --doc_processes N",
    "--load_best_model_at_end": "export the one you want (shardforge export RUN/checkpoints/ckpt-N.pt OUT)",
    "--metric_for_best_model": "export the one you want (shardforge export RUN/checkpoints/ckpt-N.pt OUT)",
    "--push_to_hub": "upload it with huggingface-cli upload",
    "--hub_model_id": "upload it with huggingface-cli upload",
    "--tf32": "whose matmuls TF32 does not touch",
    "--bf16_full_eval": "evaluation runs at the training precision",
    "--fp16_full_eval": "evaluation runs at the training precision",
    "--label_smoothing_factor": "plain cross-entropy over the masked tokens",
    "--config_name": "--init FOLDER continues a Hugging Face model with its own config.json",
    "--cache_dir": "nothing is downloaded, so nothing is cached",
    "--streaming": "the corpus is always streamed, shard by shard",
    "--disable_tqdm": "a log line every --log_every steps",
    "--ignore_data_skip": "not by replaying the batches before it",
    "--trust_remote_code": "no code from it runs",
    "--torch_dtype": "trains at --precision",
    "--low_cpu_mem_usage": "trains at --precision",
    "--save_safetensors": "writes model.safetensors",
    "--save_only_model": "shardforge export RUN OUT writes the model alone",
}


@pytest.mark.parametrize("flag", sorted(NO_EQUIVALENT_LINES))
def test_flags_without_an_equivalent_say_what_to_give_instead(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    from trainer.args import NO_EQUIVALENT

    assert set(NO_EQUIVALENT) == set(NO_EQUIVALENT_LINES)
    for argv in ([flag], [flag, "3"], [f"{flag}=3"], ["--steps", "5", flag, "--lr", "1e-3"]):
        line = refused(capsys, "--data", "d", *argv)
        assert line.startswith(f"error: {flag}: ") and NO_EQUIVALENT_LINES[flag] in line, line
        assert "unknown flag" not in line


OTHER_WORDS_LINES = {
    ("--epoch", "--epochs", "--max_epochs", "--num_epochs"): "the length is --steps or --max_tokens",
    ("--max_seq_len", "--seq_len", "--seq_length", "--block_size", "--tokens_per_sample"):
        "set by the corpus: build it (or shardforge repack it) with --max_seq_len",
    ("--rule", "--packing"): "shardforge repack --tokenized CORPUS --output NEW --rule RULE",
    ("--tokenizer", "--tokenizer_kind", "--vocab_size"): "the build sets them (--tokenizer_kind, --vocab_size",
    ("--dropout", "--attention_dropout"):
        "--config_overrides hidden_dropout_prob=P,attention_probs_dropout_prob=P (run_mlm's form), or --set "
        "model.dropout=P --set model.attention_dropout=P",
    ("--layers", "--num_layers", "--heads"): "--model_size (tiny, small, base, large), a --recipe, or --config_overrides",
    ("--nsp", "--sop", "--sentence_head"): "--set model.sentence_head=nsp or sop, on a corpus packed in pairs",
    ("--whole_word_mask", "--whole_word_masking", "--wwm"): "whole-word masking is --masking whole_word",
    ("--gpus", "--num_gpus", "--nproc_per_node", "--devices", "--num_nodes", "--nnodes", "--world_size"):
        "one process a GPU, started by torchrun: torchrun --nproc_per_node N -m trainer.train",
    ("--deepspeed", "--fsdp", "--zero_stage"): "every rank holds the whole model (DDP over torchrun's processes)",
    ("--hub_token",): "upload it with huggingface-cli upload",
    ("--max_position_embeddings",): "--set model.max_positions=N (514 for 512 tokens)",
    **{(f"--{hf}",): f"--config_overrides {hf}=VALUE (run_mlm's form), or --set model.{key}=VALUE" for hf, key in (
        ("hidden_size", "hidden"), ("num_hidden_layers", "layers"), ("num_attention_heads", "heads"),
        ("intermediate_size", "intermediate"), ("embedding_size", "embedding_size"), ("hidden_dropout_prob", "dropout"),
        ("attention_probs_dropout_prob", "attention_dropout"), ("type_vocab_size", "type_vocab_size"),
        ("layer_norm_eps", "layer_norm_eps"), ("hidden_act", "hidden_act"))},
}


def test_the_builds_and_other_trainers_words_say_what_to_give_here(capsys: pytest.CaptureFixture[str]) -> None:
    """The build's flags (--max_seq_len, --rule, --vocab_size), other trainers' (--epochs, --gpus, --deepspeed) and a
    model config key as a flag were unknown flags pointed by spelling at flags that mean another thing (--epochs at
    --eps, --max_seq_len at --max_steps, --num_gpus at the loader's --num_workers, --rule at --schedule): each is one
    line saying what to give here, and what it names is taken."""
    from trainer.args import OTHER_WORDS

    assert set(OTHER_WORDS) == {flag for flags in OTHER_WORDS_LINES for flag in flags}
    for flags, says in OTHER_WORDS_LINES.items():
        for flag in flags:
            for argv in ([flag], [flag, "3"], [f"{flag}=3"], ["--steps", "5", flag, "--lr", "1e-3"]):
                line = refused(capsys, "--data", "d", *argv)
                assert line.startswith(f"error: {flag}: ") and says in line, line
    # A typo near one of them is pointed at a flag that works, not at one of them.
    assert "(did you mean --gradient_accumulation?)" in refused(capsys, "--data", "d", "--gradient_acumulation", "2")
    # What the lines name is taken, as they say it.
    c = resolved("--config_overrides", "hidden_dropout_prob=0.2,attention_probs_dropout_prob=0", "--masking",
                 "whole_word", "--set", "model.sentence_head=sop", "--set", "model.max_positions=130")
    assert (c.model.dropout, c.model.attention_dropout, c.masking.scheme, c.model.sentence_head,
            c.model.max_positions) == (0.2, 0.0, "whole_word", "sop", 130)
    values = {"hidden_act": "gelu", "layer_norm_eps": "1e-5", "hidden_dropout_prob": "0.1",
              "attention_probs_dropout_prob": "0.1"}
    from trainer.runmlm_flags import HF_CONFIG_KEYS

    for hf, key in HF_CONFIG_KEYS.items():
        value = values.get(hf, "64")
        over = resolved("--config_overrides", f"{hf}={value}")
        by_set = resolved("--set", f"{key}={value}")
        assert getattr(over.model, key.split(".")[1]) == getattr(by_set.model, key.split(".")[1]), hf


def test_an_unknown_flag_is_never_pointed_at_one_without_an_equivalent(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "--data", "d", "--hub_strategy", "x").startswith("error: unknown flag: --hub_strategy (see ")
    # --eval_strateg is near --eval_strategy (no equivalent) and --eval_steps: the suggestion is the one that works
    assert "(did you mean --eval_steps?)" in refused(capsys, "--data", "d", "--eval_strateg", "steps")
    assert "(did you mean --steps?)" in refused(capsys, "--data", "d", "--stpes", "3")


def test_every_run_mlm_name_of_the_audit_is_accepted_or_answered(capsys: pytest.CaptureFixture[str]) -> None:
    """None of these is an "unknown flag" any more."""
    accepted = {"--output_dir": "x", "--max_grad_norm": "1.0", "--adam_beta1": "0.9", "--adam_beta2": "0.98",
                "--adam_epsilon": "1e-6", "--model_name_or_path": "x", "--bf16": None, "--fp16": None,
                "--per_device_train_batch_size": "8", "--learning_rate": "1e-4", "--max_steps": "10",
                "--save_steps": "5", "--logging_steps": "5", "--seed": "1", "--mlm_probability": "0.15",
                "--gradient_accumulation_steps": "2", "--warmup_steps": "3", "--weight_decay": "0.01",
                "--lr_scheduler_type": "linear", "--eval_steps": "5", "--save_total_limit": "2",
                "--dataloader_num_workers": "1", "--optim": "adamw"}
    for flag, value in accepted.items():
        parse("--data", "c", flag, *([value] if value is not None else []))
    for flag in NO_EQUIVALENT_LINES:
        assert "unknown flag" not in refused(capsys, "--data", "c", flag, "1")


def test_use_cpu_and_local_rank_are_taken(capsys: pytest.CaptureFixture[str]) -> None:
    """--use_cpu / --no_cuda (TrainingArguments') are --device cpu; torch.distributed.launch's --local-rank N (or
    --local_rank) is taken and left to LOCAL_RANK, which the launcher sets too. They were unknown flags."""
    for argv in (["--use_cpu"], ["--no_cuda"], ["--use_cpu", "true"], ["--use_cpu=yes", "--device", "cpu"]):
        assert resolved(*argv).device == "cpu", argv
    assert resolved("--use_cpu", "false").device == "auto"
    assert resolved("--recipe", "cpu", "--no_cuda").device == "cpu"
    assert refused(capsys, "--use_cpu", "--device", "cuda:1") == \
        "error: give --use_cpu or --device cuda:1, not both (see python -m trainer.train --help)"
    for argv in (["--local-rank=1"], ["--local_rank", "0"]):
        assert resolved(*argv, "--steps", "7").steps == 7


@pytest.mark.parametrize("argv, on", [
    (["--gradient_checkpointing"], True), (["--gradient_checkpointing", "false"], False),
    (["--activation_checkpointing=yes"], True), (["--activation_checkpointing", "--steps", "5"], True), ([], False)])
def test_gradient_checkpointing_sets_activation_checkpointing(argv: list[str], on: bool) -> None:
    assert resolved(*argv).activation_checkpointing is on


@pytest.mark.parametrize("argv, compile_", [
    (["--torch_compile"], True), (["--torch_compile", "false"], False), (["--torch_compile=True"], True),
    (["--compile", "auto"], "auto"), (["--compile"], True), (["--compile", "--steps", "5"], True), ([], "auto"),
])
def test_torch_compile_sets_compile(argv: list[str], compile_: bool | str) -> None:
    assert resolved(*argv).compile == compile_


def test_run_name_and_compile_mistakes(capsys: pytest.CaptureFixture[str]) -> None:
    assert resolved("--run_name", "rb-ablation-3").trackers.run_name == "rb-ablation-3"
    assert "argument --compile/--torch_compile: true, false or auto, not 'maybe'" in refused(
        capsys, "--torch_compile", "maybe")


def test_config_overrides_set_the_model_keys_of_their_hugging_face_names() -> None:
    cfg = resolved("--config_overrides", "num_hidden_layers=3, hidden_size=96,num_attention_heads=4,"
                   "intermediate_size=384,hidden_dropout_prob=0.2,attention_probs_dropout_prob=0,"
                   "layer_norm_eps=1e-12,hidden_act=gelu_new,type_vocab_size=2,embedding_size=32")
    m = cfg.model
    assert (m.layers, m.hidden, m.heads, m.intermediate, m.embedding_size) == (3, 96, 4, 384, 32)
    assert (m.dropout, m.attention_dropout, m.layer_norm_eps, m.hidden_act, m.type_vocab_size) == (
        0.2, 0.0, 1e-12, "gelu_new", 2)
    # After the flags, before --set (which wins), over a recipe's values.
    cfg = resolved("--recipe", "roberta-base", "--config_overrides", "hidden_dropout_prob=0.05",
                   "--set", "model.dropout=0.3")
    assert cfg.model.dropout == 0.3 and cfg.model.size == "base"
    cfg = resolved("--recipe", "roberta-base", "--config_overrides", "hidden_dropout_prob=0.05")
    assert cfg.model.dropout == 0.05


@pytest.mark.parametrize("text, line", [
    ("n_embd=10", "error: --config_overrides: n_embd: no such key here; it takes hidden_size, num_hidden_layers, "),
    ("vocab_size=50265", "error: --config_overrides: vocab_size: the corpus's tokenizer sets it"),
    ("max_position_embeddings=512", "error: --config_overrides: max_position_embeddings: positions count from "
                                    "pad_id + 1 as fairseq's do: --set model.max_positions=N"),
    ("hidden_size", "error: --config_overrides: expects KEY=VALUE,... (run_mlm's form), got 'hidden_size'"),
    ("num_hidden_layers=2,", "error: --config_overrides: expects KEY=VALUE,... (run_mlm's form), got ''"),
])
def test_config_overrides_mistakes_are_one_line(capsys: pytest.CaptureFixture[str], text: str, line: str) -> None:
    assert refused(capsys, "--data", "d", "--config_overrides", text).startswith(line)


def test_with_init_config_overrides_takes_the_dropout_keys_and_refuses_a_shape_key(
        capsys: pytest.CaptureFixture[str]) -> None:
    for init in ("--init", "--model_name_or_path"):
        line = refused(capsys, "--data", "d", init, "m", "--config_overrides",
                       "hidden_dropout_prob=0,num_attention_heads=4,num_hidden_layers=2")
        assert line.startswith("error: --config_overrides num_hidden_layers, num_attention_heads: --init takes "
                               "the model's shape from its folder; with --init it takes only hidden_dropout_prob "
                               "and attention_probs_dropout_prob"), line
    args = parse("--data", "d", "--init", "m", "--config_overrides",
                 "hidden_dropout_prob=0,attention_probs_dropout_prob=0.05")
    assert args.config_overrides == ["model.dropout=0", "model.attention_dropout=0.05"]
    assert parse("--data", "d", "--config_overrides", "num_hidden_layers=2").config_overrides == ["model.layers=2"]


def test_a_bad_config_overrides_value_names_the_flag_and_the_key() -> None:
    from schemas.errors import UserError

    with pytest.raises(UserError, match=r"--config_overrides \(model.attention_dropout\): Input should be less "):
        resolved("--config_overrides", "attention_probs_dropout_prob=1.5")
    with pytest.raises(UserError, match=r"^invalid train config: model.dropout: "):  # --set's own: no flag named
        resolved("--config_overrides", "hidden_dropout_prob=0.1", "--set", "model.dropout=2")


def test_help_lists_the_run_mlm_names() -> None:
    from trainer.args import train_parser

    text = " ".join(train_parser().format_help().split())  # argparse wraps help at the terminal's width
    for shown in ("--output, --output_dir OUTPUT", "--init, --model_name_or_path INIT",
                  "--beta1, --adam_beta1 FLOAT", "[optim.beta1; default 0.9]", "--beta2, --adam_beta2 FLOAT",
                  "--eps, --adam_epsilon FLOAT", "[optim.eps; default 1e-06]",
                  "--clip_norm, --max_grad_norm FLOAT", "[optim.clip_norm; default 1.0]",
                  "--bf16 [true|false] --precision bf16", "--fp16 [true|false] --precision fp16",
                  "--num_train_epochs, --max_seq_length", "--warmup_ratio FLOAT", "[optim.warmup_ratio",
                  "--config_overrides KEY=VALUE,...", "attention_probs_dropout_prob=0 (keys: hidden_size,"):
        assert shown in text, shown
    for hidden in ("--overwrite_output_dir", "--report_to", "--logging_dir", "--per_device_eval_batch_size"):
        assert hidden not in text, hidden  # no flag of theirs to list: they only answer


@pytest.mark.parametrize("flag, value, words", [
    ("--num_train_epochs", "3", "error: --num_train_epochs: the length is --steps or --max_tokens (tokens); "
                                "one epoch is the train split's tokens (shardforge inspect CORPUS shows them)"),
    ("--max_seq_length", "512", "error: --max_seq_length: set by the corpus: build it (or shardforge repack it) "
                                "with --max_seq_len"),
    ("--config_overrides", "vocab_size=50265", "error: --config_overrides: vocab_size: the corpus's tokenizer "
                                               "sets it"),
])
def test_the_trainer_answers_them_in_one_line_before_importing_torch(flag: str, value: str, words: str) -> None:
    res = subprocess.run([sys.executable, "-c", import_probe("torch"), "trainer.train", "--data", "d", flag, value],
                         capture_output=True, text=True, cwd=REPO, env=ENV, timeout=120)
    assert res.stdout.splitlines()[-1] == "probe: False 2", res.stdout[-500:] + res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(words) and "Traceback" not in res.stderr, res.stderr


def test_a_config_key_under_a_flags_or_hugging_faces_name_is_answered_with_its_key(tmp_path) -> None:
    """A train config file or --set item with run_mlm's names (learning_rate, per_device_train_batch_size,
    max_steps) or a Hugging Face config key (num_hidden_layers) listed forty known keys, or pointed
    --set learning_rate at masking.rate: the line names the key, in the section it was written in."""
    from schemas.errors import UserError

    hf_style = tmp_path / "hf.yaml"
    hf_style.write_text("learning_rate: 1e-4\nper_device_train_batch_size: 8\nmax_steps: 100\nmodel:\n"
                        "  num_hidden_layers: 4\neval_masking:\n  mlm_probability: 0.2\n")
    with pytest.raises(UserError) as e:
        resolved("--data", "c", "--config", str(hf_style))
    head, _, rest = str(e.value).partition(": ")
    assert head == f"invalid config {hf_style}" and sorted(rest.split("; ")) == [
        "eval_masking.mlm_probability: unknown key (the key for that is eval_masking.rate)",
        "learning_rate: unknown key (the key for that is optim.lr)",
        "max_steps: unknown key (the key for that is steps)",
        "model.num_hidden_layers: unknown key (the key for that is model.layers)",
        "per_device_train_batch_size: unknown key (the key for that is batch_size)"], str(e.value)
    for item, says in (("learning_rate=1e-4", "the key for that is optim.lr (--set optim.lr=1e-4)"),
                       ("model.num_hidden_layers=4", "the key for that is model.layers (--set model.layers=4)"),
                       ("masking=span", "the key for that is masking.scheme (--set masking.scheme=span)"),
                       ("eval_masking.mlm_probability=0.2", "(--set eval_masking.rate=0.2)")):
        with pytest.raises(UserError) as e:
            resolved("--data", "c", "--set", item)
        assert says in str(e.value), str(e.value)
    # The keys it names are the ones that take the values.
    c = resolved("--data", "c", "--set", "optim.lr=1e-4", "--set", "model.layers=4", "--set", "eval_masking.rate=0.2")
    assert (c.optim.lr, c.model.layers, c.eval_masking.rate) == (1e-4, 4, 0.2)
    # A misspelt key still gets the closest one.
    typo = tmp_path / "typo.yaml"
    typo.write_text("optim:\n  learnin_rate: 1\n")
    with pytest.raises(UserError, match=r"optim.learnin_rate: unknown key \(known keys of optim: "):
        resolved("--data", "c", "--config", str(typo))
