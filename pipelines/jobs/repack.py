"""Repack: a new corpus version from an existing corpus's tokenized intermediate.

    python -m pipelines.repack --tokenized out/corpus --output out/corpus-doc --rule doc_sentences
    shardforge repack --tokenized gs://corpus/v1 --output gs://corpus/v1-sop --rule sop --max_seq_len 256 \\
        --runner DataflowRunner --project P --region R --temp_location gs://tmp/beam

Reads the parent's ``tokenized/part-*.parquet`` (one element per file, read in
parallel), packs with the new rule through the same ``WriteCorpus`` transform
as the build, and commits a manifest whose ``parent`` names the parent's
manifest. Cleaning, dedupe, sentence splitting and tokenizing never run again:
the documents, their accounting and the tokenizer are the parent's. With the
parent's own packing settings the shards come out byte-identical to the
parent's, which is what makes the intermediate trustworthy.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.coders import TokenizedDocumentCoder  # noqa: F401  (registers the coder)
from pipelines.corpus.shards import WriteCorpus
from pipelines.flags import add_repack_flags, repack_parser, take_json
from pipelines.intermediates import TOKENIZED_SCHEMA
from pipelines.jobs.summary import repack_summary, repack_summary_text
from pipelines.localrunner import progress
from pipelines.options import (
    CachedViews,
    check_beam_args,
    finalize_options,
    handle_help,
    make_pipeline,
    quiet_beam,
)
from pipelines.pack.step import TokenGroups
from pipelines.records import TokenizedDocument, token_ids
from pipelines.tokenizer.model import load_model, stored_path
from schemas.config import BuildConfig
from schemas.configfile import parse_config
from schemas.errors import UserError
from schemas.manifest import MANIFEST_NAME, Manifest, SourceAccount, repack_origin
from schemas.naming import TAG_RE, VERSIONS_DIR, version_manifest_name
from shardforge.console.run import data_job_interrupted, run_cli
from shardforge.storage import (
    absolute,
    exists,
    expand_glob,
    join,
    open_read,
    sha256_bytes,
    write_bytes_atomic,
)
from shardforge.storage.contract import folder_kind, kinds_under, load_manifest, tokenizer_url

PART_GLOB = "part-*.parquet"
READ_BATCH_ROWS = 2048
_SCHEMA_KEY = b"shardforge.schema"


class RepackOptions(CachedViews, PipelineOptions):
    """Options of `python -m pipelines.repack` / `shardforge repack` (run with --help to list them)."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        add_repack_flags(parser)


# ------------------------------------------------------------------ the parent


@dataclass(frozen=True)
class Parent:
    """A parent corpus resolved for repacking."""

    manifest: Manifest
    manifest_url: str  # absolute URL of the parent's manifest.json
    root: str
    tokenized: str  # URL of its tokenized intermediate folder (the latest version's, for a versioned corpus)
    parts: tuple[str, ...]  # the Parquet part files
    model_url: str
    model: bytes




def _same(a: str, b: str) -> bool:
    return absolute(a).rstrip("/") == absolute(b).rstrip("/")


def _kept(m: Manifest) -> int:
    return sum(a.kept for a in m.accounting.values())


def _tokenized_folders(root: str, manifest: Manifest) -> list[tuple[str, bool]]:
    """The tokenized intermediate folder(s) of a corpus, each with whether its version kept a document: one
    for a plain build; for a versioned corpus (``pipelines.jobs.serve`` / ``--batch_mb``: version N lists the
    shards of versions 1..N) each version's. A version that kept none (every file a copy of earlier ones)
    wrote no part, so its folder may not exist."""
    chain = [manifest]
    while chain[-1].version > 1 and chain[-1].parent == version_manifest_name(chain[-1].version - 1):
        chain.append(load_manifest(join(root, chain[-1].parent))[0])
    folders, kept_before = [], 0
    for m in reversed(chain):
        rel = m.intermediates.get("tokenized")  # a plain relative name (the manifest path rule)
        origin = repack_origin(m)
        if origin is not None:
            # A repack's documents stay with the corpus it was repacked from; its manifest records that
            # corpus but a reader never opens what a manifest names outside the corpus (docs/storage.md).
            raise UserError(f"corpus {root} is a repack of {origin} and holds no tokenized intermediate of its "
                            f"own: repack {origin} instead (--tokenized {origin})")
        if not rel:
            raise UserError(f"corpus {root} (version {m.version}) has no tokenized intermediate (built with "
                            "write_intermediates: false?); rebuild it with intermediates to repack")
        folders.append((join(root, rel), _kept(m) > kept_before))  # the accounting counts versions 1..N
        kept_before = _kept(m)
    return folders


