"""SentencePiece: train on a deterministic sample of the clean corpus, encode in batches.

Special tokens have fixed ids (``schemas.SPECIAL_TOKENS``): <s>=0 <pad>=1
</s>=2 <unk>=3 <mask>=4. Training uses one thread and an unshuffled input in
a content-keyed order, because SentencePiece's output differs across thread
counts and its own sampling is not seeded: the same sample then gives the
same model bytes.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.records import SentencedDocument, TokenizedDocument, stable_hash
from schemas import BOS_ID, EOS_ID, MASK_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID
from schemas.config import TokenizerConfig
from schemas.errors import UserError
from schemas.manifest import TokenizerInfo
from schemas.storage import read_bytes, sha256_bytes, write_bytes_atomic

MODEL_PATH = "tokenizer/spm.model"
MAX_SENTENCE_CHARS = 8192


def train_sentencepiece(sentences: Iterable[str], cfg: TokenizerConfig) -> bytes:
    """Train a SentencePiece model on the sentences (in the given order); returns the model bytes."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=buf,
        vocab_size=cfg.vocab_size,
        model_type=cfg.model_type,
        character_coverage=cfg.character_coverage,
        byte_fallback=cfg.byte_fallback,
        normalization_rule_name=cfg.normalization_rule,
        input_sentence_size=cfg.input_sentence_size,
        shuffle_input_sentence=False,
        max_sentence_length=MAX_SENTENCE_CHARS,
        bos_id=BOS_ID, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID,
        user_defined_symbols=["<mask>"],
        hard_vocab_limit=False,
        num_threads=cfg.num_threads,
        minloglevel=2,
    )
    return buf.getvalue()


def load_processor(model: bytes):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model)
    for piece, want in SPECIAL_TOKENS.items():
        if sp.piece_to_id(piece) != want:
            raise UserError(f"tokenizer: {piece} has id {sp.piece_to_id(piece)}, shardforge needs {want}")
    assert sp.piece_to_id("<mask>") == MASK_ID
    return sp


def tokenizer_info(model: bytes, cfg: TokenizerConfig, path: str) -> TokenizerInfo:
    sp = load_processor(model)
    return TokenizerInfo(path=path, sha256=sha256_bytes(model), model_type=cfg.model_type,
                         vocab_size=sp.get_piece_size(), normalization_rule=cfg.normalization_rule)


def sample_key(seed: int, doc_id: str) -> int:
    return stable_hash(seed, "tokenizer-sample", doc_id)


class TrainTokenizer(beam.PTransform):
    """Sentenced documents -> a one-element PCollection with the trained model bytes.

    The sample is the `sample_docs` documents with the smallest content hash
    (a distributed bottom-k: Top.Smallest combines per worker, then merges),
    so it is the same on every runner; training itself runs on one worker,
    bounded by `input_sentence_size`.
    """

    def __init__(self, cfg: TokenizerConfig, seed: int, output: str):
        super().__init__()
        self.cfg, self.seed, self.output = cfg, seed, output

    def expand(self, docs):
        seed, cfg, output = self.seed, self.cfg, self.output

        def train(sample: list[tuple[int, tuple[str, ...]]]) -> bytes:
            sample = sorted(sample)
            sentences = [s[:MAX_SENTENCE_CHARS] for _, sents in sample for s in sents]
            if not sentences:
                raise UserError("tokenizer: the clean corpus is empty, nothing to train on")
            model = train_sentencepiece(sentences[: cfg.input_sentence_size], cfg)
            write_bytes_atomic(f"{output.rstrip('/')}/{MODEL_PATH}", model)
            return model

        return (
            docs
            | "KeyForSample" >> beam.Map(lambda d: (sample_key(seed, d.doc_id), d.sentences))
            | "BottomK" >> beam.combiners.Top.Smallest(cfg.sample_docs)
            | "TrainSentencePiece" >> beam.Map(train)
        )


class _Encode(beam.DoFn):
    """Batched encoding: one library call per batch of sentences, never per sentence."""

    def __init__(self, batch_docs: int):
        self.batch_docs = batch_docs
        self._sp = None
        self._model_sha: str | None = None
        self.empty = Metrics.counter("tokenize", "empty_documents")

    def _processor(self, model: bytes):
        sha = sha256_bytes(model)
        if self._sp is None or sha != self._model_sha:
            self._sp, self._model_sha = load_processor(model), sha
        return self._sp

    def process(self, batch: Sequence[SentencedDocument], model: bytes):
        sp = self._processor(model)
        flat = [s for d in batch for s in d.sentences]
        ids = sp.encode(flat, out_type=int) if flat else []
        pos = 0
        for d in batch:
            sents = tuple(tuple(x) for x in ids[pos: pos + len(d.sentences)] if x)
            pos += len(d.sentences)
            yield TokenizedDocument(d.doc_id, d.source, sents, sum(len(s) for s in sents))


def encode_documents(docs: Sequence[SentencedDocument], model: bytes) -> list[TokenizedDocument]:
    """Plain-Python form of the Tokenize stage (for tests and benchmarks)."""
    return list(_Encode(len(docs)).process(docs, model))


class Tokenize(beam.PTransform):
    """Sentenced documents + model (singleton side input) -> TokenizedDocuments."""

    def __init__(self, model, batch_docs: int = 64):
        super().__init__()
        self.model = model
        self.batch_docs = batch_docs

    def expand(self, docs):
        return (
            docs
            | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=self.batch_docs)
            | "Encode" >> beam.ParDo(_Encode(self.batch_docs), model=beam.pvalue.AsSingleton(self.model))
        )


def load_model(url: str) -> bytes:
    try:
        model = read_bytes(url)
    except FileNotFoundError:
        raise UserError(f"tokenizer model not found: {url}") from None
    load_processor(model)  # validates ids
    return model
