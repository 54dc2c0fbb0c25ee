"""`shardforge status URL`: the versions, pending files and ingest lag of a served corpus.

    shardforge status out/corpus
    shardforge status gs://corpus/news --json

Per version: its parent, the files it absorbed, the documents, tokens and
shards it added, when it was committed and how long its files waited (landed
-> committed). Then the files matching the watch glob (recorded by
`pipelines.jobs.serve`, or --watch) that no version absorbed yet (pending, with the
age of the oldest: the current ingest lag) and the files that changed after
they were absorbed (never re-ingested; listed here).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from pipelines.jobs.ingest import SERVE_STATE, read_ledger, scan
from schemas.errors import UserError
from schemas.manifest import LATEST_NAME, MANIFEST_NAME, Manifest, manifest_summary
from shardforge.console.args import ArgumentParser
from shardforge.console.redact import redact_text
from shardforge.console.run import run_cli
from shardforge.storage import exists, join, read_text
from shardforge.storage.contract import committed_versions, load_manifest, load_version, read_latest_pointer


def _sums(m: Manifest | None) -> dict[str, int]:
    if m is None:
        return {"documents": 0, "tokens": 0, "samples": 0, "shards": 0}
    return {k: sum(getattr(t, k) for t in m.totals.values()) for k in ("documents", "tokens", "samples", "shards")}


def corpus_status(root: str, watch: str | None = None, now: float | None = None) -> dict[str, Any]:
    """Everything `shardforge status` prints, as a dict (no side effects: nothing is repaired)."""
    now = time.time() if now is None else now
    root = root.rstrip("/")
    versions = committed_versions(root)
    if not versions:
        if not exists(join(root, MANIFEST_NAME)):
            raise UserError(f"no corpus at {root} (no manifest-v*.json, no manifest.json)")
        manifest, _ = load_manifest(root)
        return {"corpus": root, "served": False, "manifest": manifest_summary(manifest)}
    ledger = read_ledger(root, versions)
    rows: list[dict[str, Any]] = []
    prev: Manifest | None = None
    for n in versions:
        m = load_version(root, n)
        cur, before = _sums(m), _sums(prev)
        entries = [e for e in ledger.values() if e.version == n]
        committed = max((e.committed_at for e in entries if e.committed_at), default=None)
        lags = [e.committed_at - e.landed_at for e in entries if e.committed_at and e.landed_at]
        rows.append({
            "version": n, "parent": m.parent, "files": len(m.inputs),
            "documents": cur["documents"] - before["documents"], "tokens": cur["tokens"] - before["tokens"],
            "samples": cur["samples"] - before["samples"], "shards": cur["shards"] - before["shards"],
            "duplicates": sum(sum(a.duplicate.values()) for a in m.accounting.values())
            - (sum(sum(a.duplicate.values()) for a in prev.accounting.values()) if prev else 0),
            "committed_at": committed, "max_lag_s": max(lags, default=None),
            "mean_lag_s": (sum(lags) / len(lags)) if lags else None,
        })
        prev = m
    try:
        state = json.loads(read_text(join(root, SERVE_STATE)))
    except FileNotFoundError:
        state = {}
    watch = watch or state.get("watch")
    out: dict[str, Any] = {
        "corpus": root, "served": True, "latest": read_latest_pointer(root), "latest_committed": versions[-1] if versions else None,
        "versions": rows, "totals": _sums(prev), "files_absorbed": len(ledger), "watch": watch,
        "pending": [], "changed": [], "oldest_pending_age_s": None,
    }
    if watch:
        look = scan(watch, ledger, exclude=root)
        out["pending"] = [{"path": f.url, "size": f.size, "age_s": None if f.mtime is None else now - f.mtime}
                          for f in look.pending]
        out["changed"] = [{"path": f.url, "version": e.version, "why": why} for f, e, why in look.changed]
        ages = [p["age_s"] for p in out["pending"] if p["age_s"] is not None]
        out["oldest_pending_age_s"] = max(ages, default=None)
    return out


def _fmt_time(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _fmt_s(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f}s"


def render_plain(st: dict[str, Any]) -> str:
    """The report on a corpus that is not served (one manifest.json, from a build or a repack)."""
    m, acc = st["manifest"], st["manifest"]["accounting"]
    lines = [f"corpus   {st['corpus']}",
             "not a served corpus: it has one manifest.json (a build or repack), no versions, pending files or "
             "ingest lag (those come from `pipelines.jobs.serve`)",
             f"rule     {m['packing_rule']}, max_seq_len {m['max_seq_len']}; tokenizer {m['tokenizer']['path']} "
             f"(vocab {m['tokenizer']['vocab_size']})" + (f"; parent {m['parent']}" if m["parent"] else ""),
             f"input    {acc['input']} documents: {acc['kept']} kept, {acc['filtered']} filtered, "
             f"{acc['duplicate']} duplicate, {acc['rejected']} rejected"]
    for split, t in m["splits"].items():
        lines.append(f"{split:8} {t['documents']} documents, {t['samples']} samples, {t['tokens']} tokens, "
                     f"{t['shards']} shards, {t['bytes']} bytes")
    lines.append("(shardforge inspect shows its samples; shardforge validate checks its shards)")
    return "\n".join(lines)


def render(st: dict[str, Any]) -> str:
    """The human-readable report."""
    if not st.get("served", True):
        return render_plain(st)
    lines = [f"corpus   {st['corpus']}",
             f"latest   v{st['latest']}" + ("" if st["latest"] == st["latest_committed"]
                                            else f"  (v{st['latest_committed']} committed; {LATEST_NAME} not yet moved)"),
             f"totals   {st['totals']['documents']} documents, {st['totals']['tokens']} tokens, "
             f"{st['totals']['shards']} shards; {st['files_absorbed']} files absorbed", ""]
    lines.append(f"{'version':>7} {'files':>5} {'docs':>7} {'tokens':>10} {'shards':>6} {'dups':>5}  "
                 f"{'committed':19}  {'max lag':>8}")
    for r in st["versions"]:
        lines.append(f"{'v' + str(r['version']):>7} {r['files']:>5} {r['documents']:>7} {r['tokens']:>10} "
                     f"{r['shards']:>6} {r['duplicates']:>5}  {_fmt_time(r['committed_at']):19}  "
                     f"{_fmt_s(r['max_lag_s']):>8}")
    lines.append("")
    if not st["watch"]:
        lines.append("watch    (none recorded; pass --watch GLOB to list pending files)")
    else:
        lines.append(f"watch    {st['watch']}")
        lines.append(f"pending  {len(st['pending'])} file(s); oldest waiting {_fmt_s(st['oldest_pending_age_s'])}")
        lines += [f"  {p['path']}  ({p['size']} bytes)" for p in st["pending"][:20]]
        if len(st["pending"]) > 20:
            lines.append(f"  … {len(st['pending']) - 20} more")
        lines.append(f"changed  {len(st['changed'])} file(s) changed after ingest (not re-ingested)")
        lines += [f"  {c['path']}  (absorbed by v{c['version']}; {c['why']})" for c in st["changed"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="shardforge status", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", help="Corpus root URL.")
    p.add_argument("--watch", default=None, help="Watch glob (default: the one recorded by serve).")
    p.add_argument("--json", action="store_true", help="Print JSON instead of the table.")
    args = p.parse_args(argv)
    st = corpus_status(args.corpus, args.watch)
    print(redact_text(json.dumps(st, indent=1, sort_keys=True) if args.json else render(st)))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
