"""Continuous ingest: append batches of new raw files to a versioned corpus (design: docs/serve.md).

A served corpus is a chain of immutable manifest versions under one root::

    latest                    "manifest-v3.json": the pointer readers follow
    manifest.json             a copy of the latest version (every existing reader works)
    manifest-v1.json …        version N lists ALL shards up to N; parent = "manifest-v{N-1}.json"
    train-000000.tar …        shards of every version, names continue per split
    versions/v{N}/            version N's batch: dedupe index (of everything up to N),
                              rejects, intermediates, report, batch-manifest.json
    ingest/serve.json         what is watched (glob, source), for `shardforge status`
    ingest/ledger/v{N}.jsonl  files absorbed by version N, with timings (derived, repairable)

Commit protocol of version N (docs/serve.md; any number of writers, one wins):

1. the attempt's tag ``v{N}-{hash}`` (``pipelines.corpus.commit``) is a hash of the batch's
   config, its files (URL, size, fingerprint), the parent manifest and N; run the
   batch build (``pipelines.graph.build_pipeline`` with ``files=`` and ``append=``)
   writing shards as ``{split}-{index:06d}-{tag}.tar`` and everything else under
   ``versions/{tag}/``: names no other attempt can produce (an attempt that can
   produce them writes the same bytes);
2. after the pipeline has finished (index complete), conditionally create
   ``manifest-v{N}.json``: THE commit point. It names the input files it
   absorbed. A loser (another manifest is there) removes its own objects and
   fails with one line; one that finds its own bytes there has succeeded;
3. write ``ingest/ledger/v{N}.jsonl``, then ``latest``, then ``manifest.json``;
   remove dead attempts' objects and stale temporaries.

A crash before 2 leaves only unreferenced objects (reused by a rerun with the same
tag, removed once another attempt commits version N); a crash after 2 is repaired
by ``recover`` from the manifest chain, which is the source of truth for what was
absorbed. So every file is absorbed by exactly one committed version.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from pipelines.report.record import REPORT_HTML
from pipelines.sources.rawfiles import RawFile, fingerprint, list_raw_files
from schemas.config import BuildConfig, SourceConfig
from schemas.errors import UserError
from schemas.manifest import (
    LATEST_NAME,
    MANIFEST_NAME,
    InputFile,
    Manifest,
    SourceAccount,
    SplitTotals,
    parse_manifest,
)
from schemas.naming import (
    BATCH_MANIFEST_NAME,
    INGEST_DIR,
    SHARD_NAME_RE,
    VERSIONS_DIR,
    version_key_prefix,
    version_manifest_name,
    work_dir,
)
from shardforge.storage import (
    absolute,
    exists,
    join,
    read_text,
    redact_url,
    write_text_atomic,
)
from shardforge.storage.contract import committed_versions, load_version, read_latest_pointer

if TYPE_CHECKING:  # Beam loads only when a batch runs
    from pipelines.report.timings import RunTimings

log = logging.getLogger("shardforge.ingest")

LEDGER_DIR = f"{INGEST_DIR}/ledger"
SERVE_STATE = f"{INGEST_DIR}/serve.json"


# ------------------------------------------------------------------ ledger


@dataclass
class LedgerEntry:
    """A file absorbed by a committed version, with the timings status reports.

    landed_at: the file's mtime (when the store says); seen_at: first listed by
    the driver; committed_at: the version's commit. None where unknown (entries
    repaired from a manifest lack the driver's timings).
    """

    path: str
    source: str
    size: int
    fingerprint: str
    version: int
    mtime: float | None = None
    landed_at: float | None = None
    seen_at: float | None = None
    committed_at: float | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def ledger_url(root: str, n: int) -> str:
    return join(root, LEDGER_DIR, f"v{n}.jsonl")


def read_ledger(root: str, versions: Sequence[int]) -> dict[str, LedgerEntry]:
    """path -> entry over the given versions' ledger files (missing files are skipped)."""
    out: dict[str, LedgerEntry] = {}
    for n in versions:
        try:
            text = read_text(ledger_url(root, n))
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            if line.strip():
                e = LedgerEntry(**json.loads(line))
                out[e.path] = e
    return out


