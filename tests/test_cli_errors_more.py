"""More user mistakes through the real entry points: one clear line (exit 2), never a traceback.

An unknown training device, attention heads that do not divide the hidden width, an unknown
``serve --log_level`` and a ``demo --docs`` too small for the demo's corpus each ended in a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_cli_errors import one_line_error, run

from schemas.config import ModelConfig, TrainConfig


def test_train_refuses_an_unknown_device_in_one_line(small_corpus, tmp_path) -> None:
    """--device gpu reached torch.device: "Expected one of cpu, cuda, ... device type" with its traceback."""
    res = run("-m", "trainer.train", "--data", small_corpus[0], "--output", str(tmp_path / "run"), "--steps", "1",
              "--device", "gpu")
    assert one_line_error(res) == ("error: invalid train config: --device: 'gpu' is not a device: give auto, cpu, "
                                   "cuda (each rank's GPU), cuda:N (GPU N) or mps")
    assert not (tmp_path / "run").exists()
    for device in ("auto", "cpu", "cuda", "cuda:1", "mps"):
        assert TrainConfig(data="x", device=device).device == device
    for device in ("cuda:", "cuda:x", "CPU", ""):
        with pytest.raises(ValueError, match="is not a device"):
            TrainConfig(data="x", device=device)


def test_train_refuses_heads_that_do_not_divide_hidden_in_one_line(small_corpus, tmp_path) -> None:
    """model.heads=3 on the tiny size (hidden 64) was resolve_dims' ValueError, with its traceback."""
    res = run("-m", "trainer.train", "--data", small_corpus[0], "--output", str(tmp_path / "run"), "--steps", "1",
              "--set", "model.heads=3")
    assert one_line_error(res) == ("error: invalid train config: model: hidden 64 (size tiny's) is not divisible "
                                   "by heads 3: set heads to a divisor of 64, or hidden to a multiple of 3")
    with pytest.raises(ValueError, match=r"hidden 100 is not divisible by heads 16 \(size large's\)"):
        ModelConfig(size="large", hidden=100)
    assert ModelConfig(size="tiny", hidden=96, heads=3).heads == 3


def test_serve_refuses_an_unknown_log_level_in_one_line(tmp_path) -> None:
    """--log_level verbose reached logging.basicConfig: "Unknown level: 'verbose'", with its traceback."""
    (tmp_path / "in").mkdir()
    res = run("-m", "shardforge.cli", "serve", "--watch", str(tmp_path / "in" / "*.jsonl"),
              "--corpus", str(tmp_path / "corpus"), "--once", "--log_level", "verbose")
    assert one_line_error(res) == ("error: argument --log_level: invalid choice: 'VERBOSE' (choose from 'DEBUG', "
                                   "'INFO', 'WARNING', 'ERROR') (see shardforge serve --help)")
    assert not (tmp_path / "corpus").exists()
    from pipelines.flags import serve_parser

    args = serve_parser().parse_args(["--watch", "in/*.jsonl", "--corpus", "c", "--log_level", "warning"])
    assert args.log_level == "WARNING"


@pytest.mark.parametrize("docs", ["2", "0", "-1"])
def test_demo_refuses_too_few_docs_in_one_line(docs, tmp_path: Path) -> None:
    """The demo's corpus copies its third article into another source: --docs 2 was an IndexError."""
    res = run("-m", "shardforge.cli", "demo", "--output", str(tmp_path / "demo"), "--docs", docs, "--steps", "1")
    assert one_line_error(res) == f"error: argument --docs: must be 3 or more, not {docs} (see shardforge demo --help)"
    assert not (tmp_path / "demo").exists()


def test_export_of_a_missing_path_or_a_file_says_which(tmp_path: Path) -> None:
    """Both said something else: 'no checkpoint found in runs/nope', and 'Not a directory: …/checkpoints'."""
    (tmp_path / "manifest.json").write_text("{}")
    missing = one_line_error(run("-m", "shardforge.cli", "export", str(tmp_path / "nope"), str(tmp_path / "a")))
    assert "nope does not exist: give a run folder" in missing
    a_file = one_line_error(run("-m", "shardforge.cli", "export", str(tmp_path / "manifest.json"), str(tmp_path / "b")))
    assert "manifest.json is a file but not a checkpoint" in a_file


