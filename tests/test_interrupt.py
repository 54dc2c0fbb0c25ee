"""Ctrl-C: every command says "interrupted" in one line (with what is left and how to go on), exit 130.

Before, a build printed Beam's log of the KeyboardInterrupt and then its wrapped traceback (exit 1),
and the trainer Python's traceback.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import apache_beam as beam
import pytest

from shardforge.console.run import (
    DATA_JOB_INTERRUPTED,
    INTERRUPTED,
    quiet_library_logs,
    run_cli,
    was_interrupted,
)

REPO = Path(__file__).resolve().parents[1]


def test_a_keyboard_interrupt_is_one_line_and_130(capsys) -> None:
    def body() -> int:
        raise KeyboardInterrupt

    assert run_cli(body, [], interrupted="what is left") == INTERRUPTED == 130
    assert capsys.readouterr().err == "interrupted: what is left\n"
    assert run_cli(body, []) == 130
    assert capsys.readouterr().err == "interrupted\n"


def _interrupt(x: int) -> int:
    raise KeyboardInterrupt


def test_an_interrupt_inside_a_beam_step_is_one_line_too(capsys) -> None:
    """The local runner re-raises it as "KeyboardInterrupt [while running 'X']" after logging it."""
    quiet_library_logs()  # run_cli installs it too; here its handler must be attached first
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    runner_log = logging.getLogger("apache_beam.runners.common")
    runner_log.addHandler(handler)

    def body() -> int:
        with beam.Pipeline(runner="DirectRunner") as p:
            _ = p | beam.Create([1, 2]) | "Boom" >> beam.Map(_interrupt)
        return 0

    try:
        assert run_cli(body, [], interrupted=DATA_JOB_INTERRUPTED) == 130
        assert capsys.readouterr().err == f"interrupted: {DATA_JOB_INTERRUPTED}\n"
        assert not seen  # the runner's own log of it (with a traceback) is left out
        runner_log.error("another error in a step")  # what is not an interrupt still reaches the log
        assert [r.getMessage() for r in seen] == ["another error in a step"]
    finally:
        runner_log.removeHandler(handler)


def test_what_is_not_an_interrupt_is_not_taken_for_one() -> None:
    assert was_interrupted(RuntimeError("KeyboardInterrupt [while running 'Clean/Clean']"))
    assert not was_interrupted(ValueError("x"))
    err = RuntimeError("outer")
    err.__cause__ = KeyboardInterrupt()
    assert was_interrupted(err)
    assert not was_interrupted(RuntimeError("a document mentioning KeyboardInterrupt somewhere"))


def _sampler_started_when_ctrl_c_came(monkeypatch) -> tuple[object, threading.Thread]:
    """A state sampler whose ``start`` is interrupted once its thread runs (as a Ctrl-C during
    ``Thread.start``'s wait for the new thread), then ended as a bundle's end ends it."""
    from apache_beam.runners.worker import statesampler

    threads: list[threading.Thread] = []
    thread_start = threading.Thread.start

    def start_then_ctrl_c(self: threading.Thread) -> None:
        thread_start(self)
        threads.append(self)
        raise KeyboardInterrupt

    sampler = statesampler.StateSampler("stage", None)
    with monkeypatch.context() as m:
        m.setattr(threading.Thread, "start", start_then_ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            sampler.start()
    sampler.stop_if_still_running()  # the bundle's `finally`
    assert len(threads) == 1
    return sampler, threads[0]


def test_a_ctrl_c_while_a_bundle_starts_its_state_sampler_leaves_no_thread_running(monkeypatch) -> None:
    """Beam's sampler marks itself started only after its (non-daemon) thread runs, and a bundle's end
    stops only a sampler marked started: a Ctrl-C in between left the thread sampling, and the build,
    having printed "interrupted", never exited (the interpreter waits for such threads at exit)."""
    from pipelines.localrunner import statesampler as sampler_patch

    sampler_patch.install()  # what every pipeline this project makes installs
    _, thread = _sampler_started_when_ctrl_c_came(monkeypatch)
    thread.join(timeout=10)
    assert not thread.is_alive()

    sampler_patch.uninstall()  # the control: Beam's own start leaves the thread running
    try:
        sampler, thread = _sampler_started_when_ctrl_c_came(monkeypatch)
        thread.join(timeout=0.5)
        assert thread.is_alive() and not thread.daemon
        sampler.finished = True  # ends it, as the wrapped start does
        thread.join(timeout=10)
        assert not thread.is_alive()
    finally:
        sampler_patch.install()


def _non_daemon_threads_after(seconds: float, besides: frozenset[threading.Thread] = frozenset()) -> list:
    """The non-daemon threads (other than the main thread and ``besides``) still alive after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        alive = [t for t in threading.enumerate()
                 if not t.daemon and t is not threading.main_thread() and t not in besides]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


@pytest.mark.parametrize("finish", [True, False], ids=["finish_all", "control"])
def test_a_pipeline_cut_short_in_a_bundles_end_leaves_no_thread_running(monkeypatch, finish) -> None:
    """A Ctrl-C in a bundle's end, before its sampler's ``stop`` marks it finished: the pipeline's run
    raises and the sampler's thread would keep the process from exiting; the pipeline made by
    make_pipeline finishes every sampler of its run (the control, without that, leaves the thread)."""
    from apache_beam.runners.worker import statesampler

    from pipelines.localrunner import statesampler as sampler_patch
    from pipelines.options import BuildOptions, finalize_options, make_pipeline

    before = frozenset(_non_daemon_threads_after(0))  # what other tests of this process may have left
    tracker = statesampler.set_current_tracker

    def ctrl_c_in_stop(value: object) -> None:
        if value is None:  # StateSampler.stop's first step
            monkeypatch.setattr(statesampler, "set_current_tracker", tracker)
            raise KeyboardInterrupt
        tracker(value)

    monkeypatch.setattr(statesampler, "set_current_tracker", ctrl_c_in_stop)
    if not finish:
        monkeypatch.setattr(sampler_patch, "finish_all", lambda: None)
    with pytest.raises(BaseException) as raised:  # noqa: PT011 - as the runner re-raises it
        with make_pipeline(finalize_options(BuildOptions([]))) as p:
            _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x + 1)
    assert was_interrupted(raised.value)
    left = _non_daemon_threads_after(2, before)
    monkeypatch.undo()
    sampler_patch.finish_all()
    assert bool(left) is not finish, left
    assert not _non_daemon_threads_after(5, before)


