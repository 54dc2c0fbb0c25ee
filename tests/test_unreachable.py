"""An object store that cannot be reached: one line naming the host, after the client's retries only.

Before, `shardforge validate gs://...` on a machine without network printed aiohttp's traceback
after 3 min 46 s: gcsfs retried each request six times (~31 s) and ``shardforge.storage.retry`` retried
that six times more. The clients retry a connection that cannot be made themselves, so the
outer loop now gives up at once on those (and still retries a connection dropped mid-request).
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from shardforge.console.run import quiet_library_logs, run_cli, unreachable_store_error
from shardforge.storage.retry import OPERATION_ATTR, is_transient, not_connected, retry, unreachable_endpoint
from tests.conftest import free_port  # a loopback port nothing listens on once it returns

REPO = Path(__file__).resolve().parents[1]


def aiohttp_error(url: str) -> BaseException:
    """The error aiohttp raises for a GET of url (a real connection attempt, no retries)."""
    async def get() -> None:
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            await resp.read()

    try:
        asyncio.run(get())
    except Exception as e:  # noqa: BLE001 - the error is the point
        return e
    raise AssertionError(f"{url} answered")


def test_a_refused_connection_is_not_retried_again_and_names_its_host() -> None:
    port = free_port()
    err = aiohttp_error(f"http://127.0.0.1:{port}/b/o")
    assert is_transient(err)  # infrastructure, never bad data: a source read still fails the bundle
    assert not_connected(err)
    assert unreachable_endpoint(err) == f"127.0.0.1:{port} (Connection refused)"
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise err

    with pytest.raises(aiohttp.ClientConnectorError) as info:
        retry(attempt, "read gs://b/o", attempts=6)
    assert len(calls) == 1  # the client retried it already: no five more rounds of its retries
    assert getattr(info.value, OPERATION_ATTR) == "read gs://b/o"
    assert not getattr(info.value, "__notes__", None)  # Beam words a wrapped error by its last line: no notes


def test_a_name_that_does_not_resolve_is_not_retried_again() -> None:
    err = aiohttp_error("http://nohost.invalid:9/b/o")  # .invalid never resolves (RFC 6761)
    assert not_connected(err) and is_transient(err)
    where = unreachable_endpoint(err)
    # "Name or service not known" with a resolver, "Temporary failure in name resolution" without network
    assert where is not None and where.startswith("nohost.invalid:9 (") and where.endswith(")"), where
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise OSError("wrapped by the client") from err

    with pytest.raises(OSError):
        retry(attempt, "list s3://b/", attempts=6)
    assert len(calls) == 1


def test_a_dropped_connection_is_still_retried() -> None:
    calls = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError(104, "Connection reset by peer")
        return "ok"

    assert retry(attempt, "read x", attempts=6) == "ok" and len(calls) == 3
    assert not not_connected(ConnectionResetError(104, "Connection reset by peer"))


def test_what_a_runner_kept_as_text_still_names_the_host() -> None:
    wrapped = RuntimeError("Error in stage: aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host "
                           "storage.googleapis.com:443 ssl:default [Temporary failure in name resolution] "
                           "[while running 'WriteCorpus']")
    assert unreachable_endpoint(wrapped) == "storage.googleapis.com:443 (Temporary failure in name resolution)"
    botocore = RuntimeError('Could not connect to the endpoint URL: "http://minio.local:9000/b/manifest.json"')
    assert unreachable_endpoint(botocore) == "http://minio.local:9000/b/manifest.json"
    assert unreachable_endpoint(RuntimeError("connection reset by peer")) is None
    assert unreachable_endpoint(FileNotFoundError("gs://b/manifest.json")) is None



def _raise(exc: BaseException):
    def step(_: object) -> None:
        raise exc
    return step


def test_a_storage_error_raised_in_a_local_beam_step_is_still_classified() -> None:
    """What serve's in-place batch retry and the one-line messages rely on: the local runner
    re-raises a step's error with the original as its cause, so the classification sees it."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    closed = f"http://127.0.0.1:{free_port()}/b/o"
    cases = [(ConnectionResetError(104, "Connection reset by peer"), True, False),
             (aiohttp_error(closed), True, True),
             (ValueError("a bad record"), False, False)]
    for exc, transient, unreachable in cases:
        with pytest.raises(Exception) as info:
            with beam.Pipeline(runner="FnApiRunner", options=PipelineOptions([])) as p:
                _ = p | beam.Create([1]) | beam.Map(_raise(exc))
        assert info.value is not exc  # wrapped by the runner ...
        assert is_transient(info.value) is transient, (exc, info.value)  # ... and still classified
        assert not_connected(info.value) is unreachable
        if unreachable:
            assert unreachable_endpoint(info.value).startswith("127.0.0.1:")

def test_run_cli_prints_one_line_for_an_unreachable_store(capsys) -> None:
    port = free_port()
    err = aiohttp_error(f"http://127.0.0.1:{port}/b/o")

    def body() -> int:
        retry(lambda: (_ for _ in ()).throw(err), "read s3://b/corpus/manifest.json")
        return 0

    assert run_cli(body, []) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [str(unreachable_store_error(err)).join(("error: ", ""))], lines
    assert lines[0].startswith(f"error: cannot reach 127.0.0.1:{port} (Connection refused) [read "
                               "s3://b/corpus/manifest.json]: check the URL")