def resolve_parent(url: str) -> Parent:
    """Find the parent manifest, its tokenized parts and its tokenizer from any of the accepted URLs."""
    url = absolute(url.rstrip("/"))
    if url.endswith(".json") or exists(join(url, MANIFEST_NAME)):
        manifest, root = load_manifest(url)
        given_folder = None
    else:
        # The tokenized folder itself: its corpus is the folder above it, or above its
        # attempt folder (`ROOT/versions/{tag}/tokenized`, pipelines.corpus.commit).
        root = url.rsplit("/", 1)[0] or "/"
        parent_dir, tag = root.rsplit("/", 1) if "/" in root else ("", root)
        if TAG_RE.match(tag) and parent_dir.endswith(f"/{VERSIONS_DIR}"):
            root = parent_dir[: -len(VERSIONS_DIR) - 1] or "/"
        if not exists(join(root, MANIFEST_NAME)):
            if folder_kind(url) == "run":
                raise UserError(f"{url} is a training run folder, not a corpus: repack needs the parent corpus "
                                "(--tokenized CORPUS, the --data the run trained on)")
            raise UserError(f"no corpus manifest at {url} or at {root}: repack needs the parent corpus "
                            f"(its manifest names the tokenizer, the accounting and the config){kinds_under(url)}")
        manifest, root = load_manifest(root)
        given_folder = url
    folders = _tokenized_folders(root, manifest)
    tokenized = folders[-1][0]
    if given_folder is not None and not _same(given_folder, tokenized):
        raise UserError(f"{given_folder} is not the tokenized intermediate of {root} "
                        f"(its manifest names {tokenized})")
    parts: list[str] = []
    for folder, kept in folders:
        found = expand_glob(join(folder, PART_GLOB))
        if not found and kept:
            raise UserError(f"no {PART_GLOB} under {folder}: the tokenized intermediate is missing")
        parts += found
    parts = tuple(parts)
    model_url = tokenizer_url(manifest, root)
    model = load_model(model_url)
    if sha256_bytes(model) != manifest.tokenizer.sha256:
        raise UserError(f"tokenizer {model_url} does not match the parent manifest's sha256 "
                        f"({manifest.tokenizer.sha256[:12]}…): it changed after the build")
    return Parent(manifest, join(root, MANIFEST_NAME), root, tokenized, parts, model_url, model)


def repack_config(parent: Manifest, *, rule: str | None = None, max_seq_len: int | None = None,
                  short_seq_prob: float | None = None, seed: int | None = None,
                  valid_fraction: float | None = None, shard_bytes: int | None = None,
                  shard_samples: int | None = None, groups: int | None = None,
                  model_url: str | None = None) -> BuildConfig:
    """The parent's build config with new packing / shard / seed settings (None keeps the parent's).

    The tokenizer section records the reused model's URL, so the recorded config
    rebuilds this corpus from raw text too.
    """
    data = json.loads(json.dumps(parent.config))  # deep copy
    given: dict[str, str] = {}  # config key -> the flag that set it, for an error about its value
    packing = data.setdefault("packing", {})
    for key, value in (("rule", rule), ("max_seq_len", max_seq_len), ("short_seq_prob", short_seq_prob),
                       ("valid_fraction", valid_fraction), ("groups", groups)):
        if value is not None:
            packing[key] = value
            given[f"packing.{key}"] = f"--{key}"
    shards = data.setdefault("shards", {})
    if shard_bytes is not None:
        shards["target_bytes"] = shard_bytes
        given["shards.target_bytes"] = "--shard_bytes"
    if shard_samples is not None:
        shards["target_samples"] = shard_samples
        given["shards.target_samples"] = "--shard_samples"
    if seed is not None:
        data["seed"] = seed
        given["seed"] = "--seed"
    if model_url is not None:
        data.setdefault("tokenizer", {})["model_url"] = model_url
    return parse_config(BuildConfig, data, what="repack config", flags=given)


# ------------------------------------------------------------------ reading


