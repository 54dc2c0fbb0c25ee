"""`shardforge status URL`: the versions, pending files and ingest lag of a served corpus; where a run stands.

    shardforge status out/corpus
    shardforge status gs://corpus/news --json
    shardforge status out/run

Per version: its parent, the files it absorbed, where their records went (in,
kept, duplicates, filtered, rejected), the tokens and shards it added, when it
was committed, how long its files waited (landed -> committed) and its report.
Then the files matching the watch glob (recorded by
`pipelines.jobs.serve`, or --watch) that no version absorbed yet (pending, with the
age of the oldest: the current ingest lag) and the files that changed after
they were absorbed (never re-ingested; listed here).

A corpus built once (one manifest.json) gets its manifest's summary. A training
run folder (metrics.jsonl, checkpoints/) gets where the run stands: its last
logged step, loss and evaluation, when it last logged, its checkpoints and the
step a rerun into it resumes from. Anything else is named in one line, with the
corpora and runs found directly under it.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import sys
import time
from typing import Any

from pipelines.corpus.commit import manifest_tag
from pipelines.jobs.ingest import SERVE_STATE, read_ledger, scan
from pipelines.report.record import REPORT_HTML
from schemas.errors import UserError
from schemas.manifest import LATEST_NAME, MANIFEST_NAME, Manifest, accounting_totals, manifest_summary
from schemas.naming import PLAN_NAME, work_dir
from schemas.run_folder import CKPT_DIR, METRICS_FILE
from shardforge.console.args import ArgumentParser
from shardforge.console.redact import redact_text
from shardforge.console.run import run_cli
from shardforge.console.words import counted
from shardforge.storage import exists, get_fs, info_mtime, join, list_names, read_text, redact_url
from shardforge.storage.contract import (
    committed_versions,
    folder_kind,
    kinds_under,
    load_manifest,
    load_version,
    read_latest_pointer,
)
from trainer.run_folder import list_checkpoints, read_records


def _sums(m: Manifest | None) -> dict[str, int]:
    if m is None:
        return {"documents": 0, "tokens": 0, "samples": 0, "shards": 0}
    return {k: sum(getattr(t, k) for t in m.totals.values()) for k in ("documents", "tokens", "samples", "shards")}


def records_added(m: Manifest, prev: Manifest | None) -> dict[str, int]:
    """Where the records version m absorbed went: records in, duplicates, filtered and rejected (m's accounting
    less its parent's)."""
    now, before = accounting_totals(m), accounting_totals(prev) if prev else {}
    return {out: now[key] - before.get(key, 0) for out, key in
            (("input", "input"), ("duplicates", "duplicate"), ("filtered", "filtered"), ("rejected", "rejected"))}


def version_report(root: str, m: Manifest) -> str | None:
    """The report.html of the batch that made version m (in its attempt's folder), where its tag is known; a
    build adopted as version 1 has its report at the corpus's root."""
    tag = manifest_tag(m)
    url = join(root, work_dir(tag), REPORT_HTML) if tag else None
    if m.version == 1 and (url is None or not exists(url)) and exists(join(root, REPORT_HTML)):
        url = join(root, REPORT_HTML)
    return redact_url(url) if url else None


def corpus_status(root: str, watch: str | None = None, now: float | None = None) -> dict[str, Any]:
    """Everything `shardforge status` prints, as a dict (no side effects: nothing is repaired)."""
    now = time.time() if now is None else now
    root = root.rstrip("/")
    if root.endswith(".pt"):
        raise UserError(not_a_corpus(root))
    versions = committed_versions(root)
    if not versions:
        if not exists(join(root, MANIFEST_NAME)):
            if folder_kind(root) == "run":
                return run_status(root, now)
            parent = posixpath.dirname(root)
            if posixpath.basename(root) == CKPT_DIR and parent and folder_kind(parent) == "run":
                return run_status(parent, now)  # the run's checkpoints/ folder: the run
            raise UserError(not_a_corpus(root))
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
            **records_added(m, prev),
            "committed_at": committed, "max_lag_s": max(lags, default=None),
            "mean_lag_s": (sum(lags) / len(lags)) if lags else None,
            "report": version_report(root, m),
        })
        prev = m
    try:
        state = json.loads(read_text(join(root, SERVE_STATE)))
    except FileNotFoundError:
        state = {}
    watch = watch or state.get("watch")
    batched = exists(join(root, PLAN_NAME))
    out: dict[str, Any] = {
        "corpus": root, "served": True, "batched": batched, "latest": read_latest_pointer(root),
        "latest_committed": versions[-1] if versions else None,
        # a batched build's index page (its totals, each batch's report), else the latest version's report
        "report": redact_url(join(root, REPORT_HTML)) if batched else rows[-1]["report"] if rows else None,
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


def not_a_corpus(root: str) -> str:
    """The one line for a URL that is neither a corpus nor a run: what it is, or what lies under it."""
    if root.endswith(".pt"):
        return (f"{root} is a checkpoint, not a corpus: `shardforge status RUN` reports its run (the folder that "
                f"holds {CKPT_DIR}/), `shardforge export {root} OUT` makes a Hugging Face folder of it")
    if not list_names(root) and not exists(root):
        return f"nothing at {root}: give a corpus root (its manifest.json or manifest-v*.json) or a run folder"
    if folder_kind(root) == "model":
        return (f"{root} is a Hugging Face model folder, not a corpus or a training run (`shardforge evaluate {root} "
                "--data CORPUS` measures it on a corpus)")
    return f"no corpus at {root} (no manifest-v*.json, no manifest.json) and no training run (no {METRICS_FILE}, " \
           f"no {CKPT_DIR}/){kinds_under(root)}"


def run_status(run: str, now: float) -> dict[str, Any]:
    """Where a training run stands, from its metrics.jsonl and its checkpoints' names (nothing is loaded)."""
    try:
        rows, torn = read_records(run)
    except FileNotFoundError:
        rows, torn = [], 0
    last_at = None
    if rows or torn:
        fs, path = get_fs(join(run, METRICS_FILE))
        last_at = info_mtime(fs.info(path))
    last = rows[-1] if rows else {}
    evals = [r for r in rows if "eval_loss" in r]
    planned = [r["total_steps"] for r in rows if isinstance(r.get("total_steps"), int)]
    ckpts = list_checkpoints(run)
    keys = ("step", "epoch", "tokens_seen", "loss", "mlm_loss", "loss_smooth", "mask_rate", "lr", "tokens_per_s", "mfu")
    return {
        "run": run, "kind": "run", "records": len(rows), "torn_lines": torn, "last_record_at": last_at,
        "last_record_age_s": None if last_at is None else max(0.0, now - last_at),
        "last": {k: last[k] for k in keys if k in last},
        "eval": {k: evals[-1][k] for k in ("step", "eval_loss", "eval_ppl", "eval_mlm_acc", "eval_sentence_acc")
                 if k in evals[-1]}
        if evals else None,
        "checkpoints": [{"step": step, "path": url} for step, url in ckpts],
        "resumes_from": ckpts[-1][0] if ckpts else 0,
        "total_steps": planned[-1] if planned else None,  # the newest process's plan (a run from before: None)
        "finished": bool(planned and ckpts and ckpts[-1][0] >= planned[-1]),
    }


def render_run(st: dict[str, Any]) -> str:
    """The report on a training run folder."""
    last, lines = st["last"], [f"run      {st['run']}  (a training run folder, not a corpus)"]
    if not st["records"]:
        lines.append(f"step     no step logged yet ({METRICS_FILE} " + ("holds none)" if st["torn_lines"] else "absent)"))
    else:
        step = f"{last['step']:,}" + (f" of {st['total_steps']:,}" if st["total_steps"] else "") \
            + (" (finished)" if st["finished"] else "")
        where = [step] + ([f"epoch {last['epoch']}"] if "epoch" in last else []) + \
            ([f"{last['tokens_seen']:,} tokens seen"] if "tokens_seen" in last else [])
        lines.append(f"step     {', '.join(where)}; last logged {_fmt_time(st['last_record_at'])} "
                     f"({_fmt_age(st['last_record_age_s'])} ago)")
        loss = [f"{last['loss']:.4f}"] + ([f"(MLM {last['mlm_loss']:.4f})"] if "mlm_loss" in last else []) \
            + ([f"(smoothed {last['loss_smooth']:.4f})"] if "loss_smooth" in last else []) \
            + ([f"at masking rate {last['mask_rate']:g}"] if "mask_rate" in last else [])
        rest = ([f"lr {last['lr']:.3g}"] if "lr" in last else []) + \
            ([f"{last['tokens_per_s']:,.0f} tokens/s"] if "tokens_per_s" in last else []) + \
            ([f"MFU {100 * last['mfu']:.1f}%"] if "mfu" in last else [])
        lines.append(f"loss     {' '.join(loss)}" + (f"; {', '.join(rest)}" if rest else ""))
    ev = st["eval"]
    if ev:
        extra = ([f"perplexity {ev['eval_ppl']:.2f}"] if "eval_ppl" in ev else []) + \
            ([f"MLM accuracy {100 * ev['eval_mlm_acc']:.1f}%"] if "eval_mlm_acc" in ev else []) + \
            ([f"sentence head accuracy {100 * ev['eval_sentence_acc']:.1f}%"] if "eval_sentence_acc" in ev else [])
        lines.append(f"eval     loss {ev['eval_loss']:.4f}" + (f" ({', '.join(extra)})" if extra else "")
                     + f" at step {ev['step']:,}")
    elif st["records"]:
        lines.append("eval     none logged yet")
    if st["torn_lines"]:
        lines.append(f"metrics  {counted(st['torn_lines'], 'line')} of {METRICS_FILE} {'holds' if st['torn_lines'] == 1 else 'hold'} no step record (torn by a killed "
                     "run): skipped")
    ck = st["checkpoints"]
    if ck:
        names = ", ".join(c["path"].rstrip("/").rsplit("/", 1)[-1] for c in ck)
        lines.append(f"checkpoints  {len(ck)} kept: {names}")
        redo = last.get("step", 0) - st["resumes_from"] if st["records"] else 0
        if st["finished"]:
            lines.append(f"resume   the run finished; a rerun into this folder with a larger --steps continues it "
                         f"from step {st['resumes_from']:,} (its learning-rate schedule then ends at the new --steps)")
        else:
            lines.append(f"resume   a rerun into this folder resumes from step {st['resumes_from']:,}"
                         + (f" (its last {counted(redo, 'logged step')} {'is' if redo == 1 else 'are'} trained again)"
                            if redo > 0 else ""))
    else:
        lines.append("checkpoints  none yet: a rerun into this folder starts at step 0")
    lines.append("(shardforge plot RUN draws its curves; shardforge export CHECKPOINT OUT makes a Hugging Face folder)")
    return "\n".join(lines)


def _fmt_age(s: float | None) -> str:
    if s is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.1f} {unit}"
    return f"{s:.0f} s"