def _two_worker_pipeline(told: bool):
    """A pipeline of make_pipeline with two worker processes; for the control (``told`` false) Beam's own
    ``close_all`` is put back before it runs (``_release`` installs the patch again)."""
    from pipelines.localrunner import workers
    from pipelines.options import BuildOptions, finalize_options, make_pipeline

    opts = finalize_options(BuildOptions(["--direct_num_workers", "2"]))
    workers.uninstall()
    p = make_pipeline(opts)  # installs the patch
    if not told:
        workers.uninstall()
    return p


def _release(started: list) -> None:
    """The patch installed again, and the workers of ``started`` (a control's, still waiting) told to end."""
    from pipelines.localrunner import workers

    workers.install()
    workers.tell_to_end(started)


@pytest.mark.parametrize("told", [True, False], ids=["told_first", "control"])
def test_a_ctrl_c_while_the_run_waits_for_a_worker_leaves_no_worker_running(monkeypatch, tmp_path, told) -> None:
    """A run's end closes its worker handlers one after another, each waiting for its worker to end. A
    Ctrl-C during the first wait left the second worker, which ignores SIGINT, waiting for work, and the
    driver's thread waiting for that process kept the build from exiting ("interrupted", then a hang).
    Every worker is told to end before the first wait now; the control (Beam's ``close_all``) leaves one.
    The workers (pipelines.localrunner.sdkworker) run the harness's wrapped ``_execute``."""
    import os

    from apache_beam.runners.portability.fn_api_runner import worker_handlers as wh

    before = frozenset(_non_daemon_threads_after(0))
    started: list = []
    start, stop = wh.SubprocessSdkWorkerHandler.start_worker, wh.SubprocessSdkWorkerHandler.stop_worker

    def start_and_keep(self) -> None:
        started.append(self)
        start(self)

    def ctrl_c_in_the_first_wait(self) -> None:
        monkeypatch.setattr(wh.SubprocessSdkWorkerHandler, "stop_worker", stop)
        stop(self)  # the first worker, told by its close(), ends; the Ctrl-C comes as the wait returns
        raise KeyboardInterrupt

    monkeypatch.setattr(wh.SubprocessSdkWorkerHandler, "start_worker", start_and_keep)
    monkeypatch.setattr(wh.SubprocessSdkWorkerHandler, "stop_worker", ctrl_c_in_the_first_wait)

    def note_the_worker(x: int, folder: str = str(tmp_path)) -> int:
        from apache_beam.runners.worker.sdk_worker import SdkHarness

        wrapped = getattr(SdkHarness._execute, "wrapped_by_shardforge", False)
        Path(folder, str(os.getpid())).write_text(str(wrapped))
        return x

    p = _two_worker_pipeline(told)
    try:
        with pytest.raises(BaseException) as raised:  # noqa: PT011 - as the runner re-raises it
            with p:
                _ = p | beam.Create(list(range(64))) | beam.Reshuffle() | beam.Map(note_the_worker)
        assert was_interrupted(raised.value)
        assert len(started) == 2
        noted = {f.name: f.read_text() for f in tmp_path.iterdir()}
        assert noted and str(os.getpid()) not in noted and set(noted.values()) == {"True"}, noted
        left = _non_daemon_threads_after(30 if told else 5, before)
        assert bool(left) is not told, left
        assert told or {"run_worker"} <= {t.name for t in left} <= {"run_worker", "beam_control_read"}, left
    finally:
        _release(started)
    assert not _non_daemon_threads_after(30, before)


