"""The loader's stages alone (trainer/loader/): the plan, one shard's reader, one partition's stream,
token-budget splitting, round-robin interleaving and collation. tests/test_loader.py checks them
end to end through ShardLoader; here each stage is fed a small real corpus or a plain list."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from schemas import PAD_ID
from schemas.errors import UserError
from tests.test_loader import UNEVEN, VOCAB, make_corpus, sample_ids, shard_gids
from trainer.loader.collate import collate, pack
from trainer.loader.plan import Plan, pieces_per_shard
from trainer.loader.shard import HashingReader, Sample, ShardCorrupt, fetch_verified, iter_piece, iter_shard
from trainer.loader.stream import PartitionStream, UnitCtx, split_by_tokens
from trainer.loader.unit import interleave
from trainer.masking import IGNORE_INDEX


def plan_of(manifest: Path, *, seed: int = 0, partitions: int = 4, shuffle_buffer: int = 8,
            batch_size: int | None = 4, tokens_per_batch: int | None = None, split: str = "train") -> Plan:
    return Plan(str(manifest), split, seed, partitions, shuffle_buffer, batch_size, tokens_per_batch)


def sample(gid: int, n: int, *, label: int | None = None, tt: np.ndarray | None = None) -> Sample:
    return Sample(gid, 0, np.arange(1, n + 1, dtype=np.uint16), tt, label)


# ---------------------------------------------------------------- the plan

def test_plan_deals_every_shard_to_one_partition_balanced_by_samples(tmp_path):
    plan = plan_of(make_corpus(tmp_path / "c", UNEVEN), partitions=3)
    dealt = sorted(i for ps in plan.part_pieces for i in ps)
    assert dealt == list(range(len(UNEVEN)))  # each shard exactly once
    assert plan.part_samples == [sum(UNEVEN[i] for i in ps) for ps in plan.part_pieces]
    assert sum(plan.part_samples) == sum(UNEVEN) == plan.total_samples
    # Largest-first to the lightest partition: no partition exceeds another by more than the largest shard.
    assert max(plan.part_samples) - min(plan.part_samples) <= max(UNEVEN)
    assert plan.part_batches == [-(-n // 4) for n in plan.part_samples]


def test_plan_is_keyed_by_seed_only(tmp_path):
    """The deal depends on the seed and the corpus, not on the batching; orders depend on (seed, epoch, p)."""
    m = make_corpus(tmp_path / "c", [10] * 8)  # equal sizes: only the seeded tie-break decides
    a, b = plan_of(m, seed=1), plan_of(m, seed=1, batch_size=None, tokens_per_batch=64)
    assert a.part_pieces == b.part_pieces and a.fingerprint == b.fingerprint
    assert any(plan_of(m, seed=s).part_pieces != a.part_pieces for s in range(2, 8))
    assert a.piece_order(0, 1) == b.piece_order(0, 1)
    assert sorted(a.piece_order(3, 1)) == a.part_pieces[1]
    assert {tuple(a.piece_order(e, 1)) for e in range(6)} != {tuple(a.piece_order(0, 1))}
    assert all(1 <= a.window_shift(e, p) <= a.K for e in range(5) for p in range(a.P))


def test_unit_parts_cover_every_partition_once_for_any_layout(tmp_path):
    plan = plan_of(make_corpus(tmp_path / "c", UNEVEN), partitions=7)
    for world, units in [(1, 1), (2, 1), (2, 3), (3, 2), (4, 4)]:
        owned = [p for r in range(world) for u in range(units) for p in plan.unit_parts(world, units, r, u)]
        assert sorted(owned) == list(range(7)), (world, units)
        assert all(p % world == r for r in range(world) for u in range(units)
                   for p in plan.unit_parts(world, units, r, u))
    # Equal steps: every unit yields the fullest unit's count.
    assert plan.segment_batches(2, 1, lambda p: plan.part_batches[p]) == max(
        sum(plan.part_batches[p] for p in plan.unit_parts(2, 1, r, 0)) for r in range(2))


# ---------------------------------------------------------------- one shard

def test_fetch_verified_accepts_the_shard_the_manifest_names(tmp_path):
    plan = plan_of(make_corpus(tmp_path / "c", [5, 3]))
    n_samples, _, n_bytes, sha = plan.infos[0]
    f = fetch_verified(plan.urls[0], plan.names[0], n_bytes, sha)
    try:
        assert f.read() == Path(plan.urls[0]).read_bytes()
    finally:
        f.close()


@pytest.mark.parametrize("damage, reason", [
    ("flip", "sha256 does not match"),
    ("truncate", "bytes, the manifest says"),
    ("append", "larger than the"),
    ("delete", "missing"),
])
def test_fetch_verified_rejects_a_changed_shard(tmp_path, damage, reason):
    plan = plan_of(make_corpus(tmp_path / "c", [5, 3]))
    _, _, n_bytes, sha = plan.infos[0]
    path = Path(plan.urls[0])
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[n_bytes // 2] ^= 0x01  # one bit, same size: only the checksum sees it
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[:-512]))
    elif damage == "append":
        path.write_bytes(bytes(data) + b"\0" * (2 << 20))
    else:
        path.unlink()
    with pytest.raises(ShardCorrupt, match=reason) as e:
        fetch_verified(plan.urls[0], plan.names[0], n_bytes, sha)
    assert e.value.shard == plan.names[0]


def test_hashing_reader_hashes_what_it_streams(tmp_path):
    import hashlib

    path = tmp_path / "blob"
    data = random.Random(0).randbytes(300_000)
    path.write_bytes(data)
    r = HashingReader(str(path))
    got = b"".join(iter(lambda: r.read(65_536), b""))
    r.close()
    assert got == data and r.pos == len(data) and r.sha.hexdigest() == hashlib.sha256(data).hexdigest()


def test_iter_shard_yields_global_ids_from_an_offset(tmp_path):
    train = [5, 4, 6]
    plan = plan_of(make_corpus(tmp_path / "c", train))
    got = list(iter_shard(plan, 2, 2))
    assert [s.gid for s in got] == sorted(shard_gids(train, 2))[2:]
    assert all(np.array_equal(s.ids, sample_ids(s.gid)) and s.shard == 2 for s in got)


def test_iter_shard_rejects_counts_the_manifest_does_not_say(tmp_path):
    m = make_corpus(tmp_path / "c", [5, 4])
    plan = plan_of(m)
    n_samples, n_tokens, n_bytes, sha = plan.infos[0]
    plan.infos[0] = (n_samples + 1, n_tokens, n_bytes, sha)  # the bytes verify; the count does not
    with pytest.raises(ShardCorrupt, match="has 5 samples, the manifest says 6"):
        list(iter_shard(plan, 0, 0))
    plan.infos[0] = (n_samples, n_tokens - 1, n_bytes, sha)
    with pytest.raises(ShardCorrupt, match="more tokens than the manifest says"):
        list(iter_shard(plan, 0, 0))


def test_shards_are_cut_into_pieces_only_for_more_readers_and_pieces_fail_together(tmp_path):
    """Fewer non-empty shards than readers: pieces apportioned by samples (at least one per shard, never
    more than its samples). A piece is released only after its whole shard checked out, so a count that
    fails at the shard's end fails every piece before its first sample."""
    assert pieces_per_shard([45], 4) == [4] and pieces_per_shard([30, 14], 4) == [3, 1]
    assert pieces_per_shard([10] * 5, 4) == [1] * 5 and pieces_per_shard([2, 0], 4) == [2, 1]
    m = make_corpus(tmp_path / "c", [12])
    plan = Plan(str(m), "train", 0, 4, 8, 4, None, readers=3)
    assert plan.pieces == [(0, 0, 4), (0, 4, 8), (0, 8, 12)] and plan.readers == 3
    assert [x.gid for x in iter_piece(plan, 1, 1)] == [5, 6, 7]
    assert plan_of(m).pieces == [(0, 0, 12)] and plan_of(m).readers == 1
    assert Plan(str(m), "train", 0, 4, 8, None, 64, readers=3).pieces == [(0, 0, 12)]  # a token budget: whole
    n_samples, n_tokens, n_bytes, sha = plan.infos[0]
    plan.infos[0] = (n_samples, n_tokens - 1, n_bytes, sha)  # the bytes verify; the last sample's count not
    with pytest.raises(ShardCorrupt, match="more tokens than the manifest says"):
        next(iter_piece(plan, 0, 0))
    assert next(iter_shard(plan, 0, 0)).gid == 0  # a whole shard releases its first samples before


