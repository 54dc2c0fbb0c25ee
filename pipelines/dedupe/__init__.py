"""Exact and near-duplicate removal at corpus scale (design: docs/dedupe.md).

``Deduplicate`` turns a PCollection of Documents into ``{"kept", "duplicates"}``;
every input document ends in exactly one of them.

1. Exact: documents grouped by the hash of their normalized text; the smallest
   doc_id of a group is kept, the others are ``Duplicate(kind="exact")``. With
   near dedupe on, the hash comes from each document's sketch and only
   (hash, doc_id, source) is grouped (``ExactVerdicts``); the documents join
   their exact and near verdicts once.
2. Near: MinHash signatures over word n-gram shingles (``pipelines.minhash``,
   numpy over batches), LSH buckets per band, candidate pairs verified by their
   signature-estimated Jaccard, connected components of the verified edges by
   alternating large-star / small-star rounds (a distributed computation: no
   worker ever sees more than one node's edges), then every member is verified
   against its cluster's kept document by the *true* Jaccard of their shingle
   sets. Members that fail stay in the corpus, which is what stops transitive
   closure from chaining unrelated documents together.
3. Incremental: an index of an existing corpus (Parquet: doc_id, exact hash,
   signature, band keys, shingles) takes part in both steps; its documents win
   every tie (they are never removed) and new documents that match them are
   duplicates of the old doc_ids.

4. Repeated spans (optional, ``cfg.repeated_spans``; C4, Raffel et al. 2020):
   after exact and near dedupe, every window of ``cfg.span_sentences``
   consecutive sentences of the kept documents is hashed; of the occurrences
   of a span hash, the one with the smallest (doc_id, position) stays and the
   sentences of all others are cut from their documents. A document left
   with no sentence becomes ``Duplicate(kind="span")``. Within this batch
   only: spans are not in the index.

Node ids in the near step are ``"0" + doc_id`` for indexed (old) documents and
``"1" + doc_id`` for new ones, so "the smallest node id" picks an old document
first and otherwise the smallest doc_id.

Modules: ``sketch`` (the per-document record and node ids), ``exact``,
``components`` (connected components), ``near`` (LSH candidates, screening,
clusters, verification), ``spans`` (repeated spans), ``index`` (the
persistent append-only index) and ``deduplicate`` (all of them wired together).
"""

from pipelines.dedupe.components import (
    ConnectedComponents,
    large_star,
    small_star,
    star_components,
    star_roles,
)
from pipelines.dedupe.deduplicate import SIGNATURE_BATCH, Deduplicate
from pipelines.dedupe.exact import ExactDedupe, ExactVerdicts, exact_verdicts, resolve_exact_group
from pipelines.dedupe.index import (
    INDEX_ENTRIES_PER_PART,
    INDEX_META,
    INDEX_ROW_GROUP,
    INDEX_VERSION,
    IndexRow,
    _sketches_to_parquet,
    index_bucket_entries,
    index_exact_matches,
    index_params,
    index_parts,
    index_row,
    index_schema,
    read_index_matches,
    read_index_part,
)
from pipelines.dedupe.near import (
    EdgeScreen,
    NearDedupe,
    bucket_candidates,
    bucket_edges,
    resolve_cluster,
    screen_at_member,
)
from pipelines.dedupe.sketch import NEW, OLD, Sketch, _hasher, near_rule, sketch_documents
from pipelines.dedupe.spans import (
    SPAN_POINTER_ROUNDS,
    SpanDedupe,
    SpanResult,
    apply_span_losses,
    remove_sentences,
    resolve_span_group,
    span_key,
    span_occurrences,
)
from pipelines.minhash import normalized_text_hash

__all__ = [
    "INDEX_ENTRIES_PER_PART",
    "INDEX_META",
    "INDEX_ROW_GROUP",
    "INDEX_VERSION",
    "IndexRow",
    "NEW",
    "OLD",
    "SIGNATURE_BATCH",
    "SPAN_POINTER_ROUNDS",
    "ConnectedComponents",
    "star_components",
    "Deduplicate",
    "EdgeScreen",
    "ExactDedupe",
    "ExactVerdicts",
    "NearDedupe",
    "Sketch",
    "SpanDedupe",
    "SpanResult",
    "_hasher",
    "_sketches_to_parquet",
    "apply_span_losses",
    "bucket_candidates",
    "bucket_edges",
    "index_bucket_entries",
    "index_exact_matches",
    "index_params",
    "index_row",
    "index_parts",
    "index_schema",
    "large_star",
    "near_rule",
    "normalized_text_hash",
    "read_index_matches",
    "read_index_part",
    "remove_sentences",
    "resolve_cluster",
    "exact_verdicts",
    "resolve_exact_group",
    "resolve_span_group",
    "screen_at_member",
    "sketch_documents",
    "small_star",
    "span_key",
    "span_occurrences",
    "star_roles",
]