@pytest.mark.parametrize("told", [True, False], ids=["told_first", "control"])
def test_a_ctrl_c_before_a_worker_connects_leaves_nothing_waiting(monkeypatch, told) -> None:
    """Beam closes the control stream of a worker that has not connected yet without telling it to end:
    the worker, once connected, waits for work, and the run's end waits for the worker, forever (a Ctrl-C
    in the second or so a worker process takes to start). Every worker is told first now; the control
    (Beam's ``close_all``) is still waiting after 5 s. The run goes in a thread, so that the control's
    wait can be ended (the worker told) and the thread joined."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers as wh

    started: list = []
    start = wh.SubprocessSdkWorkerHandler.start_worker

    def start_then_ctrl_c(self) -> None:
        started.append(self)
        start(self)
        if len(started) == 1:  # the first worker's process is starting: it has not connected yet
            raise KeyboardInterrupt

    monkeypatch.setattr(wh.SubprocessSdkWorkerHandler, "start_worker", start_then_ctrl_c)
    p = _two_worker_pipeline(told)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            with p:
                _ = p | beam.Create(list(range(64))) | beam.Reshuffle() | beam.Map(lambda x: x + 1)
        except BaseException as e:  # noqa: BLE001 - the test reads it
            raised.append(e)

    thread = threading.Thread(target=run, daemon=True)
    try:
        thread.start()
        thread.join(30 if told else 5)
        assert thread.is_alive() is not told
    finally:
        _release(started)
        thread.join(60)
    assert not thread.is_alive() and len(raised) == 1 and was_interrupted(raised[0]), raised


def test_a_bundle_cut_short_by_the_end_of_the_control_stream_prints_nothing(capsys) -> None:
    """A run cut short closes a worker's control stream while it may still run a bundle; the harness
    then shuts the bundle's processor down under it and Beam's ``_execute`` printed the failure's
    traceback twice (~36 lines). Once the stream has ended (``_alive`` false) it answers with one line
    of error and prints nothing; a failure while the stream is open is printed as before."""
    import queue
    from types import SimpleNamespace

    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.runners.worker.sdk_worker import SdkHarness

    from pipelines.localrunner import workers

    def fails() -> None:
        raise KeyError("bundle_67")

    request = beam_fn_api_pb2.InstructionRequest(instruction_id="bundle_67")
    workers.install()
    for alive in (False, True):
        harness = SimpleNamespace(_alive=alive, _responses=queue.Queue())
        SdkHarness._execute(harness, fails, request)
        response = harness._responses.get_nowait()
        err = capsys.readouterr().err
        assert response.instruction_id == "bundle_67"
        if alive:
            assert "KeyError: 'bundle_67'" in err and "Traceback" in response.error
        else:
            assert err == "" and response.error == workers.CLOSED_UNDER_IT
    counted = []

    def succeeds() -> beam_fn_api_pb2.InstructionResponse:
        counted.append(workers.still_running())  # what sdkworker reads once the harness's run returns
        return beam_fn_api_pb2.InstructionResponse(instruction_id="x")

    harness = SimpleNamespace(_alive=False, _responses=queue.Queue())
    SdkHarness._execute(harness, succeeds, request)
    assert harness._responses.get_nowait().instruction_id == "x"  # a task that succeeds answers as it did
    assert counted == [1] and workers.still_running() == 0


@pytest.mark.slow
def test_ctrl_c_during_a_real_build_is_one_line(tmp_path) -> None:
    """`python -m pipelines.build`, sent SIGINT once its attempt folder exists: 130, one line, no manifest."""
    raw = _write_wiki(tmp_path / "raw.jsonl")  # ~9 s of stages after the folder appears here
    cfg = tmp_path / "build.yaml"
    cfg.write_text(f"sources:\n  - name: wiki\n    input: {raw}\n")
    out = tmp_path / "corpus"
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.build", "--config", str(cfg), "--output", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    deadline = time.monotonic() + 60
    while not (out / "versions").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # into the stages
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "ERROR" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == f"interrupted: {DATA_JOB_INTERRUPTED}"
    assert not (out / "manifest.json").exists()


def _write_wiki(path: Path) -> Path:
    """2.4 MB of distinct real prose as JSONL at path."""
    sys.path.insert(0, str(REPO / "tests"))
    from realtext import wiki_documents, write_jsonl

    write_jsonl(str(path), wiki_documents())
    return path


def _ctrl_c_to_the_group(args: list[str], out: Path, after: float, what: str = "the build") -> tuple[int, str]:
    """``python ARGS`` in a session of its own, then a terminal's Ctrl-C (SIGINT to the whole process group)
    ``after`` seconds after ``out/versions`` appears: its exit code and stderr."""
    import os

    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (out / "versions").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(after)
    assert proc.poll() is None, f"{what} finished before the Ctrl-C could be sent"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_ctrl_c_during_a_batched_build_is_one_line(tmp_path) -> None:
    """A terminal's Ctrl-C reaches the whole process group: the build and the process running its batch.
    The batch process printed Beam's log of the KeyboardInterrupt with its traceback; the build says it once."""
    raw, out = _write_wiki(tmp_path / "raw.jsonl"), tmp_path / "corpus"
    # versions/ is made by the batch process's pipeline, a few seconds before the batch ends (~3.6 s after the
    # process starts, ~5 s before it ends, on a loaded 2-core machine): signal at once, well inside that window
    # (waiting 2 s more once let a fast batch finish first: the build then exited 0).
    code, err = _ctrl_c_to_the_group(["-m", "pipelines.build", "--input", f"wiki={raw}", "--output", str(out),
                                      "--batch_mb", "1"], out, after=0.3)
    assert code == 130, err[-3000:]
    assert "Traceback" not in err and "ERROR" not in err, err[-3000:]
    assert err.strip().splitlines() == [f"interrupted: {DATA_JOB_INTERRUPTED}"], err[-3000:]


