"""Token ids stay compact through the build's large shuffles (the peak memory of a one-shot build).

A packing group (20M tokens by default) is held decoded at once by the in-process runner; as
tuples of Python ints it cost ~36 bytes an id and was most of a build's peak RSS. These tests
fail if ids go back to int tuples or lists, or the shuffles go back to pickling documents:
they run the packing shuffle on Beam's local runner and inspect what comes out of it, and check
the coders the real build graph gives the packing and tokenized-intermediate shuffles.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.coders import (
    EncodedDocuments,
    EncodedDocumentsCoder,
    TokenizedDocumentCoder,
    decode_tokenized,
    encode_tokenized,
)
from pipelines.pack.step import GroupForPacking
from pipelines.records import TokenIds, TokenizedDocument, token_ids
from schemas.config import BuildConfig

# Bytes an id may take in memory after the shuffle: 2 (uint16) + a 64-byte array header per
# sentence (15-34 ids here). Int tuples take 8 for the pointer, plus 28 for every int above 256.
MAX_BYTES_PER_ID = 10.0


def doc(i: int, big: bool = False) -> TokenizedDocument:
    top = 70_000 if big else 8_000
    sents = tuple(tuple((i * 7919 + j * 31 + k) % top + 5 for k in range(15 + (j * 7 + i) % 20))
                  for j in range(3 + i % 5))
    return TokenizedDocument(f"web-{i:06d}", "web" if i % 3 else "news", sents, sum(map(len, sents)))


def in_memory_bytes(d: TokenizedDocument) -> int:
    """What a document's ids hold in memory: the sentence objects and the tuple of them."""
    return sys.getsizeof(d.sentences) + sum(sys.getsizeof(s) for s in d.sentences)


def test_token_ids_are_compact_and_read_like_the_tuples_they_replace():
    t = (5, 300, 7999, 5)
    ids = token_ids(t)
    assert type(ids) is TokenIds and ids.typecode == "H" and ids.itemsize == 2
    assert ids == token_ids(list(t)) and hash(ids) == hash(t) and list(ids) == list(t)
    assert ids[1] == 300 and list(ids[1:3]) == [300, 7999] and ids.count(5) == 2 and 7999 in ids
    assert token_ids((5, 6)) < token_ids((5, 7)) and token_ids((5, 6)) < token_ids((5, 6, 0))  # tuple order
    wide = token_ids((5, 70_000))
    assert wide.typecode == "i" and wide.itemsize == 4 and list(wide) == [5, 70_000]
    # The pickle (Beam's fallback coder) carries raw bytes, not one opcode per int.
    big = token_ids(range(5, 5005))
    data = pickle.dumps(big, protocol=pickle.HIGHEST_PROTOCOL)  # as Beam's PickleCoder does
    assert len(data) < 2 * len(big) + 200
    assert pickle.loads(data) == big and type(pickle.loads(data)) is TokenIds
    # Documents normalize whatever sequences they are given: equal documents whatever the input type.
    d = TokenizedDocument("a", "s", ([5, 6], (7,)), 3)
    assert all(type(s) is TokenIds for s in d.sentences) and d == TokenizedDocument("a", "s", ((5, 6), (7,)), 3)


@pytest.mark.parametrize("big", [False, True])
def test_coder_round_trips_documents_and_keeps_ids_compact(big):
    docs = [doc(i, big) for i in range(20)]
    docs += [TokenizedDocument("empty-é", "news", (), 0), TokenizedDocument("one", "src", ((), (70_000, 5)), 2)]
    coder = TokenizedDocumentCoder()
    for d in docs:
        data = coder.encode(d)
        back = coder.decode(data)
        assert back == d and [s.typecode for s in back.sentences] == [s.typecode for s in d.sentences]
        assert all(type(s) is TokenIds for s in back.sentences)
        width = 4 if any(s.typecode == "i" for s in d.sentences) else 2
        # ids at their width + a width byte and a uint32 length per sentence + the 20-byte head
        strings = len(d.doc_id.encode()) + len(d.source.encode())
        assert len(data) <= width * d.num_tokens + 5 * len(d.sentences) + strings + 20
        assert coder.estimate_size(d) == len(data)  # Beam's size metrics: measured without encoding
    assert decode_tokenized(encode_tokenized(docs[0])) == docs[0]
    assert coder.is_deterministic()


def _inspect_group(kv):
    """What one packing group holds after the shuffle: per document, its sentence types and bytes an id."""
    _, docs = kv
    for d in docs:
        kinds = sorted({type(s).__name__ for s in d.sentences})
        yield d.doc_id, kinds, in_memory_bytes(d) / max(1, d.num_tokens) <= MAX_BYTES_PER_ID


def _packing_shuffle(p: beam.Pipeline, docs: list[TokenizedDocument], groups: int):
    """The packing shuffle (GroupForPacking, as WriteCorpus uses it) of docs into groups per split."""
    cfg = BuildConfig.model_validate({"sources": [{"name": "web", "input": "unused/*.jsonl"}],
                                      "packing": {"valid_fraction": 0.2}})
    count = p | "Groups" >> beam.Create([groups])
    return p | "Docs" >> beam.Create(docs).with_output_types(TokenizedDocument) | GroupForPacking(cfg, count)


