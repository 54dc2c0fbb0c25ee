"""`shardforge evaluate`: a checkpoint's or a Hugging Face folder's MLM loss on a corpus split.

The evaluation is the trainer's own (trainer/evaluate.py), so its figures are checked against what a
real run logged: a finished run's last eval_loss, its token count and accuracy come back exactly from
its checkpoint, from the run folder and from the run's export loaded as a Hugging Face folder. The
refusals (another tokenizer, the wrong kind of folder, a split the corpus lacks) are one line each.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import free_port
from forkserver import run_python, run_python_together

from schemas.config import TrainConfig
from schemas.errors import UserError
from trainer.evaluate_cli import evaluate_model, render
from trainer.loggers import read_metrics
from trainer.train import train

pytestmark = pytest.mark.slow
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVAL_BATCHES = 3


@pytest.fixture(scope="module")
def trained(small_corpus, tmp_path_factory) -> tuple[str, str, dict]:
    """(corpus, run folder, the run's last metrics record): a tiny run that evaluates at its last step."""
    corpus = small_corpus[0]
    run = str(tmp_path_factory.mktemp("eval") / "run")
    train(TrainConfig.model_validate({
        "data": corpus, "output": run, "steps": 6, "batch_size": 8, "device": "cpu", "seed": 5,
        "optim": {"lr": 3e-3, "warmup_steps": 1}, "model": {"size": "tiny"}, "log_every": 3,
        "eval_every": 100, "eval_batches": EVAL_BATCHES, "masking": {"rate": 0.3},
        "eval_masking": {"scheme": "whole_word", "rate": 0.15}}))
    last = read_metrics(run)[-1]
    assert last["step"] == 6 and "eval_loss" in last
    return corpus, run, last


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory) -> str:
    """The run's export: a Hugging Face folder."""
    from trainer.export import export_checkpoint

    return export_checkpoint(trained[1], str(tmp_path_factory.mktemp("eval") / "hf"))


def same_eval(result: dict, logged: dict) -> None:
    assert result["eval_mlm_tokens"] == logged["eval_mlm_tokens"] > 0
    assert result["eval_loss"] == pytest.approx(logged["eval_loss"], rel=1e-9)
    assert result["eval_mlm_acc"] == pytest.approx(logged["eval_mlm_acc"], rel=1e-9)


def test_a_checkpoint_gives_the_eval_loss_its_run_logged(trained, tmp_path):
    corpus, run, last = trained
    ckpt = os.path.join(run, "checkpoints", "ckpt-00000006.pt")
    by_run = evaluate_model(run, batches=EVAL_BATCHES, device_name="cpu")
    same_eval(by_run, last)
    # The run's own settings: its corpus, batch size, seed and evaluation masking.
    assert (by_run["masking"], by_run["mask_rate"], by_run["seed"], by_run["batch_size"], by_run["step"]) == \
        ("whole_word", 0.15, 5, 8, 6)
    same_eval(evaluate_model(ckpt, corpus, batches=EVAL_BATCHES, device_name="cpu"), last)
    # Another seed masks other tokens; the whole split holds more batches than the run evaluated.
    assert evaluate_model(run, batches=EVAL_BATCHES, seed=6, device_name="cpu")["eval_loss"] != last["eval_loss"]
    whole = evaluate_model(run, device_name="cpu")
    assert whole["batches"] > EVAL_BATCHES and whole["eval_mlm_tokens"] > last["eval_mlm_tokens"]
    higher = evaluate_model(run, mask_rate=0.4, device_name="cpu")
    assert higher["eval_mlm_tokens"] > 2 * whole["eval_mlm_tokens"]


