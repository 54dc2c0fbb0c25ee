"""Mixing corpora by weight: the schedule, the plan, realized shares and exact resume (trainer/mixing.py)."""

from __future__ import annotations

import os

import pytest
from forkserver import run_python

from schemas.config import MixSource, TrainConfig
from schemas.errors import UserError
from shardforge.storage.contract import load_manifest, tokenizer_url
from trainer.mixing import MixedLoader, WeightedSchedule, mixed_loader, parse_mix_arg, plan_mix, source_names

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------ schedule and plan (no data)

@pytest.mark.parametrize("weights", [[0.7, 0.3], [1, 1, 1], [0.05, 0.9, 0.05], [3, 0, 1]])
def test_schedule_tracks_its_weights_within_one_pick(weights):
    s = WeightedSchedule(weights)
    total = sum(weights)
    for n in range(1, 2001):
        s.next()
        for i, w in enumerate(weights):
            assert abs(s.picks[i] - n * w / total) <= 1.0 + 1e-9, (n, s.picks)
    assert s.picks[weights.index(0)] == 0 if 0 in weights else True


def test_schedule_is_deterministic_and_resumes_exactly():
    a = WeightedSchedule([0.2, 0.5, 0.3])
    first = [a.next() for _ in range(37)]
    state = a.state_dict()
    rest = [a.next() for _ in range(100)]
    b = WeightedSchedule([0.2, 0.5, 0.3])
    assert [b.next() for _ in range(37)] == first
    c = WeightedSchedule([0.2, 0.5, 0.3])
    c.load_state_dict(state)
    assert [c.next() for _ in range(100)] == rest
    d = WeightedSchedule([0.21, 0.49, 0.3])  # weights derived a little otherwise: it draws by the state's
    d.load_state_dict(state)
    assert [d.next() for _ in range(100)] == rest
    with pytest.raises(UserError, match="same --mix"):
        WeightedSchedule([0.5, 0.5]).load_state_dict(state)


def test_schedule_refuses_bad_weights():
    for bad in ([], [0, 0], [-1, 2], [float("nan"), 1]):
        with pytest.raises(UserError):
            WeightedSchedule(bad)


def test_mix_arguments_and_config():
    assert parse_mix_arg("gs://b/news=0.7") == {"data": "gs://b/news", "weight": 0.7}
    assert parse_mix_arg("/data/books=x2.5") == {"data": "/data/books", "repeat": 2.5}
    for bad in ("gs://b/news", "=0.5", "a=heavy"):
        with pytest.raises(UserError):
            parse_mix_arg(bad)
    cfg = TrainConfig.model_validate({"mix": [{"data": "a", "weight": 1}, {"data": "b", "repeat": 2}]})
    assert cfg.data == "a"  # the first source stands for the run's corpus (tokenizer, heads)
    with pytest.raises(ValueError, match="exactly one of weight or repeat"):
        MixSource(data="a", weight=1, repeat=2)
    with pytest.raises(ValueError, match="not both"):
        TrainConfig.model_validate({"data": "z", "mix": [{"data": "a", "weight": 1}]})
    with pytest.raises(ValueError, match="mix lists 'gs://b/a' twice: give each corpus once, with its whole weight"):
        TrainConfig.model_validate({"mix": [{"data": "gs://b/a", "weight": 0.7}, {"data": "gs://b/a/", "weight": 0.3}]})
    from schemas.configfile import parse_config

    with pytest.raises(UserError) as refused:  # a rule over several keys: its own words, no "(root): "
        parse_config(TrainConfig, {"mix": [{"data": "a", "weight": 1}, {"data": "a", "repeat": 2}]}, "train config")
    assert str(refused.value) == "invalid train config: mix lists 'a' twice: give each corpus once, with its whole weight"
    assert source_names([MixSource(data="gs://b/news/", weight=1), MixSource(data="/x/news/manifest.json", weight=1),
                         MixSource(data="/y", weight=1, name="books")]) == ["news", "news_2", "books"]


# ------------------------------------------------------------------ two real corpora with one tokenizer

