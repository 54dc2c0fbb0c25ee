"""More user mistakes through the real entry points: one clear line (exit 2), never a traceback.

An unknown training device, attention heads that do not divide the hidden width, an unknown
``serve --log_level`` and a ``demo --docs`` too small for the demo's corpus each ended in a traceback.
"""

from __future__ import annotations

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
