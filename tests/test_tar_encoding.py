"""The shard writer's template headers and cached .npy headers give tarfile's and np.save's bytes."""

from __future__ import annotations

import io
import random
import tarfile

import numpy as np
import pytest

from schemas import sample
from schemas.sample import encode_sample, iter_tar_samples, tar_bytes, ustar_header, write_tar
from tests import reference_tar


def _random_samples(rng: random.Random, n: int) -> list[tuple[str, list[tuple[str, bytes]]]]:
    out = []
    for i in range(n):
        # keys of 1 to 79 characters: with the longest suffix, names up to USTAR's 100 bytes
        key = "".join(rng.choice("abcXYZ019_-") for _ in range(rng.choice([1, 5, 20, 60, 77])))
        key = f"{key}{i}"
        length = rng.choice([1, 2, 255, 256, 257, 510, 512, 1000])
        vocab = rng.choice([100, 65536, 70000])
        ids = [rng.randrange(vocab) for _ in range(length)]
        members = encode_sample(ids, vocab, token_type_ids=[rng.randrange(2) for _ in ids] if i % 3 == 0 else None,
                                label=rng.randrange(2) if i % 3 == 0 else None,
                                meta={"doc_ids": [f"d{j}" for j in range(rng.randrange(4))]} if i % 2 else None)
        if i % 14 == 0:  # (even: no meta member yet)
            members.append(("json", b""))  # an empty payload: a header and no data block
        out.append((key, members))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_write_tar_is_byte_identical_to_tarfile(seed: int) -> None:
    rng = random.Random(seed)
    for n in (0, 1, 2, 19, 20, 21, 60):
        samples = _random_samples(rng, n)
        ours = tar_bytes(samples)
        assert ours == reference_tar.tar_bytes(samples), (seed, n)
        assert len(ours) % tarfile.RECORDSIZE == 0
        with tarfile.open(fileobj=io.BytesIO(ours)) as t:  # and an independent reader agrees
            names = t.getnames()
        assert names == [f"{k}.{s}" for k, ms in samples for s, _ in ms]


def test_write_tar_writes_once_per_sample() -> None:
    class Counting(io.BytesIO):
        writes = 0

        def write(self, b):  # type: ignore[override]
            Counting.writes += 1
            return super().write(b)

    samples = _random_samples(random.Random(3), 12)
    f = Counting()
    write_tar(f, samples)
    assert Counting.writes == len(samples) + 1  # each sample, then the end blocks
    assert [k for k, _ in iter_tar_samples(io.BytesIO(f.getvalue()))] == [k for k, _ in samples]


def test_headers_equal_tarfile_and_fall_back_where_the_template_cannot_go() -> None:
    for name, size in [("a.json", 0), ("k.input_ids.npy", 1), ("x" * 100, 8**11 - 1), ("x" * 101, 5),
                       ("p/" * 60 + "k.json", 7), ("é.json", 3), ("k.json", 8**11)]:
        try:
            ref = sample._tarfile_header(name, size)
        except ValueError:  # tarfile cannot write it either: neither may we
            with pytest.raises(ValueError):
                ustar_header(name, size)
            continue
        assert ustar_header(name, size) == ref, name
    assert sample._FAST_HEADERS  # the template matches this Python's tarfile


def test_invalid_keys_are_refused_before_anything_is_written() -> None:
    f = io.BytesIO()
    with pytest.raises(ValueError, match="invalid sample key"):
        write_tar(f, [("bad key", [("json", b"{}")])])
    assert f.getvalue() == b""


def test_a_name_too_long_for_ustar_fails_as_it_did_with_tarfile() -> None:
    samples = [("k" * 150, [("json", b"{}")])]  # a valid key, but no '/' to split a 155-byte name at
    with pytest.raises(ValueError, match="too long"):
        reference_tar.tar_bytes(samples)
    with pytest.raises(ValueError, match="too long"):
        tar_bytes(samples)


@pytest.mark.parametrize("dtype", ["<u2", "<i4", "|u1", "<f4", ">i4"])
def test_npy_bytes_equal_np_save(dtype: str) -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 64, 511, 512, 4096):
        arr = rng.integers(0, 200, n).astype(dtype)
        assert sample._npy_bytes(arr) == reference_tar.npy_bytes(arr), (dtype, n)
        assert np.array_equal(np.load(io.BytesIO(sample._npy_bytes(arr)), allow_pickle=False), arr)
    strided = np.arange(20, dtype="<u2")[::2]  # not contiguous: the data is laid out first
    assert sample._npy_bytes(strided) == reference_tar.npy_bytes(strided)
    two_d = np.arange(12, dtype="<i4").reshape(3, 4)  # not 1-D: np.save's own path
    assert sample._npy_bytes(two_d) == reference_tar.npy_bytes(two_d)