@pytest.mark.slow
def test_ctrl_c_to_a_build_with_worker_processes_reaches_only_the_driver(tmp_path) -> None:
    """A terminal's Ctrl-C reaches the workers of ``--direct_num_workers`` too: each printed its
    KeyboardInterrupt's traceback, the driver's threads theirs ("Worker subprocess exited with return
    code -2"), ~200 lines before "interrupted". The workers ignore it; the driver stops the run."""
    raw, out = _write_wiki(tmp_path / "raw.jsonl"), tmp_path / "corpus"
    # 1 s: the workers are started with the first stage, then run its bundles
    code, err = _ctrl_c_to_the_group(["-m", "pipelines.build", "--input", f"wiki={raw}", "--output", str(out),
                                      "--direct_num_workers", "2"], out, after=1.0)
    assert code == 130, err[-3000:]
    assert "KeyboardInterrupt" not in err and "exited with return code" not in err, err[-3000:]
    assert "Traceback" not in err and "terminate called" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == f"interrupted: {DATA_JOB_INTERRUPTED}", err[-3000:]


@pytest.mark.slow
def test_a_served_batch_with_worker_processes_finishes_and_commits_after_a_ctrl_c(tmp_path) -> None:
    """serve's first Ctrl-C lets the running batch finish and commit. With ``--direct_num_workers`` the
    same Ctrl-C killed the workers: the batch failed (exit 1, ~460 lines of tracebacks, nothing committed)."""
    (tmp_path / "in").mkdir()
    _write_wiki(tmp_path / "in" / "a.jsonl")
    out = tmp_path / "corpus"
    code, err = _ctrl_c_to_the_group(["-m", "pipelines.serve", "--watch", str(tmp_path / "in" / "*.jsonl"),
                                      "--corpus", str(out), "--source", "wiki", "--settle", "0", "--once",
                                      "--direct_num_workers", "2"], out, after=1.0, what="the batch")
    assert code == 0, err[-3000:]
    assert "finishing the running batch" in err and "committed v1" in err, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert (out / "manifest.json").exists()