def test_the_runs_export_evaluates_as_its_checkpoint_and_the_cli_prints_it(trained, exported):
    corpus, run, last = trained
    hf = exported
    # A Hugging Face folder has no run settings: given the run's, it is the same model on the same masks.
    args = ["-m", "shardforge.cli", "evaluate", hf, "--data", corpus, "--batches",
            str(EVAL_BATCHES), "--batch_size", "8", "--seed", "5", "--device", "cpu", "--json"]
    r = run_python(args, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert res["masking"] == "token" and res["mask_rate"] == 0.15 and "step" not in res  # RoBERTa's masking
    # The checkpoint on the same scheme: the same model on the same masks (the export keeps every weight).
    ckpt = evaluate_model(run, batches=EVAL_BATCHES, masking="token", mask_rate=0.15, device_name="cpu")
    assert res["eval_loss"] != last["eval_loss"]  # the run evaluated with whole-word masking
    assert res["eval_mlm_tokens"] == ckpt["eval_mlm_tokens"] > 0
    assert res["eval_loss"] == pytest.approx(ckpt["eval_loss"], rel=1e-6)
    # The text form names the model, the corpus and the split, and the figures.
    text = render(res)
    said = (f"{hf} on {corpus} (valid split: {res['sequences']} sequences in {EVAL_BATCHES} batches of up to 8; "
            "token masking at 0.15, seed 5")
    assert said in text and 0 < res["sequences"] <= 8 * EVAL_BATCHES
    assert f"MLM loss {res['eval_loss']:.4f}" in text
    # One sequence in one batch reads as such; under 1,000 predicted tokens the figure says it is noisy.
    few = render({**res, "sequences": 1, "batches": 1, "eval_mlm_tokens": 65.0})
    assert "split: 1 sequence in 1 batch of up to 8;" in few, few
    assert few.endswith("(under 1,000 predicted tokens the masking draw alone moves the loss: more batches, or a "
                        "larger valid split, steady it)"), few
    assert "masking draw" not in render({**res, "eval_mlm_tokens": 1000.0})


def test_export_says_what_it_wrote_and_the_evaluate_command_it_prints_runs(trained, tmp_path, capsys):
    """The export's summary: the step and checkpoint, the class and shape from the folder's config.json, its
    tokenizer files, its card, and a load line whose evaluate command (the run's corpus) runs as printed."""
    from trainer.evaluate_cli import main as evaluate_main
    from trainer.export import main as export_main

    corpus, run, last = trained
    out = str(tmp_path / "hf")
    assert export_main([run, out]) == 0
    lines = capsys.readouterr().out.splitlines()
    ckpt = os.path.join(run, "checkpoints", "ckpt-00000006.pt")
    hf = json.loads(open(os.path.join(out, "config.json")).read())
    assert lines[0] == f"exported step 6 of {ckpt} to {out}", lines
    assert lines[1].startswith(f"  model      {hf['architectures'][0]}: {hf['num_hidden_layers']} layers, hidden "
                               f"{hf['hidden_size']}, vocab {hf['vocab_size']:,}; weights "), lines
    assert lines[1].endswith(" MiB (model.safetensors)") and "left out" not in lines[1], lines  # no sentence head
    assert lines[2] == "  tokenizer  spm.model + tokenizer.json" and all(
        os.path.exists(os.path.join(out, f)) for f in ("spm.model", "tokenizer.json", "README.md")), lines
    assert lines[3] == f"  card       {out}/README.md", lines
    load, command = lines[4].removeprefix("  load it    ").split("; ")
    assert load == f"AutoModelForMaskedLM.from_pretrained({out!r})", lines
    assert command == f"shardforge evaluate {out} --data {corpus}", lines
    argv = command.split()[2:] + ["--batches", "1", "--batch_size", "8", "--device", "cpu", "--json"]
    assert evaluate_main(argv) == 0
    assert json.loads(capsys.readouterr().out)["eval_mlm_tokens"] > 0


def test_the_export_summary_names_the_heads_it_leaves_out_and_a_bucket_is_loaded_from_a_copy(tmp_path) -> None:
    """A run with a sentence head and SBO: both named as left out; an export to a URL (file:// here, as
    gs:// or s3://) is not what from_pretrained reads, so the load line says to copy it down first."""
    from trainer.export import export_summary

    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["AlbertForMaskedLM"], "num_hidden_layers": 1,
                                                    "hidden_size": 768, "vocab_size": 30000}))
    (folder / "model.safetensors").write_bytes(b"\0" * (3 << 20))
    (folder / "spm.model").write_bytes(b"")
    cfg = TrainConfig.model_validate({"data": "gs://corpora/v1", "output": "r",
                                      "model": {"sentence_head": "sop", "span_boundary": True}})
    url = f"file://{folder}"
    lines = export_summary(url, "gs://runs/r/checkpoints/ckpt-00001000.pt", 1000, cfg)
    assert lines[0] == f"exported step 1,000 of gs://runs/r/checkpoints/ckpt-00001000.pt to {url}"
    assert lines[1] == ("  model      AlbertForMaskedLM: 1 layer, hidden 768, vocab 30,000; weights 3.0 MiB "
                        "(model.safetensors); left out: the SOP head and its pooler and the span boundary (SBO) "
                        "head (pretraining only)"), lines
    assert lines[2] == "  tokenizer  spm.model", lines
    assert lines[4] == ("  load it    AutoModelForMaskedLM.from_pretrained(FOLDER) on a local copy of it; shardforge "
                        f"evaluate {url} --data gs://corpora/v1"), lines


