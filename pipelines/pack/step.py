"""The packing step of the build graph: tokenized documents -> packing groups -> packed groups.

Shared by the full build and by repack. ``TokenGroups`` counts the packing groups from the token
total; ``GroupForPacking`` routes every document to its ``(split, group, groups)`` key (a hash of
its id, ``packing_key``) and groups them, the documents crossing as the bytes they were encoded to
once; ``pack_groups`` (the step ``Pack``) packs each group once by the papers' rules
(``pipelines.pack.rules``), writes the group's tokenized intermediate part where asked, tags the
group's plan (shard count, documents, counters, lengths) and hands the shard writer
(``pipelines.corpus.shards``) the packed group (``encode_packed``) with its shard cuts, computed
from each sample's exact tar size without encoding it (``planned_tar_size``); ``shard_offsets``
turns the plans into each group's first global shard index. Imports the pure packing modules,
``pipelines.intermediates`` (the tokenized parts, the cuts) and the contract; never
``pipelines.corpus.shards``, which imports this module.
"""

from __future__ import annotations

import functools
import io
import json
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipelines.coders import EncodedDocuments, encode_tokenized  # (importing it registers the coders)
from pipelines.intermediates import BundleTotals, part_name, size_runs, sum_pairs, write_tokenized_parquet
from pipelines.pack.encoding import encode_packed
from pipelines.pack.rules import group_of, pack_group, split_of
from pipelines.pack.sequences import PackedSequence
from pipelines.records import TokenizedDocument
from schemas import BOS_ID, EOS_ID
from schemas.config import BuildConfig
from schemas.sample import ids_dtype, member_tar_size
from shardforge.storage import join, unless_swept, write_stream_atomic

GroupKey = tuple[str, int, int]  # (split, group, number of groups)
ENCODED = beam.typehints.Tuple[str, bytes]  # (doc_id, encode_tokenized bytes): a document on its way to packing
ROUTED = beam.typehints.Tuple[GroupKey, bytes]  # GroupForPacking's shuffle input
# GroupForPacking's output: a group's documents as the bytes they crossed in, decoded as they are read
GROUPED = beam.typehints.Tuple[GroupKey, EncodedDocuments]
PLANS = "plans"  # _PackGroup's tagged output: each group's plan
TOKENIZED_PARTS = "tokenized_parts"  # _PackGroup's tagged output: the tokenized part files it wrote
PACKED = "packed"  # _PackGroup's main output: each packed group with its shard cuts, for the writer
SPLITS = ("train", "valid")


def tokenized_part_index(split: str, group: int, groups: int) -> int:
    """The tokenized intermediate's part number of a packing group: train's groups, then valid's."""
    return SPLITS.index(split) * groups + group


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
    """A group's documents sorted by doc_id, its packed sequences and its counters (``pack_group``
    with the build's packing config and the group count)."""
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
            unless_swept(functools.partial(write_stream_atomic, url, functools.partial(write_tokenized_parquet, ordered),
                                           create=True),
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


def pack_groups(cfg: BuildConfig, tokenized_dir: str | None, vocab_size: Any, ends: Any) -> beam.PTransform:
    """The packing step over ``GroupForPacking``'s groups (one ``_PackGroup`` per group), with its
    outputs tagged ``PLANS``, ``TOKENIZED_PARTS`` and ``PACKED``. ``vocab_size``, ``ends``: side
    inputs (singletons: the vocabulary size, the ids of ``<s>`` and ``</s>``)."""
    return beam.ParDo(_PackGroup(cfg, tokenized_dir), vocab_size, ends).with_outputs(PLANS, TOKENIZED_PARTS,
                                                                                     main=PACKED)


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


def count_groups(total_tokens: int, cfg: BuildConfig) -> int:
    """The number of packing groups: the configured one, else one per ``group_tokens`` of the total."""
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
    the document again.
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