def iter_tokenized(url: str, batch_rows: int = READ_BATCH_ROWS) -> Iterator[TokenizedDocument]:
    """Stream the documents of one tokenized part file, a record batch at a time.

    Token lists are sliced from the flat int32 column (no per-row Arrow
    conversion). Checks the schema tag and each row's num_tokens, so a foreign
    or damaged file fails loudly instead of packing garbage.
    """
    import pyarrow.parquet as pq

    with open_read(url) as f:
        pf = pq.ParquetFile(f)
        meta = pf.schema_arrow.metadata or {}
        want = TOKENIZED_SCHEMA.metadata[_SCHEMA_KEY]
        if meta.get(_SCHEMA_KEY) != want:
            raise UserError(f"{url} is not a shardforge tokenized intermediate "
                            f"(schema tag {meta.get(_SCHEMA_KEY)!r}, want {want!r})")
        for batch in pf.iter_batches(batch_size=batch_rows, columns=list(TOKENIZED_SCHEMA.names)):
            doc_ids = batch.column("doc_id").to_pylist()
            sources = batch.column("source").to_pylist()
            counts = batch.column("num_tokens").to_pylist()
            docs = batch.column("sentences")  # list<list<int32>>
            doc_off = docs.offsets.to_numpy()
            sents = docs.flatten()  # respects slicing
            sent_off = sents.offsets.to_numpy()
            tokens = sents.flatten().to_numpy(zero_copy_only=False).tolist()
            sent_off = (sent_off - sent_off[0]).tolist()
            doc_off = (doc_off - doc_off[0]).tolist()
            for i, doc_id in enumerate(doc_ids):
                a, b = doc_off[i], doc_off[i + 1]
                sentences = tuple(token_ids(tokens[sent_off[j]: sent_off[j + 1]]) for j in range(a, b))
                n = sent_off[b] - sent_off[a]
                if n != counts[i]:
                    raise UserError(f"{url}: document {doc_id} has {n} tokens but num_tokens={counts[i]}; "
                                    "the intermediate is damaged")
                yield TokenizedDocument(doc_id, sources[i], sentences, int(n))
            progress.tick("read tokenized documents", len(doc_ids), unit="doc")


class ReadTokenized(beam.PTransform):
    """Tokenized part-file URLs -> TokenizedDocuments, one element (and work item) per file."""

    def __init__(self, parts: Iterable[str]):
        super().__init__()
        self.parts = sorted(parts)

    def expand(self, pbegin):
        return (
            pbegin
            | "ListParts" >> beam.Create(self.parts)
            # Spread the files over workers: Create emits them all in one bundle.
            | "SpreadParts" >> beam.Reshuffle()
            | "ReadParts" >> beam.FlatMap(iter_tokenized).with_output_types(TokenizedDocument)  # compact coder
        )


def carry_accounts(counts: list[tuple[str, int]], parent: dict[str, SourceAccount]) -> dict[str, SourceAccount]:
    """The parent's accounting, after checking that the intermediate holds exactly its kept documents."""
    read = dict(counts)
    bad = [f"{s}: read {read.get(s, 0)}, parent kept {a.kept}" for s, a in parent.items() if read.get(s, 0) != a.kept]
    bad += [f"{s}: read {n}, not in the parent's accounting" for s, n in read.items() if s not in parent]
    if bad:
        raise UserError("the tokenized intermediate does not match the parent's accounting "
                        "(missing or extra part files?): " + "; ".join(sorted(bad)))
    return parent


# ------------------------------------------------------------------ the job


def repack_tag(parent: Parent, cfg: BuildConfig) -> str:
    """The attempt tag of a repack (pipelines.corpus.commit): its config and the parent manifest's bytes."""
    from pipelines.corpus.commit import tag_for
    from shardforge.storage import read_text

    return tag_for(1, cfg.model_dump(mode="json"), [], read_text(parent.manifest_url), {"repack": True})