def write_ledger(root: str, n: int, entries: Sequence[LedgerEntry]) -> None:
    write_text_atomic(ledger_url(root, n), "".join(e.to_json() + "\n" for e in entries))


# ------------------------------------------------------------------ the version chain


@dataclass
class CorpusState:
    """What recover() found: the latest committed version and the files absorbed so far."""

    root: str
    versions: list[int]
    latest: Manifest | None
    ledger: dict[str, LedgerEntry] = field(default_factory=dict)
    repaired: list[str] = field(default_factory=list)

    @property
    def version(self) -> int:
        return self.versions[-1] if self.versions else 0


def _entries_from_manifest(m: Manifest, n: int, committed_at: float | None) -> list[LedgerEntry]:
    return [LedgerEntry(path=f.path, source=f.source, size=f.size, fingerprint=f.fingerprint, version=n,
                        committed_at=committed_at) for f in m.inputs]


def recover(root: str, clean_orphans: bool = True) -> CorpusState:
    """Bring the derived state in line with the committed manifest chain (idempotent).

    Repairs what a crash after a commit can leave behind: a missing or short
    ledger file, a stale ``latest`` or ``manifest.json`` (only ever moved forward:
    another writer may commit a newer version meanwhile). With clean_orphans,
    removes what can never be committed (``pipelines.corpus.commit.clean_after_commit``:
    dead attempts of versions up to the latest, stale temporaries), never an
    attempt at a later version (it may be another writer's, running now).
    A plain-build corpus (manifest.json, no versions) is adopted as version 1.
    A local root is made absolute: what a batch records of its own folder (its config's index and
    tokenizer paths) is then the same however ``--output`` was spelled, so an attempt cut short
    resumes under another spelling (an attempt never replaces an object with other bytes).
    """
    root = absolute(root)
    versions = committed_versions(root)
    repaired: list[str] = []
    if not versions and exists(join(root, MANIFEST_NAME)):
        text = read_text(join(root, MANIFEST_NAME))
        m = parse_manifest(text, join(root, MANIFEST_NAME))
        if m.version != 1 or m.parent is not None:
            raise UserError(f"{root}: manifest.json is version {m.version}; cannot adopt it as version 1")
        if not m.inputs:
            # The build's files count as absorbed by version 1 (as they are now): were they
            # ingested again, their doc_ids would equal the indexed ones.
            m = m.model_copy(update={"inputs": _adopted_inputs(m)})
        from pipelines.corpus.commit import commit_manifest

        commit_manifest(root, version_manifest_name(1), m.to_json(), "")
        versions = [1]
        repaired.append("adopted manifest.json as version 1")
    ledger: dict[str, LedgerEntry] = {}
    latest: Manifest | None = None
    for n in versions:
        m = load_version(root, n)
        if m.version != n:
            raise UserError(f"{version_manifest_name(n)} says version {m.version}")
        have = read_ledger(root, [n])
        if any(f.path not in have for f in m.inputs):
            entries = _entries_from_manifest(m, n, None)
            for e in entries:  # keep the timings we have
                old = have.get(e.path)
                if old is not None:
                    e.mtime, e.landed_at, e.seen_at, e.committed_at = old.mtime, old.landed_at, old.seen_at, old.committed_at
            write_ledger(root, n, entries)
            repaired.append(f"ledger v{n}")
            have = {e.path: e for e in entries}
        for path, e in have.items():
            if path in ledger:  # a file in two versions would break exactly-once: say so loudly
                raise UserError(f"{path} is absorbed by versions {ledger[path].version} and {n}")
            ledger[path] = e
        latest = m
    if versions:
        n = versions[-1]
        text = read_text(join(root, version_manifest_name(n)))
        pointer = read_latest_pointer(root)
        newer = pointer is not None and pointer > n and pointer in committed_versions(root)
        if pointer != n and not newer:
            write_text_atomic(join(root, LATEST_NAME), version_manifest_name(n) + "\n")
            repaired.append(f"latest -> v{n}")
        try:
            current = read_text(join(root, MANIFEST_NAME))
        except FileNotFoundError:
            current = None
        if current != text and not newer:
            write_text_atomic(join(root, MANIFEST_NAME), text)
            repaired.append(f"manifest.json = v{n}")
    if clean_orphans and latest is not None:
        from pipelines.corpus.commit import clean_after_commit

        repaired += [f"removed {r}" for r in clean_after_commit(root, latest.version, latest)]
    for r in repaired:
        log.warning("recover %s: %s", root, r)
    return CorpusState(root, versions, latest, ledger, repaired)


