"""Packed groups -> WebDataset shards -> manifest: what a corpus is written as.

Shared by the full build and by repack. ``WriteCorpus`` runs the packing step
(``pipelines.pack.step``: groups of documents by a hash of their id, each packed once, cut
into shards by their exact encoded sizes and handed over as one compact blob,
``pipelines.pack.encoding.encode_packed``), then writes: shard names are global and
contiguous per split (`train-000000.tar` …); a tiny side input turns every group's shard
count into index offsets (``shard_offsets``), and the writer (``_WriteGroup``) streams
each shard to storage atomically. The manifest (``assemble_manifest``), written last, is
the commit marker of the corpus (``pipelines.corpus.commit``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.localrunner import progress
from pipelines.pack.encoding import decode_packed
from pipelines.pack.sequences import PackedSequence
from pipelines.pack.step import (
    PACKED,
    PLANS,
    TOKENIZED_PARTS,
    GroupForPacking,
    GroupKey,
    pack_groups,
    shard_offsets,
)
from pipelines.report.accounting import check_balanced
from pipelines.tokenizer.model import MODEL_PATH, tokenizer_info
from schemas.config import PAIR_RULES, BuildConfig
from schemas.manifest import MANIFEST_NAME, Manifest, ShardInfo, SourceAccount, SplitTotals
from schemas.naming import shard_name
from schemas.sample import (
    INPUT_IDS,
    LABEL,
    META,
    TOKEN_TYPE_IDS,
    encode_sample,
    ids_dtype,
    write_tar,
)
from schemas.tokenizer_files import load_tokenizer
from shardforge.console.words import counted
from shardforge.storage import (
    TemporaryRemoved,
    is_within,
    join,
    redact_url,
    relative_url,
    unless_swept,
    write_stream_atomic,
    write_text_atomic,
)

LOST_SHARD = "lost_shard"  # a _WriteGroup output naming a shard whose temporary another writer removed


def sample_key(split: str, group: int, index: int, prefix: str = "") -> str:
    """A sample's key; ``prefix`` (e.g. "v000002-") keeps keys unique across appended versions."""
    return f"{prefix}{split}-{group:05d}-{index:08d}"


def encoded_samples(split: str, group: int, seqs: Sequence[PackedSequence], vocab_size: int, key_prefix: str = "",
                    start: int = 0) -> Iterator[tuple[str, list[tuple[str, bytes]], int]]:
    """(key, members, tokens) for each packed sequence, in packing order; ``start``: the group index
    of ``seqs[0]`` (its key's number)."""
    for i, s in enumerate(seqs, start):
        members = encode_sample(s.input_ids, vocab_size, s.token_type_ids, s.label, {"doc_ids": list(s.doc_ids)})
        yield sample_key(split, group, i, key_prefix), members, len(s.input_ids)


class _WriteGroup(beam.DoFn):
    """Stream a packed group's shards to storage, under the global names its offset gives."""

    def __init__(self, cfg: BuildConfig, output: str, base_offsets: dict[str, int] | None = None,
                 key_prefix: str = "", tag: str = ""):
        self.cfg, self.output = cfg, output
        self.base_offsets = dict(base_offsets or {})
        self.key_prefix = key_prefix
        self.tag = tag

    def process(self, kv, vocab_size: int, offsets: dict[GroupKey, int]):
        (split, group, groups), (chunks, blob) = kv
        seqs = decode_packed(blob)
        del blob
        # Appending to an existing corpus: this split's shard names continue after its last shard.
        first = offsets[(split, group, groups)] + self.base_offsets.get(split, 0)
        for j, (a, b) in enumerate(chunks):
            name = shard_name(split, first + j, self.tag)  # the attempt's tag: no other attempt writes it

            # Each shard's samples are encoded while it streams out: a worker holds one sample's members.
            def samples(a: int = a, b: int = b) -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
                for k, members, _ in encoded_samples(split, group, seqs[a:b], vocab_size, self.key_prefix, a):
                    yield k, members

            try:
                sha, size = write_stream_atomic(join(self.output, name), lambda f, s=samples: write_tar(f, s()),
                                                 create=True)
            except TemporaryRemoved as e:
                # Another writer committed this corpus and swept this attempt's temporaries:
                # this attempt cannot commit. Not raised (a runner logs a raised error with a
                # trace and retries the bundle); the commit step sees the lost shard and
                # stops, the driver says why in one line (pipelines.corpus.commit.raise_if_lost).
                logging.getLogger("shardforge.commit").warning("shard %s lost: %s", name, e)
                Metrics.counter("write", "lost_shards").inc()
                yield {LOST_SHARD: name}
                continue
            Metrics.counter("write", "shards").inc()
            progress.tick("write shards", unit="shard")
            yield ShardInfo(name=name, split=split, samples=b - a, tokens=sum(len(s.input_ids) for s in seqs[a:b]),
                            bytes=size, sha256=sha).model_dump()


