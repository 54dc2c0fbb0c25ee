"""The tokenizer job and the Tokenize stage: determinism, special ids, model types, reuse errors."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import unicodedata

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.records import SentencedDocument, TokenizedDocument
from pipelines.sentences import split_sentences
from pipelines.tokenizer import (
    MODEL_PATH,
    Tokenize,
    TrainTokenizer,
    encode_documents,
    load_model,
    load_processor,
    model_spec,
    sample_key,
    tokenizer_info,
    train_sentencepiece,
)
from schemas import SPECIAL_TOKENS, UNK_ID
from schemas.config import BuildConfig, TokenizerConfig
from schemas.errors import UserError
from shardforge.synth import make_article

UNIGRAM = TokenizerConfig(model_type="unigram", vocab_size=300)
BPE = TokenizerConfig(model_type="bpe", vocab_size=400, byte_fallback=True)
UNSEEN = "Zoë's café: 漢字 and emoji 🦊 — ∑x² ≠ ¥"


def make_docs(n: int, seed: int = 5) -> list[SentencedDocument]:
    rng = random.Random(seed)
    return [SentencedDocument(f"doc-{i:05d}", "news" if i % 3 else "stories",
                              tuple(split_sentences(make_article(rng, rng.randint(6, 14), story=i % 3 == 0))))
            for i in range(n)]


@pytest.fixture(scope="module")
def docs() -> list[SentencedDocument]:
    return make_docs(120)


@pytest.fixture(scope="module")
def models(docs) -> dict[str, bytes]:
    sents = [s for d in docs for s in d.sentences]
    return {"unigram": train_sentencepiece(sents, UNIGRAM), "bpe": train_sentencepiece(sents, BPE)}


def train_in_beam(docs: list[SentencedDocument], cfg: TokenizerConfig, seed: int, out: str) -> bytes:
    with test_pipeline.TestPipeline(runner="FnApiRunner") as p:
        _ = p | beam.Create(docs) | TrainTokenizer(cfg, seed, out)
    return open(os.path.join(out, MODEL_PATH), "rb").read()


def test_same_sample_gives_same_model_bytes(docs, tmp_path):
    cfg = UNIGRAM.model_copy(update={"sample_docs": 50})
    a = train_in_beam(docs, cfg, 11, str(tmp_path / "a"))
    shuffled = list(docs)
    random.Random(0).shuffle(shuffled)
    b = train_in_beam(shuffled, cfg, 11, str(tmp_path / "b"))
    assert a == b  # input order (bundling) does not matter
    # The sample is the sample_docs documents with the smallest content hash, in hash order.
    chosen = sorted(docs, key=lambda d: sample_key(11, d.doc_id))[:50]
    assert a == train_sentencepiece([s for d in chosen for s in d.sentences], cfg)
    # A different seed picks a different sample, hence (here) a different model: the check can fail.
    c = train_in_beam(docs, cfg, 12, str(tmp_path / "c"))
    assert c != a


def test_input_sentence_size_bounds_training(docs):
    sents = [s for d in docs for s in d.sentences]
    small = UNIGRAM.model_copy(update={"input_sentence_size": 200})
    assert train_sentencepiece(sents, small) == train_sentencepiece(sents[:200], small)


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_special_ids_are_fixed(models, kind):
    sp = load_processor(models[kind])
    for piece, i in SPECIAL_TOKENS.items():
        assert sp.piece_to_id(piece) == i and sp.id_to_piece(i) == piece
    assert (sp.bos_id(), sp.pad_id(), sp.eos_id(), sp.unk_id()) == (0, 1, 2, 3)
    # <mask> is a user-defined symbol: text containing it encodes to the id, never to pieces of it.
    assert SPECIAL_TOKENS["<mask>"] in sp.encode("the <mask> opened")
    info = tokenizer_info(models[kind], TokenizerConfig(), MODEL_PATH)
    assert info.special_ids == SPECIAL_TOKENS


def test_bpe_byte_fallback_encodes_unseen_characters(models):
    bpe = load_processor(models["bpe"])
    ids = bpe.encode(UNSEEN)
    assert UNK_ID not in ids
    # Lossless up to the recorded normalization (NFKC turns ² into 2), emoji and CJK included.
    assert bpe.decode(ids) == unicodedata.normalize("NFKC", UNSEEN)
    # Without byte fallback the same text hits <unk> (so the check above means something).
    assert UNK_ID in load_processor(models["unigram"]).encode(UNSEEN)


def test_model_spec_reads_the_model_itself(models):
    assert model_spec(models["unigram"]).model_type == "unigram"
    bpe = model_spec(models["bpe"])
    assert (bpe.model_type, bpe.byte_fallback, bpe.normalization_rule) == ("bpe", True, "nmt_nfkc")
    # A reused BPE model is recorded as BPE even if the config says unigram.
    info = tokenizer_info(models["bpe"], TokenizerConfig(model_type="unigram"), "gs://b/spm.model")
    assert info.model_type == "bpe" and info.vocab_size == load_processor(models["bpe"]).get_piece_size()


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_tokenize_stage_matches_sentencepiece(docs, models, kind):
    sp = load_processor(models[kind])
    extra = [SentencedDocument("empty-1", "news", ()), SentencedDocument("unseen-1", "news", (UNSEEN, "  ", "ok."))]
    inputs = docs[:40] + extra
    expected = []
    for d in inputs:
        sents = tuple(tuple(sp.encode(s)) for s in d.sentences)  # the library, one sentence at a time
        sents = tuple(s for s in sents if s)
        expected.append(TokenizedDocument(d.doc_id, d.source, sents, sum(map(len, sents))))
    assert expected[-2].num_tokens == 0 and expected[-1].num_tokens > 0
    with test_pipeline.TestPipeline(runner="FnApiRunner") as p:
        model = p | "Model" >> beam.Create([models[kind]])
        out = p | "Docs" >> beam.Create(inputs) | Tokenize(model, batch_docs=16, num_threads=2)
        assert_that(out, equal_to(expected))


def test_encode_threads_do_not_change_ids(docs, models):
    one = encode_documents(docs, models["unigram"], num_threads=1)
    two = encode_documents(docs, models["unigram"], num_threads=2)
    auto = encode_documents(docs, models["unigram"], num_threads=0)
    assert one == two == auto
    assert sum(d.num_tokens for d in one) > 1000


def spm_default_ids_model(docs) -> bytes:
    """A model trained the SentencePiece default way (<unk>=0, <s>=1, </s>=2, no <pad> / <mask>)."""
    import io

    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter([s for d in docs for s in d.sentences]),
                                   model_writer=buf, vocab_size=200, num_threads=1, minloglevel=2)
    return buf.getvalue()


def test_bad_reused_model_is_a_clear_user_error(docs, tmp_path):
    bad = tmp_path / "default_ids.model"
    bad.write_bytes(spm_default_ids_model(docs))
    with pytest.raises(UserError, match=r"tokenizer: <s> has id 1, shardforge needs 0.*default_ids\.model"):
        load_model(str(bad))
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(UserError, match="not a SentencePiece model"):
        load_model(str(junk))
    with pytest.raises(UserError, match="tokenizer model not found"):
        load_model(str(tmp_path / "missing.model"))


def test_bad_reused_model_fails_the_build_cli_in_one_line(docs, tmp_path):
    bad = tmp_path / "default_ids.model"
    bad.write_bytes(spm_default_ids_model(docs))
    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps({"text": "One sentence here. Another one there."}) + "\n")
    r = subprocess.run([sys.executable, "-m", "pipelines.build", "--input", str(raw), "--output",
                        str(tmp_path / "out"), "--tokenizer", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: tokenizer: <s> has id 1, shardforge needs 0")
    assert "Traceback" not in r.stderr


# ------------------------------------------------------------------ through the build

def quality_rules_off() -> dict:
    from pipelines import clean

    guards = set(getattr(clean, "GUARD_RULES", ()))
    return {"disabled_rules": sorted(set(getattr(clean, "RULE_NAMES", ())) - guards), "english_only": False,
            "min_words": 1}


@pytest.mark.slow
@pytest.mark.parametrize("tok", [
    {"model_type": "unigram", "vocab_size": 300},
    {"model_type": "bpe", "vocab_size": 420, "byte_fallback": True, "sample_docs": 40,
     "input_sentence_size": 400},
])
def test_build_trains_and_encodes_both_model_types(tmp_path, tok):
    from pipelines.build import run_build
    from schemas.sample import decode_sample, iter_tar_samples

    rng = random.Random(9)
    raw = tmp_path / "raw.jsonl"
    texts = [make_article(rng, rng.randint(8, 16)) for _ in range(60)] + [f"{UNSEEN}. " + make_article(rng, 8)]
    raw.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    cfg = BuildConfig.model_validate({
        "sources": [{"name": "news", "input": str(raw)}], "clean": quality_rules_off(), "tokenizer": tok,
        "packing": {"max_seq_len": 64, "valid_fraction": 0.1}, "shards": {"target_samples": 50}})
    out = str(tmp_path / "corpus")
    m = run_build(cfg, out)
    model = open(os.path.join(out, m.tokenizer.path), "rb").read()  # under the attempt folder
    sp = load_processor(model)
    assert m.tokenizer.model_type == tok["model_type"]
    assert m.tokenizer.vocab_size == sp.get_piece_size() <= tok["vocab_size"]
    assert m.tokenizer.special_ids == SPECIAL_TOKENS and m.tokenizer.normalization_rule == "nmt_nfkc"
    assert m.config["tokenizer"] == {**TokenizerConfig().model_dump(), **tok}
    ids = []
    for s in m.shards:
        with open(os.path.join(out, s.name), "rb") as f:
            ids += [decode_sample(k, mem)["input_ids"] for k, mem in iter_tar_samples(f)]
    flat = np.concatenate(ids)
    assert flat.max() < sp.get_piece_size()
    assert "the council" in sp.decode([int(i) for i in flat if i > 4]).lower()
    unk = int((flat == UNK_ID).sum())
    if tok.get("byte_fallback"):
        assert unk == 0  # the emoji / CJK document is encoded byte by byte
