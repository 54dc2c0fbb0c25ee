"""The Beam commands as a newcomer meets them, through the real entry points: --help in the user's words
with the defaults, a mistyped flag or value answered in one line before Beam is imported, a config key
spelled wrong answered like a flag, a config that sets only some sections, a path that is not a corpus
told apart from one that does not exist, and one install command for the Dataflow extra.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_python
from probes import import_probe

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}

BEAM_PROBE = import_probe("apache_beam")


def run(*args: str, cwd: Path | str = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_python(args, capture_output=True, text=True, cwd=cwd, env=ENV, timeout=timeout)


def one_line_error(res: subprocess.CompletedProcess) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-3000:]
    return lines[0]


# ------------------------------------------------------------------ --help


def test_build_help_speaks_the_users_words_shows_defaults_and_offers_the_flags() -> None:
    from pipelines.flags import FORMATS, RULES, TOKENIZER_KINDS
    from schemas.config import BuildConfig, PackingConfig, TokenizerConfig

    res = run("-m", "shardforge.cli", "build", "--help")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    text = " ".join(res.stdout.split())  # argparse wraps the help: compare words, not lines
    # no module names, no internals
    for word in ("pipelines", "jobs.", "attempt tag", "``", "driver", "graph"):
        assert word not in text, word
    assert text.startswith("usage: shardforge build ") and "shardforge build --input 'data/*.jsonl'" in text
    # the defaults, as the config has them
    seed = BuildConfig.model_fields["seed"].default
    for flag, value in (("--vocab_size N", TokenizerConfig().vocab_size), ("--seed N", seed),
                        ("--valid_fraction F", PackingConfig().valid_fraction),
                        ("--max_seq_len N", PackingConfig().max_seq_len),
                        ("--tokenizer_kind KIND", TokenizerConfig().model_type), ("--spill_mb MB", 32)):
        help_of = text[text.index(flag + " "):]
        assert re.search(rf"\(default: {re.escape(str(value))}[);]", help_of[:400]), (flag, help_of[:400])
    assert "(default: 8000)" in text and "(default: 0.01)" in text and "(default: 1234)" in text
    # the values a flag takes
    for values in (FORMATS, RULES, TOKENIZER_KINDS):
        assert ", ".join(values) in text, values
    # the local runner's cores and memory and the summary are flags, and so are tokenizer kind, languages, text field
    for flag in ("--doc_processes N", "--spill_mb MB", "--spill_dir DIR", "--tokenizer_kind KIND", "--languages CODES",
                 "--text_field FIELD", "--json"):
        assert re.search(rf"^  {re.escape(flag)}", res.stdout, re.M), flag


def test_repack_help_offers_no_flag_it_refuses() -> None:
    res = run("-m", "shardforge.cli", "repack", "--help")
    assert res.returncode == 0 and res.stderr == ""
    assert "Refused" not in res.stdout and "--tokenizer_ref" not in res.stdout and "pipelines" not in res.stdout
    assert "--spill_mb MB" in res.stdout and "--doc_processes" not in res.stdout  # repack cleans no documents


# ------------------------------------------------------------------ mistakes before Beam is imported


@pytest.mark.parametrize("args, says", [
    (["pipelines.build", "--input", "x", "--output", "o", "--vocab-size", "9"],
     "unknown flag: --vocab-size (did you mean --vocab_size?)"),
    (["shardforge.cli", "build", "--input", "x", "--output", "o", "--max_seq_length", "9", "--jsn"],
     "unknown flags: --max_seq_length (did you mean --max_seq_len?), --jsn (did you mean --json?)"),
    (["pipelines.build", "--input", "x", "--output", "o", "--rule", "sopp"],
     "--rule 'sopp' is not one of full_sentences, doc_sentences, segment_pair_nsp, sentence_pair_nsp, sop "
     "(did you mean sop?)"),
    (["shardforge.cli", "build", "--input", "x", "--output", "o", "--format", "jsnl"], "--format 'jsnl' is not one of"),
    (["pipelines.build", "--input", "x", "--output", "o", "--vocab_size", "many"],
     "argument --vocab_size: invalid int value: 'many'"),
    (["shardforge.cli", "repack", "--tokenized", "p", "--output", "o", "--rule", "x"], "--rule 'x' is not one of"),
    (["pipelines.repack", "--tokenized", "p", "--output", "o", "--doc_processes", "2"], "unknown flag: --doc_processes"),
    # serve: a misspelled flag is named before the required --corpus it may be the misspelling of
    (["pipelines.serve", "--wath", "w/*.jsonl"], "unknown flag: --wath (did you mean --watch?)"),
    (["shardforge.cli", "serve", "--watch", "w/*.jsonl", "--corpus", "o", "--vocab-size", "9"],
     "unknown flag: --vocab-size (did you mean --vocab_size?)"),
    (["shardforge.cli", "serve", "--watch", "w/*.jsonl", "--corpus", "o", "--rule", "x"], "--rule 'x' is not one of"),
    (["pipelines.serve", "--watch", "w/*.jsonl"], "the following arguments are required: --corpus"),
    # what the command line lacks, before Beam too
    (["pipelines.build", "--input", "x", "--output", "o", "--rule", "SEGMENT-PAIR+NSP"],
     "(did you mean segment_pair_nsp?)"),  # the papers' spelling, as README.md writes the rules
    (["pipelines.build", "--input", "x"], "--output URL is required"),
    (["shardforge.cli", "build", "--output", "o", "--vocab_size", "9"], "no input: give --input URL"),
    # an empty URL ("$RAW" unset) would read the working folder, subfolders and all
    (["pipelines.build", "--input", "", "--output", "o"], "--input '' names no file, folder or glob"),
    (["shardforge.cli", "build", "--input", "news= ", "--output", "o"],
     "--input 'news= ' names no file, folder or glob after NAME="),
    (["pipelines.repack", "--output", "o"], "--tokenized URL (the parent corpus) and --output URL are required"),
    # python -m shardforge is the shardforge command
    (["shardforge", "build", "--inptu", "x", "--output", "o"], "unknown flag: --inptu (did you mean --input?)"),
])
def test_flag_mistakes_are_one_line_before_beam_is_imported(args, says, tmp_path) -> None:
    """Beam takes 2 s to import (9-13 s on a busy machine): a mistyped flag or value needs none of it, and
    a bad value names the flag the user typed (not the config key it sets: packing.rule)."""
    res = run("-c", BEAM_PROBE, *args, cwd=tmp_path)
    assert res.stdout.splitlines()[-1] == "probe: False 2", res.stdout[-500:] + res.stderr[-2000:]
    line = one_line_error(res)
    assert says in line and "packing.rule" not in line, line
    assert not (tmp_path / "o").exists()


def test_beam_flags_is_the_list_of_beams_own_options() -> None:
    """The list the early check trusts is what Beam's registered option classes hold at the pinned version
    (a Beam upgrade that adds or drops a flag fails here: update pipelines.flags.BEAM_FLAGS)."""
    import argparse
    import importlib.metadata

    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.flags import BEAM_FLAGS, BEAM_VERSION

    assert importlib.metadata.version("apache-beam") == BEAM_VERSION
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for cls in {c for c in PipelineOptions.__subclasses__() if c.__module__.startswith("apache_beam.")}:
        cls._add_argparse_args(parser)
    assert {s for a in parser._actions for s in a.option_strings} == BEAM_FLAGS


def test_a_runner_with_options_of_its_own_leaves_unknown_flags_to_beam() -> None:
    """A runner given by its module path (or Beam's DaskRunner) may bring options of its own: only the check
    after Beam's import can know them."""
    from pipelines.flags import beam_flags_known, build_parser, check_flags

    assert beam_flags_known([]) and beam_flags_known(["--runner", "DataflowRunner"])
    assert beam_flags_known(["--runner=flink"]) and beam_flags_known(["--runner", "FnApiRunner"])
    assert not beam_flags_known(["--runner", "my.pkg.MyRunner"]) and not beam_flags_known(["--runner=my.pkg.R"])
    assert not beam_flags_known(["--runner", "DaskRunner"])
    check_flags(build_parser(), ["--runner", "my.pkg.MyRunner", "--my_runner_option", "1"])  # no exit
    with pytest.raises(SystemExit):
        check_flags(build_parser(), ["--runner", "DataflowRunner", "--my_runner_option", "1"])


@pytest.mark.parametrize("entry", [["shardforge.cli", "build", "--input"], ["pipelines.build", "--input"],
                                   ["shardforge.cli", "serve", "--corpus", "o", "--watch"]])
@pytest.mark.parametrize("runner", ["FlinkRunner", "DataflowRunner"])
def test_a_glob_the_shell_expanded_is_named_before_the_runners_checks(entry, runner, tmp_path) -> None:
    """`--input raw/*.jsonl` unquoted hands the command every file: the first is --input's, the rest are
    named as the shell's expansion, before the runner's checks (which would name the first file alone as
    the input, or a job-server jar to download), and before Beam is imported."""
    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        (tmp_path / name).write_text("{}\n")
    output = ["--output", "o"] if "build" in entry[:2] else []
    res = run("-c", BEAM_PROBE, *entry, "a.jsonl", "b.jsonl", "c.jsonl", *output, "--runner", runner, cwd=tmp_path)
    assert res.stdout.splitlines()[-1] == "probe: False 2", res.stdout[-500:] + res.stderr[-2000:]
    line = one_line_error(res)
    assert line.startswith("error: unexpected arguments: b.jsonl c.jsonl (a glob the shell expanded?"), line


@pytest.mark.parametrize("written, size", [("268435456", 268435456), ("256MiB", 256 << 20), ("256MB", 256_000_000),
                                           ("256M", 256_000_000), ("2.5e8", 250_000_000), ("1.5GB", 1_500_000_000),
                                           ("64KiB", 65536), ("1_000_000", 1_000_000), ("4,096", 4096), ("2048B", 2048)])
def test_a_size_in_bytes_is_read_as_people_write_it(written, size, tmp_path) -> None:
    from pipelines.jobs.build_config import build_config_from_options
    from pipelines.options import BuildOptions
    from shardforge.console.args import byte_size

    assert byte_size(written) == size
    built = build_config_from_options(BuildOptions(["--input", "x", "--shard_bytes", written]))  # Beam's parser
    assert built.shards.target_bytes == size


@pytest.mark.parametrize("written, says", [("0.5", "'0.5' is not a whole number of bytes"),
                                           ("1x", "'1x' is not a size in bytes (an integer, or 2.5e8, 256MB, 256MiB)"),
                                           ("MB", "is not a size in bytes")])
def test_a_size_that_is_no_whole_number_of_bytes_is_one_line(written, says, tmp_path) -> None:
    res = run("-m", "shardforge.cli", "build", "--input", "x", "--output", "o", "--shard_bytes", written, cwd=tmp_path)
    assert one_line_error(res).startswith(f"error: argument --shard_bytes: {says}") or says in one_line_error(res)


def test_large_counts_are_read_as_people_write_them() -> None:
    from shardforge.console.args import count

    assert [count(t) for t in ("2000000000", "2e9", "2B", "2G", "2,000,000,000", "2_000_000_000", "1.5M", "10k")] == \
        [2_000_000_000] * 6 + [1_500_000, 10_000]


def test_the_values_of_beams_flags_are_not_strays() -> None:
    from pipelines.flags import build_parser, stray_arguments

    argv = ["--input", "gs://b/*", "a", "--output", "gs://b/o", "--runner", "DataflowRunner", "--project", "p",
            "--region=r", "b", "--temp_location", "gs://t", "--experiments=x", "--save_main_session", "c"]
    _, extra = build_parser().parse_known_args(argv)
    # "c" follows a switch that takes no value: Beam's own check, which knows the switch, names it
    assert stray_arguments(argv, extra) == ["a", "b"]


# ------------------------------------------------------------------ configs


def test_a_config_key_spelled_wrong_is_answered_like_a_flag(tmp_path) -> None:
    cfg = tmp_path / "build.yaml"
    cfg.write_text("tokenizer:\n  vocab_sise: 300\npackng: {rule: sop}\n")
    res = run("-m", "pipelines.build", "--config", str(cfg), "--input", str(tmp_path / "a.jsonl"), "--output",
              str(tmp_path / "o"))
    line = one_line_error(res)
    assert "tokenizer.vocab_sise: unknown key (did you mean vocab_size?)" in line, line
    assert "packng: unknown key (did you mean packing?)" in line and "Extra inputs" not in line, line


def test_a_config_that_sets_some_sections_combines_with_the_flags(tmp_path) -> None:
    """`tokenizer: {model_type: byte_bpe}` and --input: the sources come from the flag, the rest from the file."""
    from pipelines.jobs.build_config import build_config_from_options
    from pipelines.options import BuildOptions
    from schemas.errors import UserError

    cfg = tmp_path / "partial.yaml"
    cfg.write_text("tokenizer: {model_type: byte_bpe}\n")
    built = build_config_from_options(BuildOptions(["--config", str(cfg), "--input", "news=raw/*.jsonl",
                                                    "--languages", "en,de", "--text_field", "body"]))
    assert built.tokenizer.model_type == "byte_bpe" and built.tokenizer.vocab_size == 8000
    assert [(s.name, s.input, s.text_field) for s in built.sources] == [("news", "raw/*.jsonl", "body")]
    assert built.clean.languages == ["en", "de"]
    assert build_config_from_options(BuildOptions(["--input", "x", "--languages", "any"])).clean.languages == []
    with pytest.raises(UserError, match="no input"):  # neither the file nor the flags name a source
        build_config_from_options(BuildOptions(["--config", str(cfg)]))
    cfg.write_text("sources: [{name: news, input: ' '}]\n")  # a config's empty input is refused too
    with pytest.raises(UserError, match=r"sources\.0\.input: .*empty: give a file URL, a folder or a glob"):
        build_config_from_options(BuildOptions(["--config", str(cfg)]))
    cfg.write_text("tokenizer: {model_type: byte}\n")  # what the file sets is still checked
    with pytest.raises(UserError, match=r"tokenizer\.model_type"):
        build_config_from_options(BuildOptions(["--config", str(cfg), "--input", "x"]))


def test_input_flags_replace_a_configs_sources_and_say_so(tmp_path, capsys) -> None:
    from pipelines.jobs.build_config import build_config_from_options
    from pipelines.options import BuildOptions

    cfg = tmp_path / "sources.yaml"
    cfg.write_text("sources: [{name: news, input: 'news/*.json', format: ccnews}, {name: owt, input: owt}]\n")
    built = build_config_from_options(BuildOptions(["--config", str(cfg), "--input", "cc=cc.parquet"]))
    assert [s.name for s in built.sources] == ["cc"]
    assert capsys.readouterr().err == (f"note: --input replaces the 2 sources of --config {cfg} (news, owt); to build "
                                       "those too, give each as an --input NAME=URL, or leave --input out\n")
    assert [s.name for s in build_config_from_options(BuildOptions(["--config", str(cfg)])).sources] == ["news", "owt"]
    assert capsys.readouterr().err == ""


def test_per_source_flags_set_a_configs_sources_too(tmp_path) -> None:
    """--format, --text_field and --encoding with a --config that lists the sources (no --input): they
    were dropped without a word; they set every source, and a bad value names the flag."""
    from pipelines.jobs.build_config import build_config_from_options
    from pipelines.options import BuildOptions
    from schemas.errors import UserError

    cfg = tmp_path / "sources.yaml"
    cfg.write_text("sources: [{name: news, input: 'news/*.json'}, {name: books, input: books, encoding: cp1252}]\n")
    built = build_config_from_options(BuildOptions(["--config", str(cfg), "--text_field", "body",
                                                    "--encoding", "Latin1", "--format", "jsonl"]))
    assert [(s.name, s.text_field, s.encoding, s.format) for s in built.sources] == [
        ("news", "body", "iso8859-1", "jsonl"), ("books", "body", "iso8859-1", "jsonl")]
    kept = build_config_from_options(BuildOptions(["--config", str(cfg)]))  # no flag: the config's own values
    assert [(s.text_field, s.encoding, s.delimiter) for s in kept.sources] == [("text", "utf-8", None),
                                                                               ("text", "cp1252", None)]
    blank = build_config_from_options(BuildOptions(["--input", "books=b.txt", "--delimiter", ""]))
    assert [s.delimiter for s in blank.sources] == [""]  # '' is a delimiter (blank lines), not "not given"
    with pytest.raises(UserError, match=r"--encoding \(sources\.0\.encoding\): 'klingon' is no text encoding"):
        build_config_from_options(BuildOptions(["--config", str(cfg), "--encoding", "klingon"]))
    with pytest.raises(UserError, match=r"--input 'x': encoding: 'rot13' is a codec that transforms data"):
        build_config_from_options(BuildOptions(["--input", "x", "--encoding", "rot13"]))


def test_print_config_prints_the_resolved_build_config_that_config_loads_again(tmp_path) -> None:
    """--print-config: the defaults, the file and the flags resolved, as YAML; no --output, nothing written;
    the printed file given to --config resolves to the same config."""
    import yaml

    from pipelines.jobs.build_config import build_config_from_options
    from pipelines.options import BuildOptions
    from schemas.config import BuildConfig

    partial = tmp_path / "partial.yaml"
    partial.write_text("tokenizer: {vocab_size: 2000}\n")
    flags = ["--config", str(partial), "--input", "news=raw/*.jsonl", "--rule", "sop", "--min_words", "20"]
    res = run("-m", "shardforge.cli", "build", *flags, "--print-config", cwd=tmp_path)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    printed = yaml.safe_load(res.stdout)
    want = build_config_from_options(BuildOptions(flags))
    assert BuildConfig.model_validate(printed) == want
    assert (printed["tokenizer"]["vocab_size"], printed["packing"]["rule"], printed["clean"]["min_words"]) == \
        (2000, "sop", 20)
    assert printed["sources"] == [want.sources[0].model_dump(mode="json")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["partial.yaml"]  # nothing read or written
    again = tmp_path / "printed.yaml"
    again.write_text(res.stdout)
    res2 = run("-m", "pipelines.build", "--config", str(again), "--print_config", cwd=tmp_path)
    assert res2.returncode == 0 and res2.stdout == res.stdout, res2.stderr
    assert "--print-config" in run("-m", "shardforge.cli", "build", "--help").stdout
    # Alone, it prints every default but the sources, which only --input (or a config's list) gives.
    alone = run("-m", "shardforge.cli", "build", "--print-config", cwd=tmp_path)
    assert alone.returncode == 0 and alone.stderr == "", alone.stderr
    defaults = yaml.safe_load(alone.stdout)
    assert "sources" not in defaults and "# no sources: --input URL gives them" in alone.stdout
    assert BuildConfig.model_validate({**defaults, "sources": [{"name": "n", "input": "x"}]}) == \
        BuildConfig.model_validate({"sources": [{"name": "n", "input": "x"}]})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["partial.yaml", "printed.yaml"]


# ------------------------------------------------------------------ a path that is not a corpus


def test_validate_tells_a_file_a_folder_and_nothing_apart(tmp_path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "plain.jsonl").write_text('{"text": "hello"}\n')
    lines = {what: one_line_error(run("-m", "shardforge.cli", "validate", str(path)))
             for what, path in (("file", raw / "plain.jsonl"), ("folder", raw), ("nothing", tmp_path / "nope"))}
    assert lines["file"] == (f"error: {raw}/plain.jsonl is a file, not a corpus (a corpus is the folder a build "
                             "writes: shards and their manifest.json): build one from it with `shardforge build "
                             f"--input {raw}/plain.jsonl --output CORPUS`, then use CORPUS")
    assert f"{raw} is a folder but not a corpus" in lines["folder"] and f"--input '{raw}/*'" in lines["folder"]
    assert lines["nothing"] == f"error: no manifest at {tmp_path}/nope/manifest.json: {tmp_path}/nope does not exist " \
                               "(check the path)"


def test_train_on_a_raw_file_says_to_build_a_corpus_first(tmp_path) -> None:
    (tmp_path / "plain.jsonl").write_text('{"text": "hello"}\n')
    res = run("-m", "shardforge.cli", "train", "--data", "plain.jsonl", "--steps", "1", "--output", "run",
              cwd=tmp_path)
    line = one_line_error(res)
    assert line.startswith(f"error: {tmp_path}/plain.jsonl is a file, not a corpus") and "Not a directory" not in line
    assert f"shardforge build --input {tmp_path}/plain.jsonl --output CORPUS" in line
    assert not (tmp_path / "run").exists()
    # Said before torch is imported (seconds on a busy machine), by both entry points, for each kind of path.
    (tmp_path / "raw").mkdir()
    for entry, data, says in ((["shardforge.cli", "train"], "plain.jsonl", "is a file, not a corpus"),
                              (["trainer.train"], "raw", "is a folder but not a corpus"),
                              (["trainer.train"], "nothing", "does not exist")):
        res = run("-c", import_probe("torch"), *entry, "--data", data, cwd=tmp_path)
        assert res.stdout.splitlines()[-1] == "probe: False 2", res.stdout[-500:] + res.stderr[-2000:]
        assert says in one_line_error(res), res.stderr


def test_python_m_shardforge_is_the_shardforge_command() -> None:
    res = run("-m", "shardforge", "--help")
    assert res.returncode == 0 and res.stdout.startswith("usage: shardforge ") and res.stderr == "", res.stderr
    res = run("-m", "shardforge", "--version")
    assert res.returncode == 0 and res.stdout.startswith("shardforge "), res.stdout


# Writes many lines through run_cli, as a command does; a reader that stops after one line closes the pipe.
PIPE_PROBE = """
import sys
from shardforge.console.run import run_cli

def body():
    if sys.argv[1] == "socket":
        raise BrokenPipeError(32, "Broken pipe")  # a connection of the command's own, not its stdout
    for i in range(200000):
        print("line", i)
    return 0

sys.exit(run_cli(body))
"""


def test_output_into_a_reader_that_stops_early_ends_quietly() -> None:
    """`shardforge inspect CORPUS | head`: status 141 as `cat` would give, no BrokenPipeError traceback; a
    broken pipe of anything but stdout is still the error it is."""
    proc = subprocess.Popen([sys.executable, "-c", PIPE_PROBE, "stdout"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO, env=ENV)
    assert proc.stdout is not None and proc.stdout.readline() == b"line 0\n"
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141 and err == b"", err.decode()[-2000:]
    res = run("-c", PIPE_PROBE, "socket")
    assert res.returncode == 1 and "BrokenPipeError" in res.stderr, res.stderr[-2000:]
    for args in (["-m", "pipelines.build", "--help"], ["-m", "shardforge", "train", "--help"]):
        proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                                env=ENV)
        assert proc.stdout is not None
        proc.stdout.close()  # before the help is printed
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 141) and err == b"", (args, err.decode()[-2000:])


def test_docs_hold_code_in_code_spans_and_prose_outside() -> None:
    """A sentence of docs/ reads as one: no code span holds a phrase of prose (docs/storage.md once read
    "All storage access goes through `storage/ (the neutral storage package)`.")."""
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        found += [(path.name, span) for span in re.findall(r"`([^`\n]+)`", text)
                  if re.search(r"\((the|a|an) [a-z]+ [a-z]+", span)]
    assert not found, found
    storage = (REPO / "docs" / "storage.md").read_text()
    assert "All storage access goes through `shardforge.storage` (fsspec;" in " ".join(storage.split())


# ------------------------------------------------------------------ the Dataflow extra


def test_the_dataflow_extra_has_one_install_command() -> None:
    """Every place that tells how to install the Dataflow client gives the README's command."""
    from pipelines.localrunner.preflight import DATAFLOW_INSTALL

    assert DATAFLOW_INSTALL in (REPO / "README.md").read_text()
    files = [REPO / "README.md", *REPO.glob("docs/*.md"), *REPO.glob("deploy/**/*"), *REPO.glob("scripts/*.sh"),
             *REPO.glob("pipelines/**/*.py"), *REPO.glob("shardforge/**/*.py")]
    found = 0
    for path in files:
        if not path.is_file() or path.suffix in (".pyc",):
            continue
        text = " ".join(path.read_text(errors="replace").replace("#", " ").split())
        for m in re.finditer(r"pip install", text):
            after = text[m.start():m.start() + 80]
            if "dataflow" in after or "[gcp]" in after:
                found += 1
                begin = m.start() - len(".venv/bin/")
                assert text[begin:begin + len(DATAFLOW_INSTALL)] == DATAFLOW_INSTALL, (path, text[begin:begin + 90])
    assert found >= 4


@pytest.mark.parametrize("pattern", ["nest", "nest/**", "nest/**/*.jsonl"])
def test_a_one_shot_output_inside_its_recursive_input_is_one_line(tmp_path, pattern) -> None:
    """A rerun would read the corpus's own files (or a killed attempt's) as input: 53 documents in became 328."""
    (tmp_path / "nest" / "raw").mkdir(parents=True)
    (tmp_path / "nest" / "raw" / "a.jsonl").write_text('{"text": "one document"}\n')
    res = run("-m", "shardforge", "build", "--input", pattern, "--output", "nest/corpus", cwd=tmp_path)
    assert res.returncode == 2 and "lies inside source other's input" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "nest" / "corpus").exists()


