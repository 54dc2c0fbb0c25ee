"""The streaming shard loader (trainer/loader/): coverage, shuffling, workers,
exact and elastic resume, equal steps on uneven shards, token budgets, pair
rules and the corrupt-shard policy. Corpora are written directly with the
sample spec (no Beam), with deliberately uneven shard sizes."""

from __future__ import annotations

import io
import logging
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from schemas import PAD_ID
from schemas.errors import UserError
from schemas.manifest import Manifest, ShardInfo, TokenizerInfo
from schemas.sample import encode_sample, tar_bytes
from shardforge.storage import sha256_bytes
from trainer.loader import ShardLoader

VOCAB = 1000
UNEVEN = [37, 5, 60, 1, 23, 14, 0, 41]  # includes an empty and a one-sample shard


def sample_len(gid: int, lo: int, hi: int) -> int:
    return lo + (gid * 7919) % (hi - lo + 1)


def sample_ids(gid: int, lo: int = 6, hi: int = 40) -> np.ndarray:
    """Content is a function of the global id, so a batch row can be checked against its sample_id."""
    n = sample_len(gid, lo, hi)
    body = [5 + (gid * 31 + k * 17) % (VOCAB - 5) for k in range(n - 2)]
    return np.array([0, *body, 2], dtype=np.int64)