def test_two_ranks_evaluate_the_whole_split_as_one_process_does(trained):
    """Under torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR / MASTER_PORT: the env://
    rendezvous torchrun sets up) each rank takes its share of the split and rank 0 prints the sums: every
    sequence and predicted token counted once, the loss the one process gives."""
    corpus, run, _ = trained
    one = evaluate_model(run, device_name="cpu")
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2"}
    envs = [{**base, "RANK": str(r), "LOCAL_RANK": str(r)} for r in range(2)]
    args = ["-m", "shardforge.cli", "evaluate", run, "--device", "cpu", "--json"]
    first, second = run_python_together([args, args], envs=envs, capture_output=True, text=True, cwd=REPO,
                                        timeout=300)
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-2000:] + second.stderr[-2000:]
    assert second.stdout == ""  # one result, from rank 0
    assert " attention on " not in second.stderr and first.stderr.count(" attention on ") == 1  # rank 0 logs it
    two = json.loads(first.stdout)
    assert two["ranks"] == 2 and one["ranks"] == 1 and two["device"] == "cpu"
    assert two["sequences"] == one["sequences"] and two["eval_mlm_tokens"] == one["eval_mlm_tokens"] > 0
    assert two["batches"] >= one["batches"]  # each rank's batches, its share's
    assert two["eval_loss"] == pytest.approx(one["eval_loss"], rel=1e-6)
    assert two["eval_mlm_acc"] == pytest.approx(one["eval_mlm_acc"], abs=1.5 / one["eval_mlm_tokens"])
    assert f"{two['batches']} batches of up to 8 on 2 ranks;" in render(two)
    assert " on 1 ranks" not in render(one) and " ranks;" not in render(one)


def test_mistakes_are_one_line(trained, exported, tmp_path, capsys):
    """Through the command line's own entry (in this process: each case is a parse or a check before any
    model is built)."""
    from shardforge.cli import main as cli

    corpus, run, _ = trained
    hf = exported
    cases = [
        ([corpus], "is a corpus, not a training run"),
        ([hf], "is a Hugging Face folder: give --data"),
        ([str(tmp_path / "nothing")], "does not exist: give a run folder"),
        ([run, "--data", os.path.join(corpus, "nothing")], "nothing does not exist (check the path)"),
        ([run, "--mask_rate", "1"], "argument --mask_rate/--mlm_probability: must be between 0 and 1"),
        ([run, "--batches", "0"], "argument --batches/--eval_batches: must be 1 or more"),
        ([run, "--device", "tpu"], "argument --device: 'tpu' is not a device"),
        ([run, "--device", "cuda:7"], "--device cuda:7: "),  # a CPU build of torch, or no GPU 7
    ]
    for argv, said in cases:
        device = [] if "--device" in argv else ["--device", "cpu"]
        try:
            code = cli(["evaluate", *argv, *device])
        except SystemExit as e:  # argparse's mistakes exit
            code = e.code
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert code == 2 and "Traceback" not in err and len(lines) == 1, (argv, err[-1500:])
        assert lines[0].startswith("error: ") and said in lines[0], (argv, lines[0])