@pytest.fixture(scope="module")
def two_corpora(small_corpus, demo_corpus, tmp_path_factory):
    """The shared small corpus, and a second one built from one demo source with the first one's tokenizer."""
    from test_storage import store_config

    from pipelines.jobs.build import run_build

    root_a, m_a = small_corpus
    cfg = store_config(demo_corpus, target_samples=32).model_dump()
    cfg["sources"] = [s for s in cfg["sources"] if s["name"] == cfg["sources"][-1]["name"]]
    cfg["tokenizer"]["model_url"] = tokenizer_url(m_a, root_a)
    out = str(tmp_path_factory.mktemp("mix") / "second")
    from schemas.config import BuildConfig

    run_build(BuildConfig.model_validate(cfg), out)
    return root_a, out


def loader_pair(a: str, b: str, weights: tuple[float, float], batch_size: int | None = 4,
                tokens_per_batch: int | None = None) -> MixedLoader | None:
    from trainer.loader import ShardLoader

    return mixed_loader([MixSource(data=a, weight=weights[0]), MixSource(data=b, weight=weights[1])], "train",
                        lambda url: ShardLoader(url, "train", batch_size=batch_size, tokens_per_batch=tokens_per_batch,
                                                seed=3, shuffle_buffer=16))


def realized(mix: MixedLoader | None, batches: int) -> dict[str, float]:
    assert mix is not None
    it = iter(mix)
    for _ in range(batches):
        next(it)
    it.close()
    return mix.realized_shares()


def test_a_weighted_mix_realizes_its_token_shares_within_two_percent(two_corpora):
    a, b = two_corpora
    for weights in ((0.7, 0.3), (0.25, 0.75)):
        got = realized(loader_pair(a, b, weights), 600)
        names = list(got)
        assert abs(got[names[0]] - weights[0]) <= 0.02, (weights, got)
        assert abs(sum(got.values()) - 1) < 1e-9


@pytest.mark.parametrize("batching", [{"batch_size": 32}, {"batch_size": None, "tokens_per_batch": 4096}])
def test_shares_hold_where_a_corpus_gives_short_batches(two_corpora, batching):
    """A batch never spans two partitions: the second corpus's last partition (9 of its 137 samples) makes a
    short batch of every fifth, and a 4,096-token budget is more than any partition of either holds. Its
    batch weight comes from the tokens its loader's batches really hold (the plan's), so the token shares
    still come out right (weighed by full batches they missed by 3-4 points)."""
    from trainer.loader import ShardLoader

    a, b = two_corpora
    held = [ShardLoader(x, "train", seed=3, **batching).plan for x in (a, b)]
    fill = [p.batch_tokens() / (p.B * p.sequence_tokens() if p.B else p.T) for p in held]
    assert abs(fill[0] / sum(fill) - 0.5) > 0.025, fill  # what weighing by full batches would give: > 2.5 off
    got = realized(loader_pair(a, b, (0.5, 0.5), **batching), 520)  # 20 epochs of either corpus
    assert abs(list(got.values())[0] - 0.5) <= 0.01, got


def test_repeat_factors_follow_corpus_sizes(two_corpora):
    a, b = two_corpora
    ma, mb = load_manifest(a)[0], load_manifest(b)[0]
    plan = plan_mix([MixSource(data=a, repeat=1), MixSource(data=b, repeat=3)], [ma, mb], [1.0, 1.0])
    ta, tb = ma.totals["train"].tokens, 3 * mb.totals["train"].tokens
    assert plan.token_shares == pytest.approx((ta / (ta + tb), tb / (ta + tb)))


def test_corpora_with_different_tokenizers_are_refused(small_corpus, tmp_path):
    import shutil

    root, m = small_corpus
    other = str(tmp_path / "other")
    shutil.copytree(root, other)
    from schemas.manifest import MANIFEST_NAME

    path = os.path.join(other, MANIFEST_NAME)
    text = open(path).read().replace(m.tokenizer.sha256, "0" * 64)
    open(path, "w").write(text)
    with pytest.raises(UserError, match=r"the tokenizer \(sha256\) differs \("):
        plan_mix([MixSource(data=root, weight=1), MixSource(data=other, weight=1)],
                 [m, load_manifest(other)[0]], [1.0, 1.0])


def take(mix: MixedLoader, it) -> tuple[str, list[int]]:
    ids = next(it)["sample_ids"].tolist()
    return mix.last_source, ids


def test_mixed_loader_state_resumes_on_exactly_the_same_batches(two_corpora):
    a, b = two_corpora
    mix = loader_pair(a, b, (0.6, 0.4))
    assert mix is not None
    it = iter(mix)
    for _ in range(13):
        next(it)
    state = mix.state_dict()
    after = [take(mix, it) for _ in range(20)]
    it.close()
    again = loader_pair(a, b, (0.6, 0.4))
    assert again is not None
    again.load_state_dict(state)
    it = iter(again)
    assert [take(again, it) for _ in range(20)] == after
    it.close()


