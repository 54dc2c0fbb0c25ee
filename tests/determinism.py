"""Two builds of one input compared file by file: the determinism check's input, builds and comparison.

Used by benchmarks/check_determinism.py and tests/test_determinism.py. ``write_dup_corpus`` writes a
near-duplicate-heavy corpus (English-like articles from ``shardforge.commands.synth.make_article``
with exact copies, near copies at word edit rates of 1-10 %, copies that add a paragraph and a shared
boilerplate footer, shuffled over several files so that the copies of a family land in different
files and bundles); ``build`` runs one build through the real CLI (``python -m pipelines.build``) in a
fresh process; ``compare`` lists every file that differs between two corpus folders, by stage, with
the first differing row of a Parquet or JSONL intermediate (the earliest stage that differs is where
to look).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

BOILERPLATE = ("Subscribe to our newsletter for the latest local news. "
               "Follow us on social media for daily updates from the region. "
               "All rights reserved by the publisher of this newspaper.")


def write_dup_corpus(folder: Path, megabytes: float, seed: int = 5, files: int = 4) -> int:
    """Write about ``megabytes`` of JSONL with duplicate families into ``files`` files; returns the records.

    Per family an original article and, at random, an exact copy, 1-3 near copies
    (``perturb`` at 1-10 %), a copy with an added paragraph, and (one in ten) the
    boilerplate footer; records are shuffled before they are dealt to the files.
    """
    from shardforge.commands.synth import make_article, perturb

    rng = random.Random(seed)
    target = int(megabytes * 1_000_000)
    texts: list[str] = []
    size = 0
    while size < target:
        base = make_article(rng, rng.randint(12, 32), story=rng.random() < 0.2)
        if rng.random() < 0.1:
            base += "\n\n" + BOILERPLATE
        family = [base]
        if rng.random() < 0.3:
            family.append(base)
        family += [perturb(base, rng, rng.choice((0.01, 0.02, 0.05, 0.1))) for _ in range(rng.choice((0, 1, 1, 2, 3)))]
        if rng.random() < 0.2:
            family.append(base + "\n\n" + make_article(rng, 4))
        texts += family
        size += sum(len(t) for t in family)
    rng.shuffle(texts)
    folder.mkdir(parents=True, exist_ok=True)
    outs = [open(folder / f"part-{i:03d}.jsonl", "w", encoding="utf-8") for i in range(files)]
    try:
        for i, text in enumerate(texts):
            outs[i % files].write(json.dumps({"text": text, "url": f"https://example.org/{i}"}) + "\n")
    finally:
        for f in outs:
            f.close()
    return len(texts)


def build_config(raw: Path, spans: bool) -> dict[str, Any]:
    """The build config of the check (JSON for ``pipelines.jobs.build --config``)."""
    return {
        "sources": [{"name": "web", "input": str(raw / "*.jsonl")}],
        # Template text repeats its 5-10-grams across sentences far more than prose (bench_scaling.py).
        "clean": {"disabled_rules": ["dup_ngrams"]},
        "dedupe": {"near": True, "exact": True, "repeated_spans": spans},
        "tokenizer": {"vocab_size": 4000},
        "packing": {"max_seq_len": 512},
    }


def files_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under root, by relative path (the reports' images included; not the
    stage timings, which measure the run)."""
    from pipelines.report.record import RUN_DEPENDENT_FILES

    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            if n in RUN_DEPENDENT_FILES:
                continue
            p = Path(dirpath) / n
            out[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return dict(sorted(out.items()))


def stage_of(path: str) -> str:
    """Which stage a corpus file comes from (by its folder or name)."""
    for part, stage in (("/clean/", "clean"), ("/dedupe/", "dedupe index"), ("/rejects/", "rejects (duplicates)"),
                        ("/tokenizer/", "tokenizer"), ("/tokenized/", "tokenized")):
        if part in f"/{path}":
            return stage
    if path.endswith(".tar"):
        return "shards"
    return "manifest" if path == "manifest.json" else "report"


def first_row_difference(a: Path, b: Path) -> str:
    """The first row at which two Parquet or JSONL files differ, as one line (or why not)."""
    if a.suffix == ".parquet":
        import pyarrow.parquet as pq

        ta, tb = pq.read_table(a).to_pylist(), pq.read_table(b).to_pylist()
    elif a.suffix == ".jsonl":
        ta, tb = a.read_text().splitlines(), b.read_text().splitlines()
    else:
        return f"{a.stat().st_size} vs {b.stat().st_size} bytes"
    for i, (ra, rb) in enumerate(zip(ta, tb, strict=False)):
        if ra != rb:
            keys = [k for k in ra if ra[k] != rb.get(k)] if isinstance(ra, dict) else []
            who = ra.get("doc_id", "") if isinstance(ra, dict) else str(ra)[:120]
            return f"row {i} ({who}) differs{' in ' + ', '.join(keys) if keys else ''}"
    return f"{len(ta)} vs {len(tb)} rows"


def compare(a: Path, b: Path) -> list[str]:
    """Lines describing every difference between two corpus folders (empty: byte-identical)."""
    da, db = files_digest(a), files_digest(b)
    lines = [f"only in one build: {name}" for name in sorted(set(da) ^ set(db))]
    for name in sorted(set(da) & set(db)):
        if da[name] != db[name]:
            lines.append(f"[{stage_of(name)}] {name}: {first_row_difference(a / name, b / name)}")
    return lines


def build(config: Path, output: Path, beam_args: list[str]) -> dict[str, Any]:
    """One build through the CLI in a fresh process; its summary line (JSON)."""
    res = subprocess.run([sys.executable, "-m", "pipelines.build", "--config", str(config), "--output", str(output),
                          "--json", *beam_args], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if res.returncode != 0:
        raise SystemExit(f"build failed ({' '.join(beam_args) or 'in-process'}):\n{res.stderr[-3000:]}")
    out = res.stdout
    return json.loads(out[out.rindex("\n{") + 1 if "\n{" in out else out.index("{"):])  # the summary: the last JSON