def with_tokenizer(corpus: str, dst: str, edit) -> str:
    """A copy of ``corpus`` whose tokenizer file is ``edit(bytes)`` (the manifest records its sha256)."""
    import hashlib

    shutil.copytree(corpus, dst)
    path = os.path.join(dst, "manifest.json")
    m = json.load(open(path))
    tok = os.path.join(dst, m["tokenizer"]["path"])
    data = edit(open(tok, "rb").read())
    open(tok, "wb").write(data)
    m["tokenizer"]["sha256"] = hashlib.sha256(data).hexdigest()
    json.dump(m, open(path, "w"))
    return dst


def test_a_corpus_of_another_tokenizer_is_refused_one_of_the_same_vocabulary_is_not(trained, tmp_path):
    import sentencepiece as spm

    corpus, run, last = trained
    # Another file, the same vocabulary (a field sentencepiece does not know, kept as unknown by
    # protobuf): the corpus's ids mean what the checkpoint learned; evaluated as the original.
    same = with_tokenizer(corpus, str(tmp_path / "same"), lambda b: b + bytes([0xA0, 0x06, 0x01]))
    same_eval(evaluate_model(run, same, batches=EVAL_BATCHES, device_name="cpu"), last)
    # One piece renamed (same length, so the file stays valid): another vocabulary, refused.
    sp = spm.SentencePieceProcessor(model_file=os.path.join(corpus, json.load(open(
        os.path.join(corpus, "manifest.json")))["tokenizer"]["path"]))
    piece = next(sp.id_to_piece(i).encode() for i in range(sp.get_piece_size())
                 if sp.id_to_piece(i).startswith("\u2581") and len(sp.id_to_piece(i)) >= 3)
    new = "\u2581".encode() + b"q" * (len(piece) - 3)

    def rename(b: bytes) -> bytes:
        old = bytes([0x0A, len(piece)]) + piece
        assert b.count(old) == 1 and new not in b
        return b.replace(old, bytes([0x0A, len(new)]) + new)

    other = with_tokenizer(corpus, str(tmp_path / "other"), rename)
    with pytest.raises(UserError, match="is built with another tokenizer .* and not the same vocabulary"):
        evaluate_model(run, other, device_name="cpu")


def test_a_corpus_without_the_split_names_the_other(trained, tmp_path):
    corpus, run, _ = trained
    m = json.load(open(os.path.join(corpus, "manifest.json")))
    no_valid = str(tmp_path / "no_valid")
    shutil.copytree(corpus, no_valid)
    m["shards"] = [s for s in m["shards"] if s["split"] != "valid"]
    m["totals"].pop("valid", None)
    json.dump(m, open(os.path.join(no_valid, "manifest.json"), "w"))
    with pytest.raises(UserError, match="has no valid split; --split train evaluates on its train split"):
        evaluate_model(run, no_valid, device_name="cpu")
    assert evaluate_model(run, no_valid, split="train", batches=1, device_name="cpu")["eval_mlm_tokens"] > 0
    # Batches too few to hold a masked token at the rate asked: the line says what to give.
    with pytest.raises(UserError, match=r"no token was masked in the 1 sequence of .* give more --batches"):
        evaluate_model(run, batches=1, batch_size=1, mask_rate=1e-9, device_name="cpu")


def test_the_sentence_heads_accuracy_is_printed_with_its_count_of_pairs():
    r = {"model": "m", "data": "d", "split": "valid", "sequences": 12, "batches": 2, "batch_size": 6,
         "masking": "span", "mask_rate": 0.15, "seed": 1, "device": "cpu", "precision": "fp32", "eval_loss": 2.0,
         "eval_ppl": 7.389, "eval_mlm_acc": 0.5, "eval_mlm_tokens": 30.0, "eval_sentence_acc": 0.75,
         "eval_sentence_pairs": 12.0}
    assert "sentence head accuracy 75.00% of 12 pairs" in render(r)
    assert "sentence head" not in render({k: v for k, v in r.items() if "sentence" not in k})
