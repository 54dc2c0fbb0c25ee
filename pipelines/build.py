"""The build job: raw text -> clean -> dedupe -> sentences -> tokenizer -> tokenize -> pack -> shards.

    python -m pipelines.build --input 'data/*.jsonl' --output out/corpus
    python -m pipelines.build --input ccnews=gs://raw/cc/*.jsonl.gz --output gs://corpus/v1 \\
        --runner DataflowRunner --project P --region R --temp_location gs://tmp/beam

This file only wires stages together; each stage lives in its own module.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import StandardOptions

from pipelines import progress
from pipelines.accounting import build_accounts, duplicate_outcome, reject_outcome
from pipelines.clean import CleanDocuments
from pipelines.corpus import WriteCorpus, count_groups
from pipelines.dedupe import Deduplicate
from pipelines.files import (
    PartCount,
    WriteParts,
    documents_to_parquet,
    rejects_to_jsonl,
    tokenized_to_parquet,
)
from pipelines.options import (
    LOCAL_RUNNER,
    BuildOptions,
    build_config_from_options,
    finalize_options,
    quiet_beam,
)
from pipelines.records import SentencedDocument
from pipelines.report import WriteReport
from pipelines.sentences import split_sentences
from pipelines.sources import ReadSource
from pipelines.tokenizer import MODEL_PATH, Tokenize, TrainTokenizer, load_model
from schemas.config import BuildConfig
from schemas.errors import UserError, run_cli
from schemas.intermediate import CLEAN_DIR, TOKENIZED_DIR
from schemas.manifest import MANIFEST_NAME, Manifest
from schemas.naming import work_dir
from schemas.storage import join

REJECTS_DIR = "rejects"
DEDUPE_INDEX_DIR = "dedupe/index"
# Records per reject-log part file: a part is written by one worker holding all of its records
# (~1.4 KB each while its JSONL is built, snippet included), so the part count grows with the
# rejects instead of being fixed: a worker holds ~140 MB, whatever the corpus size.
REJECTS_PER_PART = 100_000
BATCH_MANIFEST_NAME = "batch-manifest.json"


@dataclass(frozen=True)
class AppendTo:
    """Append this build's shards to an existing corpus (incremental ingest, ``pipelines.ingest``).

    Shards go to ``corpus`` (not to the build's output folder) under names that
    continue each split's index from ``shard_offsets``; every sample key starts
    with ``key_prefix``. The build's own manifest, listing only the new shards
    (names relative to ``corpus``), is written as ``batch-manifest.json`` in the
    output folder: the ingest driver merges it into the next corpus version.
    """

    corpus: str
    shard_offsets: dict[str, int] = field(default_factory=dict)
    key_prefix: str = ""
    tag: str = ""  # the attempt tag every shard name carries (pipelines.commit)


def to_sentences(doc) -> SentencedDocument:
    return SentencedDocument(doc.doc_id, doc.source, tuple(split_sentences(doc.text)))


def one_shot_tag(cfg: BuildConfig, files: dict[str, list[str]] | None = None) -> str:
    """The attempt tag of a one-shot build (version 1): config + every input file's size and fingerprint.

    Costs one listing per source, plus a sha256 of each local input file (object
    stores report a checksum in the listing), and of a tokenizer / index given by URL.
    """
    from pipelines.commit import input_identity, tag_for
    from pipelines.ingest import fingerprint, list_raw_files
    from schemas.storage import sha256_url

    def print_of(f) -> str:
        try:
            return fingerprint(f)
        except OSError:  # unreadable: the reader rejects it with a reason; its listing still identifies it
            return f"unreadable:{f.size}:{f.mtime}"

    inputs = []
    for src in cfg.sources:
        urls = None if files is None else set(files.get(src.name, []))
        listed = list_raw_files(src.input) if urls is None else [f for u in sorted(urls) for f in list_raw_files(u)]
        inputs += [(src.name, *i) for i in input_identity((f.url, f.size, print_of(f)) for f in listed)]
    extra: dict[str, Any] = {}
    if cfg.tokenizer.model_url:
        extra["tokenizer"] = sha256_url(cfg.tokenizer.model_url)[0]
    if cfg.dedupe.index:
        extra["index"] = sha256_url(join(cfg.dedupe.index, "index.json"))[0]
    return tag_for(1, cfg.model_dump(mode="json"), inputs, None, extra)


def build_pipeline(p: beam.Pipeline, cfg: BuildConfig, output: str, *,
                   files: dict[str, list[str]] | None = None, append: AppendTo | None = None,
                   tag: str | None = None) -> None:
    """Add the whole build to pipeline p.

    files: read exactly these URLs per source name instead of each source's glob.
    append: write the shards into an existing corpus (see AppendTo); ``output`` is
    then the batch's own folder and the ingest driver commits.
    tag: the attempt tag of a one-shot build (default: ``one_shot_tag``). Shards
    carry it; everything else goes under ``output/versions/{tag}/``; the manifest
    is committed by a conditional create (docs/architecture.md, "Commit protocol").
    """
    root = output
    if append is None:
        tag = tag or one_shot_tag(cfg, files)
        output = join(root, work_dir(tag))
    else:
        tag = append.tag
    docs_by_source, rejects_by_source = [], []
    for src in cfg.sources:
        reader = ReadSource(src, None if files is None else files.get(src.name, []))
        read = p | f"Read[{src.name}]" >> reader
        docs_by_source.append(read.documents)
        rejects_by_source.append(read.rejects)
    raw_docs = docs_by_source | "AllDocuments" >> beam.Flatten()
    read_rejects = rejects_by_source | "AllReadRejects" >> beam.Flatten()

    # Accounting starts at the reader: one input per record, good or bad.
    inputs = (
        (
            (raw_docs | "DocSource" >> beam.Map(lambda d: d.source)),
            (read_rejects | "RejectSource" >> beam.Map(lambda r: r.source)),
        )
        | "AllInputs" >> beam.Flatten()
        | "CountInputs" >> beam.combiners.Count.PerElement()
        | "InputList" >> beam.combiners.ToList()
    )

    cleaned = raw_docs | "Clean" >> CleanDocuments(cfg.clean, cfg.sources)
    rejects = (read_rejects, cleaned.rejects) | "AllRejects" >> beam.Flatten()

    dedupe = cleaned.documents | "Dedupe" >> Deduplicate(
        cfg.dedupe, index_in=cfg.dedupe.index, index_out=join(output, DEDUPE_INDEX_DIR),
        index_root=append.corpus if append is not None else root)
    kept, duplicates = dedupe["kept"], dedupe["duplicates"]

    sentenced = kept | "SplitSentences" >> beam.Map(to_sentences)
    if cfg.tokenizer.model_url:
        model = p | "ReuseTokenizer" >> beam.Create([load_model(cfg.tokenizer.model_url)])
        tokenizer_path = cfg.tokenizer.model_url
    else:
        model = sentenced | "TrainTokenizer" >> TrainTokenizer(cfg.tokenizer, cfg.seed, output)
        tokenizer_path = MODEL_PATH
    tokenized_all = sentenced | "Tokenize" >> Tokenize(model, cfg.tokenizer.encode_batch, cfg.tokenizer.encode_threads)
    tokenized = tokenized_all | "HasTokens" >> beam.Filter(lambda d: d.num_tokens > 0)

    outcomes = (
        (
            (rejects | "RejectOutcome" >> beam.Map(reject_outcome)),
            (duplicates | "DuplicateOutcome" >> beam.Map(duplicate_outcome)),
            (tokenized_all | "TokenOutcome" >> beam.Map(
                lambda d: (d.source, "kept", "") if d.num_tokens > 0 else (d.source, "filtered", "no_tokens"))),
        )
        | "AllOutcomes" >> beam.Flatten()
        | "CountOutcomes" >> beam.combiners.Count.PerElement()
        | "OutcomeList" >> beam.combiners.ToList()
    )
    accounts = inputs | "Accounts" >> beam.Map(build_accounts, beam.pvalue.AsSingleton(outcomes))

    groups = (
        tokenized
        | "Tokens" >> beam.Map(lambda d: d.num_tokens)
        | "TotalTokens" >> beam.CombineGlobally(sum)
        | "Groups" >> beam.Map(count_groups, cfg)
    )

    reject_log = (rejects, duplicates) | "RejectLog" >> beam.Flatten()
    reject_parts = reject_log | "RejectParts" >> PartCount(REJECTS_PER_PART)
    written = [
        reject_log | "WriteRejects" >> WriteParts(join(output, REJECTS_DIR), "jsonl", rejects_to_jsonl, reject_parts)
    ]
    intermediates: dict[str, str] = {"rejects": REJECTS_DIR, "dedupe_index": DEDUPE_INDEX_DIR}
    if cfg.write_intermediates:
        written.append(kept | "WriteClean" >> WriteParts(join(output, CLEAN_DIR), "parquet",
                                                          documents_to_parquet, groups))
        written.append(tokenized | "WriteTokenized" >> WriteParts(join(output, TOKENIZED_DIR), "parquet",
                                                                   tokenized_to_parquet, groups))
        intermediates.update(clean=CLEAN_DIR, tokenized=TOKENIZED_DIR)

    append_args: dict[str, Any] = {}
    if append is not None:
        append_args = {"shard_root": append.corpus, "shard_offsets": append.shard_offsets,
                       "key_prefix": append.key_prefix, "manifest_name": BATCH_MANIFEST_NAME, "commit": False}
    else:  # the manifest at the root names the attempt's objects relative to the root
        intermediates = {k: f"{work_dir(tag)}/{v}" for k, v in intermediates.items()}
        if not cfg.tokenizer.model_url:
            tokenizer_path = f"{work_dir(tag)}/{tokenizer_path}"
    manifest = tokenized | "WriteCorpus" >> WriteCorpus(
        cfg, root if append is None else output, model=model, accounts=accounts, groups=groups,
        tokenizer_path=tokenizer_path, intermediates=intermediates, after=written, tag=tag, **append_args)
    # The report (report.html / report.json) comes right after the manifest commits.
    _ = manifest | "Report" >> WriteReport(root if append is None else output, before=raw_docs, after=kept)


def run_build(cfg: BuildConfig, output: str, beam_args: list[str] | None = None,
              batch_mb: float | None = None) -> Manifest:
    """Run the build on the configured runner and return the committed manifest.

    batch_mb: build in batches of that much input (``pipelines.batched``).
    """
    from schemas.manifest import load_manifest

    if batch_mb is not None:
        from pipelines.batched import build_in_batches

        return build_in_batches(cfg, output, batch_mb, beam_args or [])
    tag = one_shot_tag(cfg)
    check_output(output, tag)
    from pipelines.commit import raise_if_lost

    opts = finalize_options(BuildOptions(beam_args or []))
    try:
        with progress.local_bars(opts), beam.Pipeline(options=opts) as p:
            build_pipeline(p, cfg, output, tag=tag)
    except Exception:
        raise_if_lost(output, MANIFEST_NAME, tag)  # another build committed meanwhile: that is the reason
        raise
    raise_if_lost(output, MANIFEST_NAME, tag)  # the commit step lost: say so (its objects are gone)
    manifest, _ = load_manifest(output)
    return manifest


def check_output(output: str, tag: str) -> None:
    """Refuse (one line) to build into a folder holding a committed corpus, unless it is this very build.

    A committed corpus is immutable: a build of other inputs or config must go
    elsewhere. The same build again (same tag) is an idempotent rerun: it rewrites
    the same bytes under the same names and finds the identical manifest.
    """
    from pipelines.commit import manifest_tag
    from schemas.manifest import parse_manifest
    from schemas.storage import exists, read_text, redact_url

    url = join(output, MANIFEST_NAME)
    if not exists(url):
        return
    try:
        committed = manifest_tag(parse_manifest(read_text(url), url))
    except (UserError, ValueError):
        committed = None
    if committed != tag:
        raise UserError(f"{redact_url(output)} already holds a committed corpus of other inputs or config "
                        f"({committed or 'untagged'}; this build is {tag}); a committed corpus is never "
                        "overwritten: choose another --output, or remove that folder first")


# A one-shot build on the local runner needs about this much RSS per input byte
# (benchmarks/results/scaling.md: 25-36 MB per MB); above the threshold, say so.
LOCAL_RSS_PER_INPUT_BYTE = 35
HINT_INPUT_BYTES = 256_000_000


def batching_hint(cfg: BuildConfig) -> str | None:
    """A warning for a one-shot local build of a big input, or None."""
    from pipelines.ingest import list_raw_files

    try:
        total = sum(f.size for src in cfg.sources for f in list_raw_files(src.input))
    except Exception:  # the build itself reports unreadable inputs properly
        return None
    if total < HINT_INPUT_BYTES:
        return None
    need_gb = total * LOCAL_RSS_PER_INPUT_BYTE / 1e9
    return (f"note: {total / 1e6:,.0f} MB of input; a one-shot build on the local runner needs about "
            f"{need_gb:,.0f} GB of RAM (Beam's FnApiRunner holds every stage's output). Pass --batch_mb 64 "
            "to build in batches with bounded memory (docs/scaling.md), or run on Dataflow.")


def summarize(m: Manifest) -> dict[str, Any]:
    acc = m.accounting
    return {
        "documents_in": sum(a.input for a in acc.values()),
        "kept": sum(a.kept for a in acc.values()),
        "filtered": sum(sum(a.filtered.values()) for a in acc.values()),
        "duplicates": sum(sum(a.duplicate.values()) for a in acc.values()),
        "rejected": sum(sum(a.rejected.values()) for a in acc.values()),
        "shards": len(m.shards),
        "samples": sum(t.samples for t in m.totals.values()),
        "tokens": sum(t.tokens for t in m.totals.values()),
    }


def main(argv: list[str] | None = None) -> int:
    quiet_beam()
    argv = sys.argv[1:] if argv is None else argv
    opts = BuildOptions(argv)
    parser = argparse.ArgumentParser(prog="python -m pipelines.build", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    BuildOptions._add_argparse_args(parser)
    if "-h" in argv or "--help" in argv:
        parser.print_help()
        print("\nAll standard Beam pipeline options (--runner, --project, --region, --temp_location, "
              "--sdk_container_image, --direct_num_workers, ...) are accepted too. Without --runner the "
              "job runs locally on Beam's FnApiRunner (nothing is downloaded).")
        return 0

    def body() -> int:
        o = opts.view_as(BuildOptions)
        if not o.output:
            raise UserError("--output URL is required")
        cfg = build_config_from_options(opts)
        _, beam_args = parser.parse_known_args(argv)
        if o.batch_mb is None and opts.view_as(StandardOptions).runner in (None, LOCAL_RUNNER):
            hint = batching_hint(cfg)
            if hint:
                print(hint, file=sys.stderr)
        summary = summarize(run_build(cfg, o.output, beam_args, batch_mb=o.batch_mb))
        summary["manifest"] = join(o.output, "manifest.json")
        summary["report"] = join(o.output, "report.html")
        print(json.dumps(summary, indent=1))
        return 0

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
