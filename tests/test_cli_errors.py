"""User mistakes through the real entry points: one clear line, never silence or a traceback.

Every test runs the command the user runs (`python -m pipelines.build`, `python -m shardforge.cli …`) in a
subprocess and reads what it printed.
"""

from __future__ import annotations

import ast
import gzip
import json
import logging
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_python
from probes import import_probe

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def run(*args: str, cwd: Path | str = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python ARGS` as the user would; the repo on PYTHONPATH so any cwd works."""
    return run_python(args, capture_output=True, text=True, cwd=cwd, env=ENV, timeout=timeout)


def one_line_error(res: subprocess.CompletedProcess) -> str:
    """The single stderr line of a command that failed on a user error (exit 2, no traceback)."""
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.stderr and "apitools" not in res.stderr
    return lines[0]


@pytest.fixture(scope="module")
def small_input(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("raw")
    (d / "a.jsonl").write_text(json.dumps({"text": "A short document about nothing much at all."}) + "\n")
    return d / "a.jsonl"


@pytest.fixture(scope="module")
def corpus(demo_corpus, tmp_path_factory) -> Path:
    """A small ordinary (non-served) corpus, built in-process."""
    from pipelines.jobs.build import run_build
    from tests.test_build import small_config

    out = tmp_path_factory.mktemp("cli-corpus") / "corpus"
    run_build(small_config(demo_corpus), str(out))
    return out


# ------------------------------------------------------------------ 13: unknown flags, abbreviations


def test_build_refuses_unknown_flags_naming_them_with_a_close_match(small_input, tmp_path) -> None:
    out = tmp_path / "out"
    res = run("-m", "pipelines.build", "--input", str(small_input), "--output", str(out),
              "--max_seq_length", "128", "--vocab-size", "500")
    line = one_line_error(res)
    assert "--max_seq_length (did you mean --max_seq_len?)" in line
    assert "--vocab-size (did you mean --vocab_size?)" in line
    assert not out.exists()  # nothing ran


@pytest.mark.parametrize("args, flag, suggestion", [
    (["-m", "pipelines.repack", "--tokenized", "p", "--output", "o", "--max_seq_lenn", "64"], "--max_seq_lenn",
     "--max_seq_len"),
    (["-m", "pipelines.serve", "--corpus", "CORPUS", "--watch", "w/*.jsonl", "--once", "--polll", "1"], "--polll",
     "--poll"),
    (["-m", "trainer.train", "--data", "d", "--stpes", "3"], "--stpes", "--steps"),
    (["-m", "trainer.train", "--data", "d", "--step", "3"], "--step", "--steps"),  # no abbreviations
    (["-m", "shardforge.cli", "build", "--input", "x", "--output", "o", "--vocab-size", "9"], "--vocab-size",
     "--vocab_size"),
    (["-m", "shardforge.cli", "repack", "--tokenized", "p", "--output", "o", "--rulee", "sop"], "--rulee", "--rule"),
    (["-m", "shardforge.cli", "serve", "--corpus", "CORPUS", "--watch", "w/*.jsonl", "--once", "--batch_retry", "1"],
     "--batch_retry", "--batch_retries"),
    (["-m", "shardforge.cli", "train", "--data", "d", "--batch-size", "2"], "--batch-size", "--batch_size"),
    (["-m", "shardforge.cli", "validate", "c", "--jobz", "2"], "--jobz", "--jobs"),
    (["-m", "shardforge.cli", "inspect", "c", "--sampels", "2"], "--sampels", "--samples"),
    (["-m", "shardforge.cli", "status", "c", "--jsn"], "--jsn", "--json"),
    (["-m", "shardforge.cli", "export", "ck", "out", "--tokeniser", "t"], "--tokeniser", "--tokenizer"),
    (["-m", "shardforge.cli", "plot", "run", "--outt", "p.png"], "--outt", "--out"),
    (["-m", "shardforge.cli", "demo", "--stepz", "1"], "--stepz", "--steps"),
])
def test_every_entry_point_refuses_unknown_flags(args, flag, suggestion, tmp_path) -> None:
    args = [a.replace("CORPUS", str(tmp_path / "corpus")) for a in args]
    line = one_line_error(run(*args, cwd=tmp_path))
    assert f"{flag} (did you mean {suggestion}?)" in line
    assert not (tmp_path / "corpus").exists() and not (tmp_path / "o").exists()


def test_serve_set_is_not_taken_as_settle(tmp_path) -> None:
    """`--set x=y` used to be read as an abbreviation of --settle."""
    corpus = tmp_path / "corpus"
    res = run("-m", "pipelines.serve", "--corpus", str(corpus), "--watch", str(tmp_path / "*.jsonl"), "--once",
              "--set", "x=y")
    assert "unknown flag: --set" in one_line_error(res)
    assert not corpus.exists()


def test_real_beam_options_still_pass(small_input, tmp_path) -> None:
    """Every kind of Beam flag gets through the check; the build then fails on the (deliberately) missing
    tokenizer, which proves the flags were accepted without running a whole build."""
    beam_flags = ["--runner", "FnApiRunner", "--project", "p", "--region", "europe-west4",
                  "--temp_location", str(tmp_path / "tmp"), "--staging_location", str(tmp_path / "stage"),
                  "--direct_num_workers", "1", "--direct_running_mode", "in_memory",
                  "--sdk_container_image", "example/img:1", "--job_name", "j", "--experiments", "a",
                  "--experiments=b", "--max_num_workers", "3", "--machine_type", "n1-standard-2",
                  "--setup_file", "./setup.py", "--save_main_session", "--no_use_public_ips",
                  "--dataflow_service_options", "x=y", "--environment_type", "LOOPBACK"]
    res = run("-m", "pipelines.build", "--input", str(small_input), "--output", str(tmp_path / "o"),
              "--tokenizer", str(tmp_path / "missing.model"), *beam_flags)
    assert "tokenizer model not found" in one_line_error(res)
    res = run("-m", "shardforge.cli", "repack", "--tokenized", str(tmp_path / "nothing"), "--output",
              str(tmp_path / "o2"), *beam_flags)
    assert "unknown flag" not in one_line_error(res)
    res = run("-m", "pipelines.serve", "--corpus", str(tmp_path / "served"), "--watch", str(tmp_path / "w/*.jsonl"),
              "--once", "--vocab_size", "300", *beam_flags)
    assert res.returncode == 0, res.stderr
    res = run("-m", "shardforge.cli", "serve", "--corpus", str(tmp_path / "served2"), "--watch",
              str(tmp_path / "w/*.jsonl"), "--once", "--vocab_size", "300", *beam_flags)
    assert res.returncode == 0, res.stderr


def test_beam_flag_values_are_checked_in_one_line(small_input, tmp_path) -> None:
    res = run("-m", "pipelines.build", "--input", str(small_input), "--output", str(tmp_path / "o"),
              "--direct_num_workers", "two")
    assert "--direct_num_workers: invalid int value: 'two'" in one_line_error(res)


def test_unknown_shardforge_command_suggests_one() -> None:
    res = run("-m", "shardforge.cli", "buidl")
    assert "unknown command 'buidl' (did you mean build?)" in one_line_error(res)


# ------------------------------------------------------------------ 15: help texts, noise, --version


@pytest.mark.parametrize("args, usage", [
    (["-m", "pipelines.build", "--help"], "usage: python -m pipelines.build "),
    (["-m", "pipelines.repack", "--help"], "usage: python -m pipelines.repack "),
    (["-m", "pipelines.serve", "--help"], "usage: python -m pipelines.serve "),
    (["-m", "trainer.train", "--help"], "usage: python -m trainer.train "),
    (["-m", "trainer.export", "--help"], "usage: python -m trainer.export "),
    (["-m", "trainer.plot", "--help"], "usage: python -m trainer.plot "),
    (["-m", "shardforge.cli", "export", "--help"], "usage: shardforge export "),
    (["-m", "shardforge.cli", "plot", "--help"], "usage: shardforge plot "),
    (["-m", "shardforge.cli", "build", "--help"], "usage: shardforge build "),
    (["-m", "shardforge.cli", "repack", "--help"], "usage: shardforge repack "),
    (["-m", "shardforge.cli", "serve", "--help"], "usage: shardforge serve "),
    (["-m", "shardforge.cli", "train", "--help"], "usage: shardforge train "),
    (["-m", "shardforge.cli", "status", "--help"], "usage: shardforge status "),
])
def test_help_names_the_command_as_the_user_ran_it(args, usage) -> None:
    res = run(*args)
    assert res.returncode == 0 and res.stdout.startswith(usage), res.stdout[:200]
    assert res.stderr == ""  # no 'apitools not found' warning, nothing else
    if "pipelines" in args[1] or args[2:3] in (["build"], ["repack"], ["serve"]):
        assert "Apache Beam's own options" in res.stdout and "--help_beam" in res.stdout


@pytest.mark.parametrize("module, args, says", [
    ("trainer.export", ["no-such-run", "out"], "no-such-run does not exist"),
    ("trainer.plot", ["no-such-run"], "no-such-run does not exist"),
])
def test_export_and_plot_as_modules_run_as_their_commands(tmp_path, module, args, says) -> None:
    """`python -m trainer.export` / `trainer.plot` are the commands (they did nothing before)."""
    res = run("-m", module, *args, cwd=tmp_path)
    assert says in one_line_error(res)


@pytest.mark.parametrize("args, says", [
    (["-m", "trainer.train", "--config", "examples/build.yaml", "--data", "d"],
     "examples/build.yaml is a build config (clean, dedupe, tokenizer, packing are build settings), not a train "
     "one: give it to shardforge build --config"),
    (["-m", "pipelines.build", "--config", "examples/train.yaml", "--output", "o"],
     "examples/train.yaml is a train config (data, output, steps, batch_size are train settings), not a build "
     "one: give it to shardforge train --config"),
])
def test_the_other_commands_config_is_named_as_such(args, says) -> None:
    """A build config given to train (or back) is one short line, not the 1 KB list of known keys."""
    line = one_line_error(run(*args))
    assert line == f"error: {says}", line


IMPORT_PROBE = import_probe("torch", "trainer.args")


@pytest.mark.parametrize("args, code", [
    (["trainer.train", "--help"], 0),
    (["trainer.train", "--data", "d", "--stpes", "3"], 2),
    (["shardforge.cli", "train", "--help"], 0),
    (["shardforge.cli", "train", "--data", "d", "--batch-size", "2"], 2),
    (["trainer.train", "--steps", "many"], 2),
])
def test_the_trainer_answers_help_and_flag_mistakes_before_importing_torch(args, code) -> None:
    """torch takes seconds to import: --help and a mistyped flag need none of it (trainer/args.py)."""
    res = run("-c", IMPORT_PROBE, *args)
    assert res.stdout.splitlines()[-1] == f"probe: False True {code}", res.stdout[-500:] + res.stderr[-2000:]
    if code == 0:
        assert res.stderr == "" and "usage: " in res.stdout and "--tokens_per_batch" in res.stdout
    else:
        assert one_line_error(res)


def test_the_import_probe_sees_torch_where_the_flags_are_right() -> None:
    """The control of the test above: with right flags the trainer goes on to import torch (so the probe's
    False there is torch not imported, not a probe that cannot see it)."""
    res = run("-c", IMPORT_PROBE, "trainer.train", "--print-config", "--steps", "3")
    assert res.stdout.splitlines()[-1] == "probe: True True 0", res.stdout[-500:] + res.stderr[-2000:]


TORCH_PROBE = import_probe("torch")


@pytest.mark.parametrize("args, code", [
    (["shardforge.cli", "export", "--help"], 0),
    (["shardforge.cli", "export", "ckpt.pt"], 2),  # the output folder is missing
    (["shardforge.cli", "plot", "--help"], 0),
])
def test_export_and_plot_answer_help_before_importing_torch(args, code) -> None:
    res = run("-c", TORCH_PROBE, *args)
    assert res.stdout.splitlines()[-1] == f"probe: False {code}", res.stdout[-500:] + res.stderr[-2000:]
    if code == 0:
        assert res.stderr == "" and res.stdout.startswith(f"usage: shardforge {args[1]} ")
    else:
        assert one_line_error(res)


BEAM_PROBE = import_probe("apache_beam")


@pytest.mark.parametrize("args, module", [
    (["pipelines.build", "--help"], "pipelines.build"),
    (["pipelines.repack", "-h"], "pipelines.repack"),
    (["pipelines.serve", "--help"], "pipelines.serve"),
    (["shardforge.cli", "build", "--help"], "pipelines.build"),
    (["shardforge.cli", "repack", "--help"], "pipelines.repack"),
    (["shardforge.cli", "serve", "--help"], "pipelines.serve"),
])
def test_beam_commands_answer_help_before_importing_beam(args, module, capsys) -> None:
    """Beam takes ~2 s to import: --help needs none of it (pipelines/flags.py), and says what the command
    says once Beam is imported (its main, here in the test's process, with Beam loaded)."""
    import importlib

    res = run("-c", BEAM_PROBE, *args)
    lines = res.stdout.splitlines()
    assert lines[-1] == "probe: False 0", res.stdout[-500:] + res.stderr[-2000:]
    assert res.stderr == ""
    main = importlib.import_module(module).main
    assert main(["--help"]) == 0
    full = capsys.readouterr().out.splitlines()
    if args[0] == "shardforge.cli":  # the usage (and the examples) name the command as the user ran it
        assert lines[0].startswith(f"usage: shardforge {args[1]} ") and full[0].startswith(f"usage: python -m {module} ")
        lines, full = [x.replace(f"shardforge {args[1]}", f"python -m {module}") for x in lines[lines.index(""):]], full[full.index(""):]
    assert lines[:-1] == full


def test_module_doc_reads_the_docstring_without_importing() -> None:
    import pipelines.jobs.build
    import pipelines.jobs.repack
    import pipelines.jobs.serve
    from pipelines.flags import module_doc

    for m in (pipelines.jobs.build, pipelines.jobs.repack, pipelines.jobs.serve):
        assert module_doc(m.__name__) == m.__doc__ and m.__doc__
    assert module_doc("pipelines.no_such_module") is None


def test_help_beam_lists_beams_own_options() -> None:
    res = run("-m", "pipelines.build", "--help_beam")
    assert res.returncode == 0 and res.stderr == ""
    for flag in ("--runner", "--project", "--region", "--temp_location", "--sdk_container_image",
                 "--direct_num_workers"):
        assert flag in res.stdout


def test_beam_commands_print_no_import_warning(corpus) -> None:
    res = run("-m", "shardforge.cli", "status", str(corpus))  # imports Beam (pipelines.jobs.ingest)
    assert res.returncode == 0 and "apitools" not in res.stderr and res.stderr == "", res.stderr


def test_version() -> None:
    from shardforge import __version__

    res = run("-m", "shardforge.cli", "--version")
    assert res.returncode == 0 and res.stdout.strip() == f"shardforge {__version__}"


# Every module a user can run (`python -m X`) and the dispatcher's subcommands.
ENTRY_PACKAGES = ("pipelines", "trainer", "shardforge")
# Entry points no user runs: Beam starts pipelines/localrunner/sdkworker.py as its SDK worker (errors are Beam's to report);
# pipelines.localrunner.docpool starts pipelines/localrunner/docworker.py (its tasks' errors go back to the step that handed them over).
NOT_USER_ENTRY_POINTS = {"pipelines/localrunner/sdkworker.py", "pipelines/localrunner/docworker.py"}


def _runs_through_run_cli(tree: ast.Module) -> bool:
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and n.module == "shardforge.console.run" for a in n.names}
    return "run_cli" in names and "run_cli" in imported


def _main_module(tree: ast.Module) -> str | None:
    """The module a thin entry point takes its ``main`` from (``from pipelines.jobs.build import main``, at the
    top level or inside a ``with``)."""
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module and any(a.name == "main" for a in n.names):
            return n.module
    return None


def test_every_main_module_runs_through_run_cli() -> None:
    """Each `if __name__ == "__main__"` of pipelines/trainer/shardforge reaches run_cli (statically), itself or
    through the ``main`` of the module it runs (``python -m pipelines.build`` runs ``pipelines.jobs.build``)."""
    missing = []
    for pkg in ENTRY_PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            mains = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
            if not mains or str(path.relative_to(REPO)) in NOT_USER_ENTRY_POINTS:
                continue
            if not _runs_through_run_cli(tree):
                runs = _main_module(tree)
                target = REPO / (runs.replace(".", "/") + ".py") if runs else None
                if target is None or not target.exists() or not _runs_through_run_cli(ast.parse(target.read_text("utf-8"))):
                    missing.append(str(path.relative_to(REPO)))
    assert not missing, f"entry points not run through shardforge.console.run.run_cli: {missing}"


@pytest.mark.parametrize("module", ["shardforge.commands.inspect", "shardforge.commands.status"])
def test_tool_modules_run_directly_print_one_line(module, tmp_path) -> None:
    """`python -m shardforge.commands.inspect MISSING` (not only `shardforge inspect`) is one line, exit 2, no traceback."""
    line = one_line_error(run("-m", module, str(tmp_path / "nope")))
    assert str(tmp_path / "nope") in line


# ------------------------------------------------------------------ 14: run folders, export, status


def test_status_of_an_ordinary_corpus_summarizes_its_manifest(corpus) -> None:
    from shardforge.storage.contract import load_manifest

    manifest, _ = load_manifest(str(corpus))
    res = run("-m", "shardforge.cli", "status", str(corpus))
    assert res.returncode == 0, res.stderr
    assert "not a served corpus" in res.stdout and "vNone" not in res.stdout
    train = manifest.totals["train"]
    assert f"train    {train.documents:,} documents, {train.samples:,} samples, {train.tokens:,} tokens" in res.stdout
    kept = sum(a.kept for a in manifest.accounting.values())
    assert f"{kept:,} kept" in res.stdout and manifest.packing_rule in res.stdout
    res = run("-m", "shardforge.cli", "status", str(corpus), "--json")
    st = json.loads(res.stdout)
    assert st["served"] is False and st["manifest"]["totals"]["tokens"] == sum(t.tokens for t in manifest.totals.values())
    # A split of one of each is counted in words.
    from shardforge.commands.status import render_plain

    one = {"documents": 1, "samples": 1, "tokens": 1, "shards": 1, "bytes": 10_240}
    text = render_plain({**st, "manifest": {**st["manifest"], "splits": {"valid": one}}})
    assert "valid    1 document, 1 sample, 1 token, 1 shard, 10,240 bytes" in text


def test_a_model_of_one_layer_and_one_head_is_said_in_the_singular() -> None:
    from schemas.config import ModelConfig
    from trainer.checkpoint import describe_model

    assert describe_model(ModelConfig(size="tiny", layers=1, heads=1, hidden=32), 100).startswith(
        "size=tiny: 1 layer, hidden 32, 1 head, ")


TRAIN = ["--steps", "2", "--batch_size", "4", "--device", "cpu", "--set", "model.size=tiny",
         "--set", "model.dropout=0.0", "--set", "shuffle_buffer=8"]


@pytest.mark.slow
def test_training_into_a_run_of_another_model_shape_says_what_it_holds(corpus, tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(corpus, work / "corpus")
    # Trained with a relative corpus path, from `work`.
    first = run("-m", "trainer.train", "--data", "corpus", "--output", "run", *TRAIN, cwd=work)
    assert first.returncode == 0, first.stderr
    res = run("-m", "trainer.train", "--data", "corpus", "--output", "run", *TRAIN, "--steps", "4",
              "--set", "model.layers=3", "--set", "model.hidden=96", cwd=work)
    line = one_line_error(res)
    assert "run folder run holds another model: ckpt-00000002.pt (step 2) is size=tiny" in line
    assert "this run asks for size=tiny: 3 layers, hidden 96" in line
    assert "new --output folder" in line and "checkpoints" in line
    # The checkpoint recorded the corpus as an absolute path: export works from any directory.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = run("-m", "shardforge.cli", "export", str(work / "run"), "hf", cwd=elsewhere)
    assert res.returncode == 0, res.stderr
    assert (elsewhere / "hf" / "config.json").exists() and (elsewhere / "hf" / "model.safetensors").exists()
    # The corpus gone (moved, deleted): the line says to give its tokenizer; a copy of the corpus serves.
    os.remove(work / "corpus")
    line = one_line_error(run("-m", "shardforge.cli", "export", str(work / "run"), "hf2", cwd=elsewhere))
    assert line.startswith(f"error: no manifest at {work / 'corpus' / 'manifest.json'}") and line.endswith(
        "that is the corpus this checkpoint trained on, whose tokenizer an export writes beside the model: pass "
        "--tokenizer URL (its tokenizer file, or a copy of the corpus)"), line
    res = run("-m", "shardforge.cli", "export", str(work / "run"), "hf2", "--tokenizer", str(corpus), cwd=elsewhere)
    assert res.returncode == 0, res.stderr
    assert (elsewhere / "hf2" / "tokenizer.json").read_bytes() == (elsewhere / "hf" / "tokenizer.json").read_bytes()


# ------------------------------------------------------------------ 16: credentials never echoed

SECRETS = ("AKIAEXAMPLEKEY", "wJalrSECRETvalue", "TOKEN123abc", "SIGNATURE456def", "PASSWORD789")


def assert_no_secret(res: subprocess.CompletedProcess) -> None:
    for s in SECRETS:
        assert s not in res.stderr and s not in res.stdout, (s, res.stderr)


def test_object_store_url_with_credentials_is_refused_without_echoing_them(tmp_path) -> None:
    res = run("-m", "shardforge.cli", "build", "--input", "s3://AKIAEXAMPLEKEY:wJalrSECRETvalue@bucket/raw/*.jsonl",
              "--output", str(tmp_path / "o"))
    line = one_line_error(res)
    assert_no_secret(res)
    assert "s3://bucket/raw/*.jsonl: credentials inside a s3:// URL are not supported" in line
    res = run("-m", "trainer.train", "--data", "gs://AKIAEXAMPLEKEY:wJalrSECRETvalue@bucket/corpus")
    assert "gs://bucket/corpus" in one_line_error(res)
    assert_no_secret(res)


@pytest.mark.parametrize("args", [
    ["-m", "pipelines.build", "--input", "IN", "--output", "OUT",
     "--config", "http://127.0.0.1:9/c.yaml?token=TOKEN123abc&X-Goog-Signature=SIGNATURE456def"],
    ["-m", "shardforge.cli", "inspect", "http://user:PASSWORD789@127.0.0.1:9/corpus?sig=SIGNATURE456def"],
    ["-m", "shardforge.cli", "validate", "https://127.0.0.1:9/corpus?X-Goog-Signature=SIGNATURE456def"],
    ["-m", "trainer.train", "--data", "http://127.0.0.1:9/corpus?token=TOKEN123abc"],
    ["-m", "trainer.train", "--data", "corpus", "--steps", "s3://bucket/x?token=TOKEN123abc"],  # argparse's own error
])
def test_failing_urls_with_credentials_are_redacted(args, small_input, tmp_path) -> None:
    args = [a.replace("IN", str(small_input)).replace("OUT", str(tmp_path / "o")) for a in args]
    res = run(*args)
    one_line_error(res)
    assert_no_secret(res)
    assert "127.0.0.1:9" in res.stderr or "s3://bucket/x" in res.stderr  # the URL itself is still named


def test_tracebacks_and_log_lines_are_redacted(capsys, caplog) -> None:
    """The two other ways a message leaves a process: an unexpected error's traceback, and logging."""
    from shardforge.console.redact import install_log_redaction, register_secrets
    from shardforge.console.run import run_cli

    register_secrets(["s3://AKIAEXAMPLEKEY:wJalrSECRETvalue@bucket/x"])

    def boom() -> int:
        raise RuntimeError('Invalid bucket name "AKIAEXAMPLEKEY:wJalrSECRETvalue@bucket" '
                           "(https://h/o?X-Goog-Signature=SIGNATURE456def&a=1)")

    assert run_cli(boom) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and 'Invalid bucket name "***:***@bucket"' in err and "https://h/o?a=1" in err
    assert all(s not in err for s in SECRETS)

    install_log_redaction()
    log = logging.getLogger("shardforge.test")
    with caplog.at_level(logging.INFO):
        log.info("reading %s", "gs://b/x?token=TOKEN123abc&sig=SIGNATURE456def")
        try:
            raise ValueError("http://u:PASSWORD789@h/p")
        except ValueError:
            log.exception("failed")
    text = caplog.text
    assert "reading gs://b/x" in text and "ValueError: http://h/p" in text
    assert all(s not in text for s in SECRETS)


# ------------------------------------------------------------------ 17: the big-input hint


def _jsonl_of(texts: list[str]) -> bytes:
    return ("\n".join(json.dumps({"text": t}) for t in texts) + "\n").encode()


@pytest.fixture(scope="module")
def big_inputs(tmp_path_factory) -> dict[str, Path]:
    """~120 MB of text that cleaning keeps (gzip, 13 MB stored) and ~110 MB that it drops (plain and gzip)."""
    from shardforge.commands.synth import make_article

    d = tmp_path_factory.mktemp("big")
    rng = random.Random(3)
    good = _jsonl_of([make_article(rng, 16) for _ in range(300)])
    junk = _jsonl_of(["buy now cheap deals click here"] * 2000)
    paths = {"kept.jsonl.gz": d / "kept.jsonl.gz", "dropped.jsonl": d / "dropped.jsonl",
             "dropped.jsonl.gz": d / "dropped.jsonl.gz"}
    with gzip.open(paths["kept.jsonl.gz"], "wb", compresslevel=1) as f:
        for _ in range(120_000_000 // len(good)):
            f.write(good)
    with open(paths["dropped.jsonl"], "wb") as f:
        for _ in range(120_000_000 // len(junk)):
            f.write(junk)
    with gzip.open(paths["dropped.jsonl.gz"], "wb", compresslevel=1) as f:
        for _ in range(120_000_000 // len(junk)):
            f.write(junk)
    for name, p in paths.items():
        cfg = tmp_path_factory.mktemp("cfg") / "build.yaml"
        # Gopher's dup_ngrams rule off: the synthetic template text repeats n-grams (as in the benchmarks).
        cfg.write_text(f"sources:\n  - {{name: news, input: '{p}'}}\nclean:\n  disabled_rules: [dup_ngrams]\n")
        paths[name] = cfg
    return paths


def _hint_run(cfg: Path, tmp_path: Path, *flags: str) -> str:
    """The build's stderr; a missing tokenizer stops it right after the hint, before any input is read."""
    res = run("-m", "pipelines.build", "--config", str(cfg), "--output", str(tmp_path / "o"),
              "--tokenizer", str(tmp_path / "missing.model"), *flags)
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1].startswith("error: tokenizer model not found")
    return res.stderr


@pytest.mark.slow
def test_big_input_hint_estimates_from_what_cleaning_keeps(big_inputs, tmp_path) -> None:
    # Spilled (the default) with a reused tokenizer: ~0.7 GB for 120 MB kept, no note.
    err = _hint_run(big_inputs["kept.jsonl.gz"], tmp_path)
    assert "note:" not in err and len(err.strip().splitlines()) == 1
    # Beam's runner holding everything (--spill_mb -1): ~33 MB per MB kept.
    err = _hint_run(big_inputs["kept.jsonl.gz"], tmp_path, "--spill_mb", "-1")
    assert err.startswith("note: ")
    decompressed = re.search(r"\(~(\d+) MB decompressed\)", err)  # measured on the first 4 MB: within 10%
    assert decompressed and 108 <= int(decompressed.group(1)) <= 132, err
    assert "100% of the text passed cleaning, so expect roughly 4." in err and "rough estimate" in err
    assert "33 MB of RAM per MB kept" in err and "--batch_mb 64" in err and "Drop --spill_mb -1" in err
    # Input that cleaning drops (an 836 MB crawl of that kind peaked at 347 MB): no claim of gigabytes.
    for name in ("dropped.jsonl", "dropped.jsonl.gz"):
        err = _hint_run(big_inputs[name], tmp_path, "--spill_mb", "-1")
        assert "note:" not in err and len(err.strip().splitlines()) == 1


def test_stage_error_log_filter_drops_only_user_errors() -> None:
    """Beam's log of a stage's exception is dropped for a user error (the command prints it in one
    line), also one Beam re-raised wrapped; a bug's traceback is still logged."""
    from pipelines.options import UserErrorsOnce
    from schemas.errors import UserError

    def record(exc: BaseException | None) -> logging.LogRecord:
        info = None
        if exc is not None:
            try:
                raise exc
            except BaseException:  # noqa: BLE001
                info = sys.exc_info()
        return logging.LogRecord("apache_beam.runners.common", logging.ERROR, __file__, 1, "failed", None, info)

    def wrapped() -> BaseException:
        try:
            raise UserError("no files match")
        except UserError as e:
            return RuntimeError(f"UserError: {e} [while running 'Read']")

    f = UserErrorsOnce()
    assert not f.filter(record(UserError("the clean corpus is empty")))
    assert not f.filter(record(wrapped()))
    assert f.filter(record(ValueError("a bug")))
    assert f.filter(record(None))


# ------------------------------------------------------------------ a path that cannot serve


@pytest.mark.parametrize("extra", [[], ["--batch_mb", "1"]])
def test_a_build_into_a_file_is_refused_before_any_work(small_input, tmp_path, extra) -> None:
    target = tmp_path / "taken"
    target.write_text("not a folder\n")
    res = run("-m", "pipelines.build", "--input", str(small_input), "--output", str(target), *extra)
    assert one_line_error(res) == f"error: --output {target} is a file, and a corpus is a folder: choose another --output"
    assert target.read_text() == "not a folder\n"


def test_reading_a_corpus_under_a_file_is_one_line(tmp_path) -> None:
    """validate / inspect of a path that is a file: it is not a corpus, and how to build one, not a traceback."""
    target = tmp_path / "afile"
    target.write_text("x\n")
    for tool in ("validate", "inspect"):
        line = one_line_error(run("-m", "shardforge.cli", tool, str(target)))
        assert line.startswith(f"error: {target} is a file, not a corpus") and "--input " in line, (tool, line)


def test_path_errors_a_user_can_fix_are_one_line_others_keep_their_traceback() -> None:
    from shardforge.console.run import path_error

    nested = RuntimeError("a step failed")
    nested.__context__ = NotADirectoryError(20, "Not a directory", "/out/versions")
    assert str(path_error(nested)) == "Not a directory: /out/versions"
    assert str(path_error(FileExistsError(17, "File exists", "/tmp/export"))) == "File exists: /tmp/export"
    assert str(path_error(PermissionError(13, "Permission denied", "/a", None, "/b"))) == "Permission denied: /a -> /b"
    assert str(path_error(OSError(28, "No space left on device", "/out/train-000001.tar"))).startswith(
        "No space left on device: /out/train-000001.tar (what was written completely stays")
    # A missing file is each command's own message; an error without a path may be a bug: a traceback.
    assert path_error(FileNotFoundError(2, "No such file or directory", "/x")) is None
    assert path_error(OSError(13, "Permission denied")) is None
    assert path_error(ValueError("x")) is None
    # A full disk never is a bug, also where a library's write names no file (TensorBoard's writer).
    assert str(path_error(OSError(28, "No space left on device"))).startswith("No space left on device (")
    assert "run the same command again" in str(path_error(OSError(122, "Disk quota exceeded", "/run/x")))


def test_a_bare_scheme_in_a_message_survives_redaction() -> None:
    """"for gs:// URLs" in a message came out "for gs: URLs" (urlunsplit drops // without a host)."""
    from shardforge.console.redact import redact_text
    from shardforge.storage import redact_url

    assert redact_url("gs://") == "gs://" and redact_url("s3://?token=T0KEN&a=1") == "s3://?a=1"
    assert redact_url("file:///tmp/x") == "file:///tmp/x" and redact_url("https://u:p@h/x") == "https://h/x"
    assert redact_text("STORAGE_EMULATOR_HOST for gs://, FSSPEC_S3_ENDPOINT_URL for s3://)") == \
        "STORAGE_EMULATOR_HOST for gs://, FSSPEC_S3_ENDPOINT_URL for s3://)"


# ------------------------------------------------------------------ hostile source names


@pytest.mark.parametrize("args", [
    ["-m", "pipelines.build", "--input", "../../evil=f.txt"],
    ["-m", "pipelines.build", "--input", "a/b=data.jsonl"],
    ["-m", "pipelines.build", "--input", "=f"],
    ["-m", "shardforge.cli", "build", "--input", "a/b=f"],
])
def test_a_hostile_source_name_is_one_line(args, tmp_path) -> None:
    """A source name is 1-40 of a-z, 0-9, _: anything else (a path, an empty name) is refused in one line
    naming the flag, before anything is read or written (it was pydantic's 20-line traceback)."""
    name = args[-1].split("=", 1)[0]
    line = one_line_error(run(*args, "--output", str(tmp_path / "out")))
    assert line.startswith(f"error: --input {args[-1]!r}: the source name {name!r} is not 1 to 40 "), line
    assert not (tmp_path / "out").exists()


def test_serve_refuses_a_hostile_source_name_in_one_line(tmp_path) -> None:
    res = run("-m", "shardforge.cli", "serve", "--source", "../evil", "--watch", str(tmp_path / "in" / "*.jsonl"),
              "--corpus", str(tmp_path / "corpus"), "--once")
    assert one_line_error(res).startswith("error: --source '../evil': the source name '../evil' is not 1 to 40 ")
    assert not (tmp_path / "corpus").exists()
