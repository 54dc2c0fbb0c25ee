"""The README's path with the example configs (examples/build.yaml, examples/train.yaml), through the real
commands on a small corpus of real news: the build config combined with --input and flags, the summary a
person reads, the train config printed and trained for a few steps, and a pair corpus whose labels
`inspect` explains.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from forkserver import run_python
from realtext import news_documents

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
BUILD_YAML = REPO / "examples" / "build.yaml"
TRAIN_YAML = REPO / "examples" / "train.yaml"


def run(*args: str, cwd: Path | str = REPO, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_python(args, capture_output=True, text=True, cwd=cwd, env=ENV, timeout=timeout)


def test_the_build_example_holds_the_defaults_and_lacks_only_the_sources() -> None:
    """What examples/build.yaml says are the defaults are the defaults: the file stays true to the code."""
    from schemas.config import BuildConfig
    from shardforge.storage.contract import load_config_data

    data = load_config_data(BuildConfig, str(BUILD_YAML))
    assert "sources" not in data and {"clean", "dedupe", "tokenizer", "packing", "shards", "seed"} <= set(data)
    source = {"name": "news", "input": "raw/*.jsonl"}
    assert BuildConfig.model_validate({**data, "sources": [source]}) == BuildConfig.model_validate({"sources": [source]})


@pytest.fixture(scope="module")
def example_build(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """`python -m pipelines.build --config examples/build.yaml --input ...` on 60 news articles, with the
    flags a small corpus needs and the new ones (tokenizer kind, languages, text field)."""
    tmp = tmp_path_factory.mktemp("example")
    with open(tmp / "news.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"body": t}) + "\n" for t in news_documents()[:60])
    out = tmp / "corpus"
    res = run("-m", "pipelines.build", "--config", str(BUILD_YAML), "--input", f"news={tmp / 'news.jsonl'}",
              "--output", str(out), "--text_field", "body", "--tokenizer_kind", "bpe", "--languages", "en",
              "--vocab_size", "400", "--max_seq_len", "128", "--shard_samples", "100", cwd=tmp)
    assert res.returncode == 0, res.stderr[-3000:]
    return out, res


def test_the_build_example_combines_with_the_flags_and_prints_a_summary_for_a_person(example_build) -> None:
    out, res = example_build
    m = json.loads((out / "manifest.json").read_text())
    cfg = m["config"]
    assert [(s["name"], s["text_field"]) for s in cfg["sources"]] == [("news", "body")]
    assert cfg["tokenizer"]["model_type"] == "bpe" and cfg["tokenizer"]["vocab_size"] == 400
    assert cfg["clean"]["languages"] == ["en"] and cfg["packing"]["valid_fraction"] == 0.01  # the file's
    kept = sum(a["kept"] for a in m["accounting"].values())
    # A few lines, the report's path last; no JSON (that is --json's).
    lines = res.stdout.strip().splitlines()
    assert 4 <= len(lines) <= 8 and "{" not in res.stdout, res.stdout
    assert lines[0] == f"built corpus {out}"
    assert lines[1].startswith(f"  documents  60 in, {kept} kept; ")
    assert lines[2].startswith("  tokenizer  bpe, 400 pieces; ")
    assert lines[-1] == f"  report     {out}/report.html  (what was kept, filtered and deduplicated, and why)"
    assert f"{out}/timings.html" in res.stdout and (out / "timings.html").is_file()
    assert res.stderr.count("stage timings (s):") == 1  # where the time went stays one line on stderr


def test_a_build_of_several_sources_says_what_each_gave(example_build) -> None:
    """With more than one source the summary says what each gave: a Stories file read as one document (one a
    file, by design) was one document among 61 in the totals, seen only in the report."""
    from pipelines.jobs.summary import summary_text
    from schemas.manifest import Manifest, SourceAccount

    out, _ = example_build
    m = Manifest.model_validate(json.loads((out / "manifest.json").read_text()))
    news = m.accounting["news"].model_copy(update={"tokens": 3000})
    two = m.model_copy(update={"accounting": {"news": news, "stories": SourceAccount(input=1, kept=1, tokens=1000)}})
    summary = {"manifest": f"{out}/manifest.json", "documents_in": news.input + 1, "kept": news.kept + 1,
               "duplicates": 0, "filtered": news.input - news.kept, "rejected": 0, "report": f"{out}/report.html"}
    lines = summary_text(summary, two).splitlines()
    assert lines[2] == (f"  sources    news {news.input:,} in, {news.kept:,} kept, 75.0% of the tokens; "
                        "stories 1 in, 1 kept, 25.0% of the tokens"), lines
    assert not any(line.startswith("  sources") for line in summary_text(summary, m).splitlines())  # one source


def test_a_valid_split_too_small_for_a_steady_loss_is_said_with_the_repack_that_grows_it(example_build) -> None:
    """Under ~1,000 predicted tokens (at the trainer's 15%) the build's and the repack's summaries say so,
    with the valid fraction that gives about that many: the trainer said it only at a run's start."""
    from pipelines.jobs.summary import repack_summary_text, summary_text, valid_line
    from schemas.manifest import Manifest, SplitTotals

    out, _ = example_build
    m = Manifest.model_validate(json.loads((out / "manifest.json").read_text()))
    small = m.model_copy(update={"totals": {**m.totals, "valid": SplitTotals(shards=1, samples=2, tokens=220,
                                                                           documents=1)}})
    summary = {"manifest": f"{out}/manifest.json", "documents_in": 60, "kept": 60, "duplicates": 0, "filtered": 0,
               "rejected": 0, "report": f"{out}/report.html"}
    want = ("  valid      2 sequences from 1 document, 220 tokens: ~33 predicted at 15% masking, under the ~1,000 a "
            "steady evaluation loss needs (repack it: shardforge repack --tokenized {} --output NEW {}--valid_fraction "
            "0.31)")  # 0.01 x 1,000 / 33, rounded up to two digits
    assert want.format(out, "") in summary_text(summary, small).splitlines()
    # A repack keeps no tokenized documents: its origin is repacked again, with its rule and length.
    repack = small.model_copy(update={"intermediates": {}, "parent": f"{out}/manifest.json"})
    assert want.format(out, f"--rule {m.packing_rule} --max_seq_len {m.max_seq_len} ") in \
        repack_summary_text(repack, "gs://b/repacked").splitlines()
    # Enough predicted tokens, or no valid split at all: nothing said.
    big = small.model_copy(update={"totals": {**m.totals, "valid": SplitTotals(shards=1, samples=90, tokens=6667)}})
    none = small.model_copy(update={"totals": {k: v for k, v in m.totals.items() if k != "valid"}})
    assert valid_line(big, str(out)) == [] and valid_line(none, str(out)) == []
    # A repack whose valid split came out empty says so (a build warns of it), with the fraction that gives
    # about 1,000 predicted tokens and 3 documents expected; none asked for (valid_fraction 0): nothing.
    kept = sum(t.documents for t in none.totals.values())
    tokens = sum(t.tokens for t in none.totals.values())
    (empty,) = valid_line(none, str(out), say_empty=True)
    assert empty.startswith(f"  valid      none: none of the {kept:,} documents fell in it at valid_fraction "
                            f"{m.config['packing']['valid_fraction']:g}, so training on it cannot evaluate (repack it: "
                            f"shardforge repack --tokenized {out} --output NEW --valid_fraction "), empty
    asked = float(empty.rsplit(" ", 1)[1].rstrip(")"))
    assert asked >= max(1000 / (0.15 * tokens), 3 / kept) and asked < 1.1 * max(1000 / (0.15 * tokens), 3 / kept)
    unasked = none.model_copy(update={"config": {**m.config, "packing": {**m.config["packing"], "valid_fraction": 0}}})
    assert valid_line(unasked, str(out), say_empty=True) == []
    assert valid_line(big.model_copy(update={"totals": {"valid": SplitTotals(samples=90, tokens=6600)}}), str(out))
    one = valid_line(small.model_copy(update={"totals": {"valid": SplitTotals(samples=1, tokens=319, documents=1)}}),
                     str(out))
    assert one[0].startswith("  valid      1 sequence from 1 document, 319 tokens: ~48 predicted"), one


def test_the_train_example_resolves_and_trains(example_build, tmp_path) -> None:
    """The config --print-config shows (resolved in-process: the CLI's one costs a torch import) holds the
    file's values; then a few steps of the example on the example corpus (a tiny model)."""
    from trainer.recipes import resolve_train_config

    example = yaml.safe_load(TRAIN_YAML.read_text())
    resolved = resolve_train_config(None, str(TRAIN_YAML), {}, []).model_dump(mode="json")
    for section in ("model", "masking", "optim"):
        assert resolved[section] | example[section] == resolved[section], section
    assert resolved["steps"] == example["steps"] and resolved["data"] == os.path.abspath(example["data"])
    out, _ = example_build
    res = run("-m", "trainer.train", "--config", str(TRAIN_YAML), "--data", str(out), "--output", str(tmp_path / "run"),
              "--steps", "2", "--batch_size", "4", "--set", "model.size=tiny", "--set", "optim.warmup_steps=1",
              "--set", "eval_every=0", "--set", "checkpoint_every=0", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if x]
    assert max(r.get("step", 0) for r in records) == 2


def test_inspect_says_what_a_pair_label_means(example_build, tmp_path) -> None:
    out, _ = example_build
    res = run("-m", "shardforge.cli", "repack", "--tokenized", str(out), "--output", str(tmp_path / "sop"),
              "--rule", "sop")
    assert res.returncode == 0, res.stderr[-3000:]
    # Repack's summary is a few lines for a person, as the build's (JSON is --json's).
    lines = res.stdout.strip().splitlines()
    assert lines[0] == f"repacked corpus {tmp_path / 'sop'}" and "{" not in res.stdout, res.stdout
    assert lines[1].startswith(f"  from       {out} ") and "rule sop" in lines[3] and len(lines) == 6
    m = json.loads((tmp_path / "sop" / "manifest.json").read_text())
    kept = sum(a["kept"] for a in m["accounting"].values())
    packed = {split: t["documents"] for split, t in m["totals"].items()}
    assert lines[2] == f"  documents  {sum(packed.values())} of the {kept} kept, in train {packed['train']}", lines[2]
    # Documents the rule gave no sequence are counted.
    from pipelines.jobs.summary import documents_packed_line
    from schemas.manifest import Manifest, SplitTotals

    fewer = Manifest.model_validate(m)
    fewer = fewer.model_copy(update={"totals": {"train": SplitTotals(documents=kept - 1), "valid": SplitTotals()}})
    assert documents_packed_line(fewer) == (f"  documents  {kept - 1} of the {kept} kept, in train {kept - 1} and "
                                            "valid 0; 1 document gave no sop sequence")
    # 60 documents at the example's valid_fraction 0.01 drew none into valid: said, with the repack that would
    assert lines[4].startswith("  valid      none: none of the ") and f"--tokenized {out} --output NEW " in lines[4]
    assert lines[-1].startswith(f"  look       shardforge inspect {tmp_path / 'sop'}")
    res = run("-m", "shardforge.cli", "inspect", str(tmp_path / "sop"), "--samples", "4")
    assert res.returncode == 0, res.stderr[-3000:]
    assert ("a sentence order prediction label: 0 = A and B in their order in the document; 1 = A and B swapped"
            in res.stdout)
    labelled = [x for x in res.stdout.splitlines() if ", label " in x]
    assert len(labelled) == 4 and all(x.endswith(("label 0 (A and B in their order in the document)",
                                                  "label 1 (A and B swapped)")) for x in labelled), labelled
    # Each pair's two segments are shown apart (the label is about where A ends and B begins).
    lines = res.stdout.splitlines()
    for x in labelled:
        i = lines.index(x)
        assert lines[i + 2].startswith("    A:    ") and lines[i + 3].startswith("    B:    "), lines[i:i + 4]
    res = run("-m", "shardforge.cli", "inspect", str(tmp_path / "sop"), "--samples", "4", "--json")
    samples = json.loads(res.stdout)["samples"]
    assert {s["label_meaning"] for s in samples} <= {"A and B in their order in the document", "A and B swapped"}
    for sample in samples:  # the two texts are the sample's, cut where segment B starts
        assert sample["text_a"] and sample["text_b"] and sample["text_b"] in sample["text"]
        assert sample["text"].replace(" ", "") == (sample["text_a"] + sample["text_b"]).replace(" ", "")
    from shardforge.commands.inspect import label_meaning

    # NSP as the packer writes it (pipelines/pack/rules.py): 0 = B is A's continuation, 1 = B is random
    assert "is next" in label_meaning("segment_pair_nsp", 0) and "another document" in label_meaning(
        "sentence_pair_nsp", 1) and label_meaning("full_sentences", 0) is None
