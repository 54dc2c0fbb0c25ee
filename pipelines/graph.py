"""The build graph: raw text -> clean -> [decontaminate] -> dedupe -> sentences -> tokenizer -> tokenize -> pack -> shards.

Only wiring: every step is a named composite transform from the module that owns the stage.
The drivers (``pipelines.jobs.build`` one-shot, ``pipelines.jobs.ingest`` one batch of a versioned corpus,
which ``pipelines.jobs.batched`` and ``pipelines.jobs.serve`` run, ``deploy/dataflow/main.py``) construct it
with ``build_pipeline``; this module imports no driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam

from pipelines.corpus.shards import WriteCorpus
from pipelines.dedupe import Deduplicate
from pipelines.intermediates import (
    CLEAN_DIR,
    DEDUPE_INDEX_DIR,
    REJECTS_DIR,
    TOKENIZED_DIR,
    WriteClean,
    WriteRejectLog,
)
from pipelines.options import RunnerPlan
from pipelines.pack.step import TokenGroups
from pipelines.report.accounting import Account
from pipelines.report.writer import WriteReport
from pipelines.sources import ReadSources
from pipelines.stages import CleanDocuments, DropEmpty, SplitSentences, decontaminate, tokenizer_model
from pipelines.tokenizer.encode import Tokenize
from schemas.config import BuildConfig
from schemas.naming import BATCH_MANIFEST_NAME, work_dir
from shardforge.storage import join


@dataclass(frozen=True)
class AppendTo:
    """Append this build's shards to an existing corpus (incremental ingest, ``pipelines.jobs.ingest``).

    Shards go to ``corpus`` (not to the build's output folder) under names that
    continue each split's index from ``shard_offsets``; every sample key starts
    with ``key_prefix``. The build's own manifest, listing only the new shards
    (names relative to ``corpus``), is written as ``batch-manifest.json`` in the
    output folder: the ingest driver merges it into the next corpus version.
    """

    corpus: str
    shard_offsets: dict[str, int] = field(default_factory=dict)
    key_prefix: str = ""
    tag: str = ""  # the attempt tag every shard name carries (pipelines.corpus.commit)


def build_pipeline(p: beam.Pipeline, cfg: BuildConfig, output: str, *,
                   files: dict[str, list[str]] | None = None, append: AppendTo | None = None,
                   tag: str | None = None, plan: RunnerPlan | None = None,
                   expect: dict[str, dict[str, str]] | None = None) -> None:
    """Add the whole build to pipeline p.

    files: read exactly these URLs per source name instead of each source's glob.
    append: write the shards into an existing corpus (see AppendTo); ``output`` is
    then the batch's own folder and the ingest driver commits.
    tag: the attempt tag of a one-shot build (default: ``pipelines.corpus.commit.one_shot_attempt(...).tag``). Shards
    carry it; everything else goes under ``output/versions/{tag}/``; the manifest
    is committed by a conditional create (docs/architecture.md, "Commit protocol").
    plan: the choices that depend on the runner (``RunnerPlan.of(options)``; default: one in-process worker).
    expect: per source, URL -> the content fingerprint the tag was made from (``Attempt.fingerprints``):
    the reader checks the bytes it reads against it, so a changed input fails the build.
    """
    plan = plan or RunnerPlan.in_process()
    root = output
    if append is None:
        if tag is None:
            from pipelines.corpus.commit import one_shot_attempt

            attempt = one_shot_attempt(cfg, files)
            tag, expect = attempt.tag, attempt.fingerprints
        output = join(root, work_dir(tag))
    else:
        tag = append.tag

    read = p | "ReadSources" >> ReadSources(cfg.sources, files, expect)
    documents = read.documents
    if plan.spread_documents:  # one big file would otherwise clean and sketch on one worker
        documents = documents | "SpreadDocuments" >> beam.Reshuffle()
    cleaned = documents | "Clean" >> CleanDocuments(cfg.clean, cfg.sources)
    clean_docs, decontaminated, decontamination = decontaminate(cleaned.documents, cfg.decontaminate)
    rejects = (read.rejects, cleaned.rejects, *decontaminated) | "AllRejects" >> beam.Flatten()
    dedupe = clean_docs | "Dedupe" >> Deduplicate(  # the local runner: verdicts and components unshuffled
        cfg.dedupe, index_in=cfg.dedupe.index, index_out=join(output, DEDUPE_INDEX_DIR),
        index_root=append.corpus if append is not None else root, one_machine=plan.one_machine)
    kept, duplicates = dedupe["kept"], dedupe["duplicates"]

    reject_log = (rejects, duplicates) | "RejectLog" >> beam.Flatten()

    sentenced = kept | "SplitSentences" >> SplitSentences()
    model, tokenizer_path, training = tokenizer_model(p, sentenced, cfg, output, make_room=plan.make_room,
                                                      lost=reject_log)
    tokenize = Tokenize(model, cfg.tokenizer.encode_batch, cfg.tokenizer.encode_threads)
    tokenized_all = sentenced | "Tokenize" >> tokenize
    tokenized = tokenized_all | "HasTokens" >> DropEmpty()

    # Accounting starts at the reader: the records it read per file (counted before parsing).
    accounts = read.read_counts | "Account" >> Account(rejects, duplicates, tokenized_all)
    groups = tokenized | "Groups" >> TokenGroups(cfg)

    written = [reject_log | "WriteRejects" >> WriteRejectLog(join(output, REJECTS_DIR), origins=read.origins)]
    intermediates: dict[str, str] = {"rejects": REJECTS_DIR, "dedupe_index": DEDUPE_INDEX_DIR}
    tokenized_dir = None
    if cfg.write_intermediates:
        # The clean parts here; the tokenized ones by the packing step, one per packing group.
        written.append(kept | "WriteIntermediates" >> WriteClean(output, sized_by=cleaned.documents))
        tokenized_dir = join(output, TOKENIZED_DIR)
        intermediates.update(clean=CLEAN_DIR, tokenized=TOKENIZED_DIR)

    append_args: dict[str, Any] = {}
    if append is not None:
        append_args = {"shard_root": append.corpus, "shard_offsets": append.shard_offsets,
                       "key_prefix": append.key_prefix, "manifest_name": BATCH_MANIFEST_NAME, "commit": False}
    else:  # the manifest at the root names the attempt's objects relative to the root
        # (a reused tokenizer is copied into the attempt folder like a trained one: the path rule)
        intermediates = {k: f"{work_dir(tag)}/{v}" for k, v in intermediates.items()}
        tokenizer_path = f"{work_dir(tag)}/{tokenizer_path}"
    corpus = WriteCorpus(
        cfg, root if append is None else output, model=model, accounts=accounts, groups=groups,
        tokenizer_path=tokenizer_path, intermediates=intermediates, after=written, tag=tag,
        tokenized_dir=tokenized_dir, **append_args)
    manifest = tokenized | "WriteCorpus" >> corpus
    # The report (report.html / report.json) comes right after the manifest commits.
    _ = manifest | "Report" >> WriteReport(root if append is None else output, before=cleaned.raw_words, after=kept,
                                           reject_log=reject_log, duplicates=duplicates, token_counts=tokenize.counts,
                                           plans=corpus.plans, training=training, pii=cleaned.pii,
                                           decontamination=decontamination)
