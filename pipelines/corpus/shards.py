"""Tokenized documents -> packed sequences -> WebDataset shards -> manifest.

Shared by the full build and by repack. Packing runs per deterministic group
of documents (split × group, by doc hash), in parallel. Shard names are
global and contiguous per split (`train-000000.tar` …): the packing step packs
each group once, cuts its sequences into shards by their exact encoded sizes
(computed, not encoded) and hands the writer the packed group (one compact blob,
``packing.encode_packed``); a tiny side input turns every group's shard count into
index offsets, and the writer streams each shard to storage atomically. The
manifest, written last, is the commit marker of the corpus.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipelines.coders import EncodedDocuments, encode_tokenized  # (importing it registers the coders)
from pipelines.corpus.parts import BundleTotals, part_name, size_runs, sum_pairs, write_tokenized_parquet
from pipelines.localrunner import progress
from pipelines.pack.rules import PackedSequence, decode_packed, encode_packed, group_of, pack_group, split_of
from pipelines.records import TokenizedDocument
from pipelines.report.accounting import check_balanced
from pipelines.tokenizer.tokenizer import MODEL_PATH, tokenizer_info
from schemas import BOS_ID, EOS_ID
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
    member_tar_size,
    write_tar,
)
from schemas.tokenizer_files import load_tokenizer
from shardforge.storage import (
    TemporaryRemoved,
    join,
    redact_url,
    unless_swept,
    write_stream_atomic,
    write_text_atomic,
)

GroupKey = tuple[str, int, int]  # (split, group, number of groups)
ENCODED = beam.typehints.Tuple[str, bytes]  # (doc_id, encode_tokenized bytes): a document on its way to packing
ROUTED = beam.typehints.Tuple[GroupKey, bytes]  # GroupForPacking's shuffle input
# GroupForPacking's output: a group's documents as the bytes they crossed in, decoded as they are read
GROUPED = beam.typehints.Tuple[GroupKey, EncodedDocuments]
LOST_SHARD = "lost_shard"  # a _WriteGroup output naming a shard whose temporary another writer removed
PLANS = "plans"  # _PackGroup's tagged output: each group's plan
TOKENIZED_PARTS = "tokenized_parts"  # _PackGroup's tagged output: the tokenized part files it wrote
SPLITS = ("train", "valid")


def tokenized_part_index(split: str, group: int, groups: int) -> int:
    """The tokenized intermediate's part number of a packing group: train's groups, then valid's."""
    return SPLITS.index(split) * groups + group



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


def _meta_json(seq: PackedSequence) -> bytes:
    return json.dumps({"doc_ids": list(seq.doc_ids)}, sort_keys=True, separators=(",", ":")).encode("utf-8")


@functools.lru_cache(maxsize=8192)
def _npy_len(length: int, dtype: str) -> int:
    """Bytes of a 1-D ``.npy`` of that length and dtype (header included): measured once per pair."""
    buf = io.BytesIO()
    np.save(buf, np.zeros(length, dtype=dtype), allow_pickle=False)
    return buf.tell()


def planned_tar_size(seq: PackedSequence, vocab_size: int) -> int:
    """``sample_tar_size(encode_sample(...))`` of a packed sequence, without encoding it.

    The packing step needs only each sample's size in the tar (to cut shards); the members
    are made once, by the writer. tests/test_packing.py checks it against the encoding.
    """
    n = len(seq.input_ids)
    size = member_tar_size(_npy_len(n, ids_dtype(vocab_size).str))
    if seq.token_type_ids is not None:
        size += member_tar_size(_npy_len(n, "|u1"))
    if seq.label is not None:
        size += member_tar_size(len(str(int(seq.label))))
    return size + member_tar_size(len(_meta_json(seq)))


def pack_sorted(docs: Iterable[TokenizedDocument], cfg: BuildConfig, group: int, groups: int,
                ends: tuple[int, int] = (BOS_ID, EOS_ID)):
    ordered = sorted(docs, key=lambda d: d.doc_id)
    packing = cfg.packing.model_copy(update={"groups": groups})
    seqs, stats = pack_group(ordered, packing, cfg.seed, group, ends)
    return ordered, seqs, stats