def test_plot_names_the_file_it_writes(tmp_path: Path) -> None:
    """``--out myplot`` printed 'myplot' while matplotlib wrote myplot.png."""
    import json

    from trainer.plot import plot_run

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": 5.0 - s / 10, "lr": 1e-4, "tokens_per_s": 100.0}) + "\n" for s in (1, 2, 3)))
    written = plot_run(str(run_dir), str(tmp_path / "myplot"))
    assert written == str(tmp_path / "myplot.png") and Path(written).is_file()


def _killed_run(tmp_path: Path) -> Path:
    """A run folder as a run killed at step 7 leaves it: checkpoints of steps 4 and 6, metrics of steps 1-7 and
    a last record cut mid-write."""
    import json

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    for step in (4, 6):
        (run_dir / "checkpoints" / f"ckpt-{step:08d}.pt").write_bytes(b"not loaded by status")
    records = [{"step": s, "epoch": 0, "loss": 6.0 - s / 10, "loss_smooth": 6.1 - s / 10, "mask_rate": 0.15,
                "lr": 1e-4 * s, "tokens_per_s": 1000.0 + s, "tokens_seen": 512 * s} for s in range(1, 8)]
    records[4]["eval_loss"], records[4]["eval_ppl"], records[4]["eval_mlm_acc"] = 5.5, 244.69, 0.125
    records[0]["total_steps"] = 10  # the process's plan, on its first record
    text = "".join(json.dumps(r) + "\n" for r in records) + '{"step": 8, "loss": 5.'
    (run_dir / "metrics.jsonl").write_text(text)
    return run_dir


def test_status_of_a_run_with_a_sentence_head_shows_the_mlm_part_and_the_head_s_accuracy(tmp_path, capsys) -> None:
    """The summed loss of a model with a sentence head is shown with its MLM part (what the eval loss
    measures), and the evaluation with the head's accuracy."""
    import json

    from shardforge.commands.status import main

    run_dir = _killed_run(tmp_path)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()[:-1]]
    rows[-1]["mlm_loss"] = 4.7
    rows[4]["eval_sentence_acc"] = 0.625
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main([str(run_dir)]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines() if not line.startswith("("))
    assert lines["loss"].startswith("5.3000 (MLM 4.7000) (smoothed 5.4000) at masking rate 0.15; ")
    assert lines["eval"] == ("loss 5.5000 (perplexity 244.69, MLM accuracy 12.5%, sentence head accuracy 62.5%) "
                             "at step 5")


def test_status_of_a_killed_run_says_where_it_stands_and_what_a_rerun_redoes(tmp_path: Path) -> None:
    """`shardforge status RUN` said "no corpus at RUN"; `shardforge plot` of a run killed mid-write ended in a
    JSONDecodeError traceback."""
    run_dir = _killed_run(tmp_path)
    res = run("-m", "shardforge.cli", "status", str(run_dir))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    lines = dict(line.split(None, 1) for line in res.stdout.splitlines() if not line.startswith("("))
    assert lines["step"].startswith("7 of 10, epoch 0, 3,584 tokens seen; last logged ")
    assert lines["loss"] == "5.3000 (smoothed 5.4000) at masking rate 0.15; lr 0.0007, 1,007 tokens/s"
    assert lines["eval"] == "loss 5.5000 (perplexity 244.69, MLM accuracy 12.5%) at step 5"
    assert lines["metrics"].startswith("1 line of metrics.jsonl holds no step record")
    assert lines["checkpoints"] == "2 kept: ckpt-00000004.pt, ckpt-00000006.pt"
    assert lines["resume"] == "a rerun into this folder resumes from step 6 (its last 1 logged step is trained again)"
    # The run's checkpoints/ folder is its run; a checkpoint file, a folder of runs and a missing path are one line.
    from shardforge.commands.status import corpus_status

    st = corpus_status(str(run_dir), now=2e9)
    assert (st["kind"], st["records"], st["torn_lines"], st["resumes_from"]) == ("run", 7, 1, 6)
    assert (st["total_steps"], st["finished"]) == (10, False)
    assert corpus_status(str(run_dir / "checkpoints"), now=2e9) == st
    ckpt = one_line_error(run("-m", "shardforge.cli", "status", str(run_dir / "checkpoints" / "ckpt-00000006.pt")))
    assert "ckpt-00000006.pt is a checkpoint, not a corpus" in ckpt and "shardforge export" in ckpt
    above = one_line_error(run("-m", "shardforge.cli", "status", str(tmp_path)))
    assert above.endswith(f"under it: {run_dir} (a training run)")
    assert one_line_error(run("-m", "shardforge.cli", "status", str(tmp_path / "nope"))).startswith("error: nothing at ")
    # plot draws the seven records and says what it skipped
    drawn = run("-m", "shardforge.cli", "plot", str(run_dir))
    assert drawn.returncode == 0 and (run_dir / "plots.png").is_file(), drawn.stderr
    assert drawn.stderr.strip() == (f"warning: skipped 1 line of {run_dir}/metrics.jsonl that holds no step record "
                                    "(a line torn by a killed run)")