def _adopted_inputs(m: Manifest) -> list[InputFile]:
    """The files a plain build's sources match now (best effort: a source that cannot be listed is skipped)."""
    out: list[InputFile] = []
    for src in m.config.get("sources", []):
        try:
            files = list_raw_files(src["input"], bool(src.get("follow_links")))
        except Exception as e:  # noqa: BLE001 - a redacted or vanished input must not block adoption
            log.warning("adopting: cannot list source %s (%s): its files are not recorded", src.get("name"), e)
            continue
        out += [InputFile(path=redact_url(f.url), source=src["name"], size=f.size, fingerprint=fingerprint(f))
                for f in files]
    return out


# ------------------------------------------------------------------ one batch -> one version


def next_shard_offsets(m: Manifest | None) -> dict[str, int]:
    """First free shard index per split after the given version's shards."""
    out: dict[str, int] = {"train": 0, "valid": 0}
    for s in m.shards if m else []:
        match = SHARD_NAME_RE.match(s.name)
        if match:
            out[s.split] = max(out[s.split], int(match.group("index")) + 1)
        else:
            out[s.split] = max(out[s.split], len(m.shards_of(s.split)))  # type: ignore[union-attr]
    return out


def _is_url(path: str) -> bool:
    return "://" in path or path.startswith("/")


def batch_config(state: CorpusState, source: SourceConfig | Sequence[SourceConfig],
                 new_corpus_cfg: BuildConfig | None) -> BuildConfig:
    """The build config of the next batch: the corpus's own config, its tokenizer and index frozen.

    The first version takes ``new_corpus_cfg`` (and trains the tokenizer); later
    ones take the latest version's config, reuse its tokenizer file and
    deduplicate against its signature index.
    """
    if state.latest is None:
        if new_corpus_cfg is None:
            raise UserError(f"{state.root} has no corpus yet: give a build config for version 1")
        data = new_corpus_cfg.model_dump()
        tok = data["tokenizer"].get("model_url")
        if tok and not _is_url(tok):  # a relative local model: absolute, or later batches look in versions/v1/
            data["tokenizer"] = {**data["tokenizer"], "model_url": os.path.abspath(tok)}
    else:
        data = dict(state.latest.config)
        tok = state.latest.tokenizer.path
        data["tokenizer"] = {**data["tokenizer"], "model_url": tok if _is_url(tok) else join(state.root, tok)}
        index = state.latest.intermediates.get("dedupe_index")
        data["dedupe"] = {**data["dedupe"], "index": join(state.root, index) if index else None}
    # The batch's sources: their settings as recorded in the corpus if it has one of that name.
    known = {s["name"]: s for s in data.get("sources", [])}
    sources = [source] if isinstance(source, SourceConfig) else list(source)
    data["sources"] = [{**known.get(s.name, {}), **s.model_dump(exclude_unset=True), "input": s.input}
                       for s in sources]
    return BuildConfig.model_validate(data)