def test_packing_shuffle_delivers_compact_ids_on_the_local_runner():
    """A real Beam run of the packing shuffle (GroupForPacking, as WriteCorpus uses it)."""
    docs = [doc(i) for i in range(120)]
    with test_pipeline.TestPipeline(runner="FnApiRunner") as p:
        grouped = _packing_shuffle(p, docs, 3)
        seen = grouped | "Inspect" >> beam.FlatMap(_inspect_group)
        assert_that(seen, equal_to([(d.doc_id, ["TokenIds"], True) for d in docs]), label="CompactIds")
        same = grouped | "Docs back" >> beam.FlatMap(lambda kv: list(kv[1]))
        assert_that(same, equal_to(docs), label="SameDocuments")
    # The control: the tuples this replaced do not pass the memory bound.
    as_tuples = sum(sys.getsizeof(tuple(s)) + sum(sys.getsizeof(t) for t in s) for s in docs[0].sentences)
    assert as_tuples / docs[0].num_tokens > 3 * MAX_BYTES_PER_ID


def test_a_packing_group_is_decoded_once(monkeypatch):
    """Beam sizes the first elements of every PCollection; a packing group is one element, and sized
    as an iterable of documents it was decoded a second time, document by document, to be sized."""
    reads: list[int] = []
    real = EncodedDocuments.__iter__

    def counting(self):
        reads.append(len(self._values))
        return real(self)

    monkeypatch.setattr(EncodedDocuments, "__iter__", counting)  # the in-process runner sees it
    docs = [doc(i) for i in range(60)]
    with test_pipeline.TestPipeline(runner="FnApiRunner") as p:
        grouped = _packing_shuffle(p, docs, 2)
        ids = grouped | "Read once" >> beam.FlatMap(lambda kv: [d.doc_id for d in kv[1]])
        assert_that(ids, equal_to([d.doc_id for d in docs]))
    assert len(reads) == 4 and sum(reads) == len(docs)  # (train, valid) x 2 groups, each read once


def test_encoded_documents_coder_round_trips_and_sizes_without_decoding():
    docs = [doc(i) for i in range(10)]
    group = EncodedDocuments([encode_tokenized(d) for d in docs])
    coder = EncodedDocumentsCoder()
    data = coder.encode(group)
    assert list(coder.decode(data)) == docs == list(group)  # iterable again and again
    # A size near the encoded one, from the lengths alone: bytes that do not decode are sized too.
    assert abs(coder.estimate_size(group) - len(data)) <= len(docs) + 4
    assert coder.estimate_size(EncodedDocuments([b"\xff" * 300])) == 4 + 302
    assert beam.coders.registry.get_coder(EncodedDocuments) == coder and coder.is_deterministic()


def _shuffle_coders(p: beam.Pipeline) -> dict[str, beam.coders.Coder]:
    """Full label of each GroupByKey of the pipeline -> the coder of its input (Beam's choice by type)."""
    found: dict[str, beam.coders.Coder] = {}

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            if isinstance(node.transform, beam.GroupByKey):
                pcoll = node.inputs[0]
                found[node.full_label] = beam.coders.registry.get_coder(pcoll.element_type)

    p.visit(Visitor())
    return found


def test_the_build_graph_shuffles_tokenized_documents_with_the_compact_coder(tmp_path):
    from pipelines.graph import build_pipeline

    raw = tmp_path / "web.jsonl"
    raw.write_text('{"text": "One sentence here. Another one."}\n')
    cfg = BuildConfig.model_validate({"sources": [{"name": "web", "input": str(raw)}]})
    p = beam.Pipeline(runner="FnApiRunner")
    build_pipeline(p, cfg, str(tmp_path / "out"), files={"web": [str(raw)]})
    coders = _shuffle_coders(p)
    label = "WriteCorpus/GroupForPacking/Group"
    coder = coders[label]
    assert isinstance(coder, beam.coders.TupleCoder), (label, coder)
    # Each document crosses as the bytes encode_tokenized made once, where it was tokenized.
    assert isinstance(coder.coders()[1], beam.coders.BytesCoder), (label, coder)
    # No shuffle re-encodes tokenized documents (combines aside: what they shuffle is accumulators):
    # the packing step writes the tokenized intermediate too.
    assert [k for k, c in coders.items()
            if "TokenizedDocumentCoder" in repr(c) and "CombinePerKey" not in k] == []
    # Nor does the store between tokenizing and routing (routing waits for the group count).
    routed = _input_types(p)["WriteCorpus/GroupForPacking/Route"]
    assert isinstance(beam.coders.registry.get_coder(routed), beam.coders.TupleCoder)
    assert "Bytes" in repr(beam.coders.registry.get_coder(routed)), routed


def _input_types(p: beam.Pipeline) -> dict[str, Any]:
    found: dict[str, Any] = {}

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            if node.inputs:
                found[node.full_label] = node.inputs[0].element_type

    p.visit(Visitor())
    return found