@pytest.mark.parametrize("store_url", ["gs", "s3"], indirect=True)
def test_status_of_a_run_on_an_object_store_reads_the_same(store_url: str, tmp_path: Path) -> None:
    """The same run folder on the GCS and S3 emulators: the same report, the last log's time from the store."""
    from shardforge.commands.status import corpus_status
    from shardforge.storage import get_fs

    run_dir = _killed_run(tmp_path)
    fs, path = get_fs(store_url)
    for f in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        fs.pipe_file(f"{path}/run/{f.relative_to(run_dir).as_posix()}", f.read_bytes())
    local, remote = corpus_status(str(run_dir), now=2e9), corpus_status(f"{store_url}/run", now=2e9)
    assert remote["last_record_at"] is not None and abs(remote["last_record_at"] - local["last_record_at"]) < 120
    assert [c["path"] for c in remote["checkpoints"]] == [f"{store_url}/run/checkpoints/ckpt-0000000{s}.pt" for s in (4, 6)]
    for st in (local, remote):
        for key in ("run", "checkpoints", "last_record_at", "last_record_age_s"):
            st.pop(key)
    assert remote == local


def test_a_command_given_the_wrong_kind_of_folder_names_what_it_is(tmp_path: Path) -> None:
    """inspect or repack of a run folder said to build it from raw files or found no manifest; export of a
    corpus said 'no checkpoint found';
    plot of a folder of runs asked 'is this a shardforge run folder?'. Each now says what the folder is, or
    what lies under it."""
    top = tmp_path / "work"
    _killed_run(top)
    (top / "corpus").mkdir()
    (top / "corpus" / "manifest.json").write_text("{}")  # named, never read: the folder's kind is by its names
    (top / "raw").mkdir()
    (top / "raw" / "a.jsonl").write_text("{}\n")
    fresh = top / "fresh"
    fresh.mkdir()
    (fresh / "metrics.jsonl").write_text('{"step": 1, "loss": 6.0}\n')
    under = f"under it: {top / 'corpus'} (a corpus), {fresh} (a training run), {top / 'run'} (a training run)"
    said = {name: one_line_error(run("-m", "shardforge.cli", *args)) for name, args in {
        "inspect top": ["inspect", str(top)], "inspect run": ["inspect", str(top / "run")],
        "export corpus": ["export", str(top / "corpus"), str(tmp_path / "hf")],
        "export top": ["export", str(top), str(tmp_path / "hf")],
        "export fresh": ["export", str(fresh), str(tmp_path / "hf")],
        "plot corpus": ["plot", str(top / "corpus")], "plot top": ["plot", str(top)],
        "plot raw": ["plot", str(top / "raw")], "plot missing": ["plot", str(top / "nope")],
        "repack run": ["repack", "--tokenized", str(top / "run"), "--output", str(tmp_path / "r")],
        "repack top": ["repack", "--tokenized", str(top), "--output", str(tmp_path / "r")]}.items()}
    assert said["inspect top"].endswith(f"{top} is a folder but not a corpus; {under}")
    assert f"{top / 'run'} is a training run folder, not a corpus" in said["inspect run"]
    assert f"`shardforge status {top / 'run'}` says where the run stands" in said["inspect run"]
    assert said["export corpus"].startswith(f"error: {top / 'corpus'} is a corpus, not a training run: give a run folder")
    assert said["export top"].endswith(under) and said["export top"].startswith(f"error: no checkpoint found in {top}")
    assert said["export fresh"] == (f"error: no checkpoint in {fresh} yet: the run has saved none (`shardforge status "
                                    f"{fresh}` says where it stands)")
    assert said["plot corpus"] == f"error: {top / 'corpus'} is a corpus, not a training run: give a run folder (the --output of a run)"
    assert said["plot top"].endswith(under)
    assert said["plot raw"] == f"error: no metrics.jsonl in {top / 'raw'}: not a training run folder (the --output of a run)"
    assert said["repack run"] == (f"error: {top / 'run'} is a training run folder, not a corpus: repack needs the "
                                  "parent corpus (--tokenized CORPUS, the --data the run trained on)")
    assert said["repack top"].endswith(under)
    assert said["plot missing"] == f"error: {top / 'nope'} does not exist: give a run folder (the --output of a run)"


