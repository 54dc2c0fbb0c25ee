"""Every reader gets data of its own, and the loader's work is bounded by the data (trainer/loader/).

A reader is a rank's DataLoader worker (or the rank itself without workers).
With fewer non-empty shards than readers, fixed-size batches cut shards into
sample ranges so that no reader only repeats others' data; where that cannot
be done the loader refuses in one line. A shard that claims more samples than
it holds costs what it holds, not what it claims. Corpora are written
directly with the sample spec (tests/test_loader.py's make_corpus).
"""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from test_loader import make_corpus, real_ids, roundtrip, same_batches, split_gids, take

from schemas.errors import UserError
from trainer.loader import ShardLoader

CORPORA = {1: [45], 2: [30, 14], 18: [3 + (i * 5) % 11 for i in range(18)]}
WORLD, WORKERS = 2, 2


def rank_loaders(url: str, **kw: Any) -> list[ShardLoader]:
    return [ShardLoader(url, rank=r, world_size=WORLD, **kw) for r in range(WORLD)]


def real_tokens(batches: list[dict[str, torch.Tensor]]) -> int:
    return sum(int(b["attention_mask"][~b["is_pad"]].sum()) for b in batches)


@pytest.mark.parametrize("shards", sorted(CORPORA))
def test_two_ranks_by_two_workers_each_read_data_of_their_own(tmp_path: Path, shards: int) -> None:
    """2 ranks x 2 workers on 1-, 2- and 18-shard corpora: disjoint real data on every rank and every
    worker, together exactly one process's epoch, in fewer steps than one process takes."""
    train = CORPORA[shards]
    url = str(make_corpus(tmp_path / "c", train))
    kw = dict(batch_size=4, shuffle_buffer=8, epochs=1)
    runs = [take(ld) for ld in rank_loaders(url, num_workers=WORKERS, **kw)]
    single = take(ShardLoader(url, **kw))
    assert len(runs[0]) == len(runs[1]) < len(single)  # equal steps, and the work is shared
    ids = [real_ids(r) for r in runs]
    assert not set(ids[0]) & set(ids[1]) and all(len(i) == len(set(i)) for i in ids)
    assert sorted(ids[0] + ids[1]) == sorted(real_ids(single)) == split_gids(train)
    assert real_tokens(runs[0]) + real_tokens(runs[1]) == real_tokens(single)
    for r, run in enumerate(runs):
        for w in range(WORKERS):  # a rank reads its workers round robin: batch t came from worker t % 2
            assert real_ids(run[w::WORKERS]), f"rank {r} worker {w} read no data of its own"


def test_pieces_resume_exactly_and_on_another_layout(tmp_path: Path) -> None:
    """A one-shard split cut for 2 x 2 readers: the same layout resumes on the same batches; one process
    takes over the rest of the epoch (each remaining sample once), then plans whole shards again; and
    back: a one-process state resumed by 2 x 2 readers finishes its epoch on whole shards, then cuts."""
    url = str(make_corpus(tmp_path / "c", [45]))
    everything = split_gids([45])
    kw = dict(batch_size=4, shuffle_buffer=8, epochs=2)
    full = [take(ld) for ld in rank_loaders(url, num_workers=WORKERS, **kw)]
    first = rank_loaders(url, num_workers=WORKERS, **kw)
    head = [take(ld, 5) for ld in first]
    states = [roundtrip(ld.state_dict()) for ld in first]
    assert states[0]["split_readers"] == WORLD * WORKERS
    again = rank_loaders(url, num_workers=WORKERS, **kw)
    for ld, st in zip(again, states, strict=True):
        ld.load_state_dict(st)
    for r in range(WORLD):
        assert same_batches(head[r] + take(again[r]), full[r]), r

    one = ShardLoader(url, **kw)
    one.load_state_dict(roundtrip(ShardLoader.merge_state_dicts(states)))
    tail = take(one)
    seen = [i for h in head for i in real_ids(h)]
    assert sorted(seen + real_ids(tail, 0)) == everything
    assert sorted(real_ids(tail, 1)) == everything and one.plan.readers == 1

    solo = ShardLoader(url, **kw)
    start = take(solo, 3)
    back = rank_loaders(url, num_workers=WORKERS, **kw)
    for ld in back:
        ld.load_state_dict(roundtrip(solo.state_dict()))
    tails = [take(ld) for ld in back]
    assert sorted(real_ids(start) + [i for t in tails for i in real_ids(t, 0)]) == everything
    assert sorted(i for t in tails for i in real_ids(t, 1)) == everything
    assert all(ld.plan.readers == WORLD * WORKERS for ld in back)
    epoch1 = [[b for b in t if int(b["epoch"][0]) == 1] for t in tails]
    for t in epoch1:  # epoch 1 on pieces: every worker of every rank reads data of its own
        assert all(real_ids(t[w::WORKERS]) for w in range(WORKERS))