TORCH_PROBE = import_probe("torch")


@pytest.mark.parametrize("args,says", [
    (["trainer.train", "--data", "c", "--lr", "0"], "invalid train config: --lr (optim.lr): Input should be greater "
                                                    "than 0"),  # the flag the user gave, and its key
    (["trainer.train", "--data", "c", "--lr", "1", "--set", "optim.lr=0"], "config: optim.lr: Input should be"),
    (["shardforge.cli", "train", "--data", "c", "--recipe", "nope"], "unknown recipe 'nope'"),
    (["shardforge.cli", "train", "--data", "c", "--set", "model.hiden=3"], "unknown key 'model.hiden'"),
    (["trainer.train", "--data", "c", "--steps", "0"], "steps"),
    (["trainer.train", "--data", "c", "--set", "model.heads=3"], "not divisible by heads 3"),
])
def test_train_config_mistakes_are_one_line_before_torch_is_imported(args, says, tmp_path) -> None:
    """torch takes 3-7 s to import on a busy machine: a config mistake needs none of it."""
    res = run("-c", TORCH_PROBE, *args, cwd=tmp_path)
    assert res.stdout.splitlines()[-1] == "probe: False 2", res.stdout[-500:] + res.stderr[-2000:]
    assert says in one_line_error(res)