def _hf_folder(parent: Path) -> Path:
    """A folder as an export leaves it, by its names (config.json and weights; never read: a folder's kind
    goes by its names)."""
    model = parent / "hf-model"
    model.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (model / name).write_text("{}")
    return model


def test_a_hugging_face_folder_given_for_a_corpus_or_a_run_is_named_so(tmp_path: Path) -> None:
    """export, plot, status and inspect of an exported model folder said 'no checkpoint found', 'no
    metrics.jsonl', 'no corpus' or to build a corpus from its files."""
    top = tmp_path / "work"
    hf = _hf_folder(top)
    said = {name: one_line_error(run("-m", "shardforge.cli", *args)) for name, args in {
        "export": ["export", str(hf), str(tmp_path / "out")], "plot": ["plot", str(hf)],
        "status": ["status", str(hf)], "inspect": ["inspect", str(hf)], "inspect top": ["inspect", str(top)],
        "train": ["train", "--data", str(hf), "--output", str(tmp_path / "run")]}.items()}
    assert said["export"] == (f"error: {hf} is a Hugging Face model folder already: export makes one from a training "
                              "run (its folder, the --output of a run, or a checkpoint file)")
    assert said["plot"] == f"error: {hf} is a Hugging Face model folder, not a training run: give a run folder " \
                           "(the --output of a run)"
    assert said["status"].startswith(f"error: {hf} is a Hugging Face model folder, not a corpus or a training run")
    for name in ("inspect", "train"):
        assert said[name] == (f"error: no manifest at {hf / 'manifest.json'}: {hf} is a Hugging Face model folder, "
                              f"not a corpus (`shardforge evaluate {hf} --data CORPUS` measures it on one)")
    assert said["inspect top"].endswith(f"under it: {hf} (a Hugging Face model)")


def test_train_given_a_run_or_a_corpus_file_for_a_model_or_a_corpus_names_what_it_is(tmp_path: Path) -> None:
    """--init of a run folder said 'no config.json'; --data of a corpus's report said to build a corpus from
    it; --data of another JSON file listed the ten fields a manifest would need."""
    top = tmp_path / "work"
    _killed_run(top)
    corpus = top / "corpus"
    corpus.mkdir()
    (corpus / "manifest.json").write_text("{}")
    (corpus / "report.html").write_text("<html></html>")
    (top / "summary.json").write_text('{"shards": 17, "tokens": 118016}')
    said = {name: one_line_error(run("-m", "shardforge.cli", "train", *args, "--output", str(tmp_path / "out")))
            for name, args in {"init run": ["--data", str(corpus), "--init", str(top / "run")],
                               "init corpus": ["--data", str(corpus), "--init", str(corpus)],
                               "data report": ["--data", str(corpus / "report.html")],
                               "data json": ["--data", str(top / "summary.json")]}.items()}
    assert said["init run"] == (f"error: --init {top / 'run'}: a training run folder, not a Hugging Face model "
                                f"folder: export it first (`shardforge export {top / 'run'} HF`) and give --init HF, "
                                f"or continue that run itself with --output {top / 'run'} (a rerun resumes it)")
    assert said["init corpus"].endswith(f"{corpus}: a corpus, not a Hugging Face model folder (a corpus is what "
                                        "--data takes)")
    assert said["data report"] == (f"error: {corpus / 'report.html'} is a file of the corpus {corpus}: give the "
                                   f"corpus itself ({corpus}) or its manifest.json")
    assert said["data json"].startswith(f"error: {top / 'summary.json'} is JSON but not a shardforge manifest")


