"""Named recipes: each resolves to its paper's values; --print-config, --set, packing checks.

The expected values below are typed from the papers (and the reference code where a
paper is silent), not read from the recipe files: a recipe that drifts fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from forkserver import run_python

from schemas.config import TrainConfig
from schemas.errors import UserError
from trainer.recipes import apply_set, closest_first, recipe_names, resolve_train_config, valid_keys

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}

ROBERTA = {"packing_rules": ["full_sentences"], "global_batch_sequences": 8192, "masking.scheme": "token",
           "masking.rate": 0.15, "optim.name": "adamw", "optim.beta1": 0.9, "optim.beta2": 0.98, "optim.eps": 1e-6,
           "optim.weight_decay": 0.01, "optim.clip_norm": None, "steps": 500_000, "model.dropout": 0.1,
           "model.sentence_head": "none", "model.max_positions": 514}
ALBERT = {"packing_rules": ["sop"], "global_batch_sequences": 4096, "optim.name": "lamb", "optim.lr": 0.00176,
          "optim.warmup_steps": 3125, "steps": 125_000, "masking.scheme": "ngram", "masking.ngram_max": 3,
          "model.sentence_head": "sop", "model.embedding_size": 128, "model.share": "all", "model.dropout": 0.0}
SPANBERT = {"packing_rules": ["full_sentences", "doc_sentences"], "global_batch_sequences": 256,
            "optim.lr": 1e-4, "optim.warmup_steps": 10_000, "optim.beta2": 0.999, "steps": 2_400_000,
            "masking.scheme": "span", "masking.span_p": 0.2, "masking.span_max": 10, "model.span_boundary": True,
            "model.sentence_head": "none"}


def shape(hidden: int, layers: int, heads: int, intermediate: int) -> dict[str, int]:
    return {"model.hidden": hidden, "model.layers": layers, "model.heads": heads, "model.intermediate": intermediate}


PAPERS: dict[str, dict[str, Any]] = {
    # Liu et al. 2019, Table 9.
    "roberta-base": {**ROBERTA, **shape(768, 12, 12, 3072), "optim.lr": 6e-4, "optim.warmup_steps": 24_000},
    "roberta-large": {**ROBERTA, **shape(1024, 24, 16, 4096), "optim.lr": 4e-4, "optim.warmup_steps": 30_000},
    # Devlin et al. 2019, section 3.1 / A.2.
    "bert-base": {**shape(768, 12, 12, 3072), "packing_rules": ["segment_pair_nsp"], "model.sentence_head": "nsp",
                  "global_batch_sequences": 256, "steps": 1_000_000, "optim.lr": 1e-4, "optim.beta2": 0.999,
                  "optim.warmup_steps": 10_000, "optim.weight_decay": 0.01, "masking.scheme": "token"},
    # Lan et al. 2020, Table 1 and section 4.1.
    "albert-base": {**ALBERT, **shape(768, 12, 12, 3072)},
    "albert-large": {**ALBERT, **shape(1024, 24, 16, 4096)},
    "albert-xlarge": {**ALBERT, **shape(2048, 24, 32, 8192)},
    "albert-xxlarge": {**ALBERT, **shape(4096, 12, 64, 16384)},
    # Joshi et al. 2020, sections 3 and 4.1.
    "spanbert-base": {**SPANBERT, **shape(768, 12, 12, 3072)},
    "spanbert-large": {**SPANBERT, **shape(1024, 24, 16, 4096)},
}


def get(cfg: TrainConfig, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def resolve(recipe: str | None, *sets: str, data: str | None = "corpus", config: str | None = None) -> TrainConfig:
    return resolve_train_config(recipe, config, {"data": data}, list(sets), require_data=data is not None)


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_python(args, capture_output=True, text=True, cwd=REPO, env=ENV, timeout=timeout)


def one_line_error(res: subprocess.CompletedProcess) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


# ------------------------------------------------------------------ the papers' values


def test_the_packaged_recipes_are_the_papers_and_cpu() -> None:
    assert recipe_names() == sorted([*PAPERS, "cpu"])


@pytest.mark.parametrize("name", sorted(PAPERS))
def test_recipe_resolves_to_its_papers_values(name: str) -> None:
    cfg = resolve(name)
    assert cfg.recipe == name
    wrong = {k: (get(cfg, k), v) for k, v in PAPERS[name].items() if get(cfg, k) != v}
    assert not wrong, f"{name}: (recipe, paper) differ: {wrong}"
    # 512-token sequences for every paper recipe; accumulation fills the global batch.
    assert cfg.model.max_positions - 2 == 512
    assert cfg.global_batch_sequences % cfg.batch_size == 0


def test_albert_xxlarge_is_one_flag_not_five_overrides() -> None:
    from trainer.model import resolve_dims

    d = resolve_dims(resolve("albert-xxlarge").model, 30_000)
    assert (d.hidden, d.layers, d.heads, d.intermediate, d.embedding_size, d.share) == \
        (4096, 12, 64, 16384, 128, "all")
    assert d.head_dim == 64


def test_cpu_recipe_resolves_to_a_small_model_that_fits_a_laptop() -> None:
    from trainer.model import Encoder

    cfg = resolve("cpu")
    assert cfg.device == "cpu" and cfg.optim.warmup_steps > 0 and cfg.eval_every > 0
    params = Encoder(cfg.model, 8000).num_params()
    assert params < 5_000_000, params
    # Its corpora are FULL-SENTENCES (ragged rows): on CPU the unpadded path's nested-tensor
    # attention costs ~1.6x the padded one per step (BENCHMARKS.md, the `cpu` recipe), so the recipe pads.
    assert cfg.unpad is False
    # It trains at 40 % masking (more predictions per step) but reports its valid loss
    # the standard way, 15 % with 80/10/10, so the number compares with any other run's.
    assert cfg.masking.rate == 0.4
    assert cfg.eval_masking is not None and cfg.eval_masking.rate == 0.15
    assert (cfg.eval_masking.scheme, cfg.eval_masking.mask_prob, cfg.eval_masking.random_prob) == ("token", 0.8, 0.1)


# ------------------------------------------------------------------ overrides and errors


def test_set_overrides_a_recipe_and_config_file_layers_between(tmp_path: Path) -> None:
    conf = tmp_path / "mine.yaml"
    conf.write_text(yaml.safe_dump({"data": "x", "optim": {"lr": 2e-4}, "batch_size": 4}))
    cfg = resolve("roberta-base", "optim.warmup_steps=100", "model.dropout=0.0", config=str(conf))
    assert cfg.optim.lr == 2e-4  # the config file over the recipe ...
    assert cfg.optim.beta2 == 0.98 and cfg.optim.eps == 1e-6  # ... keeps the recipe's other optim fields
    assert cfg.batch_size == 4 and cfg.optim.warmup_steps == 100 and cfg.model.dropout == 0.0
    assert resolve("roberta-base", "packing_rules=null").packing_rules is None
    assert resolve(None, "packing_rules=[\"sop\"]").packing_rules == ["sop"]


def test_every_config_field_is_a_valid_set_key() -> None:
    keys = valid_keys()
    for k in ("steps", "optim.lr", "model.embedding_size", "masking.span_p", "trackers.wandb", "packing_rules"):
        assert k in keys
    cfg = resolve(None)
    for k in keys:  # every key round-trips through --set with its own current value
        if k.startswith("eval_masking."):
            continue  # a section that is null here: below
        value = get(cfg, k)
        data: dict[str, Any] = {"data": "corpus"}
        apply_set(data, f"{k}={json.dumps(value)}")
        assert get(TrainConfig.model_validate(data), k) == value, k


def test_a_size_given_after_a_recipe_replaces_its_shape(tmp_path: Path) -> None:
    """Every recipe sets its shape explicitly (hidden, layers, heads, intermediate), which won over a size:
    ``--recipe roberta-base --model_size tiny`` trained 86M parameters described as size=tiny."""
    from trainer.args import parse_train_args
    from trainer.model import resolve_dims
    from trainer.train import build_train_config

    def dims(cfg: TrainConfig) -> tuple[int, int, int, int]:
        d = resolve_dims(cfg.model, 1000)
        return d.hidden, d.layers, d.heads, d.intermediate

    base, tiny = dims(resolve("roberta-base")), dims(resolve(None, "model.size=tiny"))
    assert base == (768, 12, 12, 3072) and tiny != base
    assert dims(resolve("roberta-base", "model.size=tiny")) == tiny
    args = parse_train_args(["--recipe", "roberta-base", "--model_size", "tiny", "--data", "corpus"])
    assert dims(build_train_config(args, args.set)) == tiny
    # A shape key given beside the size is kept; the recipe's keys the size does not set are kept too.
    assert dims(resolve("roberta-base", "model.size=tiny", "model.layers=3"))[1] == 3
    albert = resolve("albert-base", "model.size=small")
    assert albert.model.embedding_size == 128 and albert.model.share == "all" and albert.model.hidden is None
    # A config file's size replaces the recipe's shape; its own explicit keys stay.
    (tmp_path / "c.yaml").write_text("data: corpus\nmodel:\n  size: small\n  heads: 2\n")
    from_file = resolve("roberta-base", config=str(tmp_path / "c.yaml"))
    assert dims(from_file)[2] == 2 and from_file.model.hidden is None and from_file.model.layers is None
    # Without a later size, the recipe's shape stands.
    assert dims(resolve("roberta-base", "model.layers=6")) == (768, 6, 12, 3072)


def test_a_key_of_a_null_section_starts_it_from_its_defaults() -> None:
    """``--set eval_masking.rate=0.15`` was an unknown key (the section is null unless a recipe sets it), on the
    cpu recipe too, whose section it is."""
    from schemas.config import MaskingConfig

    assert resolve(None).eval_masking is None and "eval_masking" in valid_keys()
    assert resolve(None, "eval_masking.rate=0.2").eval_masking == MaskingConfig(rate=0.2)
    cpu = resolve("cpu")
    assert cpu.eval_masking is not None and cpu.masking.rate != 0.2
    changed = resolve("cpu", "eval_masking.rate=0.2", "eval_masking.scheme=span")
    assert changed.eval_masking == cpu.eval_masking.model_copy(update={"rate": 0.2, "scheme": "span"})
    assert changed.masking == cpu.masking
    assert resolve("cpu", "eval_masking=null").eval_masking is None
    for k in [k for k in valid_keys() if k.startswith("eval_masking.")]:
        field = k.split(".", 1)[1]
        default = MaskingConfig.model_fields[field].default
        assert getattr(resolve(None, f"{k}={json.dumps(default)}").eval_masking, field) == default, k


def test_bad_set_key_lists_the_valid_keys_closest_first() -> None:
    with pytest.raises(UserError) as e:
        resolve("roberta-base", "optim.lrr=1e-4")
    msg = str(e.value)
    listed = msg.split("the closest valid keys: ", 1)[1].split(" (python -m trainer.train --help lists every one)")[0]
    listed = listed.split(", ")
    assert listed[0] == "optim.lr" and len(listed) == 8 and set(listed) <= set(valid_keys())
    assert closest_first("model.hiden", valid_keys())[0] == "model.hidden"
    with pytest.raises(UserError, match="expects key=value"):
        resolve(None, "optim.lr")
    with pytest.raises(UserError, match="unknown recipe 'roberta-bse' \\(did you mean roberta-base\\?\\)"):
        resolve("roberta-bse")
    with pytest.raises(UserError, match="unknown recipe 'RoBERTa_Base' \\(did you mean roberta-base\\?\\)"):
        resolve("RoBERTa_Base")  # the paper's spelling: no suggestion before
    with pytest.raises(UserError, match="optim.lr"):  # a bad value is one line too
        resolve("cpu", "optim.lr=-1")


# ------------------------------------------------------------------ through the real CLI


def test_print_config_prints_the_resolved_recipe_through_the_cli() -> None:
    res = run("-m", "trainer.train", "--recipe", "albert-xxlarge", "--print-config", "--set", "optim.lr=0.001",
              "--steps", "10")
    assert res.returncode == 0, res.stderr
    printed = yaml.safe_load(res.stdout)
    assert printed["recipe"] == "albert-xxlarge" and printed["data"] is None
    assert printed["model"]["hidden"] == 4096 and printed["model"]["heads"] == 64
    assert printed["optim"]["lr"] == 0.001 and printed["steps"] == 10
    # What it prints is a config file that resolves to the same config.
    want = resolve("albert-xxlarge", "optim.lr=0.001", "steps=10")
    assert TrainConfig.model_validate({**printed, "data": want.data}) == want


def test_shardforge_train_forwards_recipe_flags() -> None:
    res = run("-m", "shardforge.cli", "train", "--recipe", "spanbert-base", "--print-config")
    assert res.returncode == 0, res.stderr
    assert yaml.safe_load(res.stdout)["masking"]["scheme"] == "span"


def test_bad_set_key_is_one_line_from_the_cli() -> None:
    res = run("-m", "trainer.train", "--recipe", "roberta-base", "--print-config", "--set", "optim.warmup=5")
    line = one_line_error(res)
    assert "unknown key 'optim.warmup'" in line
    assert line.split("the closest valid keys: ", 1)[1].startswith("optim.warmup_steps")


def test_packing_rule_mismatch_is_one_clear_line(small_corpus, tmp_path: Path) -> None:
    root, manifest = small_corpus
    assert manifest.packing_rule == "full_sentences"
    res = run("-m", "trainer.train", "--recipe", "albert-base", "--data", root, "--output", str(tmp_path / "run"),
              "--device", "cpu", "--steps", "1")
    line = one_line_error(res)
    assert "recipe albert-base trains on a corpus packed as sop" in line
    assert "is packed as full_sentences" in line
    assert f"(repack it: shardforge repack --tokenized {root} --output NEW --rule sop; or --set packing_rules=null" \
        in line  # the command, as it runs
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_the_repack_a_mismatch_suggests_is_one_that_runs(small_corpus, tmp_path: Path) -> None:
    """A repack keeps no tokenized documents: the line names the corpus it came from, and that command works."""
    import shlex

    from pipelines.jobs.repack import run_repack
    root, m = small_corpus
    nsp, doc = str(tmp_path / "nsp"), str(tmp_path / "doc")
    run_repack(root, nsp, rule="segment_pair_nsp")
    run_repack(root, doc, rule="doc_sentences")
    cases = (("recipe", nsp, ("--recipe", "albert-base"), "; or --set packing_rules=null"),
             ("head", doc, ("--recipe", "cpu", "--set", "model.sentence_head=sop"), "; or --set model.sentence_head=none"))
    for name, data, args, tail in cases:
        line = one_line_error(run("-m", "trainer.train", *args, "--data", data, "--output", str(tmp_path / "run"),
                                  "--device", "cpu", "--steps", "1"))
        hint = line.split("(repack it: ", 1)[1].split(tail, 1)[0]
        assert hint == f"shardforge repack --tokenized {root} --output NEW --rule sop --max_seq_len {m.max_seq_len}", line
        res = run("-m", "shardforge.cli", *shlex.split(hint.replace("NEW", str(tmp_path / name)))[1:])
        assert res.returncode == 0, res.stderr[-2000:]


def test_repack_hint_repacks_the_corpus_its_origin_or_asks_for_a_build(small_corpus) -> None:
    from trainer.recipes import repack_hint
    root, m = small_corpus
    assert m.intermediates.get("tokenized")
    assert repack_hint(m, root, {"--rule": "sop"}) == f"repack it: shardforge repack --tokenized {root} --output NEW --rule sop"
    repack = m.model_copy(update={"intermediates": {}, "parent": "gs://b/en-v1/manifest.json"})
    # from the origin, the repack's length is said again (the origin's own is the default)
    assert repack_hint(repack, "gs://b/en-sop", {"--rule": "sop"}) == \
        f"repack it: shardforge repack --tokenized gs://b/en-v1 --output NEW --rule sop --max_seq_len {m.max_seq_len}"
    assert repack_hint(repack, "gs://b/en-sop", {"--valid_fraction": "0.05"}) == (
        "repack it: shardforge repack --tokenized gs://b/en-v1 --output NEW "
        f"--rule {m.packing_rule} --max_seq_len {m.max_seq_len} --valid_fraction 0.05")
    bare = m.model_copy(update={"intermediates": {}})
    assert repack_hint(bare, root, {"--rule": "sop"}) == "it keeps no tokenized documents to repack: build it again with --rule sop"
    served = m.model_copy(update={"intermediates": {}, "version": 3, "parent": "manifest-v2.json"})
    assert repack_hint(served, root, {"--rule": "sop"}).startswith("it keeps no tokenized documents")


@pytest.mark.slow
def test_cpu_recipe_trains_through_the_cli(small_corpus, tmp_path: Path) -> None:
    """The recipe runs end to end on a full_sentences corpus (a few steps; learning: bench_cpu_recipe.py)."""
    root, _ = small_corpus
    run_dir = tmp_path / "run"
    res = run("-m", "trainer.train", "--recipe", "cpu", "--data", root, "--output", str(run_dir),
              "--steps", "4", "--set", "eval_every=2", "--set", "eval_batches=1", timeout=600)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["grad_norm"] > 0 for r in rows)
    seen = [r["tokens_seen"] for r in rows]
    assert seen == sorted(seen) and seen[0] > 0
    assert "eval_loss" in rows[1] and "loss_smooth" in rows[-1]
    # What the run is comes first on stdout (its end line last); progress goes to stderr from step 1.
    said = res.stdout.splitlines()
    assert [line.split(":")[0] for line in said[:7]] == ["model", "device", "corpus", "length", "optimizer",
                                                         "evaluation", "output"], res.stdout
    assert "4 steps x 16 sequences" in said[3] and "masking token 40% (evaluated at token 15%)" in said[4]
    assert said[-1].startswith("trained to step 4: ") and f"eval loss {rows[-1]['eval_loss']:.4f}" in said[-1]
    assert "step 1/4 " in res.stderr and " eta " in res.stderr and "model:" not in res.stderr


# ------------------------------------------------------------------ packaging


@pytest.mark.slow
def test_an_installed_wheel_carries_the_recipes(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path), str(REPO)], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    (wheel,) = tmp_path.glob("shardforge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"trainer/recipes/{n}.yaml" for n in recipe_names()} <= names
