"""Exact and near-duplicate removal at corpus scale (design: docs/dedupe.md).

``Deduplicate`` turns a PCollection of Documents into ``{"kept", "duplicates"}``;
every input document ends in exactly one of them.

1. Exact: documents grouped by the hash of their normalized text; the smallest
   doc_id of a group is kept, the others are ``Duplicate(kind="exact")``. With
   near dedupe on, the hash comes from each document's sketch and only
   (hash, doc_id, source) is grouped (``ExactVerdicts``); the documents join
   their exact and near verdicts once.
2. Near: MinHash signatures over word n-gram shingles (``pipelines.dedupe.minhash``,
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

Modules: ``minhash`` (MinHash signatures and LSH banding, numpy; ``minhash_kernel``, the fused loop
compiled by numba), ``sketch`` (the per-document record and node ids), ``exact``, ``components``
(connected components), ``candidates`` (LSH buckets, their candidates and the screen, no Beam), ``near``
(the near step as Beam transforms: candidates, screening, clusters, verification), ``spans``
(repeated spans), ``index`` (the persistent append-only index) and ``deduplicate`` (all of them
wired together).

The room's public face is ``Deduplicate``: the graph needs nothing else. It is loaded on first use,
because the document processes (``pipelines.localrunner.docpool``) import ``minhash`` to sketch and
never import Beam, which every transform here does. Imports the records, the local runner's batching,
the part files of ``pipelines.corpus`` (the index is written as parts) and ``pipelines.clean``'s
sentences; nothing above them.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipelines.dedupe.deduplicate import Deduplicate

__all__ = ["Deduplicate"]


def __getattr__(name: str) -> Any:
    if name == "Deduplicate":
        from pipelines.dedupe.deduplicate import Deduplicate

        return Deduplicate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