def test_a_folder_inside_a_corpus_or_a_run_given_as_the_corpus_names_the_one_it_is_in(tmp_path: Path) -> None:
    """--data CORPUS/versions (or a version's tokenized/, or RUN/checkpoints) said to build a corpus from its
    files with `shardforge build --input 'CORPUS/versions/*'`; it names the corpus or run it is in. train's
    and evaluate's --corpus (serve's and status's word for it) is --data."""
    top = tmp_path / "work"
    run_dir = _killed_run(top)
    corpus = top / "corpus"
    tokenized = corpus / "versions" / "v1-0123456789abcdef" / "tokenized"
    tokenized.mkdir(parents=True)
    (corpus / "manifest.json").write_text("{}")
    said = {name: one_line_error(run("-m", "shardforge.cli", *args))
            for name, args in {"versions": ["train", "--corpus", str(corpus / "versions")],
                               "tokenized": ["train", "--data", str(tokenized)],
                               "checkpoints": ["train", "--data", str(run_dir / "checkpoints")]}.items()}
    for name, folder in (("versions", corpus / "versions"), ("tokenized", tokenized)):
        assert said[name] == (f"error: no manifest at {folder / 'manifest.json'}: {folder} is a folder inside the "
                              f"corpus {corpus}: give the corpus itself ({corpus}) or its manifest.json"), said[name]
    assert said["checkpoints"].startswith(f"error: no manifest at {run_dir / 'checkpoints' / 'manifest.json'}: "
                                          f"{run_dir / 'checkpoints'} is a folder inside the training run {run_dir}, "
                                          "not a corpus"), said["checkpoints"]
    from trainer.args import evaluate_parser

    assert evaluate_parser().parse_args(["RUN", "--corpus", "C"]).data == "C"


def test_a_corpus_is_never_written_into_a_run_or_a_model_folder(small_corpus, tmp_path: Path) -> None:
    """build, repack and serve wrote their shards, manifest and versions/ among a run's checkpoints or an
    exported model's files (and train its checkpoints among a model's); each now refuses such a folder in
    one line, before any work."""
    import json

    run_dir = _killed_run(tmp_path)
    model = _hf_folder(tmp_path)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.jsonl").write_text(json.dumps({"text": "One sentence here. Another one there."}) + "\n")
    before = {p: sorted(x.name for x in p.rglob("*")) for p in (run_dir, model)}
    for folder, words in ((run_dir, "a training run folder"), (model, "a Hugging Face model folder")):
        for flag, args in (("--output", ["build", "--input", str(raw / "*.jsonl"), "--output", str(folder)]),
                           ("--output", ["build", "--input", str(raw / "*.jsonl"), "--output", str(folder),
                                         "--batch_mb", "1"]),
                           ("--output", ["repack", "--tokenized", small_corpus[0], "--output", str(folder)]),
                           ("--corpus", ["serve", "--watch", str(raw / "*.jsonl"), "--corpus", str(folder),
                                         "--once"])):
            line = one_line_error(run("-m", "shardforge.cli", *args))
            assert line == (f"error: {flag} {folder} is {words}, not a corpus: a corpus goes into a folder of its "
                            f"own; choose another {flag}"), (args, line)
    line = one_line_error(run("-m", "shardforge.cli", "train", "--data", small_corpus[0], "--output", str(model)))
    assert line == (f"error: --output {model} is a Hugging Face model folder; a run writes its checkpoints and "
                    "metrics into its --output: give a run folder of its own")
    assert {p: sorted(x.name for x in p.rglob("*")) for p in (run_dir, model)} == before


