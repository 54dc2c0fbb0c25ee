"""Giving up on a store that keeps failing: requests and seconds until one shard write gives up.

    python benchmarks/bench_giveup.py             # S3 (moto), the clients' own retries off (~1 min)
    python benchmarks/bench_giveup.py --shipped   # also the clients' retries as shipped, S3 and GCS (~8 min)

A fault proxy (tests/faultproxy.py) in front of an emulator on 127.0.0.1 answers 503 to every
request, or to every HEAD (the write's checks), and counts the requests. One 100 KB shard goes
through ``storage.write_stream_atomic`` (our defaults: SHARDFORGE_RETRY_* unset) until it raises.

Baseline: nested retries multiplying, each level's loop retrying what an inner loop already ran out
of tries on (``storage.retry.retried_out`` switched off: the rule this compares against). Ours: the
shipped rule, an error an inner loop gave up on is given up on at once by the outer ones. The
baseline runs only with the clients' retries off: with them on, its GCS row takes ~45 minutes.

Backoff is jittered (0.5-1.5x), so seconds vary a little from run to run; request counts do not.
Results go to benchmarks/results/giveup.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import (  # noqa: E402
    bench_parser,
    command_line,
    free_port,
    local_server,
    machine,
    set_gcsfs_env,
    write_results,
)

set_gcsfs_env()  # before anything imports gcsfs
for _k, _v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",  # the emulator's dummies
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
    os.environ.setdefault(_k, _v)

from shardforge import storage  # noqa: E402
from tests.faultproxy import FaultProxy  # noqa: E402

# The module, not the function of that name that shardforge.storage exports.
retry_module = sys.modules["shardforge.storage.retry"]

ROOT = Path(__file__).resolve().parents[1]
SHARD = b"x" * 100_000


@contextlib.contextmanager
def emulator(store: str) -> Iterator[str]:
    """The tests' emulator of ``store`` on 127.0.0.1 (tests/s3_emulator.py: moto with S3's atomic
    conditional writes; tests/gcs_emulator.py: gcp-storage-emulator with GCS's ifGenerationMatch=0);
    yields its URL."""
    port = free_port()
    args = (["-H", "127.0.0.1", "-p", str(port)] if store == "s3"
            else ["start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"])
    script = ROOT / "tests" / ("s3_emulator.py" if store == "s3" else "gcs_emulator.py")
    with local_server([sys.executable, str(script), *args], port, f"the {store} emulator"):
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def routed(store: str, endpoint: str, client_retries: bool) -> Iterator[None]:
    """Every s3:// or gs:// URL our storage layer opens goes to ``endpoint`` (the proxy)."""
    import fsspec
    import gcsfs
    import s3fs

    conf = fsspec.config.conf.setdefault("s3", {})
    saved_conf, saved_retries, saved_host = dict(conf), s3fs.S3FileSystem.retries, os.environ.get(
        "STORAGE_EMULATOR_HOST")
    if store == "s3":
        conf["endpoint_url"] = endpoint
        if not client_retries:  # s3fs's loop and botocore's, both off: ours counted alone
            s3fs.S3FileSystem.retries = 1
            conf["config_kwargs"] = {"retries": {"total_max_attempts": 1, "mode": "standard"}}
    else:
        os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    s3fs.S3FileSystem.clear_instance_cache()
    gcsfs.GCSFileSystem.clear_instance_cache()
    try:
        yield
    finally:
        conf.clear()
        conf.update(saved_conf)
        s3fs.S3FileSystem.retries = saved_retries
        if saved_host is not None:
            os.environ["STORAGE_EMULATOR_HOST"] = saved_host
        s3fs.S3FileSystem.clear_instance_cache()
        gcsfs.GCSFileSystem.clear_instance_cache()


@contextlib.contextmanager
def nested_retries() -> Iterator[None]:
    """The baseline: no loop knows that an inner one already ran out of tries."""
    shipped = retry_module.retried_out
    retry_module.retried_out = lambda exc: False
    try:
        yield
    finally:
        retry_module.retried_out = shipped