def _sum_accounts(a: SourceAccount, b: SourceAccount) -> SourceAccount:
    def add(x: dict[str, int], y: dict[str, int]) -> dict[str, int]:
        return {k: x.get(k, 0) + y.get(k, 0) for k in sorted(set(x) | set(y))}

    return SourceAccount(input=a.input + b.input, kept=a.kept + b.kept, filtered=add(a.filtered, b.filtered),
                         duplicate=add(a.duplicate, b.duplicate), rejected=add(a.rejected, b.rejected),
                         tokens=a.tokens + b.tokens)


def merge_version(parent: Manifest | None, batch: Manifest, n: int, inputs: list[InputFile],
                  tag: str = "") -> Manifest:
    """Version n = the parent's shards (unchanged, first) + the batch's new shards; totals summed.

    The batch's config is recorded as its manifest has it (its build names the corpus's own tokenizer and
    index relative to the corpus: ``pipelines.corpus.shards.assemble_manifest``), so a corpus's manifests
    do not depend on where it was built. tag: the attempt's tag; the batch's own objects are under
    ``versions/{tag}/``.
    """
    vdir = work_dir(tag) if tag else f"{VERSIONS_DIR}/v{n}"
    tokenizer = batch.tokenizer
    if parent is None:
        if not _is_url(tokenizer.path):  # trained by this batch, under its version folder
            tokenizer = tokenizer.model_copy(update={"path": f"{vdir}/{tokenizer.path}"})
    else:
        if batch.tokenizer.sha256 != parent.tokenizer.sha256:
            raise UserError("the batch was tokenized with another tokenizer than the corpus's")
        for f in ("packing_rule", "max_seq_len", "ids_dtype", "members"):
            if getattr(batch, f) != getattr(parent, f):
                raise UserError(f"batch {f} {getattr(batch, f)!r} differs from the corpus's {getattr(parent, f)!r}")
        tokenizer = parent.tokenizer
    old = list(parent.shards) if parent else []
    names = {s.name for s in old}
    new = sorted(batch.shards, key=lambda s: (s.split, s.name))
    clash = names & {s.name for s in new}
    if clash:
        raise UserError(f"new shards would overwrite committed ones: {sorted(clash)[:3]}")
    totals: dict[str, SplitTotals] = {k: v.model_copy() for k, v in (parent.totals if parent else {}).items()}
    for split, t in batch.totals.items():
        cur = totals.setdefault(split, SplitTotals())
        for f in ("shards", "samples", "tokens", "bytes", "documents"):
            setattr(cur, f, getattr(cur, f) + getattr(t, f))
    accounting = dict(parent.accounting) if parent else {}
    for src, acct in batch.accounting.items():
        accounting[src] = _sum_accounts(accounting[src], acct) if src in accounting else acct
    counters = dict(parent.counters) if parent else {}
    for k, v in batch.counters.items():
        counters[k] = counters.get(k, 0) + v
    intermediates = {k: f"{vdir}/{v}" for k, v in batch.intermediates.items()}
    return Manifest(
        version=n,
        parent=version_manifest_name(n - 1) if parent else None,
        config=batch.config,
        packing_rule=batch.packing_rule,
        max_seq_len=batch.max_seq_len,
        ids_dtype=batch.ids_dtype,
        members=batch.members,
        tokenizer=tokenizer,
        shards=old + new,
        totals=dict(sorted(totals.items())),
        accounting=dict(sorted(accounting.items())),
        counters=dict(sorted(counters.items())),
        intermediates=dict(sorted(intermediates.items())),
        inputs=inputs,
    )


