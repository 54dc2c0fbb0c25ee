"""Build a corpus in batches of bounded input size: bounded memory on one machine (design: docs/scaling.md).

    python -m pipelines.build --input 'raw/*.jsonl.gz' --output out/corpus --batch_mb 64

Beam's local FnApiRunner keeps every stage's whole output in memory (each
GroupByKey's input included), so a one-shot local build needs memory in
proportion to its input. With ``--batch_mb`` the build runs as a chain of
ordinary batch builds, each over at most that many MB of input files, each
appended to the corpus as the next version (the incremental-ingest machinery
of ``pipelines.jobs.ingest``, the same code ``pipelines.jobs.serve`` runs):

- batch 1 trains the tokenizer; every later batch reuses it;
- dedupe is global: each batch is deduplicated against the signature index of
  everything before it (exact and near), and only the index entries that can
  match the batch are read, so a batch costs its own size, not the corpus's;
- files go to batches in a fixed pseudo-random order (a hash of the URL), so
  batch 1 is a sample of all sources and dates for the tokenizer, not the
  alphabetically first files. A file is never split: one larger than
  ``--batch_mb`` is a batch of its own;
- the plan (which file in which batch) is written first
  (``ingest/batches.json``); a rerun with the same inputs and config resumes
  after the last committed batch, and a different plan is refused.

The result is a versioned corpus (``manifest.json`` lists every shard; the
trainer, ``inspect`` and ``validate`` read it like any other corpus). The same
input and config give byte-identical shards and manifests.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.jobs.ingest import (
    RawFile,
    ingest_sources,
    list_raw_files,
    recover,
)
from pipelines.jobs.summary import where_records_went
from pipelines.report.timings import TIMINGS_HTML, BuildTimings, RunTimings, timings_table, write_timings
from pipelines.sources.listing import check_one_source_each, check_some_readable, no_match
from schemas.config import BuildConfig, SourceConfig
from schemas.errors import UserError
from schemas.manifest import Manifest, accounting_totals, parse_manifest
from schemas.naming import BATCH_MANIFEST_NAME, PLAN_NAME, work_dir
from shardforge.console.words import counted
from shardforge.storage import (
    create_if_absent,
    exists,
    is_within,
    join,
    read_text,
    redact_url,
    write_text_atomic,
)
from shardforge.storage.contract import committed_versions

log = logging.getLogger("shardforge.batched")

PLAN_VERSION = 1


@dataclass(frozen=True)
class Batch:
    """The files of one batch, per source (sources in config order, files in plan order)."""

    files: tuple[tuple[str, tuple[RawFile, ...]], ...]  # (source name, files)

    @property
    def size(self) -> int:
        return sum(f.size for _, fs in self.files for f in fs)

    @property
    def count(self) -> int:
        return sum(len(fs) for _, fs in self.files)


def _order_key(url: str) -> str:
    return hashlib.sha256(redact_url(url).encode("utf-8")).hexdigest()


def plan_batches(listing: Sequence[tuple[str, Sequence[RawFile]]], batch_bytes: int) -> list[Batch]:
    """Cut the files of all sources into batches of at most ``batch_bytes`` (a bigger file goes alone).

    Files are taken in the order of a hash of their URL, which mixes sources
    and dates; within a batch each source's files keep that order.
    """
    if batch_bytes <= 0:
        raise UserError("--batch_mb must be positive")
    order = [s for s, _ in listing]
    tagged = sorted(((_order_key(f.url), f.url, name, f) for name, fs in listing for f in fs))
    batches: list[Batch] = []
    current: list[tuple[str, RawFile]] = []
    size = 0

    def close() -> None:
        if current:
            per = {name: tuple(f for n, f in current if n == name) for name in order}
            batches.append(Batch(tuple((n, fs) for n, fs in per.items() if fs)))

    for _, _, name, f in tagged:
        if current and size + f.size > batch_bytes:
            close()
            current, size = [], 0
        current.append((name, f))
        size += f.size
    close()
    return batches


def _plan_json(cfg: BuildConfig, batch_bytes: int, batches: Sequence[Batch]) -> str:
    config = cfg.model_dump(mode="json")
    for src in config.get("sources", []):
        src["input"] = redact_url(src["input"])
    plan = {
        "version": PLAN_VERSION,
        "batch_bytes": batch_bytes,
        "config": config,
        "batches": [{name: [{"path": redact_url(f.url), "size": f.size} for f in fs] for name, fs in b.files}
                    for b in batches],
    }
    return json.dumps(plan, indent=1, sort_keys=True) + "\n"


def _start_or_resume(output: str, plan: str, batches: Sequence[Batch]) -> int:
    """Number of batches already committed under `output` (0 for a fresh output); writes the plan."""
    url = join(output, PLAN_NAME)
    if exists(url):
        if read_text(url) != plan:
            raise UserError(f"{output} holds a batched build of other inputs or another config "
                            f"(see {PLAN_NAME}): remove it or choose another --output")
        done = len(committed_versions(output))
        if done > len(batches):
            raise UserError(f"{output} has {done} versions but its plan only {len(batches)} batches")
        return done
    if exists(join(output, "manifest.json")) or committed_versions(output):
        raise UserError(f"{output} already holds a corpus that was not built with --batch_mb: "
                        "remove it or choose another --output")
    if create_if_absent(url, plan.encode("utf-8")) == "taken":  # another batched build started at once
        raise UserError(f"{output}: another batched build of other inputs or config started into it "
                        f"(see {PLAN_NAME}): choose another --output")
    return 0


def _batch_rows(output: str, m: Manifest, timings: dict[int, float]) -> str:
    """One table row per batch: where its records went (its own batch manifest's accounting), a link to its
    report, and its seconds in this run."""
    from pipelines.corpus.commit import committed_tags

    tags = committed_tags(output)
    rows = []
    for n in range(1, m.version + 1):
        secs = f"{timings[n]:.1f}" if n in timings else ""
        folder = work_dir(tags[n]) if n in tags else f"versions/v{n}"
        url = join(output, folder, BATCH_MANIFEST_NAME)
        acc = accounting_totals(parse_manifest(read_text(url), url)) if exists(url) else {}
        counts = "".join(f"<td>{acc.get(k, '')}</td>" for k in ("input", "kept", "duplicate", "filtered", "rejected"))
        rows.append(f'<tr><td>v{n}</td>{counts}<td><a href="{folder}/report.html">report</a></td><td>{secs}</td></tr>')
    return "".join(rows)


def _write_index_page(output: str, m: Manifest, timings: dict[int, float], stage_timings: dict[str, Any]) -> None:
    """report.html at the root: corpus totals, why records were left out (by rule, over every batch), what
    to look at, each batch's counts and a link to its own report, and the seconds per stage summed over the
    batches this run built (``pipelines.report.timings``; this page is run-dependent)."""
    from pipelines.report.record import build_warnings, rule_counts
    from pipelines.report.summaries import ALL

    dumped = m.model_dump(mode="json")
    acc = "".join(
        f"<tr><td>{html.escape(s)}</td><td>{a.input}</td><td>{a.kept}</td><td>{sum(a.filtered.values())}</td>"
        f"<td>{sum(a.duplicate.values())}</td><td>{sum(a.rejected.values())}</td></tr>"
        for s, a in m.accounting.items())
    reasons = "".join(f'<tr><td style="text-align:left">{html.escape(rule)}</td><td>{n[ALL]}</td></tr>'
                      for rule, n in rule_counts(dumped).items())
    warnings = "".join(f"<li>{html.escape(w)}</li>" for w in build_warnings(dumped, redact_url(output)))
    totals = "".join(f"<tr><td>{html.escape(k)}</td><td>{t.shards}</td><td>{t.samples}</td><td>{t.tokens}</td></tr>"
                     for k, t in m.totals.items())
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>shardforge batched build</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 10px;text-align:right}}</style></head><body>
<h1>Batched build: {counted(m.version, 'batch', 'batches')}</h1>
{f"<h2>Look at</h2><ul>{warnings}</ul>" if warnings else ""}
<h2>Accounting</h2><table><tr><th>source</th><th>input</th><th>kept</th><th>filtered</th><th>duplicate</th>
<th>rejected</th></tr>{acc}</table>
<h2>Why records were left out</h2><p>Every batch's, by rule (the batches' reports show examples of each).</p>
<table><tr><th>bucket:rule</th><th>records</th></tr>{reasons}</table>
<h2>Splits</h2><table><tr><th>split</th><th>shards</th><th>samples</th><th>tokens</th></tr>{totals}</table>
<h2>Batches</h2><p>Each batch has its own report (cleaning, dedupe and length plots of that batch).</p>
<table><tr><th>version</th><th>input</th><th>kept</th><th>duplicate</th><th>filtered</th><th>rejected</th>
<th>report</th><th>seconds (this run)</th></tr>{_batch_rows(output, m, timings)}</table>
{timings_table(stage_timings)}
<p>The batches of this run, summed; each batch's own: <code>versions/&lt;tag&gt;/{TIMINGS_HTML}</code>.</p>
</body></html>
"""
    write_text_atomic(join(output, "report.html"), page)


def _run_isolated(output: str, batch_files: list[tuple[SourceConfig, tuple[RawFile, ...]]], cfg: BuildConfig,
                  beam_args: Sequence[str]) -> tuple[int, int, RunTimings | None, dict[str, int]]:
    """Run one batch in a spawned child; (version, new shards, its pipeline's timings, where its records
    went: ``accounting_totals`` of its manifest)."""
    import multiprocessing as mp

    from pipelines.jobs.batch_process import run_batch

    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    # The child leaves out the Beam integrations a local build never uses, then runs the batch.
    proc = ctx.Process(target=run_batch, args=(output, batch_files, cfg, list(beam_args), send),
                       name="shardforge-batch")
    proc.start()
    send.close()
    try:
        msg = recv.recv()
    except EOFError:
        msg = ("error", "the batch process died without a word (killed? out of memory?)")
    finally:
        proc.join()
    if msg[0] == "interrupted":  # a Ctrl-C that reached the batch process alone (the parent's own raises above)
        raise KeyboardInterrupt
    if msg[0] == "user":
        raise UserError(msg[1])
    if msg[0] != "ok":
        raise RuntimeError(f"batch failed (exit code {proc.exitcode}):\n{msg[1]}")
    return msg[1], msg[2], RunTimings.from_json(msg[3]) if msg[3] is not None else None, msg[4]


def build_in_batches(cfg: BuildConfig, output: str, batch_mb: float, beam_args: Sequence[str] = (),
                     max_batches: int | None = None, isolate: bool = True) -> Manifest:
    """Run the build as batches of at most ``batch_mb`` MB of input; returns the final manifest.

    ``max_batches``: stop after that many batches of this run (the rest is
    left for a rerun, which resumes). ``isolate``: run each batch in a fresh
    process (the default), so memory one batch leaves fragmented in the
    allocator is not carried into the next; False runs them in this process.
    """
    started = time.monotonic()
    batch_bytes = int(batch_mb * 1e6)
    sources: dict[str, SourceConfig] = {s.name: s for s in cfg.sources}
    listing = []
    for src in cfg.sources:
        # The corpus's own files never count as input (an output folder under the input glob).
        files = [f for f in list_raw_files(src.input, src.follow_links) if not is_within(f.url, output)]
        if not files:
            raise no_match(src.name, src.input)
        check_some_readable(src.name, src.input, [(f.url, f.skip) for f in files], src.follow_links)
        listing.append((src.name, files))
    check_one_source_each((name, [f.url for f in files]) for name, files in listing)
    batches = plan_batches(listing, batch_bytes)
    done = _start_or_resume(output, _plan_json(cfg, batch_bytes, batches), batches)
    state = recover(output)
    expected = {redact_url(f.url) for b in batches[:done] for _, fs in b.files for f in fs}
    if set(state.ledger) != expected:
        raise UserError(f"{output}: the committed versions did not absorb the files the plan says "
                        f"(expected {len(expected)}, found {len(state.ledger)}); remove it and rebuild")
    if done:
        print(f"resuming {output}: {done} of {len(batches)} batches committed", file=sys.stderr)
    timings: dict[int, float] = {}
    runs: list[tuple[str, RunTimings]] = []  # each batch pipeline's seconds per stage, summed in timings.json
    stop = len(batches) if max_batches is None else min(len(batches), done + max_batches)
    for i in range(done, stop):
        b = batches[i]
        batch_files = [(sources[name], fs) for name, fs in b.files]
        t0 = time.monotonic()
        if isolate:
            version, new_shards, run, records = _run_isolated(output, batch_files, cfg, beam_args)
        else:
            res = ingest_sources(state, batch_files, cfg, beam_args)
            version, new_shards, run, records = res.version, res.new_shards, res.timings, accounting_totals(res.batch)
        timings[version] = time.monotonic() - t0
        if run is not None:
            runs.append((f"v{version}", run))
        print(f"[batch {i + 1}/{len(batches)}] {counted(b.count, 'file')}, {b.size / 1e6:.3g} MB -> v{version}: "
              f"documents {where_records_went(records)}; +{counted(new_shards, 'shard')} in "
              f"{timings[version]:.1f} s", file=sys.stderr, flush=True)
    if isolate and stop > done:  # the batches committed in their own processes
        state = recover(output, clean_orphans=False)
    if state.latest is None:
        raise UserError(f"{output}: no batch was built")
    doc = write_timings(output, BuildTimings({"batched": time.monotonic() - started}, runs))
    _write_index_page(output, state.latest, timings, doc)
    return state.latest