def repack_pipeline(p: beam.Pipeline, parent: Parent, cfg: BuildConfig, output: str,
                    tag: str | None = None) -> None:
    """Add the repack to pipeline p: read the parent's intermediate, pack by cfg, write a corpus."""
    from schemas.naming import work_dir

    tag = tag or repack_tag(parent, cfg)
    docs = p | "ReadTokenized" >> ReadTokenized(parent.parts)

    counts = (
        docs
        | "DocSource" >> beam.Map(lambda d: d.source)
        | "CountDocs" >> beam.combiners.Count.PerElement()
        | "CountList" >> beam.combiners.ToList()
    )
    accounts = counts | "CarryAccounts" >> beam.Map(carry_accounts, dict(parent.manifest.accounting))
    carried = {k: v for k, v in parent.manifest.counters.items() if not k.startswith("pack_")}
    extra = counts | "RepackCounters" >> beam.Map(
        lambda c: {**carried, "repack_documents": sum(n for _, n in c), "repack_parts": len(parent.parts)})

    groups = docs | "Groups" >> TokenGroups(cfg)
    model = p | "ParentTokenizer" >> beam.Create([parent.model])
    # The parent's intermediates stay where they are and are not listed: a manifest names only files
    # inside its corpus (docs/storage.md); `parent` records where the documents came from.
    _ = docs | "WriteCorpus" >> WriteCorpus(
        cfg, output, model=model, accounts=accounts, groups=groups, parent=parent.manifest_url,
        tokenizer_path=f"{work_dir(tag)}/{stored_path(parent.model)}", intermediates={}, extra_counters=extra,
        tag=tag)


def run_repack(tokenized: str, output: str, *, copy_tokenizer: bool = True,
               beam_args: list[str] | None = None, **overrides: Any) -> Manifest:
    """Repack the corpus at `tokenized` into `output` and return the committed manifest.

    overrides: rule, max_seq_len, short_seq_prob, seed, valid_fraction,
    shard_bytes, shard_samples, groups (see repack_config).
    """
    if not copy_tokenizer:
        raise UserError("--tokenizer_ref is no longer supported: a manifest names only files inside its corpus "
                        "(docs/storage.md, manifest paths), so repack copies the parent's tokenizer; drop the flag")
    parent = resolve_parent(tokenized)
    output = absolute(output.rstrip("/"))
    if _same(output, parent.root) or _same(output, parent.tokenized):
        raise UserError(f"--output {output} is the parent corpus; write the new version elsewhere")
    cfg = repack_config(parent.manifest, model_url=parent.model_url, **overrides)
    from pipelines.corpus.commit import check_output, raise_if_lost
    from schemas.naming import work_dir

    opts = finalize_options(RepackOptions(beam_args or []))  # before any write: a runner that cannot run says so
    tag = repack_tag(parent, cfg)
    check_output(output, tag)
    # Written before the pipeline, under the attempt's folder; the manifest (written last) commits it.
    write_bytes_atomic(join(output, work_dir(tag), stored_path(parent.model)), parent.model, create=True)
    with progress.local_bars(opts), make_pipeline(opts) as p:
        repack_pipeline(p, parent, cfg, output, tag)
    raise_if_lost(output, MANIFEST_NAME, tag)  # another writer committed first: one line
    manifest, _ = load_manifest(output)
    return manifest


def main(argv: list[str] | None = None) -> int:
    """CLI entry (`shardforge repack`, `python -m pipelines.repack`); 2 with one line on user errors."""
    quiet_beam()
    argv = sys.argv[1:] if argv is None else argv
    parser = repack_parser()
    if handle_help(parser, argv):
        return 0

    committed: list[str] = []  # the output, once its version is committed (a Ctrl-C after that says so)

    def body() -> int:
        as_json, args = take_json(argv)  # the driver's own flag: Beam knows no --json
        check_beam_args(args)  # Beam would silently drop a flag no option knows
        o, beam_args = repack_parser(runner_flags=False).parse_known_args(args)  # the rest goes to Beam
        if not o.tokenized or not o.output:
            raise UserError("--tokenized URL (the parent corpus) and --output URL are required")
        manifest = run_repack(
            o.tokenized, o.output, copy_tokenizer=not o.tokenizer_ref, beam_args=beam_args,
            rule=o.rule, max_seq_len=o.max_seq_len, short_seq_prob=o.short_seq_prob, seed=o.seed,
            valid_fraction=o.valid_fraction, shard_bytes=o.shard_bytes, shard_samples=o.shard_samples,
            groups=o.groups)
        committed.append(o.output)
        print(json.dumps(repack_summary(manifest), indent=1) if as_json
              else repack_summary_text(manifest, o.output))
        return 0

    return run_cli(body, argv, interrupted=data_job_interrupted(committed))


__all__ = ["RepackOptions", "ReadTokenized", "Parent", "iter_tokenized", "repack_config", "repack_pipeline",
           "resolve_parent", "run_repack", "main"]