class _PackGroup(beam.DoFn):
    """Pack a group, once: its plan, tagged ``PLANS`` (``((split, group, groups), plan)``: shard count,
    documents, counters, lengths), and its packed sequences with their shard cuts for the writer
    (``((split, group, groups), (cuts, encode_packed(sequences)))``)."""

    def __init__(self, cfg: BuildConfig, tokenized_dir: str | None = None):
        self.cfg, self.tokenized_dir = cfg, tokenized_dir

    def process(self, kv: tuple[GroupKey, Iterable[TokenizedDocument]], vocab_size: int,
                ends: tuple[int, int] = (BOS_ID, EOS_ID)):
        (split, group, groups), docs = kv
        ordered, seqs, stats = pack_sorted(docs, self.cfg, group, groups, tuple(ends))
        del docs
        if self.tokenized_dir is not None:  # the group's documents are the intermediate's part: sorted already
            name = part_name(tokenized_part_index(split, group, groups), "parquet")
            url = join(self.tokenized_dir, name)
            unless_swept(functools.partial(write_stream_atomic, url, functools.partial(write_tokenized_parquet, ordered)),
                         f"part {name}")
            yield beam.pvalue.TaggedOutput(TOKENIZED_PARTS, name)
        chunks = size_runs((planned_tar_size(s, vocab_size) for s in seqs), self.cfg.shards.target_bytes,
                           self.cfg.shards.target_samples)
        Metrics.counter("pack", f"{split}_sequences").inc(len(seqs))
        key = (split, group, groups)
        yield beam.pvalue.TaggedOutput(PLANS, (key, {
            "shards": len(chunks),
            "documents": len(ordered),
            "stats": stats.as_dict(),
            # length -> sequences (at most max_seq_len entries): the report's length histogram
            "seq_lengths": dict(sorted(Counter(len(s.input_ids) for s in seqs).items())),
            # source -> document tokens (specials excluded): the manifest's per-source tokens
            "source_tokens": dict(sorted(_source_tokens(ordered).items())),
        }))
        del ordered
        yield key, (chunks, encode_packed(seqs))


def _source_tokens(docs: Iterable[TokenizedDocument]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for d in docs:
        counts[d.source] += d.num_tokens
    return counts


def shard_offsets(plans: list[tuple[GroupKey, dict[str, Any]]]) -> dict[GroupKey, int]:
    """First global shard index of each (split, group): groups in order, contiguous per split."""
    offsets: dict[GroupKey, int] = {}
    next_index: dict[str, int] = {}
    for key, plan in sorted(plans):
        split = key[0]
        offsets[key] = next_index.get(split, 0)
        next_index[split] = offsets[key] + plan["shards"]
    return offsets


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
                sha, size = write_stream_atomic(join(self.output, name), lambda f, s=samples: write_tar(f, s()))
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
                      intermediates: dict[str, str]) -> Manifest:
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
        if config[sect].get(key):
            config[sect][key] = redact_url(config[sect][key])
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


def count_groups(total_tokens: int, cfg: BuildConfig) -> int:
    if cfg.packing.groups:
        return cfg.packing.groups
    return max(1, math.ceil(total_tokens / cfg.packing.group_tokens))


def _num_tokens(d: TokenizedDocument) -> int:
    return d.num_tokens


class TokenGroups(beam.PTransform):
    """Tokenized documents -> a singleton with the number of packing groups (from the token total)."""

    def __init__(self, cfg: BuildConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, tokenized):
        return (
            tokenized
            | "Tokens" >> beam.ParDo(BundleTotals(_num_tokens))  # (documents, tokens) per bundle
            | "TotalTokens" >> beam.CombineGlobally(sum_pairs)
            | "Count" >> beam.Map(lambda totals, cfg: count_groups(totals[1], cfg), self.cfg)
        )