def commit_version(root: str, m: Manifest, entries: Sequence[LedgerEntry], tag: str) -> None:
    """Commit version m.version: manifest-v{N} by a conditional create (the commit point), then ledger,
    latest, manifest.json, then cleanup. Raises ``pipelines.corpus.commit.LostCommit`` (after removing this
    attempt's objects) if another writer committed version N first."""
    from pipelines.corpus.commit import clean_after_commit, commit_manifest

    n = m.version
    text = m.to_json()
    commit_manifest(root, version_manifest_name(n), text, tag)
    now = time.time()
    for e in entries:
        e.committed_at = now
    write_ledger(root, n, entries)
    # The pointers are derived (recover repairs them): never move them back to an older version.
    if (read_latest_pointer(root) or 0) <= n:
        write_text_atomic(join(root, LATEST_NAME), version_manifest_name(n) + "\n")
        write_text_atomic(join(root, MANIFEST_NAME), text)
    clean_after_commit(root, n, m)


def batch_tag(state: CorpusState, n: int, cfg: BuildConfig, files: Sequence[tuple[str, str, int, str]]) -> str:
    """The attempt tag of version n: batch config, files (source, URL, size, fingerprint), parent manifest."""
    from pipelines.corpus.commit import config_identity, input_identity, tag_for

    parent = read_text(join(state.root, version_manifest_name(n - 1))) if state.latest is not None else None
    by_source: dict[str, list[tuple[str, int, str]]] = {}
    for src, url, size, fp in files:
        by_source.setdefault(src, []).append((url, size, fp))
    inputs = [[src, *i] for src in sorted(by_source) for i in input_identity(by_source[src])]
    extra = None
    if cfg.decontaminate.paths:  # the evaluation files' contents decide what is removed
        from pipelines.dedupe.evalsets import eval_identity

        extra = {"decontaminate": eval_identity(cfg.decontaminate)}
    return tag_for(n, config_identity(cfg.model_dump(mode="json"), state.root), inputs, parent, extra)


@dataclass
class BatchResult:
    version: int
    manifest: Manifest  # the version committed: its parent's shards and the batch's
    batch: Manifest  # the batch's own: its new shards and where its records went
    files: int
    new_shards: int
    seconds: float
    report: str  # the batch's report.html
    timings: RunTimings | None = None  # the batch pipeline's wall and seconds per stage (pipelines.report.timings)


def ingest_batch(state: CorpusState, files: Sequence[RawFile], source: SourceConfig,
                 new_corpus_cfg: BuildConfig | None = None, beam_args: Sequence[str] = (),
                 seen_at: dict[str, float] | None = None) -> BatchResult:
    """Absorb `files` (all of one source, none absorbed yet) as the next version; updates `state`."""
    return ingest_sources(state, [(source, files)], new_corpus_cfg, beam_args, seen_at)


