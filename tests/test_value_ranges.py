"""Values out of range are refused in one line through the real entry points, and --help shows the defaults.

A count that must be positive (``inspect --bins``, ``validate --jobs``, ``serve --max_files``), a pause that
must be more than 0 (``serve --poll``), a probability (``packing.short_seq_prob``) and the trainer's
step intervals are each answered with one ``error:`` line naming the flag or config key, exit 2, before
any work; ``serve --once`` over a glob that matches nothing says so.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.config import PackingConfig, TrainConfig
from schemas.errors import UserError


def cli(capsys: pytest.CaptureFixture[str], *argv: str, out: list[str] | None = None) -> tuple[int, str]:
    """(exit code, stderr) of ``shardforge ARGV`` run in this process; its stdout is appended to out."""
    from shardforge.cli import main

    capsys.readouterr()
    try:
        rc = main(list(argv))
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    said = capsys.readouterr()
    if out is not None:
        out.append(said.out)
    return rc, said.err


def one_line(rc: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), (rc, err)
    return lines[0]


# ------------------------------------------------------------------ plain flags (argparse)

# --once: were a value taken, serve would stop after one look rather than run on
SERVE = ("serve", "--once", "--watch", "in/*.jsonl", "--corpus", "c")


@pytest.mark.parametrize(("argv", "says"), [
    (("inspect", "corpus", "--bins", "0"), "--bins: must be 1 or more, not 0"),
    (("inspect", "corpus", "--max-shards", "0"), "--max-shards: must be 1 or more, not 0"),
    (("inspect", "corpus", "--samples", "-1"), "--samples: must be 0 or more, not -1"),
    (("validate", "corpus", "--jobs", "0"), "--jobs: must be 1 or more, not 0"),
    ((*SERVE, "--poll", "-1"), "--poll: must be more than 0, not -1"),
    ((*SERVE, "--poll", "0"), "--poll: must be more than 0, not 0"),
    ((*SERVE, "--poll", "nan"), "--poll: must be more than 0"),
    ((*SERVE, "--settle", "-5"), "--settle: must be 0 or more, not -5"),
    ((*SERVE, "--max_files", "0"), "--max_files: must be 1 or more"),
    (("build", "--input", "raw.jsonl", "--output", "out", "--spill_mb", "-5"),
     "--spill_mb: must be 0 or more MB, or -1 to keep everything in memory, not -5"),
    (("build", "--input", "raw.jsonl", "--output", "out", "--spill_mb", "-0.5"), "--spill_mb: must be 0 or more MB"),
])
def test_an_out_of_range_flag_is_one_line(capsys, tmp_path, monkeypatch, argv, says) -> None:
    monkeypatch.chdir(tmp_path)  # nothing is read or written: the flag is refused first
    line = one_line(*cli(capsys, *argv))
    assert says in line
    assert list(tmp_path.iterdir()) == []


def test_a_flag_that_is_no_number_still_says_so(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert "--bins: invalid int value: 'x'" in one_line(*cli(capsys, "inspect", "corpus", "--bins", "x"))
    assert "--spill_mb: not a number of MB: 'lots'" in one_line(
        *cli(capsys, "build", "--input", "raw.jsonl", "--output", "out", "--spill_mb", "lots"))


def test_the_values_at_the_edges_are_taken() -> None:
    from pipelines.flags import build_parser, serve_parser

    ns = serve_parser().parse_args(["--corpus", "c", "--poll", "0.5", "--settle", "0", "--max_files", "1"])
    assert (ns.poll, ns.settle, ns.max_files) == (0.5, 0.0, 1)
    for mb in ("-1", "0", "2.5"):
        assert build_parser().parse_known_args(["--spill_mb", mb])[0].spill_mb == float(mb)


# ------------------------------------------------------------------ config keys (flags and config files)


@pytest.mark.parametrize("value", [2, -0.1, 1.5])
def test_short_seq_prob_is_a_probability(value) -> None:
    from schemas.configfile import parse_config

    with pytest.raises(UserError) as e:
        parse_config(PackingConfig, {"short_seq_prob": value}, what="config c.yaml")
    assert str(e.value).startswith("invalid config c.yaml: short_seq_prob: Input should be")
    assert "\n" not in str(e.value)
    assert PackingConfig(short_seq_prob=1).effective_short_seq_prob == 1
    assert PackingConfig(short_seq_prob=0).effective_short_seq_prob == 0


def test_a_build_config_file_with_short_seq_prob_out_of_range_is_one_line(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "raw.jsonl").write_text('{"text": "a b c"}\n')
    (tmp_path / "c.yaml").write_text("packing:\n  short_seq_prob: 2\n")
    line = one_line(*cli(capsys, "build", "--input", "raw.jsonl", "--output", "out", "--config", "c.yaml"))
    assert line == "error: invalid config c.yaml: packing.short_seq_prob: Input should be less than or equal to 1"
    assert not (tmp_path / "out").exists()


def train_config(*flags: str) -> TrainConfig:
    """The train config the trainer resolves from these flags (its own path, without torch)."""
    from trainer.args import flag_settings, parse_train_args
    from trainer.recipes import resolve_train_config

    args = parse_train_args(["--data", "corpus", *flags])
    top, dotted = flag_settings(args)
    return resolve_train_config(None, None, top, dotted)


@pytest.mark.parametrize(("flag", "key"), [
    ("--checkpoint_every", "checkpoint_every"), ("--save_steps", "checkpoint_every"), ("--log_every", "log_every"),
    ("--keep_last", "keep_last"), ("--save_total_limit", "keep_last")])
def test_a_negative_step_interval_is_refused_in_one_line(flag, key) -> None:
    with pytest.raises(UserError) as e:
        train_config(flag, "-1")
    assert str(e.value) == f"invalid train config: {key}: Input should be greater than or equal to 0"


def test_zero_keeps_its_meaning() -> None:
    cfg = train_config("--checkpoint_every", "0", "--log_every", "0", "--keep_last", "0")
    assert (cfg.checkpoint_every, cfg.log_every, cfg.keep_last) == (0, 0, 0)
    with pytest.raises(ValidationError):
        TrainConfig(data="c", keep_last=-3)


# ------------------------------------------------------------------ serve --once over nothing


def test_serve_once_over_a_glob_that_matches_nothing_says_so(capsys, tmp_path) -> None:
    from pipelines.jobs.serve import run

    watch = str(tmp_path / "typo" / "*.jsonl")
    assert run(["--watch", watch, "--corpus", str(tmp_path / "corpus"), "--once", "--settle", "0"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "nothing to ingest" in line]
    assert len(said) == 1 and f"--watch {watch} matches no file" in said[0], said


# ------------------------------------------------------------------ --help shows the defaults


def test_serve_help_shows_every_default_and_explains_log_level() -> None:
    from pipelines.flags import serve_parser

    text = " ".join(serve_parser().format_help().split())
    for shown in ("glob (default: 30)", "written; default: 5)", "per version; default: 256)",
                  "never waits; default: 3)", "WARNING or ERROR (default: INFO)"):
        assert shown in text, shown


def test_plot_help_shows_the_x_default(capsys) -> None:
    out: list[str] = []
    assert cli(capsys, "plot", "--help", out=out)[0] == 0
    assert "or step (default auto)" in " ".join(out[0].split())


def test_train_help_says_what_0_means() -> None:
    from trainer.args import train_parser

    text = " ".join(train_parser().format_help().split())
    assert "Checkpoints kept, the newest (0: keep every one)." in text
    assert "each evaluation (0: only those; metrics.jsonl has every step)." in text


def test_the_run_description_says_what_zero_means() -> None:
    from schemas.config import TrainConfig
    from trainer.describe import output_line

    zero = output_line(TrainConfig.model_validate({"data": "c", "output": "r", "keep_last": 0, "log_every": 0}))
    assert "keep all" in zero and "a line at the first and last step" in zero
    some = output_line(TrainConfig.model_validate({"data": "c", "output": "r", "keep_last": 2, "log_every": 5}))
    assert "keep 2" in some and "a line every 5 steps" in some