def test_ctrl_c_while_a_data_command_imports_beam_is_one_line(capsys):
    """``python -m pipelines.build`` imports Beam for a second or two before the command's Ctrl-C handling
    is in place: a Ctrl-C then printed a 26-line traceback and the process died of SIGINT."""
    from pipelines.localrunner.preflight import interruptible_import

    with pytest.raises(SystemExit) as stop, interruptible_import():
        raise KeyboardInterrupt  # as the import of Beam is, by a Ctrl-C
    assert stop.value.code == 130 and capsys.readouterr().err == "interrupted: nothing was started\n"


def test_ctrl_c_after_the_commit_says_the_version_is_committed(demo_corpus, tmp_path, monkeypatch, capsys) -> None:
    """A Ctrl-C while the build reads its report for the summary, after manifest.json: the version is
    complete, which the line says (not "nothing unfinished was committed"); the rerun prints the summary."""
    import pipelines.jobs.build as build
    from shardforge.console.run import DATA_JOB_COMMITTED

    out = tmp_path / "corpus"
    argv = ["--input", demo_corpus["ccnews"], "--output", str(out)]

    def interrupt(url: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "read_report", interrupt)
    assert build.main(argv) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"interrupted: {DATA_JOB_COMMITTED}"
    assert (out / "manifest.json").is_file()
    monkeypatch.undo()
    assert build.main(argv) == 0
    assert "shards" in capsys.readouterr().out