def test_a_mix_resumes_on_another_world_size_by_the_weights_it_drew_by(two_corpora, caplog):
    """Eight readers cut the second corpus's 5 shards into pieces whose batches hold other token counts, so
    the batch weights a mix derives depend on the world's size; an elastic resume draws on by the weights
    in its checkpoint (the token shares are what must match) instead of refusing or drawing otherwise."""
    from trainer.loader import ShardLoader

    a, b = two_corpora
    one = loader_pair(a, b, (0.6, 0.4), batch_size=32)
    assert one is not None
    it = iter(one)
    for _ in range(7):
        next(it)
    it.close()
    state = one.state_dict()
    after = [one.schedule.next() for _ in range(40)]
    entries = [MixSource(data=a, weight=0.6), MixSource(data=b, weight=0.4)]
    eight = mixed_loader(entries, "train", lambda url: ShardLoader(url, "train", batch_size=32, seed=3,
                                                                  shuffle_buffer=16, rank=0, world_size=8))
    assert eight is not None and eight.plan.batch_weights != pytest.approx(one.plan.batch_weights, rel=1e-3)
    with caplog.at_level("INFO", logger="trainer.mixing"):
        eight.load_state_dict(state)
    assert [eight.schedule.next() for _ in range(40)] == after
    w, v = one.plan.batch_weights, eight.plan.batch_weights
    assert (f"mix: the schedule draws on by its checkpoint's batch weights, corpus {w[0]:.1%}, second {w[1]:.1%} "
            f"(this run derives corpus {v[0]:.1%}, second {v[1]:.1%}:") in caplog.text, caplog.text
    other = loader_pair(a, b, (0.5, 0.5), batch_size=32)
    assert other is not None
    with pytest.raises(UserError, match=r"mixes corpus 60\.0%, second 40\.0% of the tokens, this run corpus "
                                        r"50\.0%, second 50\.0%; resume with the same --mix"):
        other.load_state_dict(state)


@pytest.mark.slow
def test_mixed_training_run_logs_shares_and_resumes_exactly(two_corpora, tmp_path):
    from trainer.loggers import read_metrics

    a, b = two_corpora
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    base = ["-m", "trainer.train", "--mix", f"{a}=0.7", "--mix", f"{b}=0.3", "--steps", "10",
            "--batch_size", "4", "--device", "cpu", "--set", "model.size=tiny", "--set", "log_every=1",
            "--set", "eval_every=5", "--set", "eval_batches=3"]
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
    for out, extra in ((full, []), (part, ["--set", "stop_at=4"]), (part, [])):
        r = run_python([*base, "--output", out, *extra], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    x, y = read_metrics(full), read_metrics(part)
    assert [r["step"] for r in y] == list(range(1, 11))
    for rx, ry in zip(x, y, strict=True):
        assert abs(rx["loss"] - ry["loss"]) <= 1e-6, (rx["step"], rx["loss"], ry["loss"])
        assert {k: v for k, v in rx.items() if k.startswith("share/")} == \
            {k: v for k, v in ry.items() if k.startswith("share/")}
        assert ("eval_loss" in rx) == (rx["step"] % 5 == 0) and rx.get("eval_loss") == ry.get("eval_loss")
    shares = {k: v for k, v in x[-1].items() if k.startswith("share/")}
    assert len(shares) == 2 and abs(sum(shares.values()) - 1) < 1e-9


def test_a_bad_mix_flag_is_one_clear_line(tmp_path):
    r = run_python(["-m", "trainer.train", "--mix", "somewhere=heavy", "--output",
                    str(tmp_path / "r")], env={**os.environ, "PYTHONPATH": REPO}, capture_output=True,
                   text=True, timeout=120)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "--mix 'somewhere=heavy'" in r.stderr


def test_the_manifest_records_tokens_per_source(two_corpora):
    """Per-source tokens (kept documents, specials excluded) add up to what packing took in."""
    for root in two_corpora:
        m = load_manifest(root)[0]
        assert m.accounting and all(a.tokens > 0 for a in m.accounting.values() if a.kept)
        assert sum(a.tokens for a in m.accounting.values()) == m.counters["pack_input_tokens"]