def test_iter_shard_rejects_ids_outside_the_vocabulary(tmp_path):
    plan = plan_of(make_corpus(tmp_path / "c", [5]))
    plan.vocab_size = 50  # the samples hold ids up to VOCAB - 1
    with pytest.raises(ShardCorrupt, match="outside the vocabulary of 50"):
        list(iter_shard(plan, 0, 0))
    plan.vocab_size, plan.max_seq_len = VOCAB, 5
    with pytest.raises(ShardCorrupt, match="not in 1..max_seq_len 5"):
        list(iter_shard(plan, 0, 0))


# ---------------------------------------------------------------- one partition's stream

def stream_batches(plan: Plan, epoch: int, p: int, cursor: list[int] | None = None,
                   ctx: UnitCtx | None = None) -> tuple[list[list[Sample]], PartitionStream]:
    s = PartitionStream(plan, epoch, p, cursor or [0, 0, 0, 0], ctx or UnitCtx(plan, "fail", set()))
    out = []
    while (b := s.next_batch()) is not None:
        out.append(b)
    return out, s


@pytest.mark.parametrize("batching", [{"batch_size": 3}, {"batch_size": None, "tokens_per_batch": 90}])
def test_partition_stream_reads_its_shards_once_and_resumes_from_any_cursor(tmp_path, batching):
    train = [9, 4, 7, 1, 6]
    plan = plan_of(make_corpus(tmp_path / "c", train), partitions=2, shuffle_buffer=5, **batching)
    for p in range(plan.P):
        batches, _ = stream_batches(plan, 1, p)
        gids = [x.gid for b in batches for x in b]
        assert sorted(gids) == sorted(g for i in plan.part_pieces[p] for g in shard_gids(train, i))
        assert len(batches) == plan.part_batches[p]  # the count the manifest promises
        # Resume from the cursor after every batch: the rest is the same batches.
        s = PartitionStream(plan, 1, p, [0, 0, 0, 0], UnitCtx(plan, "fail", set()))
        for k in range(len(batches)):
            s.next_batch()
            rest, _ = stream_batches(plan, 1, p, s.cursor())
            assert [[x.gid for x in b] for b in rest] == [[x.gid for x in b] for b in batches[k + 1:]]
        s.close()


