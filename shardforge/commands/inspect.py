"""`shardforge inspect URL`: what is in a corpus.

    shardforge inspect gs://bucket/corpus                 # summary, 3 decoded samples, length histogram
    shardforge inspect out/corpus --samples 5 --split valid
    shardforge inspect out/corpus --json                  # the same as JSON

The summary comes from the manifest alone (splits, shards, samples, tokens,
packing rule, tokenizer); samples are decoded from the first shard(s) of the
split (token ids, and text through the corpus's own tokenizer), and
the length histogram covers up to --max-shards shards of the split.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from schemas.errors import UserError
from schemas.manifest import Manifest, manifest_summary
from schemas.sample import ShardFormatError, decode_sample, iter_tar_samples
from shardforge.console.args import ArgumentParser, at_least
from shardforge.console.run import run_cli
from shardforge.console.words import counted
from shardforge.storage import join, open_read, redact_url
from shardforge.storage.contract import load_manifest, open_tokenizer

BAR_WIDTH = 40

# What a pair sample's label says, by packing rule (pipelines/pack/rules.py; docs/packing.md).
NSP_LABELS = {0: "B is the text that follows A (is next)", 1: "B comes from another document (not next)"}
SOP_LABELS = {0: "A and B in their order in the document", 1: "A and B swapped"}
LABELS = {"segment_pair_nsp": ("next sentence prediction", NSP_LABELS),
          "sentence_pair_nsp": ("next sentence prediction", NSP_LABELS),
          "sop": ("sentence order prediction", SOP_LABELS)}


def label_meaning(rule: str, label: int) -> str | None:
    """What a pair sample's label means under the corpus's packing rule (None: the rule has no labels)."""
    task = LABELS.get(rule)
    return None if task is None else task[1].get(int(label))


def load_tokenizer(m: Manifest, root: str) -> tuple[Any | None, str | None]:
    """(tokenizer, None), or (None, why) when it cannot be opened (text then omitted).

    Opened exactly as the trainer opens it (shardforge.storage.contract.open_tokenizer).
    """
    try:
        return open_tokenizer(m, root), None
    except ImportError as e:
        return None, f"the tokenizer's library is not installed ({e})"
    except UserError as e:
        return None, str(e)


def length_histogram(lengths: list[int], max_len: int, bins: int = 8) -> list[dict[str, int]]:
    """Counts of lengths in `bins` equal-width bins over [1, max_len]."""
    edges = np.linspace(0, max_len, bins + 1).round().astype(int)
    counts, _ = np.histogram(np.asarray(lengths, dtype=np.int64), bins=edges)
    return [{"lo": int(edges[i]) + 1, "hi": int(edges[i + 1]), "count": int(c)} for i, c in enumerate(counts)]


def inspect_corpus(url: str, split: str = "train", samples: int = 3, max_shards: int = 4,
                   bins: int = 8, show_ids: int = 24) -> dict[str, Any]:
    """Summary, a few decoded samples and the token-length histogram of a corpus."""
    m, root = load_manifest(url)
    shards = m.shards_of(split)  # type: ignore[arg-type]
    if not shards and m.shards:
        raise UserError(f"split {split!r} has no shards (splits: {', '.join(sorted(m.totals))})")
    sp, tok_problem = load_tokenizer(m, root)
    decoded: list[dict[str, Any]] = []
    lengths: list[int] = []
    for info in shards[:max_shards]:
        with open_read(join(root, info.name)) as f:
            for key, members in iter_tar_samples(f, info.name):
                try:
                    s = decode_sample(key, members)
                except ShardFormatError as e:
                    raise ShardFormatError(f"{info.name}: {e} (shardforge validate lists every problem)") from None
                ids = s["input_ids"]
                lengths.append(len(ids))
                if len(decoded) < samples:
                    d: dict[str, Any] = {"key": key, "shard": info.name, "length": len(ids),
                                         "input_ids": [int(i) for i in ids[:show_ids]],
                                         "truncated_ids": len(ids) > show_ids}
                    if sp is not None:
                        d["text"] = sp.decode([int(i) for i in ids])
                    if "token_type_ids" in s:
                        d["segment_b_start"] = int(np.argmax(s["token_type_ids"])) if s["token_type_ids"].any() else None
                        if sp is not None and d["segment_b_start"]:  # a pair: each segment as its own text
                            b = d["segment_b_start"]
                            d["text_a"] = sp.decode([int(i) for i in ids[:b]])
                            d["text_b"] = sp.decode([int(i) for i in ids[b:]])
                    if "label" in s:
                        d["label"] = s["label"]
                        d["label_meaning"] = label_meaning(m.packing_rule, s["label"])
                    if "meta" in s:
                        d["meta"] = s["meta"]
                    decoded.append(d)
    return {
        "url": redact_url(url),
        "summary": manifest_summary(m),
        "split": split,
        "samples": decoded,
        "lengths": {
            "shards_read": min(len(shards), max_shards),
            "sequences": len(lengths),
            "mean": round(float(np.mean(lengths)), 2) if lengths else None,
            "max": max(lengths) if lengths else None,
            "histogram": length_histogram(lengths, m.max_seq_len, bins) if lengths else [],
        },
        "tokenizer_loaded": sp is not None,
        "tokenizer_problem": tok_problem,
    }


def render(r: dict[str, Any]) -> str:
    """The inspect result as readable text."""
    s = r["summary"]
    tok = s["tokenizer"]
    out = [
        f"corpus {r['url']}" + (f" (version {s['version']}: `shardforge status` lists its versions)"
                                if s.get("version", 1) > 1 else ""),
        f"  packing: {s['packing_rule']}, max_seq_len {s['max_seq_len']}, ids {s['ids_dtype']}, "
        f"members {', '.join(s['members'])}",
        f"  tokenizer: {tok['model_type']} vocab {tok['vocab_size']} ({tok['path']}, sha256 {tok['sha256'][:12]}…)",
        f"  documents: {s['documents']['input']:,} in, {s['documents']['kept']:,} kept",
        f"  total: {counted(s['shards'], 'shard')}, {counted(s['samples'], 'sample')}, {counted(s['tokens'], 'token')}, "
        f"{counted(s['bytes'], 'byte')}",
    ]
    out.append(f"    {'split':<6} {'shards':>6} {'samples':>10} {'tokens':>12} {'documents':>10}")
    for split, t in s["splits"].items():
        out.append(f"    {split:<6} {t['shards']:>6,} {t['samples']:>10,} {t['tokens']:>12,} {t['documents']:>10,}")
    out.append(f"\nsamples ({r['split']}):")
    task = LABELS.get(s["packing_rule"])
    if task is not None:
        out.append(f"  each sample is a pair <s> A </s> B </s> with a {task[0]} label: "
                   + "; ".join(f"{k} = {v}" for k, v in task[1].items()))
    for d in r["samples"]:
        ids = " ".join(map(str, d["input_ids"])) + (" …" if d["truncated_ids"] else "")
        label = f", label {d['label']} ({d['label_meaning']})" if d.get("label_meaning") else \
            (f", label {d['label']}" if "label" in d else "")
        out.append(f"  {d['key']} [{d['shard']}] {d['length']} tokens{label}")
        out.append(f"    ids:  {ids}")
        if "text_a" in d:  # a pair: where A ends and B begins is what its label is about
            for seg in ("a", "b"):
                text = d[f"text_{seg}"]
                out.append(f"    {seg.upper()}:    {text if len(text) <= 200 else text[:200] + ' …'}")
        elif "text" in d:
            text = d["text"] if len(d["text"]) <= 300 else d["text"][:300] + " …"
            out.append(f"    text: {text}")
    if not r["tokenizer_loaded"]:
        out.append(f"  (tokenizer not opened, text omitted: {r.get('tokenizer_problem')})")
    lens = r["lengths"]
    out.append(f"\nsequence lengths (tokens; {counted(lens['sequences'], 'sequence')} from "
               f"{counted(lens['shards_read'], 'shard')}, "
               f"mean {lens['mean']}, max {lens['max']}):")
    peak = max((b["count"] for b in lens["histogram"]), default=0) or 1
    for b in lens["histogram"]:
        bar = "#" * round(BAR_WIDTH * b["count"] / peak)
        out.append(f"  {b['lo']:>6}-{b['hi']:<6} {b['count']:>8,} {bar}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="shardforge inspect", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_last_positional("url", "--data", "--corpus", help="Corpus root or manifest URL (local folder, gs://, s3://, memory://).")
    p.add_argument("--split", default="train", choices=["train", "valid"], help="Split to sample (train).")
    p.add_argument("--samples", type=at_least(0), default=3, help="Decoded samples to show (3; 0: none).")
    p.add_argument("--max-shards", type=at_least(1), default=4, help="Shards read for the length histogram (4).")
    p.add_argument("--bins", type=at_least(1), default=8, help="Histogram bins (8).")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    args = p.parse_args(argv)
    r = inspect_corpus(args.url, split=args.split, samples=args.samples, max_shards=args.max_shards,
                       bins=args.bins)
    print(json.dumps(r, indent=1, ensure_ascii=False) if args.json else render(r))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