def packing_ends(model: bytes) -> tuple[int, int]:
    """The ids packing writes for ``<s>`` and ``</s>``: the tokenizer file's (schemas.tokenizer_files)."""
    ids = load_tokenizer(model).special_ids
    return ids["<s>"], ids["</s>"]


def members_of(cfg: BuildConfig) -> list[str]:
    members = [INPUT_IDS]
    if cfg.packing.rule in PAIR_RULES:
        members += [TOKEN_TYPE_IDS, LABEL]
    return members + [META]


def assemble_manifest(shards: list[dict[str, Any]], plans: list[tuple[GroupKey, dict[str, Any]]],
                      model: bytes, accounts: dict[str, SourceAccount], cfg: BuildConfig,
                      tokenizer_path: str, parent: str | None, extra_counters: dict[str, int],
                      intermediates: dict[str, str], corpus: str | None = None) -> Manifest:
    """The manifest of this build's shards. ``corpus``: the corpus a batch appends to; its own tokenizer
    and index are then recorded relative to it, so the batch's manifest does not name the corpus's
    folder (an attempt cut short and resumed after the folder moved writes the same bytes)."""
    infos = sorted((ShardInfo.model_validate(s) for s in shards), key=lambda s: (s.split, s.name))
    totals: dict[str, SplitTotals] = {}
    for s in infos:
        t = totals.setdefault(s.split, SplitTotals())
        t.shards += 1
        t.samples += s.samples
        t.tokens += s.tokens
        t.bytes += s.bytes
    counters: dict[str, int] = dict(extra_counters)
    for (split, _, _), plan in plans:
        totals.setdefault(split, SplitTotals()).documents += plan["documents"]
        for k, v in plan["stats"].items():
            if isinstance(v, int):
                counters[f"pack_{k}"] = counters.get(f"pack_{k}", 0) + v
    # Every URL the manifest records is redacted: it is shared with trainers and readers,
    # and credentials belong in storage options / the environment, never in the corpus.
    tok = tokenizer_info(model, cfg.tokenizer, redact_url(tokenizer_path))
    config = cfg.model_dump(mode="json")
    for src in config["sources"]:
        src["input"] = redact_url(src["input"])
    for sect, key in (("tokenizer", "model_url"), ("dedupe", "index")):
        value = config[sect].get(key)
        if value and corpus is not None and is_within(value, corpus):
            config[sect][key] = relative_url(corpus, value)
        elif value:
            config[sect][key] = redact_url(value)
    return Manifest(
        parent=parent,
        config=config,
        packing_rule=cfg.packing.rule,
        max_seq_len=cfg.packing.max_seq_len,
        ids_dtype=str(ids_dtype(tok.vocab_size)),  # type: ignore[arg-type]
        members=members_of(cfg),
        tokenizer=tok,
        shards=infos,
        totals=dict(sorted(totals.items())),
        accounting=_with_tokens(accounts, plans),
        counters=dict(sorted(counters.items())),
        intermediates=intermediates,
    )


def _with_tokens(accounts: dict[str, SourceAccount],
                 plans: list[tuple[GroupKey, dict[str, Any]]]) -> dict[str, SourceAccount]:
    """The accounts with each source's document tokens in this build (what mixing weights are planned on)."""
    tokens: Counter[str] = Counter()
    for _, plan in plans:
        tokens.update(plan.get("source_tokens", {}))
    return {name: a.model_copy(update={"tokens": tokens.get(name, 0)}) for name, a in accounts.items()}


