"""The loader under real torch.distributed: 2 processes on gloo, uneven shards.

Each rank runs an all_reduce per step, so a rank that stopped early would make
the other fail (gloo timeout / closed peer) instead of passing; the parent
waits with a deadline and kills the group, so the test cannot hang forever.
The loader state is gathered mid-epoch (gather_state_dict, JSON over uint8
tensors) and resumed in-process on one rank (2 -> 1).
"""

from __future__ import annotations

import json
import os
import socket
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from test_loader import UNEVEN, make_corpus, real_ids, shard_gids, split_gids, take

from trainer.loader import ShardLoader, gather_state_dict

WORLD = 2
DEADLINE_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, url: str, out: str, port: int, kw: dict[str, Any], gather_at: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=timedelta(seconds=60))
    try:
        ld = ShardLoader(url, rank=rank, world_size=WORLD, **kw)
        steps, ids, state = 0, {}, None
        for b in ld:
            t = torch.ones(1)
            dist.all_reduce(t)  # every rank must be here every step
            assert int(t.item()) == WORLD
            steps += 1
            for e in b["epoch"].unique().tolist():
                ids.setdefault(str(e), []).extend(real_ids([b], e))
            if steps == gather_at:
                state = gather_state_dict(ld)
        dist.barrier()
        Path(out, f"rank{rank}.json").write_text(json.dumps({
            "steps": steps, "steps_per_epoch": ld.steps_per_epoch, "ids": ids, "state": state,
            "skipped": ld.skipped_shards}))
    finally:
        dist.destroy_process_group()


def run_ranks(url: str, out: Path, kw: dict[str, Any], gather_at: int) -> list[dict[str, Any]]:
    ctx = mp.start_processes(_rank_main, args=(url, str(out), _free_port(), kw, gather_at), nprocs=WORLD,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail(f"ranks did not finish in {DEADLINE_S}s (hang)")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.mark.parametrize("extra", [
    pytest.param({"num_workers": 0}, id="fixed"),
    pytest.param({"num_workers": 1, "tokens_per_batch": 60, "batch_size": None, "corrupt_policy": "skip"},
                 id="tokens-workers-corrupt"),
])
def test_two_gloo_ranks_take_equal_steps_and_resume_on_one(tmp_path: Path, extra: dict[str, Any]) -> None:
    url = make_corpus(tmp_path / "c", UNEVEN)
    bad: set[int] = set()
    if extra.get("corrupt_policy") == "skip":
        (url.parent / "train-000002.tar").unlink()
        bad = shard_gids(UNEVEN, 2)
    kw = dict(batch_size=4, shuffle_buffer=8, partitions=8, epochs=2) | extra
    gather_at = 5
    res = run_ranks(str(url), tmp_path, kw, gather_at)

    spe = res[0]["steps_per_epoch"]
    assert [r["steps"] for r in res] == [2 * spe, 2 * spe]
    good = set(split_gids(UNEVEN)) - bad
    for e in ("0", "1"):
        ids = [i for r in res for i in r["ids"][e]]
        assert len(ids) == len(set(ids)) and set(ids) - bad == good

    # both ranks gathered the same merged state; resuming it on one rank (2 -> 1)
    # visits exactly the samples the two ranks had not seen at that step
    state = res[0]["state"]
    assert state == res[1]["state"] and state["ranks"] == [0, 1]
    one = ShardLoader(str(url), **(kw | {"num_workers": 0}))
    one.load_state_dict(state)
    tail = take(one)
    # the samples the ranks saw before the gather: rerun the first gather_at steps in-process
    heads = [take(ShardLoader(str(url), rank=r, world_size=WORLD, **kw), gather_at) for r in range(WORLD)]
    before = [i for h in heads for i in real_ids(h, 0)]
    after = real_ids(tail, 0)
    assert len(before) + len(after) == len(set(before) | set(after))
    assert (set(before) | set(after)) - bad == good
    assert set(real_ids(tail, 1)) - bad == good
