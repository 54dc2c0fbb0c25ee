"""What packing makes and counts: ``PackedSequence``, ``PackStats``, and the keyed helpers every rule shares.

A rule (``pipelines.pack.rules`` for FULL- / DOC-SENTENCES, ``pipelines.pack.pairs`` for the pair
rules) turns a group's documents, cut into segments (``Doc``: ``(doc_id, segments)``), into
sequences; its random choices are keyed hashes (``keyed_randint``, ``target_length``), never an
RNG; ``emit`` adds a sequence and counts it. Pure Python: imports the records and the contract only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from pipelines.records import TokenIds, stable_hash, unit_hash

# A sentence (or a piece of a long one): the document's own TokenIds, or an array slice of it.
Segment = Sequence[int]
# One document after long sentences were split: (doc_id, non-empty segments).
Doc = tuple[str, list[Segment]]

# Hash stage names of the short target; prefixed so they never collide with other pipeline stages.
_S_SHORT = "pack.short"
_S_SHORT_LEN = "pack.short_len"


@dataclass(frozen=True)
class PackedSequence:
    """One training sequence.

    input_ids: specials included, no padding, ``len <= max_seq_len``.
    doc_ids: documents that contributed tokens, in order of appearance (for a
    random-next pair the second one is the borrowed B document).
    token_type_ids: pair rules only, 0 for ``<s> A </s>`` and 1 for ``B </s>``.
    label: NSP 1 = random next, 0 = real next; SOP 1 = swapped, 0 = in order.
    """

    input_ids: TokenIds
    doc_ids: tuple[str, ...]
    token_type_ids: TokenIds | None = None
    label: int | None = None


@dataclass
class PackStats:
    """Counters of one packing run; add them to merge across groups.

    Invariant: ``input_tokens == home_tokens + truncated_tokens + dropped_tokens``.
    """

    documents: int = 0  # documents seen (including empty ones)
    empty_documents: int = 0  # documents without a single token
    sentences: int = 0  # non-empty input sentences
    input_tokens: int = 0  # tokens of those sentences (specials excluded)
    sequences: int = 0
    tokens: int = 0  # ids written, specials and borrowed B tokens included
    home_tokens: int = 0  # input tokens placed in their one home sequence
    borrowed_tokens: int = 0  # random-next B tokens copied from another document
    split_long_sentences: int = 0  # sentences longer than the piece cap, split into pieces
    split_for_pair: int = 0  # single-segment pairs made by cutting one segment in two (a lone last one's real next)
    dropped_tokens: int = 0  # home tokens that could not form any sequence (1-token pair leftovers)
    short_targets: int = 0  # sequences whose target length was shortened (short_seq_prob)
    pairs: int = 0  # pair sequences (SEGMENT-PAIR, SENTENCE-PAIR, SOP)
    truncated_pairs: int = 0  # pairs cut down to max_seq_len (cut rate = truncated_pairs / pairs)
    cut_segments: int = 0  # A/B segments starting or ending mid-sentence (truncation, split_for_pair)
    truncated_tokens: int = 0  # home tokens removed by truncation
    truncated_borrowed_tokens: int = 0  # borrowed (random-next) tokens removed by truncation
    real_next: int = 0  # NSP label 0 (fallback_real_next included)
    random_next: int = 0  # NSP label 1
    fallback_real_next: int = 0  # coin said random but the group has no other document
    in_order: int = 0  # SOP label 0
    swapped: int = 0  # SOP label 1

    def __add__(self, other: PackStats) -> PackStats:
        return PackStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def __iadd__(self, other: PackStats) -> PackStats:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def as_dict(self) -> dict[str, int]:
        """Counters by name (for Beam metrics and the build report)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def unaccounted_tokens(self) -> int:
        """Input tokens neither placed, truncated nor dropped: 0 unless there is a bug."""
        return self.input_tokens - self.home_tokens - self.truncated_tokens - self.dropped_tokens


def keyed_randint(lo: int, hi: int, *key: object) -> int:
    """Keyed integer in [lo, hi] (like random.randint)."""
    return lo + stable_hash(*key) % (hi - lo + 1)


def target_length(seed: int, doc_id: str, index: int, max_tokens: int, p: float, stats: PackStats) -> int:
    """BERT's target length: max_tokens, or with probability p a random length in [2, max_tokens]."""
    if p > 0 and unit_hash(seed, doc_id, _S_SHORT, index) < p:
        stats.short_targets += 1
        return keyed_randint(min(2, max_tokens), max_tokens, seed, doc_id, _S_SHORT_LEN, index)
    return max_tokens


def emit(out: list[PackedSequence], seq: PackedSequence, stats: PackStats) -> None:
    """Add a finished sequence to ``out``, counted."""
    out.append(seq)
    stats.sequences += 1
    stats.tokens += len(seq.input_ids)