def make_corpus(root: Path, train: list[int], valid: list[int] | None = None, *,
                rule: str = "full_sentences", lo: int = 6, hi: int = 40) -> Path:
    """Write shards + manifest.json under root; returns the manifest path."""
    root.mkdir(parents=True, exist_ok=True)
    pair = rule in ("segment_pair_nsp", "sentence_pair_nsp", "sop")
    shards = []
    gid = 0
    sizes = [("train", n) for n in train] + [("valid", n) for n in (valid or [])]
    counters = Counter()
    for split, n in sizes:
        name = f"{split}-{counters[split]:06d}.tar"
        counters[split] += 1
        samples, tokens = [], 0
        for _ in range(n):
            ids = sample_ids(gid, lo, hi)
            tt = (np.arange(len(ids)) >= len(ids) // 2).astype(np.uint8) if pair else None
            label = gid % 2 if pair else None
            samples.append((f"s{gid:08d}", encode_sample(ids, VOCAB, token_type_ids=tt, label=label)))
            tokens += len(ids)
            gid += 1
        data = tar_bytes(samples)
        (root / name).write_bytes(data)
        shards.append(ShardInfo(name=name, split=split, samples=n, tokens=tokens, bytes=len(data),
                                sha256=sha256_bytes(data)))
    members = ["input_ids.npy"] + (["token_type_ids.npy", "label.cls"] if pair else [])
    m = Manifest(config={}, packing_rule=rule, max_seq_len=hi, ids_dtype="uint16", members=members,
                 tokenizer=TokenizerInfo(path="tokenizer/spm.model", sha256="0" * 64, model_type="unigram",
                                         vocab_size=VOCAB, normalization_rule="nmt_nfkc"),
                 shards=shards, totals={}, accounting={})
    (root / "manifest.json").write_text(m.to_json())
    return root / "manifest.json"


def split_gids(train: list[int]) -> list[int]:
    return list(range(sum(train)))


def shard_gids(train: list[int], i: int) -> set[int]:
    start = sum(train[:i])
    return set(range(start, start + train[i]))


def take(loader: ShardLoader, n: int | None = None) -> list[dict[str, torch.Tensor]]:
    out = []
    for b in loader:
        out.append(b)
        if n is not None and len(out) >= n:
            break
    return out


def real_ids(batches: list[dict[str, torch.Tensor]], epoch: int | None = None) -> list[int]:
    ids = []
    for b in batches:
        keep = ~b["is_pad"]
        if epoch is not None:
            keep &= b["epoch"] == epoch
        ids += b["sample_ids"][keep].tolist()
    return ids


def same_batches(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b, strict=True))


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """Through torch.save / torch.load(weights_only=True), as in a checkpoint."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@pytest.fixture
def corpus(tmp_path: Path) -> str:
    return str(make_corpus(tmp_path / "c", UNEVEN, valid=[9, 4]))


def loaders(url: str, world: int, **kw: Any) -> list[ShardLoader]:
    return [ShardLoader(url, rank=r, world_size=world, **kw) for r in range(world)]


# ------------------------------------------------------------ coverage and batches

def test_one_epoch_every_sample_once_with_correct_content(corpus: str) -> None:
    ld = ShardLoader(corpus, batch_size=8, shuffle_buffer=16, partitions=4, epochs=1)
    batches = take(ld)
    assert len(batches) == ld.steps_per_epoch
    assert sorted(real_ids(batches)) == split_gids(UNEVEN)
    for b in batches:
        assert b["input_ids"].dtype == torch.int64 and b["sample_ids"].dtype == torch.int64
        assert b["input_ids"].shape[0] <= 8 and set(b) == {"input_ids", "attention_mask", "sample_ids",
                                                             "epoch", "is_pad"}
        assert b["input_ids"].shape[1] == int(b["attention_mask"].sum(1).max())  # padded to the longest
        for row, gid, mask in zip(b["input_ids"], b["sample_ids"], b["attention_mask"], strict=True):
            want = torch.from_numpy(sample_ids(int(gid)))
            n = int(mask.sum())
            assert n == len(want) and torch.equal(row[:n], want)
            assert bool((row[n:] == PAD_ID).all()) and bool((mask[n:] == 0).all())


def test_batches_short_of_batch_size_are_said_at_the_start_with_a_size_that_fills_them(corpus: str) -> None:
    """A batch never spans two partitions: 181 samples in 7 shards, each its own partition, make batches of
    ~26 rows at batch_size 64. The warning's figure is the rows the loader's epoch really holds, and the
    size it names fills them to 90 % or more; a size that fills them says nothing. The same with a token
    budget."""
    from trainer.train import short_batches, train_batches

    def epoch(batch_size: int) -> tuple[list[int], int]:
        ld = ShardLoader(corpus, batch_size=batch_size, epochs=1)
        batches = take(ld)
        return [int((~b["is_pad"]).sum()) for b in batches], sum(int(b["attention_mask"].sum()) for b in batches)

    rows, tokens = epoch(64)
    assert sum(rows) == sum(UNEVEN) and len(rows) == 7, rows
    line = short_batches(corpus, ShardLoader(corpus, batch_size=64).plan)
    assert line == (f"{corpus}: train batches will hold ~{sum(rows) / len(rows):.0f} rows on average, not "
                    "batch_size 64: its 181 sequences fall into 7 partitions of ~26 and a batch never spans two "
                    "(docs/loader.md, \"Partitions\"); --batch_size 4 fills them (--gradient_accumulation or a "
                    "global batch then keeps a step's rows)"), line
    # What the run's description and max_tokens' steps count by: what the epoch's batches hold, or full
    # batches where they hold 90 % or more.
    held = train_batches(ShardLoader(corpus, batch_size=64))
    assert held.short and held.rows == pytest.approx(sum(rows) / len(rows))
    assert held.tokens == pytest.approx(tokens / len(rows))
    rows, tokens = epoch(4)
    assert sum(rows) / len(rows) >= 0.9 * 4 and short_batches(corpus, ShardLoader(corpus, batch_size=4).plan) is None
    held = train_batches(ShardLoader(corpus, batch_size=4))
    assert not held.short and held.rows == 4 and held.tokens == pytest.approx(4 * tokens / sum(rows))
    assert sum(epoch(8)[0]) / len(epoch(8)[0]) < 0.9 * 8  # the largest power of two that does
    # With a token budget too: the tokens an epoch's batches hold, where short of 90 % of the budget.
    ld = ShardLoader(corpus, batch_size=None, tokens_per_batch=100_000, epochs=1)
    batches = take(ld)
    held = train_batches(ShardLoader(corpus, batch_size=None, tokens_per_batch=100_000))
    assert held.short and held.rows is None
    assert held.tokens == pytest.approx(sum(int(b["attention_mask"].sum()) for b in batches) / len(batches))
    # ... and its warning names the largest budget of a power of two, a full-length sequence (40) or more,
    # whose batches the loader's epoch fills.
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    line = short_batches(corpus, ShardLoader(corpus, batch_size=None, tokens_per_batch=100_000).plan)
    assert line == (f"{corpus}: train batches will hold ~{tokens / len(batches):,.0f} tokens on average, not "
                    f"tokens_per_batch 100000: its {tokens:,} tokens fall into 7 partitions of "
                    f"~{tokens / 7:,.0f} and a batch never spans two (docs/loader.md, \"Partitions\"); "
                    "--tokens_per_batch 64 fills them (--gradient_accumulation or a global batch then keeps a "
                    "step's tokens)"), line

    def budget_fill(t: int) -> float:
        got = take(ShardLoader(corpus, batch_size=None, tokens_per_batch=t, epochs=1))
        return sum(int(b["attention_mask"].sum()) for b in got) / len(got) / t

    assert budget_fill(64) >= 0.9 > budget_fill(128)


def test_valid_split_has_its_own_global_ids(corpus: str) -> None:
    ld = ShardLoader(corpus, "valid", batch_size=4, epochs=1)
    assert sorted(real_ids(take(ld))) == list(range(sum(UNEVEN), sum(UNEVEN) + 13))


@pytest.mark.parametrize("world", [2, 3, 5])
def test_uneven_shards_equal_steps_on_every_rank(corpus: str, world: int) -> None:
    lds = loaders(corpus, world, batch_size=4, shuffle_buffer=8, epochs=2)
    assert len({ld.steps_per_epoch for ld in lds}) == 1
    runs = [take(ld) for ld in lds]
    assert [len(r) for r in runs] == [2 * lds[0].steps_per_epoch] * world
    for epoch in range(2):
        ids = [i for r in runs for i in real_ids(r, epoch)]
        assert sorted(ids) == split_gids(UNEVEN)  # once each; repeats only as is_pad rows
    assert any(bool(b["is_pad"].any()) for r in runs for b in r)  # the shards are uneven: someone pads


def test_shuffle_is_seeded_and_changes_per_epoch(corpus: str) -> None:
    def order(seed: int) -> list[list[int]]:
        bs = take(ShardLoader(corpus, batch_size=8, seed=seed, epochs=2, shuffle_buffer=16))
        return [real_ids(bs, 0), real_ids(bs, 1)]

    a, b, c = order(0), order(0), order(1)
    assert a == b
    assert a[0] != a[1] and sorted(a[0]) == sorted(a[1])
    assert a[0] != c[0]
    assert a[0] != sorted(a[0])  # actually shuffled


# ------------------------------------------------------------ workers

@pytest.mark.parametrize("world", [1, 2])
def test_workers_no_duplicate_no_gap_and_deterministic(corpus: str, world: int) -> None:
    kw = dict(batch_size=4, shuffle_buffer=8, num_workers=2, epochs=1, partitions=8)
    runs = [take(ld) for ld in loaders(corpus, world, **kw)]
    assert sorted(i for r in runs for i in real_ids(r)) == split_gids(UNEVEN)
    again = [take(ld) for ld in loaders(corpus, world, **kw)]
    assert all(same_batches(x, y) for x, y in zip(runs, again, strict=True))
    assert len({len(r) for r in runs}) == 1


# ------------------------------------------------------------ exact resume (same world size)

RESUME_CASES = [
    pytest.param(1, 0, {}, id="w1"),
    pytest.param(2, 0, {}, id="w2"),
    pytest.param(1, 2, {}, id="w1-workers2"),
    pytest.param(2, 0, {"tokens_per_batch": 60, "batch_size": None}, id="w2-tokens"),
]


@pytest.mark.parametrize(("world", "workers", "extra"), RESUME_CASES)
def test_exact_resume_yields_the_same_batches(corpus: str, world: int, workers: int,
                                              extra: dict[str, Any]) -> None:
    kw = dict(batch_size=4, shuffle_buffer=8, partitions=8, num_workers=workers, epochs=2) | extra
    full = [take(ld) for ld in loaders(corpus, world, **kw)]
    total = len(full[0])
    spe = ShardLoader(corpus, **kw).steps_per_epoch
    # mid-epoch, at the epoch boundary, and in epoch 1's last steps (pad phase for some ranks)
    for k in (3, spe, spe + 1, total - 2):
        first = loaders(corpus, world, **kw)
        head = [take(ld, k) for ld in first]
        states = [roundtrip(ld.state_dict()) for ld in first]
        resumed = loaders(corpus, world, **kw)
        for ld, st in zip(resumed, states, strict=True):
            ld.load_state_dict(st)
        tails = [take(ld) for ld in resumed]
        for r in range(world):
            assert same_batches(head[r] + tails[r], full[r]), (k, r)


def test_resume_twice_in_one_process_and_from_a_merged_state(corpus: str) -> None:
    kw = dict(batch_size=4, shuffle_buffer=8, partitions=8, epochs=1)
    full = [take(ld) for ld in loaders(corpus, 2, **kw)]
    a = loaders(corpus, 2, **kw)
    head = [take(ld, 2) for ld in a]
    mid = [take(ld, 3) for ld in a]  # iterating again continues from the state
    merged = ShardLoader.merge_state_dicts([ld.state_dict() for ld in a])
    b = loaders(corpus, 2, **kw)
    for ld in b:
        ld.load_state_dict(roundtrip(merged))
    tails = [take(ld) for ld in b]
    for r in range(2):
        assert same_batches(head[r] + mid[r] + tails[r], full[r])


# ------------------------------------------------------------ elastic resume (world size changes)

@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2), (2, 3)])
@pytest.mark.parametrize("extra", [{}, {"tokens_per_batch": 60, "batch_size": None}], ids=["fixed", "tokens"])
@pytest.mark.parametrize("k", [1, 9])
def test_elastic_resume_visits_every_remaining_sample_once(corpus: str, before: int, after: int, k: int,
                                                           extra: dict[str, Any]) -> None:
    kw = dict(batch_size=4, shuffle_buffer=8, partitions=8, epochs=1) | extra
    first = loaders(corpus, before, **kw)
    head = [take(ld, k) for ld in first]
    seen = [i for h in head for i in real_ids(h)]
    merged = roundtrip(ShardLoader.merge_state_dicts([ld.state_dict() for ld in first]))
    second = loaders(corpus, after, **kw)
    for ld in second:
        ld.load_state_dict(merged)
    left = {ld.steps_left_in_epoch for ld in second}
    assert len(left) == 1
    tails = [take(ld) for ld in second]
    assert {len(t) for t in tails} == left
    rest = [i for t in tails for i in real_ids(t)]
    assert sorted(seen + rest) == split_gids(UNEVEN)


def test_elastic_resume_with_workers_then_next_epoch_is_full(corpus: str) -> None:
    kw = dict(batch_size=4, shuffle_buffer=8, partitions=8, epochs=2)
    first = loaders(corpus, 2, num_workers=2, **kw)
    head = [take(ld, 5) for ld in first]
    merged = ShardLoader.merge_state_dicts([ld.state_dict() for ld in first])
    ld = ShardLoader(corpus, num_workers=0, **kw)
    ld.load_state_dict(merged)
    tail = take(ld)
    assert sorted(real_ids([b for h in head for b in h]) + real_ids(tail, 0)) == split_gids(UNEVEN)
    assert sorted(real_ids(tail, 1)) == split_gids(UNEVEN)
    assert sum(int(b["epoch"][0]) == 1 for b in tail) == ld.steps_per_epoch


def test_a_single_rank_state_cannot_resume_another_world_size(corpus: str) -> None:
    a = loaders(corpus, 2, batch_size=4, partitions=8)
    take(a[0], 2)
    b = ShardLoader(corpus, batch_size=4, partitions=8)
    with pytest.raises(UserError, match="merge the states"):
        b.load_state_dict(a[0].state_dict())
    # nor another rank's state of the same layout (rank 2 owns no partition here)
    c = ShardLoader(corpus, batch_size=4, partitions=2, rank=2, world_size=3, allow_idle=True)
    with pytest.raises(UserError, match="merge the states"):
        c.load_state_dict(ShardLoader(corpus, batch_size=4, partitions=2, world_size=3,
                                      allow_idle=True).state_dict())
    with pytest.raises(UserError, match="batches are cut at batch_size 4, and it is resumed with batch_size 5"):
        ShardLoader(corpus, batch_size=5, partitions=8).load_state_dict(a[0].state_dict())
    with pytest.raises(UserError, match="different corpus or loader config"):
        ShardLoader(corpus, batch_size=4, partitions=8, seed=9).load_state_dict(a[0].state_dict())


# ------------------------------------------------------------ token budget (DOC-SENTENCES)

def test_token_budget_batches_bucket_lengths(tmp_path: Path) -> None:
    train = [120, 75, 200, 33]
    url = str(make_corpus(tmp_path / "d", train, rule="doc_sentences", lo=4, hi=128))
    budget = 512
    runs = [take(ld) for ld in loaders(url, 2, tokens_per_batch=budget, batch_size=None, shuffle_buffer=100,
                                        partitions=4, epochs=1)]
    assert len(runs[0]) == len(runs[1])
    batches = [b for r in runs for b in r]
    assert sorted(real_ids(batches)) == split_gids(train)
    real = [b for b in batches if not b["is_pad"].any()]
    sizes = {b["input_ids"].shape[0] for b in real}
    assert len(sizes) > 3  # variable batch size
    tokens = [int(b["attention_mask"].sum()) for b in real]
    assert abs(np.mean(tokens) - budget) < 0.25 * budget
    padded = sum(b["input_ids"].numel() for b in real)
    # the same samples in fixed-size batches of the same mean size waste far more on padding
    mean_bs = round(np.mean([b["input_ids"].shape[0] for b in real]))
    fixed = take(ShardLoader(url, batch_size=mean_bs, shuffle_buffer=100, partitions=4, epochs=1))
    fixed_pad = sum(b["input_ids"].numel() - int(b["attention_mask"].sum()) for b in fixed)
    assert padded - sum(tokens) < 0.25 * fixed_pad


# ------------------------------------------------------------ pair rules

def test_pair_rule_batches_carry_token_types_and_labels(tmp_path: Path) -> None:
    url = str(make_corpus(tmp_path / "p", [17, 9], rule="sop"))
    batches = take(ShardLoader(url, batch_size=5, epochs=1))
    for b in batches:
        assert b["token_type_ids"].shape == b["input_ids"].shape
        for row, n in zip(b["token_type_ids"], b["attention_mask"].sum(1), strict=True):
            want = (torch.arange(int(n)) >= int(n) // 2).long()
            assert torch.equal(row[: int(n)], want) and bool((row[int(n):] == 0).all())
        assert torch.equal(b["sentence_labels"], b["sample_ids"] % 2)
    assert sorted(real_ids(batches)) == list(range(26))


# ------------------------------------------------------------ corrupt shards

def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[512 + 128 + 3] ^= 0xFF  # a token byte of the first sample: the tar stays valid, the sha256 does not
    path.write_bytes(bytes(data))


def _remove(path: Path) -> None:
    path.unlink()


CORRUPTIONS = [pytest.param(_truncate, id="truncated"), pytest.param(_flip, id="checksum"),
               pytest.param(_remove, id="missing")]


@pytest.mark.parametrize(("corrupt", "workers"), [
    pytest.param(_truncate, 0, id="truncated"), pytest.param(_flip, 0, id="checksum"),
    pytest.param(_remove, 0, id="missing"), pytest.param(_flip, 2, id="checksum-workers2")])
def test_corrupt_shard_fails_with_its_name(tmp_path: Path, corrupt: Any, workers: int) -> None:
    url = make_corpus(tmp_path / "c", UNEVEN)
    corrupt(url.parent / "train-000002.tar")
    with pytest.raises(UserError, match="train-000002.tar"):
        take(ShardLoader(str(url), batch_size=4, epochs=1, num_workers=workers))


@pytest.mark.parametrize(("corrupt", "workers"), [
    pytest.param(_truncate, 0, id="truncated"), pytest.param(_flip, 0, id="checksum"),
    pytest.param(_remove, 0, id="missing"), pytest.param(_truncate, 2, id="truncated-workers2")])
def test_corrupt_shard_skipped_counted_and_remembered(tmp_path: Path, corrupt: Any, workers: int,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    url = make_corpus(tmp_path / "c", UNEVEN)
    corrupt(url.parent / "train-000002.tar")
    kw = dict(batch_size=4, shuffle_buffer=8, partitions=4, epochs=2, corrupt_policy="skip",
              num_workers=workers)
    with caplog.at_level(logging.WARNING, logger="trainer.loader"):
        ld = ShardLoader(str(url), **kw)
        full = take(ld)
    assert ld.skipped_shards == ["train-000002.tar"]
    assert "train-000002.tar" in caplog.text
    assert len(full) == 2 * ld.steps_per_epoch  # equal steps still hold
    bad = shard_gids(UNEVEN, 2)
    for epoch in range(2):
        ids = real_ids(full, epoch)
        assert len(ids) == len(set(ids))
        assert set(ids) - bad == set(split_gids(UNEVEN)) - bad  # every good sample exactly once
    assert not set(real_ids(full, 1)) & bad  # later epochs skip it from the start
    # a run resumed from any point, including before the failure, yields the same batches
    for k in (1, ld.steps_per_epoch - 1, ld.steps_per_epoch + 1):
        a = ShardLoader(str(url), **kw)
        head = take(a, k)
        b = ShardLoader(str(url), **kw)
        b.load_state_dict(roundtrip(a.state_dict()))
        assert same_batches(head + take(b), full), k
        if k > ld.steps_per_epoch:
            assert a.state_dict()["skipped_shards"] == ["train-000002.tar"]


@pytest.mark.parametrize("corrupt", [pytest.param(_truncate, id="truncated"), pytest.param(_flip, id="checksum")])
def test_corrupt_shard_skipped_with_token_budget_resumes_exactly(tmp_path: Path, corrupt: Any) -> None:
    url = make_corpus(tmp_path / "c", UNEVEN, rule="doc_sentences")
    corrupt(url.parent / "train-000002.tar")
    kw = dict(tokens_per_batch=90, batch_size=None, shuffle_buffer=8, partitions=4, epochs=1,
              corrupt_policy="skip")
    full = take(ShardLoader(str(url), **kw))
    ids = real_ids(full)
    bad = shard_gids(UNEVEN, 2)
    assert len(ids) == len(set(ids)) and set(ids) - bad == set(split_gids(UNEVEN)) - bad
    for k in range(1, len(full)):
        a = ShardLoader(str(url), **kw)
        head = take(a, k)
        b = ShardLoader(str(url), **kw)
        b.load_state_dict(roundtrip(a.state_dict()))
        assert same_batches(head + take(b), full), k


@pytest.mark.parametrize("k", [1, 8, 1000])
def test_no_sample_of_a_changed_shard_is_released_whatever_the_shuffle_buffer(tmp_path: Path, k: int) -> None:
    """The checksum is verified before a shard's first sample, not after its last."""
    url = make_corpus(tmp_path / "c", UNEVEN)
    _flip(url.parent / "train-000002.tar")
    ld = ShardLoader(str(url), batch_size=4, shuffle_buffer=k, partitions=4, epochs=1, corrupt_policy="skip")
    ids = real_ids(take(ld))
    bad = shard_gids(UNEVEN, 2)
    assert not set(ids) & bad
    assert sorted(ids) == sorted(set(split_gids(UNEVEN)) - bad)
    assert ld.skipped_shards == ["train-000002.tar"]