def test_a_corpus_a_run_or_a_model_given_as_raw_input_is_one_line(small_corpus, tmp_path: Path) -> None:
    """build --input CORPUS read its shards as raw text and stopped at an empty clean corpus after 4,530
    rejects; a run's or a model's files went the same way. Each is now named before any work."""
    corpus = small_corpus[0]
    run_dir = _killed_run(tmp_path)
    model = _hf_folder(tmp_path)
    out = tmp_path / "out"
    corpus_line = (f"is a shardforge corpus, built already: train on it (--data {corpus}), or `shardforge repack` it "
                   "for another packing rule")
    for args, want in ((["build", "--input", corpus], f"error: source other: --input {corpus} {corpus_line}"),
                       (["build", "--input", f"news={corpus}/*.tar", "--batch_mb", "1"],
                        f"error: source news: --input {corpus}/*.tar {corpus_line}"),
                       (["serve", "--watch", f"{corpus}/*", "--once"], f"error: source other: --watch {corpus}/* {corpus_line}"),
                       (["build", "--input", str(run_dir)],
                        f"error: source other: --input {run_dir} is a training run folder, not raw text: give the files "
                        "of your text (JSONL, JSON, Parquet, text, their tars)"),
                       (["build", "--input", f"{model}/*"],
                        f"error: source other: --input {model}/* is a Hugging Face model folder, not raw text: give the "
                        "files of your text (JSONL, JSON, Parquet, text, their tars)")):
        flag = "--corpus" if args[0] == "serve" else "--output"
        assert one_line_error(run("-m", "shardforge.cli", *args, flag, str(out))) == want
    assert not out.exists()


def test_an_input_url_of_a_scheme_without_its_filesystem_is_named_by_that_url(tmp_path: Path) -> None:
    """build --input 'abfs://c/raw/*.jsonl' without adlfs said "cannot open 'abfs://c/raw/manifest.json'":
    the probe for a corpus's marks, not the input the user gave."""
    res = run("-m", "shardforge.cli", "build", "--input", "zz://container/raw/*.jsonl", "--output", str(tmp_path / "o"))
    assert one_line_error(res) == "error: cannot open 'zz://container/raw': Protocol not known: zz"