@pytest.mark.parametrize("args,says", [
    (["-m", "pipelines.build", "--input", "raw.jsonl", "--output", "o", "--max_seq_len", "3"],
     "error: invalid build config: --max_seq_len (packing.max_seq_len): Input should be greater than or equal to 8"),
    (["-m", "shardforge", "build", "--input", "raw.jsonl", "--output", "o", "--vocab_size", "5"],
     "error: invalid build config: --vocab_size (tokenizer.vocab_size): Input should be greater than or equal to 64"),
])
def test_a_build_flag_out_of_range_is_named_as_the_flag(args, says, tmp_path) -> None:
    (tmp_path / "raw.jsonl").write_text('{"text": "one document"}\n')
    assert one_line_error(run(*args, cwd=tmp_path)) == says


def test_a_config_from_a_pipe_is_read_once_and_as_yaml(tmp_path) -> None:
    """``--config <(...)`` or /dev/stdin: fsspec's local reads seek (a traceback: 'not seekable'), the name has
    no .yaml to tell the format, and the command line's checks and the command each read the config."""
    res = subprocess.run([sys.executable, "-m", "trainer.train", "--print-config", "--config", "/dev/stdin"],
                         input="data: corpus\nsteps: 7\n", capture_output=True, text=True, cwd=tmp_path, env=ENV,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "steps: 7" in res.stdout.splitlines() and f"data: {tmp_path / 'corpus'}" in res.stdout