def test_client_loggers_keep_their_line_without_the_traceback(capsys) -> None:
    quiet_library_logs()
    log = logging.getLogger("gcsfs")
    handler = logging.StreamHandler(sys.stderr)
    log.addHandler(handler)
    try:
        try:
            raise ConnectionRefusedError(111, "Connect call failed")
        except ConnectionRefusedError as e:
            log.exception(f"_request out of retries on exception: {e}")
    finally:
        log.removeHandler(handler)
    err = capsys.readouterr().err
    assert "_request out of retries" in err and "Traceback" not in err


def test_validate_of_an_unreachable_bucket_is_one_line_at_once(tmp_path) -> None:
    """The real command against an S3 endpoint nothing listens on: exit 2, one line, no retry rounds."""
    port = free_port()
    # AWS_MAX_ATTEMPTS=1: botocore's own retries (~9 s of backoff here) are not what is tested;
    # shardforge's six attempts are, at their default.
    env = {**os.environ, "FSSPEC_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "test",
           "AWS_SECRET_ACCESS_KEY": "test", "SHARDFORGE_RETRY_ATTEMPTS": "6", "AWS_MAX_ATTEMPTS": "1"}
    r = subprocess.run([sys.executable, "-m", "shardforge.cli", "validate", "s3://bucket/corpus", "--no-progress"],
                       capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "retry 1/" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: cannot reach 127.0.0.1:{port} (Connection refused) [read "
                      "s3://bucket/corpus/manifest.json]: check the URL, the network (or proxy) and the store's "
                      "endpoint settings (STORAGE_EMULATOR_HOST for gs:// URLs, FSSPEC_S3_ENDPOINT_URL or "
                      "AWS_ENDPOINT_URL for s3:// URLs)"], r.stderr


def test_an_http_input_that_cannot_be_reached_is_not_no_such_file(capsys) -> None:
    """fsspec's HTTP exists() says False for any failure: a dead server was "no files match"."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from pipelines.sources.listing import list_inputs
    from shardforge.storage import expand_glob

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_error(404)

        do_HEAD = do_GET  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        missing = f"http://127.0.0.1:{server.server_address[1]}/raw.jsonl"
        assert list_inputs(missing) == [] and expand_glob(missing) == []  # a 404 is still "no such file"
    finally:
        server.shutdown()
    port = free_port()
    dead = f"http://127.0.0.1:{port}/raw.jsonl"
    for lister in (list_inputs, expand_glob):
        with pytest.raises(ConnectionError) as info:
            lister(dead)
        assert unreachable_endpoint(info.value) == f"127.0.0.1:{port} (Connection refused)"
    assert run_cli(lambda: len(list_inputs(dead)), []) == 2
    assert capsys.readouterr().err.startswith(f"error: cannot reach 127.0.0.1:{port} (Connection refused) "
                                              f"[exists {dead}]: check the URL")


def test_the_store_host_of_a_url_is_read_as_its_client_reads_it(monkeypatch) -> None:
    from shardforge.storage.resolve import endpoint

    for name in ("STORAGE_EMULATOR_HOST", "FSSPEC_GCS_ENDPOINT_URL", "FSSPEC_GS_ENDPOINT_URL",
                 "FSSPEC_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    assert endpoint("gs://b/x") == ("storage.googleapis.com", 443)
    assert endpoint("s3://b/x") is None  # AWS's regional names: left to the client
    assert endpoint("/data/x") is None and endpoint("file:///data/x") is None
    assert endpoint("https://host.example:8443/a?b") == ("host.example", 8443)
    assert endpoint("http://host.example/a") == ("host.example", 80)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "localhost:9023")  # gcsfs takes it without a scheme too
    assert endpoint("gcs://b/x") == ("localhost", 9023)
    monkeypatch.setenv("FSSPEC_S3_ENDPOINT_URL", "http://minio.internal:9000")
    assert endpoint("s3://b/x") == ("minio.internal", 9000)


def test_a_store_host_that_does_not_resolve_is_one_line_before_any_client_retry(tmp_path, monkeypatch) -> None:
    """gcsfs looked for credentials (~18 s offline) and retried the glob and the bucket's type (~31 s each):
    `build --input gs://…` without network took 5 minutes to say it, then 61 s; now the name is resolved first."""
    env = {**os.environ, "STORAGE_EMULATOR_HOST": "http://nohost.invalid:9"}  # .invalid never resolves
    for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy",
                  "SHARDFORGE_CHECK_HOSTS"):
        env.pop(proxy, None)
    cmd = [sys.executable, "-m", "shardforge.cli", "build", "--input", "gs://bucket/raw/*.jsonl", "--output",
           str(tmp_path / "o")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert r.returncode == 2, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith("error: cannot reach nohost.invalid:9 (") and "[open gs://bucket/raw/*.jsonl]" in line, line
    assert "gcsfs" not in r.stderr, r.stderr  # the client never ran a request
    # Behind a proxy the proxy resolves names, and the check can be turned off: both leave it to the client.
    from shardforge.storage.resolve import PROXY_VARIABLES, HostUnresolved, check_resolves
    from shardforge.storage.urls import redact_url

    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SHARDFORGE_CHECK_HOSTS", "1")
    with pytest.raises(HostUnresolved) as info:
        check_resolves("http://user:hunter2@nohost.invalid/x?X-Amz-Signature=abc", redact_url)
    assert getattr(info.value, OPERATION_ATTR).startswith("open http://nohost.invalid/x")  # credentials redacted
    assert "hunter2" not in str(vars(info.value)) and "abc" not in getattr(info.value, OPERATION_ATTR)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    check_resolves("http://nohost.invalid/x", redact_url)
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setenv("SHARDFORGE_CHECK_HOSTS", "0")
    check_resolves("http://nohost.invalid/x", redact_url)