def packing_key(doc_id: str, seed: int, valid_fraction: float, groups: int) -> GroupKey:
    """The (split, group, groups) the document ``doc_id`` is packed in."""
    return split_of(doc_id, seed, valid_fraction), group_of(doc_id, seed, groups), groups


class GroupForPacking(beam.PTransform):
    """Tokenized documents -> ``((split, group, groups), documents)``: one element per packing group.

    ``groups``: a singleton PCollection with the group count (``TokenGroups``). A document is
    encoded once (``encode_tokenized``: ids as 2-4 raw bytes each), where it is tokenized, and
    crosses as those bytes both the wait for the group count (routing needs the token total, so
    the tokenized documents are stored between the two stages) and the shuffle; the group's
    documents are decoded as the packing step reads them, holding ``TokenIds`` (2-4 bytes an id,
    not ~36 as int tuples; tests/test_token_memory.py). Before, each crossing encoded and decoded
    the document again (#16, item 2).
    """

    def __init__(self, cfg: BuildConfig, groups):
        super().__init__()
        self.cfg, self.groups = cfg, groups

    def expand(self, tokenized):
        seed, valid = self.cfg.seed, self.cfg.packing.valid_fraction

        def route(doc: tuple[str, bytes], groups: int) -> tuple[GroupKey, bytes]:
            return packing_key(doc[0], seed, valid, groups), doc[1]

        return (
            tokenized
            | "ToBytes" >> beam.Map(lambda d: (d.doc_id, encode_tokenized(d))).with_output_types(ENCODED)
            | "Route" >> beam.Map(route, beam.pvalue.AsSingleton(self.groups)).with_output_types(ROUTED)
            | "Group" >> beam.GroupByKey()
            | "FromBytes" >> beam.MapTuple(lambda key, values: (key, EncodedDocuments(values))).with_output_types(GROUPED)
        )


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
    group (``tokenized_part_index``; the group's documents sorted by doc_id): the documents cross
    one shuffle for both. None: no intermediate (repack).
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
        # hfinit (#20.2): <s> / </s> ids from the tokenizer (an existing model's may differ from ours).
        ends = self.model | "EndIds" >> beam.Map(packing_ends)

        grouped = tokenized | "GroupForPacking" >> GroupForPacking(cfg, self.groups)
        packed = grouped | "Pack" >> beam.ParDo(_PackGroup(cfg, self.tokenized_dir), AsSingleton(vocab),
                                                AsSingleton(ends)).with_outputs(PLANS, TOKENIZED_PARTS, main="packed")
        after = [*self.after, packed[TOKENIZED_PARTS]]
        plan_list = packed[PLANS] | "CollectPlans" >> beam.combiners.ToList()
        self.plans = plan_list  # the packing plans (singleton list), for the report
        offsets = plan_list | "Offsets" >> beam.Map(shard_offsets)
        shards = packed["packed"] | "WriteShards" >> beam.ParDo(
            _WriteGroup(cfg, self.shard_root, self.shard_offsets, self.key_prefix, self.tag),
            AsSingleton(vocab), AsSingleton(offsets))

        parent, tok_path, inter = self.parent, self.tokenizer_path, self.intermediates
        manifest_name, tag, conditional = self.manifest_name, self.tag, self.commit

        def commit(shard_list, plan_list_, model, accounts, extra, *_after):
            lost = sorted(s[LOST_SHARD] for s in shard_list if LOST_SHARD in s)
            if lost:
                logging.getLogger("shardforge.commit").warning(
                    "not committing %s: %d shard(s) of this attempt were removed while it wrote them (%s)",
                    redact_url(join(output, manifest_name)), len(lost), ", ".join(lost[:3]))
                return None
            check_balanced(accounts)
            m = assemble_manifest(shard_list, plan_list_, model, accounts, cfg, tok_path, parent, extra, inter)
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
            elif not unless_swept(lambda: write_text_atomic(join(output, manifest_name), m.to_json()),
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