@pytest.mark.parametrize(("train", "kw", "message"), [
    ([20, 20], dict(tokens_per_batch=60, batch_size=None), r"2 non-empty shards for 4 readers .*tokens_per_batch"),
    ([3], dict(batch_size=2), r"3 samples for 4 readers"),
    ([20, 20, 20, 20], dict(batch_size=2, partitions=2), r"4 readers .* > partitions=2"),
])
def test_a_reader_that_would_get_no_data_is_one_line(tmp_path: Path, train: list[int], kw: dict[str, Any],
                                                    message: str) -> None:
    """Where shards cannot be cut (a token budget, too few samples, fixed partitions below the readers)."""
    rule = "doc_sentences" if kw.get("tokens_per_batch") else "full_sentences"
    url = str(make_corpus(tmp_path / "c", train, rule=rule))
    with pytest.raises(UserError, match=rf"readers would get no data of their own: .*{message}") as e:
        ShardLoader(url, rank=1, world_size=WORLD, num_workers=WORKERS, **kw)
    assert "\n" not in str(e.value) and "fewer ranks or num_workers" in str(e.value)
    # evaluation allows it: the idle readers pad, in step with the rest
    runs = [take(ld) for ld in rank_loaders(url, num_workers=WORKERS, epochs=1, allow_idle=True, **kw)]
    assert len({len(r) for r in runs}) == 1
    assert sorted(i for r in runs for i in real_ids(r)) == split_gids(train)


# ------------------------------------------------------------ work bounded by the data

@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """TimeoutError in the main thread after `seconds` (the loader runs in-process here)."""
    def expire(*_: Any) -> None:
        raise TimeoutError(f"the loader took over {seconds} s: it walks positions the manifest claims")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("batching", [dict(batch_size=4), dict(batch_size=None, tokens_per_batch=60)],
                         ids=["fixed", "tokens"])
def test_a_shard_claiming_more_samples_than_it_holds_costs_what_it_holds(tmp_path: Path,
                                                                        batching: dict[str, Any]) -> None:
    """A manifest claiming 10^15 samples for a 20-sample shard, corrupt_shards=skip: the shard is skipped
    (its count does not match), its claimed positions are stepped over, and batches keep coming."""
    train = [20, 20]
    rule = "doc_sentences" if batching.get("tokens_per_batch") else "full_sentences"
    m = make_corpus(tmp_path / "c", train, rule=rule)
    spec = json.loads(m.read_text())
    spec["shards"][0]["samples"] = 10**15
    m.write_text(json.dumps(spec))
    for workers in (0, 1):
        ld = ShardLoader(str(m), corrupt_policy="skip", shuffle_buffer=8, num_workers=workers, **batching)
        with deadline(30):
            got = take(ld, 40)
        assert ld.skipped_shards == ["train-000000.tar"]
        honest = {10**15 + i for i in range(train[1])}  # global ids count the claim: shards in manifest order
        assert honest <= set(real_ids(got))  # the honest shard, whole
        assert len(got) == 40  # equal steps still come (the claim's epoch pads)