def _fmt_time(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _fmt_s(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f}s"


def render_plain(st: dict[str, Any]) -> str:
    """The report on a corpus that is not served (one manifest.json, from a build or a repack)."""
    m, acc = st["manifest"], st["manifest"]["accounting"]
    lines = [f"corpus   {st['corpus']}",
             "not a served corpus: it has one manifest.json (a build or repack), no versions, pending files or "
             "ingest lag (those come from `shardforge serve`)",
             f"rule     {m['packing_rule']}, max_seq_len {m['max_seq_len']}; tokenizer {m['tokenizer']['path']} "
             f"(vocab {m['tokenizer']['vocab_size']})" + (f"; parent {m['parent']}" if m["parent"] else ""),
             f"input    {counted(acc['input'], 'document')}: {acc['kept']:,} kept, {acc['filtered']:,} filtered, "
             f"{acc['duplicate']:,} duplicate, {acc['rejected']:,} rejected"]
    for split, t in m["splits"].items():
        lines.append(f"{split:8} {counted(t['documents'], 'document')}, {counted(t['samples'], 'sample')}, "
                     f"{counted(t['tokens'], 'token')}, {counted(t['shards'], 'shard')}, {t['bytes']:,} bytes")
    lines.append("(shardforge inspect shows its samples; shardforge validate checks its shards)")
    return "\n".join(lines)


def render(st: dict[str, Any]) -> str:
    """The human-readable report."""
    if st.get("kind") == "run":
        return render_run(st)
    if not st.get("served", True):
        return render_plain(st)
    lines = [f"corpus   {st['corpus']}",
             f"latest   v{st['latest']}" + ("" if st["latest"] == st["latest_committed"]
                                            else f"  (v{st['latest_committed']} committed; {LATEST_NAME} not yet moved)"),
             f"totals   {st['totals']['documents']:,} documents, {st['totals']['tokens']:,} tokens, "
             f"{counted(st['totals']['shards'], 'shard')}; {counted(st['files_absorbed'], 'file')} absorbed", ""]
    lines.append(f"{'version':>7} {'files':>5} {'docs in':>8} {'kept':>7} {'dups':>5} {'filtered':>8} "
                 f"{'rejected':>8} {'tokens':>11} {'shards':>6}  {'committed':19}  {'max lag':>8}")
    for r in st["versions"]:
        lines.append(f"{'v' + str(r['version']):>7} {r['files']:>5,} {r['input']:>8,} {r['documents']:>7,} "
                     f"{r['duplicates']:>5,} {r['filtered']:>8,} {r['rejected']:>8,} {r['tokens']:>11,} "
                     f"{r['shards']:>6,}  {_fmt_time(r['committed_at']):19}  {_fmt_s(r['max_lag_s']):>8}")
    if st["batched"]:
        lines.append(f"report   {st['report']}  (the batched build's: its totals, and each batch's report)")
    elif st["report"]:
        lines.append(f"report   {st['report']}  (v{st['latest_committed']}'s: what it kept, filtered, deduplicated "
                     "and rejected, and why; each version's is in its versions/ folder)")
    lines.append("")
    if st["batched"] and not st["watch"]:
        lines.append("built in batches (--batch_mb): each batch is a version; max lag is from a file's mtime to "
                     "its batch's commit")
    elif not st["watch"]:
        lines.append("watch    (none recorded; pass --watch GLOB to list pending files)")
    else:
        lines.append(f"watch    {st['watch']}")
        lines.append(f"pending  {counted(len(st['pending']), 'file')}; oldest waiting {_fmt_s(st['oldest_pending_age_s'])}")
        lines += [f"  {p['path']}  ({p['size']:,} bytes)" for p in st["pending"][:20]]
        if len(st["pending"]) > 20:
            lines.append(f"  … {len(st['pending']) - 20} more")
        lines.append(f"changed  {counted(len(st['changed']), 'file')} changed after ingest (not re-ingested)")
        lines += [f"  {c['path']}  (absorbed by v{c['version']}; {c['why']})" for c in st["changed"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="shardforge status", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_last_positional("corpus", "--data", "--corpus", help="Corpus root URL (or a training run folder).")
    p.add_argument("--watch", default=None, help="Watch glob (default: the one recorded by serve).")
    p.add_argument("--json", action="store_true", help="Print JSON instead of the table.")
    args = p.parse_args(argv)
    st = corpus_status(args.corpus, args.watch)
    print(redact_text(json.dumps(st, indent=1, sort_keys=True) if args.json else render(st)))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