class WriteCorpus(beam.PTransform):
    """Tokenized documents -> shards + manifest.json under `output`.

    model: singleton PCollection of the SentencePiece model bytes.
    accounts: singleton PCollection of {source: SourceAccount} (checked, recorded).
    groups: singleton PCollection with the packing group count.

    Appending to an existing corpus (``pipelines.jobs.ingest``): ``shard_root`` is
    where shards go (default ``output``), ``shard_offsets`` the first shard
    index per split, ``key_prefix`` a prefix of every sample key, and
    ``manifest_name`` the file (under ``output``) the manifest of this batch's
    shards is written to.

    ``tag``: the attempt tag (``pipelines.corpus.commit``) every shard name carries. With
    ``commit=True`` (a whole corpus) the manifest is committed by a conditional
    create (``pipelines.corpus.commit.commit_manifest``): a loser removes its own
    attempt and fails; with False (a batch of ``pipelines.jobs.ingest``, whose driver
    commits) it is simply written. Emits the committed manifest (as a dict), or
    nothing when another attempt committed first (the driver raises then).

    ``tokenized_dir``: where the packing step writes the tokenized intermediate, one part per packing
    group (``pipelines.pack.step.tokenized_part_index``; the group's documents sorted by doc_id): the
    documents cross one shuffle for both. None: no intermediate (repack).
    """

    def __init__(self, cfg: BuildConfig, output: str, model, accounts, groups, parent: str | None = None,
                 tokenizer_path: str = MODEL_PATH, intermediates: dict[str, str] | None = None,
                 after: Sequence[Any] = (), extra_counters: Any = None, shard_root: str | None = None,
                 shard_offsets: dict[str, int] | None = None, key_prefix: str = "",
                 manifest_name: str = MANIFEST_NAME, tag: str = "", commit: bool = True,
                 tokenized_dir: str | None = None):
        super().__init__()
        self.tag, self.commit = tag, commit
        self.tokenized_dir = tokenized_dir
        self.shard_root = shard_root or output
        self.shard_offsets = dict(shard_offsets or {})
        self.key_prefix = key_prefix
        self.manifest_name = manifest_name
        self.cfg, self.output, self.model, self.accounts, self.groups = cfg, output, model, accounts, groups
        self.parent, self.tokenizer_path = parent, tokenizer_path
        self.intermediates = intermediates or {}
        # PCollections that must be complete before the manifest commits (intermediates, rejects).
        self.after = list(after)
        self.extra_counters = extra_counters
        self.plans = None  # set by expand: the packing plans (singleton list), for the report

    def expand(self, tokenized):
        cfg, output = self.cfg, self.output
        AsSingleton = beam.pvalue.AsSingleton
        vocab = self.model | "VocabSize" >> beam.Map(lambda m: tokenizer_info(m, cfg.tokenizer, MODEL_PATH).vocab_size)
        # <s> / </s> ids from the tokenizer (an existing model's, with --init, may differ from ours).
        ends = self.model | "EndIds" >> beam.Map(packing_ends)

        grouped = tokenized | "GroupForPacking" >> GroupForPacking(cfg, self.groups)
        packed = grouped | "Pack" >> pack_groups(cfg, self.tokenized_dir, AsSingleton(vocab), AsSingleton(ends))
        after = [*self.after, packed[TOKENIZED_PARTS]]
        plan_list = packed[PLANS] | "CollectPlans" >> beam.combiners.ToList()
        self.plans = plan_list  # the packing plans (singleton list), for the report
        offsets = plan_list | "Offsets" >> beam.Map(shard_offsets)
        shards = packed[PACKED] | "WriteShards" >> beam.ParDo(
            _WriteGroup(cfg, self.shard_root, self.shard_offsets, self.key_prefix, self.tag),
            AsSingleton(vocab), AsSingleton(offsets))

        parent, tok_path, inter, shard_root = self.parent, self.tokenizer_path, self.intermediates, self.shard_root
        manifest_name, tag, conditional = self.manifest_name, self.tag, self.commit

        def commit(shard_list, plan_list_, model, accounts, extra, *_after):
            lost = sorted(s[LOST_SHARD] for s in shard_list if LOST_SHARD in s)
            if lost:
                logging.getLogger("shardforge.commit").warning(
                    "not committing %s: %s of this attempt %s removed while it wrote them (%s)",
                    redact_url(join(output, manifest_name)), counted(len(lost), "shard"),
                    "was" if len(lost) == 1 else "were", ", ".join(lost[:3]))
                return None
            check_balanced(accounts)
            m = assemble_manifest(shard_list, plan_list_, model, accounts, cfg, tok_path, parent, extra, inter,
                                  corpus=None if shard_root == output else shard_root)
            from pipelines.corpus.commit import missing_objects

            missing = missing_objects(output, m)
            if missing:  # swept by another writer's commit (storage.unless_swept): never commit without them
                logging.getLogger("shardforge.commit").warning(
                    "not committing %s: %s of this attempt were removed while it wrote them",
                    redact_url(join(output, manifest_name)), ", ".join(missing[:3]))
                return None
            if conditional:
                from pipelines.corpus.commit import LostCommit, clean_after_commit, commit_manifest

                try:
                    commit_manifest(output, manifest_name, m.to_json(), tag)
                except LostCommit as e:
                    # Cleaned up already; the driver says why in one line (raise_if_lost). Not
                    # raised here: a runner would log it with a traceback, and retry the bundle.
                    logging.getLogger("shardforge.commit").warning("%s", e)
                    return None
                clean_after_commit(output, m.version, m)
            elif not unless_swept(lambda: write_text_atomic(join(output, manifest_name), m.to_json(), create=True),
                                  f"manifest {manifest_name}"):
                return None
            return m.model_dump(mode="json")

        extra = self.extra_counters
        if extra is None:
            extra = tokenized.pipeline | "NoExtraCounters" >> beam.Create([{}])
        waits = [beam.pvalue.AsList(w) for w in after]
        return (
            shards
            | "CollectShards" >> beam.combiners.ToList()
            | "CommitManifest" >> beam.Map(commit, AsSingleton(plan_list), AsSingleton(self.model),
                                           AsSingleton(self.accounts), AsSingleton(extra), *waits)
            | "Committed" >> beam.Filter(lambda m: m is not None)  # a lost commit writes no report
        )