def test_an_epoch_that_only_replays_ends_when_told_and_resumes_exactly(tmp_path: Path) -> None:
    """The same claim: once the honest shard is read, every unit only replays (``replaying``) for as long
    as the claim; ``end_epoch`` (the trainer's answer to a step of repeats only) starts the next epoch at
    once, and a state saved there resumes on the same batches."""
    train = [20, 20]
    m = make_corpus(tmp_path / "c", train)
    spec = json.loads(m.read_text())
    spec["shards"][0]["samples"] = 10**15
    m.write_text(json.dumps(spec))
    honest = {10**15 + i for i in range(train[1])}
    kw = dict(corrupt_policy="skip", shuffle_buffer=8, batch_size=4)
    for workers in (0, 2):
        ld = ShardLoader(str(m), num_workers=workers, **kw)
        it = iter(ld)
        first = []
        with deadline(30):
            while not ld.replaying:
                first.append(next(it))
        assert honest <= set(real_ids(first)) and first[-1]["is_pad"].all(), workers
        assert ld.epoch == 0 and not ShardLoader(str(m), num_workers=workers, **kw).replaying
        ld.end_epoch()
        state = roundtrip(ld.state_dict())
        with deadline(30):
            second = [next(it) for _ in range(10)]
        it.close()
        assert {int(e) for b in second for e in b["epoch"]} == {1} and set(real_ids(second)) == honest, workers
        resumed = ShardLoader(str(m), num_workers=workers, **kw)
        resumed.load_state_dict(state)
        assert same_batches(take(resumed, 10), second), workers


def test_a_mixed_source_that_only_replays_ends_its_epoch_and_resumes_exactly(tmp_path: Path) -> None:
    """The same claim in one source of a mix: the steps (trainer/step.py ``step_has_data``) end that
    source's epoch once its unit only replays (before, only a single corpus's epoch ended: the mix drew
    the source's batches of repeats for as long as the claim); the other source's epoch goes on, and a
    state saved there resumes on the same batches."""
    from types import SimpleNamespace

    from trainer.distributed import Dist
    from trainer.mixing import MixedLoader, MixPlan, batch_tokens
    from trainer.step import step_has_data

    bad, good = make_corpus(tmp_path / "bad", [20, 20]), make_corpus(tmp_path / "good", [40])
    spec = json.loads(bad.read_text())
    spec["shards"][0]["samples"] = 10**15
    bad.write_text(json.dumps(spec))
    honest = {10**15 + i for i in range(20)}
    kw = dict(corrupt_policy="skip", shuffle_buffer=8, batch_size=4)
    plan = MixPlan(names=("bad", "good"), urls=(str(bad), str(good)), token_shares=(0.5, 0.5),
                   batch_weights=(0.5, 0.5))

    def mix() -> MixedLoader:
        return MixedLoader([ShardLoader(str(bad), **kw), ShardLoader(str(good), **kw)], plan)

    def steps(m: MixedLoader, it: Iterator[dict[str, torch.Tensor]], n: int) -> list[tuple[str, Any]]:
        out = []
        for _ in range(n):
            batch = next(it)
            step_has_data([SimpleNamespace(tokens=batch_tokens(batch))], m, Dist())  # type: ignore[list-item]
            out.append((m.last_source, batch))
        return out

    m = mix()
    it = iter(m)
    first: list[tuple[str, Any]] = []
    with deadline(30):
        while m.loaders[0].epoch == 0:
            first += steps(m, it, 1)
            assert len(first) < 40, "the source's epoch did not end with its data"
    drawn = [b for src, b in first if src == "bad"]
    assert honest <= set(real_ids(drawn)) and sum(bool(b["is_pad"].all()) for b in drawn) == 1  # one replay
    assert m.loaders[1].epoch == 0
    state = roundtrip(m.state_dict())
    with deadline(30):
        second = steps(m, it, 12)
    it.close()
    assert {int(e) for src, b in second if src == "bad" for e in b["epoch"]} == {1}
    again = mix()
    again.load_state_dict(state)
    with deadline(30):
        resumed = steps(again, iter(again), 12)
    assert [s for s, _ in resumed] == [s for s, _ in second]
    assert same_batches([b for _, b in resumed], [b for _, b in second])
