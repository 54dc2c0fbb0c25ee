"""Helpers that several rooms share, each answered in one place: a flag's value in argv, a local
filesystem, reads up to n bytes (whole or up to a fault), the decompression budget's counters and the
PII kinds."""

from __future__ import annotations

import gzip
import io

import pytest

from pipelines.flags import beam_flags_known
from pipelines.localrunner.preflight import flag_values, last_flag, runner_in_argv
from pipelines.sources.compression import Budget, CorruptData, Inflated, RawCounter, decompress
from pipelines.sources.streams import read_head, read_up_to
from shardforge import storage

# ------------------------------------------------------------------ a flag's value in argv


@pytest.mark.parametrize("argv, want", [
    ([], None),
    (["--runner", "FlinkRunner"], "FlinkRunner"),
    (["--runner=FlinkRunner"], "FlinkRunner"),
    (["--runner", "A", "--input", "x", "--runner=B"], "B"),
    (["--runner=A", "--runner", "B"], "B"),
    (["--runner=a=b"], "a=b"),
    (["--runner", "--runner", "C"], "C"),  # a value that looks like the flag is still its value
    (["--runner"], None),  # no value: left out
    (["--runner", "A", "--runner"], "A"),
    (["--runners", "A", "--runnerX=B"], None),  # other flags
])
def test_the_last_value_of_a_flag(argv, want) -> None:
    assert last_flag(argv, "--runner") == want
    assert runner_in_argv(argv) == want


def test_every_value_of_a_flag_in_order() -> None:
    argv = ["--input", "a=gs://b/x", "--output", "o", "--input=c", "--input"]
    assert flag_values(argv, "--input") == ["a=gs://b/x", "c"]
    assert flag_values(argv, "--output") == ["o"]
    assert flag_values(argv, "--corpus") == []


def test_beam_flags_known_reads_the_runner_through_the_one_parser() -> None:
    pytest.importorskip("apache_beam")
    assert beam_flags_known(["--runner", "Flink", "--runner=DaskRunner"]) is False
    assert beam_flags_known(["--runner=DaskRunner", "--runner", "FlinkRunner"]) is True
    # a --runner with no value (argv's last word) is left to Beam's own parser
    assert beam_flags_known(["--runner", "FlinkRunner", "--runner"]) is False
    assert beam_flags_known(["--runner"]) is False


# ------------------------------------------------------------------ local filesystems


def test_is_local_fs(tmp_path) -> None:
    assert storage.is_local_fs(storage.get_fs(str(tmp_path))[0])
    assert storage.is_local_fs(storage.get_fs(f"file://{tmp_path}")[0])
    assert not storage.is_local_fs(storage.get_fs("memory://x/y")[0])


# ------------------------------------------------------------------ reads up to n bytes


class Chunks:
    """A read(n) stream giving at most `step` bytes a read, then raising `fault` (if any) at its end."""

    def __init__(self, data: bytes, step: int, fault: BaseException | None = None):
        self._data, self._step, self._fault = data, step, fault

    def read(self, n: int = -1) -> bytes:
        if not self._data and self._fault is not None:
            raise self._fault
        k = min(self._step, len(self._data) if n < 0 else n)
        out, self._data = self._data[:k], self._data[k:]
        return out


def test_read_up_to_gathers_short_reads() -> None:
    assert read_up_to(Chunks(b"abcdefgh", 3), 7) == b"abcdefg"
    assert read_up_to(Chunks(b"abc", 2), 10) == b"abc"
    assert read_head(Chunks(b"abcdefgh", 3), 7) == b"abcdefg"


@pytest.mark.parametrize("fault", [EOFError("cut"), CorruptData("bad")])
def test_a_fault_after_some_bytes_ends_a_head_and_raises_from_read_up_to(fault) -> None:
    assert read_head(Chunks(b"abcde", 2, fault), 100) == b"abcde"
    with pytest.raises(type(fault)):
        read_up_to(Chunks(b"abcde", 2, fault), 100)
    with pytest.raises(type(fault)):  # a fault before any byte: raised by both
        read_head(Chunks(b"", 2, fault), 100)


def test_read_head_of_a_truncated_gzip_keeps_what_decoded() -> None:
    text = b"".join(b"line %d\n" % i for i in range(20_000))
    cut = gzip.compress(text)[:-100]
    head = read_head(decompress(io.BytesIO(cut), "gzip"), 1 << 20)
    assert head and text.startswith(head)
    with pytest.raises(EOFError):
        read_up_to(decompress(io.BytesIO(cut), "gzip"), 1 << 20)


# ------------------------------------------------------------------ the budget's counters


def test_raw_counter_and_inflated_charge_their_own_counts() -> None:
    budget = Budget()
    raw = RawCounter(io.BytesIO(b"x" * 10), budget)  # type: ignore[arg-type]
    assert raw.read(4) == b"xxxx" and raw.read() == b"x" * 6 and raw.read(3) == b""
    assert (budget.raw, budget.inflated) == (10, 0)
    out = Inflated(io.BytesIO(b"y" * 7), budget)  # type: ignore[arg-type]
    assert out.read(5) == b"y" * 5 and out.read(5) == b"yy" and out.read() == b""
    assert (budget.raw, budget.inflated) == (10, 7)


def test_inflated_raises_past_the_budget() -> None:
    from pipelines.sources.compression import ExpansionLimit

    packed = gzip.compress(b"\0" * 100_000)
    budget = Budget(max_bytes=50_000)
    stream = decompress(RawCounter(io.BytesIO(packed), budget), "gzip", budget)  # type: ignore[arg-type]
    with pytest.raises(ExpansionLimit) as e:
        while stream.read(10_000):
            pass
    assert e.value.reason == "max_decompressed_bytes"
    assert 0 < budget.raw <= len(packed) and budget.inflated > 50_000


# ------------------------------------------------------------------ PII kinds


def test_the_pii_kinds_come_from_the_clean_stage() -> None:
    from pipelines.clean.pii import KINDS
    from pipelines.jobs.build_config import pii_kinds
    from pipelines.report.record import pii_stats
    from schemas.config import PiiConfig

    assert set(KINDS) <= set(PiiConfig.model_fields)
    assert list(pii_kinds("email")) == list(KINDS)
    assert pii_kinds("none") == dict.fromkeys(KINDS, False)
    assert list(pii_stats({}, None)["kinds"]) == list(KINDS)
