"""Test fixtures: object-store emulators on 127.0.0.1 and small corpora.

The environment is set before anything imports gcsfs / s3fs / transformers:
gcsfs probes bucket types over gRPC for 60 s unless told not to, the Google
and AWS clients probe metadata servers, and the HF hub must stay offline.
"""

from __future__ import annotations

import os

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ["NO_GCE_CHECK"] = "true"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["FSSPEC_GS_TOKEN"] = "anon"
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
os.environ["SHARDFORGE_RETRY_BASE_DELAY"] = "0.01"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Two test workers share two cores: torch's OpenMP threads must not spin while they wait for a core
# the other worker holds (measured on torch-heavy files, -n 2: user CPU -10 %, wall -5 %). Read when
# torch loads, so set here, before any test module imports it; subprocesses inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# inductor's C++ kernels (the CPU's compiled graphs) without SIMD: gcc spends ~1 s on each vectorized
# kernel, mostly instantiating ATen's at::vec templates; scalar kernels come out of the same graph, the
# same passes and the same fusion decisions (measured: the unpadded-path compile 44 -> 36 s alone). The
# compiled-equals-eager checks compare graphs, not SIMD code; a GPU's kernels are Triton, which
# tests/triton_masking.py generates and runs. Inherited by every command a test starts.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")

import asyncio  # noqa: E402
import itertools  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

# A suite started as a background job of a non-interactive shell (`cmd &`, nohup) inherits SIGINT
# ignored, and so does every command a test starts: a test's Ctrl-C to a build was ignored (the build
# went on and exited 0) and servers stopped with SIGINT waited out their timeout (test_portable: 20 s).
# The tests run as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_bucket_ids = itertools.count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with code {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not start in {timeout}s")