def test_interrupted_while_workers_start_raises_the_interrupt_and_nothing_later(
        corpus: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupt (Ctrl-C, SIGTERM's Preempted) during the data wait ends the workers at once,
    here before they have set their signal handlers (as a just-forked worker on a busy machine has
    not): they die of the SIGTERM. torch's SIGCHLD check must not then report them, neither in place
    of the interrupt nor at a later SIGCHLD while the interrupt's traceback keeps the iterator alive.
    Before, that later report reached the next test that started a process."""
    from torch.utils.data._utils import worker

    set_handlers = worker.signal_handling._set_worker_signal_handlers

    def late(*args: Any) -> None:  # runs in the forked workers
        time.sleep(60)  # ended by the SIGTERM long before
        set_handlers(*args)

    monkeypatch.setattr(worker.signal_handling, "_set_worker_signal_handlers", late)

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)  # the parent waits for data; the workers sleep
        with pytest.raises(KeyboardInterrupt) as excinfo:
            take(ShardLoader(corpus, batch_size=4, epochs=1, num_workers=2))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    tb = excinfo.tb
    iterators = {}
    while tb is not None:
        it = tb.tb_frame.f_locals.get("self")
        if hasattr(it, "_workers"):  # torch's DataLoader iterator, in the frames of its wait
            iterators[id(it)] = it
        tb = tb.tb_next
    workers = [w for it in iterators.values() for w in it._workers]
    assert len(workers) == 2  # the iterator lives on in the traceback, as in a test's excinfo
    for w in workers:
        w.join(10)
    assert [w.exitcode for w in workers] == [-signal.SIGTERM] * 2  # killed before their handlers
    subprocess.run(["true"], check=True)  # a SIGCHLD: torch's check runs
    time.sleep(0.2)
    torch._C._error_if_any_worker_fails()  # and nothing is reported


def test_all_shards_corrupt_is_an_error_not_a_hang(tmp_path: Path) -> None:
    url = make_corpus(tmp_path / "c", [5, 3])
    for p in url.parent.glob("*.tar"):
        p.unlink()
    with pytest.raises(UserError, match="no readable sample"):
        take(ShardLoader(str(url), batch_size=2, corrupt_policy="skip", epochs=1))


# ------------------------------------------------------------ object storage, options, errors

@pytest.mark.parametrize("workers", [0, 2])
def test_reads_shards_from_gcs_emulator(tmp_path: Path, gcs_bucket: str, workers: int) -> None:
    import gcsfs

    local = make_corpus(tmp_path / "c", [13, 4, 9])
    fs = gcsfs.GCSFileSystem(token="anon")
    for p in local.parent.iterdir():
        fs.pipe_file(f"{gcs_bucket}/corpus/{p.name}", p.read_bytes())
    fs.invalidate_cache()
    ld = ShardLoader(f"{gcs_bucket}/corpus", batch_size=4, epochs=1, num_workers=workers)
    assert sorted(real_ids(take(ld))) == list(range(26))


def test_pin_memory_without_cuda_is_harmless(corpus: str) -> None:
    ld = ShardLoader(corpus, batch_size=8, pin_memory=True, epochs=1)
    assert sorted(real_ids(take(ld))) == split_gids(UNEVEN)


@pytest.mark.parametrize("kw", [dict(corrupt_policy="ignore"), dict(rank=2, world_size=2),
                                dict(batch_size=None), dict(shuffle_buffer=0), dict(partitions=0)])
def test_bad_arguments_are_user_errors(corpus: str, kw: dict[str, Any]) -> None:
    with pytest.raises(UserError):
        ShardLoader(corpus, **kw)


def test_more_units_than_partitions_is_refused_or_pads_when_allowed(corpus: str) -> None:
    with pytest.raises(UserError, match=r"1 of 3 readers would get no data of their own: .* > partitions=2"):
        ShardLoader(corpus, batch_size=4, partitions=2, world_size=3, epochs=1)
    # allow_idle (evaluation): rank 2 owns nothing and only pads, in step with the others
    lds = loaders(corpus, 3, batch_size=4, partitions=2, epochs=1, allow_idle=True)
    runs = [take(ld) for ld in lds]
    assert len({len(r) for r in runs}) == 1
    assert all(bool(b["is_pad"].all()) for b in runs[2])
    assert sorted(i for r in runs for i in real_ids(r)) == split_gids(UNEVEN)


# ------------------------------------------------------------ following a growing corpus

def publish_version(root: Path, n: int, train: list[int]) -> None:
    """Write manifest-v{n}.json for shards `train` (appending shards, as pipelines.jobs.serve does) and point latest at it."""
    staging = root.parent / f"staging-v{n}"
    make_corpus(staging, train)
    root.mkdir(parents=True, exist_ok=True)
    for shard in staging.glob("*.tar"):
        if not (root / shard.name).exists():
            (root / shard.name).write_bytes(shard.read_bytes())
    (root / f"manifest-v{n}.json").write_text((staging / "manifest.json").read_text())
    (root / "latest").write_text(f"manifest-v{n}.json\n")


def test_follow_adopts_a_new_version_at_the_epoch_boundary_and_resumes_on_it(tmp_path: Path) -> None:
    root = tmp_path / "served"
    publish_version(root, 1, [10, 7])
    loader = ShardLoader(str(root), follow=True, batch_size=4, shuffle_buffer=8, partitions=4)
    it = iter(loader)
    first = [next(it) for _ in range(loader.steps_per_epoch - 1)]
    publish_version(root, 2, [10, 7, 12])  # lands during epoch 0: adopted at the boundary, not before
    first.append(next(it))
    assert sorted(real_ids(first, epoch=0)) == list(range(17))
    assert loader.manifest_url.endswith("manifest-v2.json")
    second = [next(it) for _ in range(3)]
    state = roundtrip(loader.state_dict())
    assert state["manifest"] == "manifest-v2.json"
    rest = [next(it) for _ in range(loader.steps_per_epoch - 3)]
    assert sorted(real_ids(second + rest, epoch=1)) == list(range(29))  # old and new shards, each once
    publish_version(root, 3, [10, 7, 12, 5])  # a newer version must not change a resumed epoch
    again = ShardLoader(str(root), follow=True, batch_size=4, shuffle_buffer=8, partitions=4)
    again.load_state_dict(state)
    assert again.manifest_url.endswith("manifest-v2.json")
    assert same_batches(take(again, len(rest)), rest)


def test_a_token_budget_a_sequence_does_not_fit_in_is_refused_in_one_line(corpus: str) -> None:
    """A batch holds whole sequences: under a budget shorter than the corpus's sequences (max_seq_len 40
    here), the partition's ceil(tokens / budget) batches outnumber what its sequences can fill, and the
    rest came out empty (at a budget of half the demo corpus's max_seq_len, 714 of 1,631). At max_seq_len
    every batch holds rows."""
    with pytest.raises(UserError, match=r"^tokens_per_batch 39 is under the corpus's max_seq_len 40: a batch holds "
                                        r"whole sequences, .* give tokens_per_batch 40 or more$"):
        ShardLoader(corpus, batch_size=None, tokens_per_batch=39)
    batches = take(ShardLoader(corpus, batch_size=None, tokens_per_batch=40, epochs=1))
    assert batches and all(int((~b["is_pad"]).sum()) >= 1 for b in batches)
