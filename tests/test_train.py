"""The trainer end to end on CPU: learning, streaming from gs://, exact resume, preemption, DDP."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from forkserver import run_python

from schemas.config import TrainConfig
from schemas.errors import UserError
from trainer.checkpoint import list_checkpoints, load_checkpoint
from trainer.loggers import read_metrics
from trainer.train import train

pytestmark = pytest.mark.slow
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def corpus(demo_corpus, tmp_path_factory) -> str:
    from pipelines.jobs.build import run_build
    from tests.test_build import small_config

    out = str(tmp_path_factory.mktemp("train-corpus"))
    run_build(small_config(demo_corpus), out)
    return out


def cfg(data: str, output: str, **kw) -> TrainConfig:
    base = {"data": data, "output": output, "steps": 30, "batch_size": 8, "device": "cpu", "resume": True,
            "optim": {"lr": 3e-3, "warmup_steps": 3}, "model": {"size": "tiny", "dropout": 0.1},
            "log_every": 5, "shuffle_buffer": 64}
    for k, v in kw.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    return TrainConfig.model_validate(base)


def test_loss_decreases_and_metrics_are_logged(corpus, tmp_path):
    out = str(tmp_path / "run")
    res = train(cfg(corpus, out, steps=40, eval_every=20, eval_batches=2))
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == list(range(1, 41))
    first = sum(r["loss"] for r in rows[:5]) / 5
    last = sum(r["loss"] for r in rows[-5:]) / 5
    # Measured over corpora of other doc ids (another data order): drops of 0.45-0.65 nats; a model
    # that does not learn stays within ~0.1.
    assert last < first - 0.3, (first, last)
    assert "eval_loss" in rows[19] and rows[19]["eval_ppl"] > 1
    assert all(0 <= r["data_wait_share"] <= 1 and r["tokens_per_s"] > 0 for r in rows)
    assert res["steps"] == 40 and list_checkpoints(out)[-1][0] == 40


def test_exact_resume_matches_uninterrupted_run(corpus, tmp_path):
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    train(cfg(corpus, full, steps=12))
    train(cfg(corpus, part, steps=12, stop_at=5))  # stopped at step 5 with a checkpoint
    with open(os.path.join(part, "metrics.jsonl"), "a") as f:  # steps logged after it, then lost (SIGKILL)
        f.write('{"step": 6, "loss": 99.0}\n{"step": 7, "lo')
    train(cfg(corpus, part, steps=12))  # resumed
    a, b = read_metrics(full), read_metrics(part)
    assert [r["step"] for r in b] == list(range(1, 13))  # steps 6-7 once: the lost timeline's records went
    for ra, rb in zip(a, b, strict=True):
        assert abs(ra["loss"] - rb["loss"]) <= 1e-6, (ra["step"], ra["loss"], rb["loss"])
    sa = load_checkpoint(list_checkpoints(full)[-1][1])["model"]
    sb = load_checkpoint(list_checkpoints(part)[-1][1])["model"]
    assert all(bool((sa[k] == sb[k]).all()) for k in sa)


def test_no_resume_refuses_a_folder_holding_checkpoints(corpus, tmp_path):
    """--no-resume into an earlier run's folder: keep_last (newest by step) removed the new run's
    checkpoints as soon as they were written, and export then shipped the old model."""
    out = str(tmp_path / "run")
    train(cfg(corpus, out, steps=6, checkpoint_every=3, keep_last=3))
    with pytest.raises(UserError, match=r"--no-resume: .*checkpoints holds 2 checkpoints of an earlier run \(up to "
                                        r"step 6\); a new run there would mix with them"):
        train(cfg(corpus, out, steps=2, resume=False))
    assert [s for s, _ in list_checkpoints(out)] == [3, 6]


def test_a_checkpoint_temporary_left_by_sigkill_is_removed_when_the_run_resumes(corpus, tmp_path):
    from shardforge.storage import STALE_TMP_LOCAL_S, tmp_name

    out = str(tmp_path / "run")
    train(cfg(corpus, out, steps=4, stop_at=2))
    left = tmp_name(os.path.join(out, "checkpoints", "ckpt-00000004.pt"))  # what a SIGKILL mid-write leaves
    open(left, "wb").write(b"\0" * 1000)
    old = time.time() - STALE_TMP_LOCAL_S - 1
    os.utime(left, (old, old))
    train(cfg(corpus, out, steps=4))
    assert not os.path.exists(left) and [s for s, _ in list_checkpoints(out)] == [2, 4]


def test_a_checkpoint_past_the_step_resumed_from_is_removed_never_the_new_one(tmp_path):
    from trainer.checkpoint import save_checkpoint

    run = str(tmp_path / "run")
    for step in (4, 8, 12):
        save_checkpoint(run, step, {"step": step}, keep_last=3)
    # resumed from 4 (8 and 12 did not load): writing 8 again keeps 4 and the new 8, drops the old 12
    save_checkpoint(run, 8, {"step": 8, "new": True}, keep_last=1)
    assert [s for s, _ in list_checkpoints(run)] == [8]
    assert load_checkpoint(list_checkpoints(run)[0][1]) == {"step": 8, "new": True}


def test_a_resume_that_changes_the_optimizer_is_one_line_and_a_corpus_switch_is_explicit(corpus, tmp_path):
    out = str(tmp_path / "run")
    train(cfg(corpus, out, steps=6, stop_at=3))
    with pytest.raises(UserError, match=r"resumes its optimizer and schedule as saved, and this run changes them "
                                        r"\(optim.name 'adamw' -> 'lamb'; optim.lr 0.003 -> 0.01\)"):
        train(cfg(corpus, out, steps=6, optim={"lr": 0.01, "name": "lamb"}))
    other = str(tmp_path / "other")  # another corpus of the same tokenizer: one train shard fewer
    shutil.copytree(corpus, other)
    spec = json.load(open(os.path.join(other, "manifest.json")))
    train_shards = [s for s in spec["shards"] if s["split"] == "train"]
    spec["shards"] = [s for s in spec["shards"] if s is not train_shards[-1]]
    open(os.path.join(other, "manifest.json"), "w").write(json.dumps(spec))
    with pytest.raises(UserError, match="switch_corpus=true"):
        train(cfg(other, out, steps=6))
    res = train(cfg(other, out, steps=6, switch_corpus=True))
    assert res["steps"] == 6 and [r["step"] for r in read_metrics(out)][-3:] == [4, 5, 6]


def test_a_corpus_longer_than_the_models_positions_is_one_line_before_any_work(corpus, tmp_path):
    n = json.load(open(os.path.join(corpus, "manifest.json")))["max_seq_len"]
    with pytest.raises(UserError, match=rf"^corpus sequences are up to {n} tokens; this model takes {n - 8} "
                                        rf"\(model.max_positions {n - 6}\): --set model.max_positions={n + 2}, or a "
                                        rf"corpus built with --max_seq_len {n - 8}$"):
        train(cfg(corpus, str(tmp_path / "run"), model={"max_positions": n - 6}))
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


def test_warmup_ratio_sets_the_warmup_steps_once_the_steps_are_known(corpus, tmp_path):
    out = str(tmp_path / "run")
    train(cfg(corpus, out, steps=10, log_every=1, optim={"warmup_steps": 0, "warmup_ratio": 0.25}))
    assert load_checkpoint(list_checkpoints(out)[-1][1])["config"]["optim"]["warmup_steps"] == 3  # ceil(2.5)
    same = str(tmp_path / "same")
    train(cfg(corpus, same, steps=10, log_every=1, optim={"warmup_steps": 3}))
    assert [r["lr"] for r in read_metrics(out)] == [r["lr"] for r in read_metrics(same)]


def test_a_corpus_is_never_a_runs_output(corpus, tmp_path):
    data = str(tmp_path / "corpus")
    shutil.copytree(corpus, data)
    with pytest.raises(UserError, match=r"is a corpus \(it holds manifest.json\); a run writes its checkpoints"):
        train(cfg(data, data))
    assert sorted(os.listdir(data)) == sorted(os.listdir(corpus))


def test_streams_from_gcs_emulator(corpus, gcs_bucket):
    import gcsfs

    fs = gcsfs.GCSFileSystem(token="anon")
    remote = f"{gcs_bucket}/corpus"
    fs.put(corpus, remote.removeprefix("gs://"), recursive=True)
    fs.invalidate_cache()
    out = f"{gcs_bucket}/run"
    res = train(cfg(remote, out, steps=6, checkpoint_every=3, keep_last=1))
    assert res["steps"] == 6
    fs.invalidate_cache()
    ckpts = list_checkpoints(out)
    assert [s for s, _ in ckpts] == [6]  # keep_last=1 removed step 3
    assert load_checkpoint(ckpts[0][1])["step"] == 6


def test_sigterm_saves_a_checkpoint(corpus, tmp_path):
    out = str(tmp_path / "run")
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-m", "trainer.train", "--data", corpus, "--output", out,
                             "--steps", "100000", "--batch_size", "4", "--device", "cpu", "--set", "log_every=1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = os.path.join(out, "metrics.jsonl")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics) > 0):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    # not 0: a scheduler must not take a preempted run for a finished one (a shell's 128 + SIGTERM)
    assert proc.returncode == 143, output
    ckpts = list_checkpoints(out)
    assert ckpts and 0 < ckpts[-1][0] < 100000
    assert f"preempted (SIGTERM) at step {ckpts[-1][0]} of 100000: run the same command again to resume from " \
        f"the checkpoint of step {ckpts[-1][0]}" in output, output[-2000:]


class Trainer:
    """`python -m trainer.train` in a subprocess, its output collected line by line as it runs."""

    def __init__(self, data: str, out: str, *sets: str, grace_s: float = 10.0):
        env = {**os.environ, "PYTHONPATH": REPO, "SHARDFORGE_SIGTERM_GRACE_S": str(grace_s)}
        args = [sys.executable, "-m", "trainer.train", "--data", data, "--output", out, "--steps", "100000",
                "--batch_size", "4", "--device", "cpu", "--set", "log_every=1"]
        for x in sets:
            args += ["--set", x]
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self._reader.start()

    def wait_for(self, done, timeout: float = 90) -> None:
        """Until done(output so far) or the process ended (or timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None and not done("".join(self.lines)):
            time.sleep(0.2)

    def terminate(self, within_s: float) -> str:
        """SIGTERM, then the whole output; fails (and kills the process) unless it ends within `within_s`."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=within_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._reader.join(10)
            pytest.fail(f"still running {within_s} s after SIGTERM:\n{''.join(self.lines)[-2000:]}")
        self._reader.join(10)
        return "".join(self.lines)


def test_a_shard_claiming_samples_it_lacks_costs_no_time_and_sigterm_still_stops(corpus, tmp_path):
    """A manifest claiming 10^15 samples for a train shard, corrupt_shards=skip: once the shard is found
    out (it ends after its real samples) it is skipped and its claimed positions stepped over; steps go on
    and SIGTERM stops the run with a checkpoint. Before, the loader walked the claimed positions: no step
    for minutes, and SIGTERM ignored; later, the epoch went on with batches of repeats for as long as the
    claim (no step either), until the trainer ended an epoch that only repeats."""
    import json

    data, out = str(tmp_path / "corpus"), str(tmp_path / "run")
    shutil.copytree(corpus, data)
    path = os.path.join(data, "manifest.json")
    spec = json.load(open(path))
    next(s for s in spec["shards"] if s["split"] == "train")["samples"] = 10**15
    open(path, "w").write(json.dumps(spec))
    run = Trainer(data, out, "corrupt_shards=skip", "shuffle_buffer=64", "batch_size=32")
    run.wait_for(lambda text: "skipping corrupt shard" in text)
    found = len(read_metrics(out))
    def next_epoch_steps() -> int:  # the claim's epoch ends with the data (no steps of repeats for the claim)
        return sum(r["epoch"] >= 1 for r in read_metrics(out))

    run.wait_for(lambda text: len(read_metrics(out)) >= found + 10 and next_epoch_steps() >= 3)
    output = run.terminate(30)
    assert "skipping corrupt shard" in output and len(read_metrics(out)) >= found + 10, output[-3000:]
    assert next_epoch_steps() >= 3, output[-3000:]
    assert run.proc.returncode == 143 and "SIGTERM" in output and list_checkpoints(out)


class StallingStore:
    """A plain HTTP server of a corpus folder that never answers for a train shard (a stalled store):
    ``asked`` is set once the trainer asks for one; the requests are let go on exit."""

    def __init__(self, root: str):
        from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

        store = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args, **kw):
                super().__init__(*args, directory=root, **kw)

            def _stall(self) -> bool:
                if os.path.basename(self.path).startswith("train-"):
                    store.asked.set()
                    store.release.wait()
                    return True
                return False

            def do_GET(self) -> None:  # noqa: N802 - http.server's names
                if not self._stall():
                    super().do_GET()

            def do_HEAD(self) -> None:  # noqa: N802
                if not self._stall():
                    super().do_HEAD()

            def log_message(self, *args) -> None:
                pass

        self.asked, self.release = threading.Event(), threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> StallingStore:
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("workers", [0, 2])
def test_sigterm_while_the_data_stalls_ends_the_run_within_seconds(corpus, tmp_path, workers):
    """The train shards behind a store that never answers: SIGTERM ends the run within the grace (2 s
    here) plus shutdown, with one warning line and no checkpoint of a step that never ended. Before, the
    step waited for its data for ever and SIGTERM only set a flag."""
    out = str(tmp_path / "run")
    with StallingStore(corpus) as store:
        run = Trainer(store.url, out, f"num_workers={workers}", grace_s=2)
        assert store.asked.wait(90), "".join(run.lines)[-3000:]
        time.sleep(0.5)  # the trainer now waits for bytes that never come
        output = run.terminate(15)
    assert run.proc.returncode == 143 and "Traceback" not in output, output[-3000:]
    assert "SIGTERM: still waiting for data 2 s later; exiting without a checkpoint" in output
    assert "run the same command again to resume from its last checkpoint" in output
    assert not list_checkpoints(out)


def test_ddp_two_processes_on_gloo_then_elastic_resume_on_one(corpus, tmp_path):
    out = str(tmp_path / "ddp")
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
    args = ["-m", "trainer.train", "--data", corpus, "--output", out, "--steps", "6", "--batch_size", "4",
            "--device", "cpu", "--set", "global_batch_sequences=16"]
    r = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", *args, "--set", "stop_at=3"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    state = load_checkpoint(list_checkpoints(out)[-1][1])
    assert state["step"] == 3
    # the checkpoint holds every rank's loader partitions, so one process can take over
    r = run_python([*args], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = read_metrics(out)
    assert [x["step"] for x in rows] == list(range(1, 7))
    assert load_checkpoint(list_checkpoints(out)[-1][1])["step"] == 6


def test_a_rank_that_joined_a_group_leaves_with_its_code_and_its_output_flushed():
    """A torchrun rank ends through distributed.leave: the code it was given, and what it printed and
    logged still there (stdout into a pipe is block-buffered: os._exit alone would drop it). A process
    that never joined a group gets its code back and exits on its own."""
    script = ("import logging, sys\n"
              "from trainer import distributed\n"
              "logging.basicConfig(level=logging.INFO)\n"
              "assert distributed.leave(5) == 5  # never joined: the code back, no exit\n"
              "distributed._joined = True\n"
              "print('printed before leaving')\n"
              "logging.getLogger('shardforge.train').warning('logged before leaving')\n"
              "distributed.leave(3)\n"
              "print('after leaving')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # Python's default buffering
    r = subprocess.run([sys.executable, "-c", script], env={**env, "PYTHONPATH": REPO},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr[-2000:]
    assert r.stdout == "printed before leaving\n"
    assert "logged before leaving" in r.stderr


def test_the_commands_log_their_own_information_and_only_the_libraries_warnings():
    """train and evaluate log shardforge's lines from INFO and a library's from WARNING: gcsfs, for one,
    announces its experimental features at INFO when it is imported, on every run that reads gs://.
    The levels are put back after the command (an in-process caller's logging is as it was)."""
    script = ("import logging\n"
              "from trainer.train import command_logging\n"
              "with command_logging():\n"
              "    logging.getLogger('gcsfs').info('library information')\n"
              "    logging.getLogger('gcsfs').warning('library warning')\n"
              "    logging.getLogger('shardforge.train').info('our information')\n"
              "    logging.getLogger('trainer.checkpoint').info('our module information')\n"
              "logging.getLogger('trainer.checkpoint').info('after the command')\n")
    r = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": REPO},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "library warning" in r.stderr and "our information" in r.stderr, r.stderr
    assert "our module information" in r.stderr, r.stderr
    assert "library information" not in r.stderr and "after the command" not in r.stderr, r.stderr


def test_plot_draws_every_logged_metric(tmp_path):
    import json

    from trainer.plot import plot_run

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": i, "loss": 5 - i * 0.1, "lr": 1e-3, "tokens_per_s": 1000.0 + i, "data_wait_share": 0.01,
             "mfu": 0.4, "mlm_acc": 0.1} for i in range(1, 11)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = plot_run(str(run))
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_starvation_monitor_warns_after_sustained_wait(caplog):
    from trainer.metrics import StarvationMonitor

    m = StarvationMonitor(threshold=0.2, window=3)
    assert not any(m.update(0.5) for _ in range(2))
    assert m.update(0.5)
    assert "bottleneck" in caplog.text
    assert not m.update(0.0)


def test_export_cli_gives_a_loadable_hf_folder(corpus, tmp_path):
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from shardforge.cli import main as cli
    from trainer.export import export_checkpoint

    run, hf = str(tmp_path / "run"), str(tmp_path / "hf")
    train(cfg(corpus, run, steps=2))
    assert cli(["export", run, hf]) == 0
    model = AutoModelForMaskedLM.from_pretrained(hf).eval()
    tok = AutoTokenizer.from_pretrained(hf)
    enc = tok(["The council approved a plan."], return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape[-1] == model.config.vocab_size and torch.isfinite(logits).all()
    # The model card's usage snippet runs as written on the export (with its folder for the Hub id): the
    # pipeline places the mask token by its text, where the export's tokenizer reads it in a text as text.
    import re

    card = open(os.path.join(hf, "README.md")).read()
    head = card.split("---\n")[1]
    assert "pipeline_tag: fill-mask" in head and "license: " in head and 'language: ["en"]' in head
    assert str(tmp_path) not in card and corpus not in card  # no folder of the training machine
    snippet = re.search(r"```python\n(.*?)```", card, re.S).group(1)
    scope: dict = {}
    exec(snippet.replace("print(", "filled = (").replace("PATH_OR_HUB_ID", hf), scope)
    filled = scope["filled"]
    assert len(filled) == 5 and all(c["sequence"].startswith("The capital of France is") for c in filled)
    # An output folder that holds files (an earlier export, an --init model) is replaced only when asked.
    weights = os.path.getmtime(os.path.join(hf, "model.safetensors"))
    assert cli(["export", run, hf]) == 2 and os.path.getmtime(os.path.join(hf, "model.safetensors")) == weights
    assert cli(["export", run, hf, "--overwrite"]) == 0
    # A corpus or a training run is never an export's folder, --overwrite or not: nothing is written there.
    for folder, what in ((corpus, "a corpus"), (run, "a training run")):
        before = sorted(os.listdir(folder))
        for extra in ([], ["--overwrite"]):
            with pytest.raises(UserError, match=rf"is {what} folder: a model goes into a folder of its own"):
                export_checkpoint(run, folder, overwrite=bool(extra))
            assert cli(["export", run, folder, *extra]) == 2
        assert sorted(os.listdir(folder)) == before


@pytest.mark.parametrize("scope", ["model", "layers"])
def test_torch_compile_option_trains_and_checkpoints_plain_weights(corpus, tmp_path, monkeypatch, scope):
    """The trainer's compile switch, whole model or by layers: a compiled model trains and saves plain weights.

    dynamo with the aot_eager backend (the graphs inductor would lower) keeps this at seconds;
    inductor's generated code is checked against eager in test_fastpath.
    """
    import trainer.train as train_mod
    from trainer.precision import is_compiled, maybe_compile

    calls, models = [], []

    def compile_aot_eager(model, setting, device, mode="default", scope="model"):
        calls.append((setting, mode, scope))
        models.append(maybe_compile(model, setting, device, backend="aot_eager", mode=mode, scope=scope))
        return models[-1]

    monkeypatch.setattr(train_mod, "maybe_compile", compile_aot_eager)
    out = str(tmp_path / "compiled")
    res = train(cfg(corpus, out, steps=2, compile=True, compile_scope=scope))
    assert calls == [(True, "default", scope)] and is_compiled(models[0])
    assert hasattr(models[0], "_orig_mod") == (scope == "model")
    assert res["steps"] == 2 and math.isfinite(res["last_loss"])
    state = load_checkpoint(list_checkpoints(out)[-1][1])["model"]
    assert not any("_orig_mod" in k for k in state)  # loadable without torch.compile


@pytest.mark.parametrize("variant", ["albert_sop", "spanbert_nsp"])
def test_pair_rule_corpora_train_every_head(corpus, tmp_path, variant):
    """ALBERT (factorized, shared, SOP, n-gram masks) and SpanBERT (spans + SBO, NSP) end to end."""
    from pipelines.jobs.repack import run_repack

    rule, model, masking = {
        "albert_sop": ("sop", {"embedding_size": 32, "share": "all", "sentence_head": "sop", "dropout": 0.0},
                       {"scheme": "ngram"}),
        "spanbert_nsp": ("segment_pair_nsp", {"sentence_head": "nsp", "span_boundary": True},
                         {"scheme": "span"}),
    }[variant]
    pairs = str(tmp_path / rule)
    run_repack(corpus, pairs, rule=rule)
    out = str(tmp_path / "run")
    train(cfg(pairs, out, steps=6, model=model, masking=masking, eval_every=6, eval_batches=2))
    rows = read_metrics(out)
    assert all("sentence_acc" in r for r in rows)
    assert "eval_sentence_acc" in rows[-1] and 0 <= rows[-1]["eval_sentence_acc"] <= 1
    # Over the pairs of the two evaluated batches of 8: the accuracy is a whole number of them.
    pairs = rows[-1]["eval_sentence_pairs"]
    assert pairs == int(pairs) and 0 < pairs <= 2 * 8, pairs
    assert abs(rows[-1]["eval_sentence_acc"] * pairs - round(rows[-1]["eval_sentence_acc"] * pairs)) < 1e-6
    assert all(r["loss"] == r["loss"] for r in rows)
    # The loss sums the heads; its MLM part is logged beside it (eval_loss is MLM alone).
    assert all(0 < r["mlm_loss"] < r["loss"] for r in rows), [(r["mlm_loss"], r["loss"]) for r in rows]


def test_sentence_head_on_a_single_segment_corpus_is_a_clear_error(corpus, tmp_path):
    from schemas.errors import UserError

    with pytest.raises(UserError, match="needs a pair-rule corpus") as e:
        train(cfg(corpus, str(tmp_path / "r"), steps=1, model={"sentence_head": "sop"}))
    # the line names the command that makes one from this corpus
    assert f"shardforge repack --tokenized {corpus} --output NEW --rule sop; or --set model.sentence_head=none" \
        in str(e.value)


def test_every_evaluation_sees_the_same_valid_batches(tmp_path):
    """evaluate() rewinds the valid loader: repeated evaluations agree and never run the split dry."""
    import contextlib

    import torch

    from schemas.config import MaskingConfig, ModelConfig
    from tests.test_loader import VOCAB, make_corpus
    from trainer.evaluate import evaluate
    from trainer.loader import ShardLoader
    from trainer.masking import Masker
    from trainer.model import Encoder

    url = str(make_corpus(tmp_path / "c", [20, 20], valid=[9, 4]))  # 13 valid samples: 4 batches of 4
    c = cfg(url, str(tmp_path / "run"), eval_batches=2, batch_size=4)
    valid = ShardLoader(url, "valid", batch_size=4, seed=0, shuffle_buffer=1, epochs=1)
    torch.manual_seed(0)
    model = Encoder(ModelConfig(size="tiny", dropout=0.0, max_positions=64), VOCAB)
    masker = Masker(MaskingConfig(), VOCAB, [0, 1, 2, 3, 4], mask_id=4, pad_id=1)
    runs = [evaluate(model, valid, masker, c, torch.device("cpu"), contextlib.nullcontext) for _ in range(3)]
    assert runs[0] and "eval_loss" in runs[0]
    assert runs[1] == runs[0] and runs[2] == runs[0]
    assert model.training  # evaluate hands the model back in train mode


def test_export_refuses_a_tokenizer_the_run_did_not_train_with(corpus, tmp_path, capsys):
    import io

    import sentencepiece as spm

    from shardforge.cli import main as cli
    from shardforge.commands.synth import make_article

    run = str(tmp_path / "run")
    train(cfg(corpus, run, steps=1))
    rng = __import__("random").Random(3)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(make_article(rng, 12).split(". ") * 20), model_writer=buf, vocab_size=120,
        bos_id=0, pad_id=1, eos_id=2, unk_id=3, user_defined_symbols=["<mask>"], hard_vocab_limit=False,
        num_threads=1, minloglevel=2)
    other = tmp_path / "other.model"
    other.write_bytes(buf.getvalue())
    assert cli(["export", run, str(tmp_path / "hf"), "--tokenizer", str(other)]) == 2
    assert "is not the one this checkpoint was trained with" in capsys.readouterr().err


def test_eval_masking_keeps_the_valid_loss_at_the_standard_rate(corpus, tmp_path):
    """A run that trains at 40 % masking evaluates at eval_masking's 15 %, not at its own 40 %.

    Three one-step runs from the same seed at a negligible lr (the same weights at the evaluation):
    training at 40 % with eval_masking 15 % evaluates exactly like training at 15 %; without
    eval_masking it evaluates at 40 % (about 2.7x the predicted tokens).
    """
    def one(name: str, **kw) -> dict:
        out = str(tmp_path / name)
        train(cfg(corpus, out, steps=1, eval_every=1, eval_batches=2, optim={"lr": 1e-12, "warmup_steps": 0},
                  model={"size": "tiny", "dropout": 0.0}, **kw))
        return read_metrics(out)[-1]

    standard = one("standard")
    high_eval_std = one("high_eval_std", masking={"rate": 0.4}, eval_masking={"rate": 0.15})
    high = one("high", masking={"rate": 0.4})
    assert high_eval_std["eval_mlm_tokens"] == standard["eval_mlm_tokens"] > 0
    assert high_eval_std["eval_loss"] == pytest.approx(standard["eval_loss"], abs=1e-5)
    assert high["eval_mlm_tokens"] > 2 * standard["eval_mlm_tokens"]
    # The training steps did mask at 40 %: their predicted-token counts differ from the 15 % run.
    assert high_eval_std["loss"] != standard["loss"]