def ingest_sources(state: CorpusState, batch_files: Sequence[tuple[SourceConfig, Sequence[RawFile]]],
                   new_corpus_cfg: BuildConfig | None = None, beam_args: Sequence[str] = (),
                   seen_at: dict[str, float] | None = None) -> BatchResult:
    """Absorb files of one or more sources (none absorbed yet) as the next version; updates `state`."""

    from pipelines.graph import AppendTo, build_pipeline
    from pipelines.options import BuildOptions, RunnerPlan, describe_runner, finalize_options, make_pipeline
    from pipelines.report.timings import BuildTimings, measure, write_timings

    t0 = time.monotonic()
    root = state.root
    files = [f for _, fs in batch_files for f in fs]
    source_of = {f.url: src.name for src, fs in batch_files for f in fs}
    already = [f.url for f in files if redact_url(f.url) in state.ledger]
    if already:
        raise UserError(f"already absorbed: {already[:3]}")
    n = state.version + 1
    cfg = batch_config(state, [src for src, _ in batch_files], new_corpus_cfg)
    prints = {f.url: fingerprint(f) for f in files}
    tag = batch_tag(state, n, cfg, [(source_of[f.url], f.url, f.size, prints[f.url]) for f in files])
    # The attempt's own folder: an earlier attempt with the same tag wrote the same bytes there,
    # so its leftovers are reused, never cleared (a concurrent identical attempt may be using them).
    work = join(root, work_dir(tag))
    opts = finalize_options(BuildOptions(list(beam_args)))
    runner = describe_runner(opts)  # before make_pipeline, which rewrites the running mode
    append = AppendTo(corpus=root, shard_offsets=next_shard_offsets(state.latest), key_prefix=version_key_prefix(n),
                      tag=tag)
    try:
        started = time.monotonic()
        with make_pipeline(opts) as p:
            build_pipeline(p, cfg, work, files={src.name: [f.url for f in fs] for src, fs in batch_files},
                           append=append, plan=RunnerPlan.of(opts),
                           expect={src.name: {f.url: prints[f.url] for f in fs} for src, fs in batch_files})
        run = measure(p.result, runner, time.monotonic() - started)
        batch_url = join(work, BATCH_MANIFEST_NAME)
        if not exists(batch_url):  # the batch's commit step found objects of this attempt removed
            raise UserError(f"batch {n}: nothing was committed: objects of this attempt were removed while it "
                            "wrote them (the warnings above name them). Run one writer per corpus; a rerun "
                            "starts again.")
        batch = parse_manifest(read_text(batch_url), batch_url)  # its objects are there (missing_objects)
    except Exception:
        # Another writer may have committed version n meanwhile (and removed this attempt's
        # objects as dead): then that is the reason to report.
        from pipelines.corpus.commit import raise_if_lost

        raise_if_lost(root, version_manifest_name(n), tag)
        raise
    inputs = [InputFile(path=redact_url(f.url), source=source_of[f.url], size=f.size, fingerprint=prints[f.url])
              for f in files]
    m = merge_version(state.latest, batch, n, inputs, tag)
    seen = seen_at or {}
    entries = [LedgerEntry(path=i.path, source=i.source, size=i.size, fingerprint=i.fingerprint, version=n,
                           mtime=f.mtime, landed_at=f.mtime, seen_at=seen.get(f.url))
               for i, f in zip(inputs, files, strict=True)]
    commit_version(root, m, entries, tag)
    state.versions.append(n)
    state.latest = m
    for e in entries:
        state.ledger[e.path] = e
    # Next to the batch's report, like a one-shot build's (run-dependent: outside the commit).
    write_timings(work, BuildTimings({"pipeline": run.wall}, [("", run)]))
    return BatchResult(n, m, batch, len(files), len(batch.shards), time.monotonic() - t0, join(work, REPORT_HTML),
                       run)


# ------------------------------------------------------------------ what changed


@dataclass
class Scan:
    """One look at the watched files against the ledger."""

    pending: list[RawFile]  # never absorbed
    changed: list[tuple[RawFile, LedgerEntry, str]]  # absorbed, then changed: (now, then, why)


def scan(pattern: str, ledger: dict[str, LedgerEntry], exclude: str | None = None,
         follow_links: bool = False) -> Scan:
    """Pending and changed files under the watch glob; `exclude` skips a prefix (the corpus itself).

    A changed file is detected by size or store checksum; on local disks
    (no checksum) a new mtime triggers a sha256 of the content.
    """
    pending: list[RawFile] = []
    changed: list[tuple[RawFile, LedgerEntry, str]] = []
    for f in list_raw_files(pattern, follow_links):
        if exclude and f.url.startswith(exclude.rstrip("/") + "/"):
            continue
        e = ledger.get(redact_url(f.url))
        if e is None:
            pending.append(f)
        elif f.size != e.size:
            changed.append((f, e, f"size {e.size} -> {f.size}"))
        elif f.checksum is not None:
            if f.checksum != e.fingerprint:
                changed.append((f, e, f"checksum {e.fingerprint} -> {f.checksum}"))
        elif e.mtime is None or (f.mtime is not None and f.mtime != e.mtime):
            fp = fingerprint(f)
            if fp != e.fingerprint:
                changed.append((f, e, f"content {e.fingerprint[:19]}… -> {fp[:19]}…"))
    return Scan(pending, changed)