def test_the_last_argument_takes_the_flag_other_commands_use_for_it(small_corpus, tmp_path, capsys) -> None:
    """`export RUN --output OUT` (train's word, run_mlm's `--output_dir`), `inspect --data CORPUS`, `evaluate
    --model_name_or_path M` were each "unknown flag" with no hint; the flag now gives the argument, and an
    argument given both ways, or neither, is one line."""
    from shardforge.commands import inspect, validate
    from trainer.args import parse_evaluate_args, parse_export_args

    for argv in (["run", "--output", "hf"], ["run", "--output_dir=hf"], ["--output", "hf", "run"], ["run", "hf"],
                 ["run", "--tokenizer", "t", "hf"], ["run", "--overwrite", "--output", "hf", "--license", "mit"]):
        args = parse_export_args(argv)
        assert (args.checkpoint, args.out) == ("run", "hf"), argv
        assert not hasattr(args, "out_by_flag")
    assert parse_export_args(["run", "--tokenizer", "t", "hf"]).tokenizer == "t"
    assert parse_evaluate_args(["--model_name_or_path", "m", "--batches", "2"]).model == "m"
    for argv, says in ((["run", "hf", "--output", "hf2"], "error: out given twice: 'hf' and --output 'hf2'"),
                       (["run"], "error: the following arguments are required: out (or --output OUT)"),
                       (["--output", "hf"], "error: the following arguments are required: checkpoint"),
                       (["run", "hf", "extra"], "error: unexpected argument: extra")):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            parse_export_args(argv)
        assert exit_.value.code == 2
        assert capsys.readouterr().err.startswith(says), argv

    root = small_corpus[0]
    assert inspect.main(["--data", root, "--samples", "0"]) == 0
    by_flag = capsys.readouterr().out
    assert inspect.main([root, "--samples", "0"]) == 0
    assert capsys.readouterr().out == by_flag and "tokens" in by_flag
    assert validate.main(["--corpus", root, "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith("OK: ")


@pytest.mark.parametrize("check, argv, says", [
    ("pipelines.flags:build_help", ["--data", "raw.jsonl", "--output", "o"], "--data (did you mean --input?)"),
    ("pipelines.flags:repack_help", ["--data", "c", "--output", "o"], "--data (did you mean --tokenized?)"),
    ("pipelines.flags:repack_help", ["--corpus", "c", "--output", "o"], "--corpus (did you mean --tokenized?)"),
    ("pipelines.flags:repack_help", ["--input", "c", "--output", "o"], "--input (did you mean --tokenized?)"),
    ("pipelines.flags:serve_help", ["--data", "c", "--watch", "w/*"], "--data (did you mean --corpus?)"),
    ("trainer.args:parse_train_args", ["--input", "c"], "--input (did you mean --data?)"),
    ("trainer.args:parse_evaluate_args", ["run", "--tokenized", "c"], "--tokenized (did you mean --data?)"),
    ("pipelines.flags:build_help", ["--input", "x", "--output", "o", "--vocab-size", "9"],
     "--vocab-size (did you mean --vocab_size?)"),
    # Other tools' words: SentencePiece's --model_type, run_mlm's --validation_split_percentage, run_clm's --block_size.
    ("pipelines.flags:build_help", ["--input", "x", "--output", "o", "--packing", "sop"], "--packing (did you mean --rule?)"),
    ("pipelines.flags:build_help", ["--input", "x", "--output", "o", "--model_type", "bpe"],
     "--model_type (did you mean --tokenizer_kind?)"),
    ("pipelines.flags:build_help", ["--input", "x", "--output", "o", "--min_length", "5"],
     "--min_length (did you mean --min_words?)"),
    ("pipelines.flags:build_help", ["--input", "x", "--output", "o", "--validation_split_percentage", "5"],
     "--validation_split_percentage (did you mean --valid_fraction?)"),
    ("pipelines.flags:repack_help", ["--tokenized", "c", "--output", "o", "--block_size", "128"],
     "--block_size (did you mean --max_seq_len?)"),
    ("trainer.args:parse_train_args", ["--data", "c", "--dtype", "bf16"], "--dtype (did you mean --precision?)"),
    ("trainer.args:parse_train_args", ["--data", "c", "--clip", "1"], "--clip (did you mean --max_grad_norm?)"),
    ("trainer.args:parse_train_args", ["--data", "c", "--size", "base"], "--size (did you mean --model_size?)"),
    ("trainer.args:parse_evaluate_args", ["run", "--bf16"], "--bf16 (did you mean --precision?)"),
    ("trainer.args:parse_evaluate_args", ["run", "--max_steps", "3"], "--max_steps (did you mean --batches?)"),
    ("trainer.args:parse_evaluate_args", ["run", "--limit", "3"], "--limit (did you mean --batches?)"),
    ("shardforge.commands.inspect:main", ["c", "--limit", "3"], "--limit (did you mean --samples?)"),  # spelling said --split
])
def test_a_flag_another_command_takes_suggests_this_one_s_word_for_it(check, argv, says, capsys) -> None:
    """Spelling alone answered `build --data` with --update, `train --input` with --init (a model to start
    from), `repack --corpus` with --output, `build --packing` with --encoding, `build --model_type` with
    --disk_type (a Dataflow flag), `train --dtype` with --data, `train --clip` with --recipe: the suggestion
    is the flag that means the same thing here."""
    import importlib

    module, func = check.split(":")
    with pytest.raises(SystemExit) as exit_:
        getattr(importlib.import_module(module), func)(argv)
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("check, argv, says", [
    ("trainer.args:parse_train_args", ["--data", "c", "--model_size", "Base"], "'Base' (choose from 'tiny', 'small', "
     "'base', 'large') (did you mean base?)"),
    ("trainer.args:parse_train_args", ["--data", "c", "--masking", "whole-word"], "(did you mean whole_word?)"),
    ("trainer.args:parse_train_args", ["--data", "c", "--precision", "BF16"], "(did you mean bf16?)"),
    ("trainer.args:parse_train_args", ["--data", "c", "--model_size", "xxl"], "'large') (see "),
    ("pipelines.flags:serve_parser().parse_args", ["--watch", "w/*", "--corpus", "c", "--log_level", "warn"],
     "'ERROR') (did you mean WARNING?)"),
    ("pipelines.flags:serve_parser().parse_args", ["--watch", "w/*", "--corpus", "c", "--log_level", "verbose"],
     "'ERROR') (see "),  # not ERROR: spelled alike, meant otherwise
    ("pipelines.flags:build_help", ["--input", "x", "--output", "o", "--rule", "docsentences"],
     "(did you mean doc_sentences?)"),
])
def test_a_value_not_among_a_flags_choices_names_the_choice_it_meant(check, argv, says, capsys) -> None:
    """The trainer's choice flags said argparse's line alone (`--model_size Base`, `--masking whole-word`);
    every command's parser now adds the choice the value meant, as the build's choice flags did: case,
    '-' and '+' for '_', then spelling; nothing where no choice is close."""
    import importlib

    module, func = check.split(":")
    target = importlib.import_module(module)
    with pytest.raises(SystemExit) as exit_:
        if func.endswith(".parse_args"):
            getattr(target, func.split("(")[0])().parse_args(argv)
        else:
            getattr(target, func)(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_evaluate_takes_the_trainers_and_run_mlms_names_for_its_flags() -> None:
    """`evaluate --eval_batches` (train's name for what evaluate calls --batches), run_mlm's
    --per_device_eval_batch_size and --mlm_probability (train's second name for --mask_rate) were unknown flags."""
    from trainer.args import parse_evaluate_args

    args = parse_evaluate_args(["run", "--eval_batches", "2", "--per_device_eval_batch_size", "8",
                                "--mlm_probability", "0.2"])
    assert (args.batches, args.batch_size, args.mask_rate) == (2, 8, 0.2)
    assert vars(args) == vars(parse_evaluate_args(["run", "--batches", "2", "--batch_size", "8", "--mask_rate", "0.2"]))


def test_a_config_key_written_as_a_flag_suggests_the_set_that_works(capsys) -> None:
    """`--model.share all` (the config's key as a flag, as Hydra-style tools take them) was answered with
    `did you mean --model_size?`: the suggestion is `--set model.share=all`, with the value given, and
    running it that way sets the key."""
    from trainer.args import parse_train_args
    from trainer.train import build_train_config

    argv = ["--data", "c", "--model.share", "all", "--model.sentence_head=sop", "--masking.span_p", "--steps", "3"]
    with pytest.raises(SystemExit) as exit_:
        parse_train_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model_size" not in err, err
    hints = re.findall(r"did you mean (--set \S+)\?", err)
    assert hints == ["--set model.share=all", "--set model.sentence_head=sop", "--set masking.span_p=VALUE"], err
    args = parse_train_args(["--data", "c", "--steps", "3", *" ".join(hints[:2]).split()])
    cfg = build_train_config(args, args.set)
    assert (cfg.model.share, cfg.model.sentence_head) == ("all", "sop")
    # The value of a key that names a credential is never echoed (the line may land in a log).
    with pytest.raises(SystemExit):
        parse_train_args(["--data", "c", "--logging.hf_token", "hf_abcdefghijklmnop", "--x.password=hunter2x"])
    err = capsys.readouterr().err
    assert "--set logging.hf_token=VALUE" in err and "--set x.password=VALUE" in err, err
    assert "hf_abcdefghijklmnop" not in err and "hunter2x" not in err, err
    # A command without --set keeps its spelling suggestion.
    from shardforge.console.args import unknown_args_message

    assert unknown_args_message(["--model.size", "x"], ["--model_size"]) == \
        "unknown flag: --model.size (did you mean --model_size?)"
