"""A packed group between stages: ``encode_packed`` / ``decode_packed``.

The packing step (``pipelines.pack.step``) hands the shard writer (``pipelines.corpus.shards``) each
group's sequences as one compact blob rather than as Python objects: the ids in one buffer, their
lengths, the token types, the labels and the doc ids. Pure Python and numpy, no Beam.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.pack.sequences import PackedSequence
from pipelines.records import TokenIds

_PACKED_MAGIC = b"SFPK1"


def encode_packed(seqs: Sequence[PackedSequence]) -> bytes:
    """A group's packed sequences as one compact blob: what the packing step hands the shard writer.

    The ids of every sequence in one buffer (uint16 when they all fit, else int32), their lengths,
    the token types (pair rules), the labels and the doc ids. ``decode_packed`` gives back equal
    sequences (a group with any id past uint16 comes back int32 throughout; the shard writer's
    width follows the vocabulary, not the array).
    """
    import json

    import numpy as np

    n = len(seqs)
    lengths = np.fromiter((len(s.input_ids) for s in seqs), dtype=np.uint32, count=n)
    wide = any(s.input_ids.typecode != "H" for s in seqs)
    ids = b"".join(s.input_ids if not wide else TokenIds("i", s.input_ids) for s in seqs)
    pairs = n > 0 and seqs[0].token_type_ids is not None
    if any((s.token_type_ids is not None) != pairs for s in seqs):
        raise ValueError("a packed group mixes sequences with and without token types")
    types = b""
    if pairs:  # token types are 0/1: uint16 buffers as packing makes them, one byte each here
        raw = b"".join(t if t.typecode == "H" else TokenIds("H", t) for t in (s.token_type_ids for s in seqs))
        types = np.frombuffer(raw, dtype=np.uint16).astype(np.uint8).tobytes()
    labels = np.fromiter((-1 if s.label is None else s.label for s in seqs), dtype=np.int8, count=n).tobytes()
    meta = json.dumps([list(s.doc_ids) for s in seqs], separators=(",", ":")).encode("utf-8")
    head = np.array([n, int(wide), int(pairs), len(ids), len(types), len(meta)], dtype=np.uint64).tobytes()
    return b"".join((_PACKED_MAGIC, head, lengths.tobytes(), ids, types, labels, meta))


def decode_packed(blob: bytes) -> list[PackedSequence]:
    """The sequences ``encode_packed`` wrote."""
    import json

    import numpy as np

    if not blob.startswith(_PACKED_MAGIC):
        raise ValueError("not a packed group")
    pos = len(_PACKED_MAGIC)
    n, wide, pairs, n_ids, n_types, n_meta = (int(v) for v in np.frombuffer(blob, dtype=np.uint64, count=6,
                                                                            offset=pos))
    pos += 48
    lengths = np.frombuffer(blob, dtype=np.uint32, count=n, offset=pos).tolist()
    pos += 4 * n
    ids = memoryview(blob)[pos:pos + n_ids]
    pos += n_ids
    types = memoryview(blob)[pos:pos + n_types]
    pos += n_types
    labels = np.frombuffer(blob, dtype=np.int8, count=n, offset=pos).tolist()
    pos += n
    doc_ids = json.loads(bytes(blob[pos:pos + n_meta]))
    width = 4 if wide else 2
    code = "i" if wide else "H"
    out: list[PackedSequence] = []
    start = 0
    for length, label, docs in zip(lengths, labels, doc_ids, strict=True):
        seq_ids = TokenIds(code)
        seq_ids.frombytes(ids[start * width:(start + length) * width])
        tt = None
        if pairs:
            tt = TokenIds("H", types[start:start + length])
        out.append(PackedSequence(seq_ids, tuple(docs), tt, None if label < 0 else label))
        start += length
    return out