def start_server(cmd: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
    except Exception:
        proc.kill()
        raise
    return proc


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()


# The object-store clients' own retry waits, divided by this in the test process (see short_client_backoff).
BACKOFF_DIVISOR = 20


class _ShortSleeps:
    """The asyncio module as a client module sees it, with ``sleep``'s delay divided by BACKOFF_DIVISOR."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def sleep(delay: float, result: Any = None) -> Any:
        return await asyncio.sleep(delay / BACKOFF_DIVISOR, result)


@pytest.fixture(scope="session")
def short_client_backoff() -> Iterator[None]:
    """gcsfs, s3fs and botocore wait between their own retries (gcsfs 0.5-1.5 s before its first, 1-2 s
    before its second); the tests that put a fault proxy in front of the emulators spent ~45 s of the suite
    asleep in those waits. In the test process they wait a twentieth as long: the same faults, the same
    requests, the same retries and give-ups (commands the tests start as processes wait in full). The
    emulator fixtures set it up; shardforge's own retry loop is shortened by SHARDFORGE_RETRY_BASE_DELAY.
    Each client module sleeps through its ``asyncio`` global (aiobotocore's in ``AioEndpoint._sleep``)."""
    import aiobotocore.endpoint
    import gcsfs.retry
    import s3fs.core

    mp = pytest.MonkeyPatch()
    for module in (gcsfs.retry, s3fs.core, aiobotocore.endpoint):
        mp.setattr(module, "asyncio", _ShortSleeps())
    yield
    mp.undo()


@pytest.fixture(scope="session")
def gcs_emulator(short_client_backoff) -> Iterator[str]:
    """A gcp-storage-emulator on 127.0.0.1; gcsfs (token anon) talks to it. Yields its URL."""
    port = free_port()
    # Through tests/gcs_emulator.py: the emulator plus GCS's ifGenerationMatch=0 rule (the commit primitive).
    exe = [sys.executable, str(Path(__file__).with_name("gcs_emulator.py"))]
    proc = start_server([*exe, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"], port)
    url = f"http://127.0.0.1:{port}"
    os.environ["STORAGE_EMULATOR_HOST"] = url
    yield url
    stop_server(proc)
    os.environ.pop("STORAGE_EMULATOR_HOST", None)


@pytest.fixture
def gcs_bucket(gcs_emulator: str) -> str:
    """A fresh, empty bucket on the emulator: 'gs://name'."""
    import gcsfs

    name = f"sf-test-{os.getpid()}-{next(_bucket_ids)}"
    fs = gcsfs.GCSFileSystem(token="anon")
    fs.mkdir(name)
    fs.invalidate_cache()
    return f"gs://{name}"


@pytest.fixture(scope="session")
def s3_emulator(short_client_backoff) -> Iterator[str]:
    """A moto server on 127.0.0.1 standing in for S3 (through tests/s3_emulator.py: its conditional
    writes atomic, as S3's are). Yields its endpoint URL."""
    port = free_port()
    proc = start_server([sys.executable, str(Path(__file__).with_name("s3_emulator.py")), "-H", "127.0.0.1",
                         "-p", str(port)], port)
    url = f"http://127.0.0.1:{port}"
    import fsspec

    fsspec.config.conf.setdefault("s3", {})["endpoint_url"] = url
    yield url
    fsspec.config.conf.get("s3", {}).pop("endpoint_url", None)
    stop_server(proc)


@pytest.fixture
def s3_bucket(s3_emulator: str) -> str:
    import s3fs

    name = f"sf-test-{os.getpid()}-{next(_bucket_ids)}"
    fs = s3fs.S3FileSystem(endpoint_url=s3_emulator)
    fs.mkdir(name)
    fs.invalidate_cache()
    return f"s3://{name}"


@pytest.fixture(params=["file", "memory", "gs", "s3"])
def store_url(request, tmp_path) -> str:
    """A fresh, empty folder URL on each storage backend (local disk, fsspec memory, the gcs and s3 emulators)."""
    if request.param == "file":
        return str(tmp_path / "store")
    if request.param == "memory":
        return f"memory://sf-{os.getpid()}-{time.monotonic_ns()}"
    return request.getfixturevalue({"gs": "gcs_bucket", "s3": "s3_bucket"}[request.param]) + "/store"


def listing(url: str) -> list[str]:
    """The names of the objects under a folder URL, read fresh (fsspec's listing cache dropped); [] if none."""
    from shardforge import storage

    fs, path = storage.get_fs(url)
    storage.invalidate(fs)
    try:
        return sorted(os.path.basename(p) for p in fs.find(path, withdirs=False))
    except FileNotFoundError:
        return []


def pytest_configure(config: pytest.Config) -> None:
    """One folder for the whole run, made by the main pytest process before it starts its workers (which
    inherit it, as do the commands the tests start) and removed when the run ends:

    - ``tmp/``, the system temp folder of every process but the main one (TMPDIR). The commands the tests
      start left what they did not remove in /tmp: Beam's ``beam-pipeline-temp*`` of a killed build, a
      portable job's staging folders (503 entries had piled up on one machine). In the test processes themselves
      ``contained_temp_dir`` moves it under pytest's own temp folder, kept for a failed run's debugging.
    - ``inductor/``, the inductor cache (TORCHINDUCTOR_CACHE_DIR) of every process. Each worker compiled
      into a folder of its own once it had compiled in-process (inductor writes the folder it picked into
      os.environ), the commands started before that into /tmp/torchinductor_<user>, which outlived the run:
      three folders, each building inductor's precompiled header (~9 s) and compiling the same kernels
      again, and a machine's second run of the suite faster than its first.

    A cache folder set from outside (TORCHINDUCTOR_CACHE_DIR) is used and kept."""
    if hasattr(config, "workerinput") or "SHARDFORGE_TESTS_RUN_DIR" in os.environ:
        return
    import tempfile

    tempfile.gettempdir()  # this process's own temp folder (pytest's, where it keeps each run) stays as it is
    run_dir = tempfile.mkdtemp(prefix="shardforge-tests-")
    os.mkdir(os.path.join(run_dir, "tmp"))
    mp = pytest.MonkeyPatch()
    mp.setenv("SHARDFORGE_TESTS_RUN_DIR", run_dir)
    mp.setenv("TMPDIR", os.path.join(run_dir, "tmp"))
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", os.path.join(run_dir, "inductor"))
    config.add_cleanup(lambda: (mp.undo(), shutil.rmtree(run_dir, ignore_errors=True)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files that hold slow tests first, each file's tests in their own order. Under ``--dist loadfile
    --no-loadscope-reorder`` (scripts/test.sh) xdist hands the files out in this order; a long file handed
    out last can keep one worker busy alone at the end of the run, where short files now fill the gaps.
    (Without that flag xdist sorts the files by their number of tests: the one-test Triton file of ~90 s
    went last, and one worker ran alone for the last ~90 s.)"""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # a stable sort: the order within each group stays


@pytest.fixture(autouse=True)
def root_log_left_as_found() -> Iterator[None]:
    """A command run in-process leaves no handler of its own on the root logger: one left there writes to
    the stream of that test's capture after it is closed, and every later test's log line then prints a
    "Logging error" traceback (pytest's own handlers come and go per phase and are not counted)."""
    import logging

    def handlers() -> list[logging.Handler]:
        return [h for h in logging.getLogger().handlers if not type(h).__module__.startswith("_pytest")]

    before = handlers()
    yield
    leaked = [h for h in handlers() if h not in before]
    for h in leaked:
        logging.getLogger().removeHandler(h)
    assert not leaked, f"the test left handlers on the root logger: {leaked}"


@pytest.fixture(scope="session", autouse=True)
def contained_temp_dir(tmp_path_factory) -> Iterator[str]:
    """The test process's temp files under pytest's own temp folder (whose old runs pytest removes).

    Beam makes a temp folder for every Pipeline that only ``run()`` removes: a test that builds a
    graph without running it (a plan, a fusion check, a failure it expects) left one in the system's
    temp folder each, ~25 per run of the suite.
    """
    import tempfile

    old = tempfile.tempdir
    tempfile.tempdir = str(tmp_path_factory.mktemp("tmp"))
    yield tempfile.tempdir
    tempfile.tempdir = old


@pytest.fixture(scope="session")
def demo_corpus(tmp_path_factory) -> dict[str, str]:
    """The synthetic multi-source raw corpus of `shardforge demo` (small)."""
    from shardforge.commands.synth import write_demo_corpus

    root = tmp_path_factory.mktemp("raw")
    return write_demo_corpus(str(root), docs_per_source=40, seed=7)


@pytest.fixture(scope="session")
def small_corpus(demo_corpus, tmp_path_factory) -> tuple[str, Any]:
    """(root, manifest) of the demo corpus built with small shards; shared read-only (tamper with a copy)."""
    from test_storage import store_config

    from pipelines.jobs.build import run_build

    out = str(tmp_path_factory.mktemp("small") / "corpus")
    return out, run_build(store_config(demo_corpus, target_samples=32), out)


@pytest.fixture
def corpus_copy(small_corpus, tmp_path) -> str:
    """A private copy of `small_corpus` to tamper with."""
    dst = str(tmp_path / "copy")
    shutil.copytree(small_corpus[0], dst)
    return dst