def test_partition_stream_skips_a_corrupt_shard_as_holes(tmp_path):
    train = [6, 6, 6]
    m = make_corpus(tmp_path / "c", train)
    plan = plan_of(m, partitions=1, shuffle_buffer=4, batch_size=4)
    (m.parent / plan.names[1]).write_bytes(b"not a tar")
    with pytest.raises(UserError, match=f"corrupt shard {plan.names[1]}: .* \\(--set corrupt_shards=skip trains on without it"):
        stream_batches(plan, 0, 0)
    ctx = UnitCtx(plan, "skip", set())
    batches, _ = stream_batches(plan, 0, 0, ctx=ctx)
    gids = sorted(x.gid for b in batches for x in b)
    assert gids == sorted(shard_gids(train, 0) | shard_gids(train, 2))
    assert ctx.skipped == {1} and ctx.new == [plan.names[1]]


def test_split_by_tokens_cuts_sorted_samples_into_even_runs():
    lens = [3, 5, 8, 8, 10, 12, 20, 30]
    samples = [sample(i, n) for i, n in enumerate(lens)]
    for b in range(1, len(lens) + 1):
        runs = split_by_tokens(samples, b)
        assert len(runs) == b and all(runs)  # b non-empty runs
        assert [x for r in runs for x in r] == samples  # in order, nothing lost or repeated
    runs = split_by_tokens(samples, 2)
    sums = [sum(int(x.ids.shape[0]) for x in r) for r in runs]
    assert sums == [46, 50]  # the cut nearest half of 96 tokens
    # A sample joins run k while its midpoint stays within k+1 shares of the total (here 32, 64, ...):
    # 10 sits at 29..34 (midpoint 29 <= 32) and joins the first run; the cuts land at 34 and 66 tokens.
    assert [[int(x.ids.shape[0]) for x in r] for r in split_by_tokens(samples, 3)] == [
        [3, 5, 8, 8, 10], [12, 20], [30]]


# ---------------------------------------------------------------- a unit

class FakeStream:
    """A partition stream as interleave sees it: batches in order, a batch count and the partition."""

    def __init__(self, p: int, n: int):
        self.p, self.b, self.n = p, 0, n
        self.done = n == 0

    def next_batch(self) -> list[Any] | None:
        self.b += 1
        self.done = self.b >= self.n
        return [f"p{self.p}b{self.b - 1}"]


def test_interleave_is_round_robin_by_batches_done_then_partition():
    streams = [FakeStream(5, 1), FakeStream(2, 3), FakeStream(9, 0), FakeStream(7, 2)]
    order = []
    while (got := interleave(streams)) is not None:  # type: ignore[arg-type]
        order.append(got[0][0])
    assert order == ["p2b0", "p5b0", "p7b0", "p2b1", "p7b1", "p2b2"]


# ---------------------------------------------------------------- collation

def test_pack_then_collate_right_pads_with_an_attention_mask():
    samples = [sample(10, 3), sample(11, 5), sample(12, 1)]
    packed = pack(samples, epoch=2, pad=False, pair=False)
    assert packed["ids"].dtype == np.uint16 and packed["lens"].tolist() == [3, 5, 1]  # compact on the pipe
    b = collate(packed, PAD_ID)
    assert b["input_ids"].dtype == torch.int64 and b["input_ids"].shape == (3, 5)
    assert b["input_ids"].tolist() == [[1, 2, 3, PAD_ID, PAD_ID], [1, 2, 3, 4, 5], [1] + [PAD_ID] * 4]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert b["sample_ids"].tolist() == [10, 11, 12] and b["epoch"].tolist() == [2, 2, 2]
    assert not b["is_pad"].any() and "token_type_ids" not in b and "sentence_labels" not in b
    assert collate(pack(samples, 0, True, False), PAD_ID)["is_pad"].all()


def test_collate_pair_rule_batches_carry_segments_and_ignore_missing_labels():
    tt = np.array([0, 0, 1, 1], dtype=np.uint8)
    samples = [sample(0, 4, label=1, tt=tt), sample(1, 2, label=None, tt=None)]
    b = collate(pack(samples, 0, False, pair=True), pad_id=7)
    assert b["input_ids"].tolist() == [[1, 2, 3, 4], [1, 2, 7, 7]]
    assert b["token_type_ids"].tolist() == [[0, 0, 1, 1], [0, 0, 0, 0]]  # no member: one segment, pads 0
    assert b["sentence_labels"].tolist() == [1, IGNORE_INDEX]