def give_up(url: str, upstream: str, store: str, failing: str, client_retries: bool) -> tuple[int, int, float]:
    """(requests, HEADs, seconds) until the write of one shard to ``url`` raises."""
    methods = ("HEAD",) if failing == "every HEAD" else None
    with FaultProxy(upstream, rate=1.0, seed=0, max_faults=10**9, active_s=10**6, kinds=("503",),
                    methods=methods) as proxy, routed(store, proxy.url, client_retries):
        start = time.perf_counter()
        try:
            storage.write_stream_atomic(url, lambda f: f.write(SHARD))
        except Exception:  # noqa: BLE001 - giving up is what is measured
            pass
        else:
            raise RuntimeError(f"the write to {url} went through a store failing {failing}")
        seconds = time.perf_counter() - start
    heads = sum(1 for m, _, _ in proxy.log if m == "HEAD")
    return proxy.stats["requests"], heads, seconds


def make_bucket(store: str, endpoint: str, name: str) -> str:
    import gcsfs
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint) if store == "s3" else gcsfs.GCSFileSystem(token="anon")
    fs.mkdir(name)
    return f"{store}://{name}"


def rows_for(store: str, upstream: str, cases: list[tuple[str, bool]], say: Callable[[str], None]) -> list[str]:
    if store == "gs":
        os.environ["STORAGE_EMULATOR_HOST"] = upstream
    bucket = make_bucket(store, upstream, "giveup")
    rows = []
    for i, (failing, client_retries) in enumerate(cases):
        url = f"{bucket}/d{i}/shard.tar"
        ours = give_up(url, upstream, store, failing, client_retries)
        say(f"{store} {failing} clients {'on' if client_retries else 'off'}: ours {ours}")
        base: tuple[int, int, float] | None = None
        if not client_retries:
            with nested_retries():
                base = give_up(url + ".base", upstream, store, failing, client_retries)
            say(f"  nested {base}")
        name = {"s3": "S3 (moto)", "gs": "GCS (emulator)"}[store]
        clients = "as shipped" if client_retries else "off"

        def cell(r: tuple[int, int, float] | None) -> str:
            return "not run" if r is None else f"{r[0]} requests ({r[1]} HEAD), {r[2]:.1f} s"

        ratio = f"{base[0] / ours[0]:.1f}x fewer requests, {base[2] / ours[2]:.1f}x sooner" if base else "—"
        rows.append(f"| {name}, {failing} | {clients} | {cell(base)} | {cell(ours)} | {ratio} |")
    return rows


def main() -> None:
    ap = bench_parser(__doc__, "giveup")
    ap.add_argument("--shipped", action="store_true",
                    help="Also the clients' own retries as shipped (S3 and GCS, ours only; ~8 min).")
    args = ap.parse_args()
    # Each try's warning and the clients' tracebacks of every 503: hundreds of lines; the rows say it.
    for name in ("gcsfs", "s3fs", "botocore", "shardforge"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    say = print
    s3_cases = [("every HEAD", False), ("every request", False)]
    if args.shipped:
        s3_cases += [("every HEAD", True), ("every request", True)]
    lines = ["# Giving up on a store that keeps failing", "", f"`{command_line()}`", "",
             f"Machine: {machine('s3fs', 'gcsfs', 'moto')}", "",
             "One 100 KB shard through `storage.write_stream_atomic`, our retry defaults, until it raises. "
             "Baseline: nested retries multiplying (`retried_out` off).", "",
             "| store, what fails | clients' retries | baseline (nested) | ours | ours vs baseline |",
             "|---|---|---|---|---|"]
    with emulator("s3") as s3:
        rows = rows_for("s3", s3, s3_cases, say)
    if args.shipped:
        with emulator("gs") as gcs:
            rows += rows_for("gs", gcs, [("every request", True)], say)
    write_results(args.out, lines + rows)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
