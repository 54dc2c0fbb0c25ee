"""The tokenizer job: train on a deterministic sample of the clean corpus, encode in batches.

Kinds (``tokenizer.model_type``): SentencePiece ``unigram`` / ``bpe``
(``tokenizer/spm.model``) and a byte-level BPE, ``byte_bpe`` (RoBERTa / GPT-2
style, trained with Hugging Face ``tokenizers``, ``tokenizer/tokenizer.json``);
``schemas.tokenizer_files`` reads either. Special tokens have fixed ids
(``schemas.SPECIAL_TOKENS``): <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4.
SentencePiece trains with one thread on an unshuffled input in a
content-keyed order, because its output differs across thread counts and its
own sampling is not seeded: the same sample then gives the same model bytes.
The byte-level BPE trainer gives the same bytes whatever its thread count
(tested). An existing model's ``tokenizer.json`` can be reused instead
(``--tokenizer``, kind ``hf_json``): it keeps its own special ids, which the
manifest records (docs/continued-pretraining.md).
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import os
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.coders import TokenizedDocumentCoder  # noqa: F401  (registers the coder of TokenizedDocument)
from pipelines.localrunner import progress
from pipelines.localrunner.batching import BundleBatches
from pipelines.localrunner.heap import release_free_memory
from pipelines.records import SentencedDocument, TokenizedDocument, stable_hash, token_ids
from schemas import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID
from schemas.config import TokenizerConfig
from schemas.errors import UserError
from schemas.manifest import TokenizerInfo
from schemas.tokenizer_files import (
    BYTE_BPE,
    HF_JSON,
    MODEL_PATHS,
    SENTENCEPIECE,
    WORD_START_RULES,
    SentencePieceTokenizer,
    kind_of_model_type,
    load_tokenizer,
    proto_fields,
    tokenizer_kind,
)
from shardforge.storage import read_bytes, sha256_bytes, unless_swept, write_bytes_atomic

MODEL_PATH = MODEL_PATHS[SENTENCEPIECE]
BYTE_BPE_PATH = MODEL_PATHS[BYTE_BPE]
MAX_SENTENCE_CHARS = 8192
# Byte-level BPE: pairs seen fewer times are never merged (the tokenizers / RoBERTa default is 2).
BYTE_BPE_MIN_FREQUENCY = 2


def model_path(model_type: str) -> str:
    """Where a build writes the tokenizer it trains for this model_type, relative to the corpus root."""
    return MODEL_PATHS[kind_of_model_type(model_type)]


def stored_path(model: bytes) -> str:
    """Where a corpus keeps a copy of this tokenizer file (by its kind), relative to the corpus root."""
    return MODEL_PATHS[tokenizer_kind(model)]


def train_tokenizer(sentences: Sequence[str], cfg: TokenizerConfig) -> bytes:
    """Train the configured kind on the sentences (in the given order); returns the file's bytes."""
    if cfg.model_type == BYTE_BPE:
        return train_byte_bpe(sentences, cfg)
    return train_sentencepiece(sentences, cfg)


def train_byte_bpe(sentences: Iterable[str], cfg: TokenizerConfig) -> bytes:
    """Train a byte-level BPE (RoBERTa / GPT-2 style) with `tokenizers`; returns tokenizer.json bytes.

    All 256 byte symbols are in the initial alphabet, so no text ever becomes
    <unk>. Sentences are encoded with a leading space (``add_prefix_space``):
    every sentence's first word is then the ``Ġword`` token it is in running
    text, and starts a word for whole-word masking. No normalization (as
    RoBERTa). The trainer counts and merges deterministically (ties broken by
    symbol ids), so the same sentences give the same bytes with any thread count.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if cfg.vocab_size < len(SPECIAL_TOKENS) + 256:
        raise UserError(f"tokenizer: byte_bpe needs vocab_size >= {len(SPECIAL_TOKENS) + 256} "
                        f"(5 special tokens + 256 byte symbols), got {cfg.vocab_size}")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    # <mask> absorbs the space before it, as RoBERTa's does ("the <mask>" -> Ġthe <mask>).
    specials = [AddedToken(t, special=True, lstrip=t == "<mask>", normalized=False) for t in SPECIAL_TOKENS]
    trainer = trainers.BpeTrainer(vocab_size=cfg.vocab_size, min_frequency=BYTE_BPE_MIN_FREQUENCY,
                                  special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(sentences, trainer=trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", SPECIAL_TOKENS["</s>"]), ("<s>", SPECIAL_TOKENS["<s>"]),
                                                      trim_offsets=True, add_prefix_space=True)
    data = tok.to_str(pretty=False).encode("utf-8")
    load_tokenizer(data)  # special ids as trained
    return data


def _required_pieces_error(e: RuntimeError, cfg: TokenizerConfig) -> UserError | None:
    """One clear line for SentencePiece's 'vocabulary smaller than required characters' check."""
    msg = str(e)
    if "Vocabulary size is smaller than required_chars" not in msg:
        return None
    need = msg.split(" vs ", 1)[1].split(".", 1)[0].strip() if " vs " in msg else "more"
    return UserError(f"tokenizer: vocab_size {cfg.vocab_size} is smaller than the {need} pieces the model must "
                     f"hold (special tokens, {'256 byte pieces, ' if cfg.byte_fallback else ''}and every "
                     f"character kept at character_coverage {cfg.character_coverage}); raise vocab_size"
                     f"{' or set byte_fallback: false' if cfg.byte_fallback else ''}")


def train_sentencepiece(sentences: Iterable[str], cfg: TokenizerConfig) -> bytes:
    """Train a SentencePiece model on the sentences (in the given order); returns the model bytes."""
    try:
        return _train_sentencepiece(sentences, cfg)
    except RuntimeError as e:
        err = _required_pieces_error(e, cfg)
        if err is None:
            raise
        raise err from None


def _train_sentencepiece(sentences: Iterable[str], cfg: TokenizerConfig) -> bytes:
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
    """A SentencePieceProcessor for the model bytes; UserError unless the special ids are shardforge's."""
    return SentencePieceTokenizer(model).sp


# ---------------------------------------------------------------- model spec

@dataclass(frozen=True)
class ModelSpec:
    """What a SentencePiece model says about itself (read from its serialized proto)."""

    model_type: str
    byte_fallback: bool
    normalization_rule: str


_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
# Field numbers of sentencepiece_model.proto: ModelProto.trainer_spec = 2, .normalizer_spec = 3;
# TrainerSpec.model_type = 3, .byte_fallback = 35; NormalizerSpec.name = 1.
_F_TRAINER, _F_NORMALIZER = 2, 3
_F_MODEL_TYPE, _F_BYTE_FALLBACK, _F_NORM_NAME = 3, 35, 1


def _last(fields: dict[int, list], number: int, default: object) -> object:
    """A field's value as protobuf reads a non-repeated one: the last occurrence wins."""
    return fields.get(number, [default])[-1]


def model_spec(model: bytes) -> ModelSpec:
    """Model type, byte fallback and normalization rule of a SentencePiece model.

    Parsed from the wire format directly: sentencepiece 0.2.3's generated proto
    module does not load under the protobuf < 7 that Beam pins.
    """
    try:
        top = proto_fields(model)
        trainer = proto_fields(_last(top, _F_TRAINER, b""))  # type: ignore[arg-type]
        norm = proto_fields(_last(top, _F_NORMALIZER, b""))  # type: ignore[arg-type]
        mtype = int(_last(trainer, _F_MODEL_TYPE, 1))  # type: ignore[arg-type]
        name = _last(norm, _F_NORM_NAME, b"")
        return ModelSpec(model_type=_MODEL_TYPES.get(mtype, f"type{mtype}"),
                         byte_fallback=bool(_last(trainer, _F_BYTE_FALLBACK, 0)),
                         normalization_rule=bytes(name).decode("utf-8") if isinstance(name, bytes) else "")
    except (ValueError, TypeError, UnicodeDecodeError) as e:
        raise UserError(f"tokenizer: cannot read the SentencePiece model header ({e})") from None


def tokenizer_info(model: bytes, cfg: TokenizerConfig, path: str) -> TokenizerInfo:
    """The manifest's tokenizer entry; kind, type and normalization come from the file itself (a
    reused model may differ from the config's defaults), falling back to the config."""
    tok = load_tokenizer(model)
    if tok.kind == HF_JSON:
        # An existing model's tokenizer: its own model, normalizer and special ids.
        spec = json.loads(model)
        return TokenizerInfo(path=path, sha256=sha256_bytes(model), kind=HF_JSON,
                             model_type=str((spec.get("model") or {}).get("type", "unknown")).lower(),
                             vocab_size=tok.vocab_size, special_ids=tok.special_ids,
                             special_tokens=tok.special_tokens, normalization_rule="tokenizer.json",
                             word_start_rule=tok.word_start_rule)
    if tok.kind == BYTE_BPE:
        model_type, normalization = BYTE_BPE, "none"  # trained without a normalizer, as RoBERTa
    else:
        spec = model_spec(model)
        model_type = spec.model_type or cfg.model_type
        normalization = spec.normalization_rule or cfg.normalization_rule
    return TokenizerInfo(path=path, sha256=sha256_bytes(model), kind=tok.kind, model_type=model_type,
                         vocab_size=tok.vocab_size, normalization_rule=normalization,
                         word_start_rule=WORD_START_RULES[tok.kind])


def sample_key(seed: int, doc_id: str) -> int:
    return stable_hash(seed, "tokenizer-sample", doc_id)


# One document of the training sample: (sample key, its sentences (cut at MAX_SENTENCE_CHARS) joined,
# their lengths in characters as raw uint32 bytes, their UTF-8 bytes). One string per document, not
# one per sentence: the sample is held whole by the combine that collects it and by the training
# step (below the byte cap, the whole corpus), and a str costs ~49 bytes beside its text.
SampleEntry = tuple[int, str, bytes, int]


def sample_entry(seed: int, doc: SentencedDocument) -> SampleEntry:
    """A document's entry in the training sample (its key, its sentences as training reads them, their bytes)."""
    sents = [s[:MAX_SENTENCE_CHARS] for s in doc.sentences]
    text = "".join(sents)
    return (sample_key(seed, doc.doc_id), text, array("I", map(len, sents)).tobytes(),
            len(text.encode("utf-8", "surrogatepass")))


def entry_count(entry: SampleEntry) -> int:
    """How many sentences a sample entry holds."""
    return len(entry[2]) // 4


def entry_sentences(entry: SampleEntry) -> Iterator[str]:
    """A sample entry's sentences."""
    text, start = entry[1], 0
    for n in array("I", entry[2]):
        yield text[start:start + n]
        start += n


@dataclass(frozen=True)
class SampleBounds:
    """The training sample's bounds: documents, sentences and UTF-8 bytes (TokenizerConfig)."""

    documents: int
    sentences: int
    bytes: int

    @classmethod
    def of(cls, cfg: TokenizerConfig) -> SampleBounds:
        return cls(cfg.sample_docs, cfg.input_sentence_size, cfg.effective_sample_bytes)

    def needed(self, entries: list[SampleEntry]) -> list[SampleEntry]:
        """The entries (sorted by key) that can contribute a sentence: each one before which fewer
        than the bounds' documents, sentences and bytes come. On any subset of a corpus this keeps
        every entry the whole corpus's sample needs (its prefix sums are no larger), so it can trim
        partial accumulators: memory stays bounded by the sample, not the corpus."""
        entries.sort()
        out: list[SampleEntry] = []
        sents = nbytes = 0
        for e in entries:
            if len(out) >= self.documents or sents >= self.sentences or nbytes >= self.bytes:
                break
            out.append(e)
            sents += entry_count(e)
            nbytes += e[3]
        return out


class BoundedSample(beam.CombineFn):
    """The smallest-key documents of the corpus, as many as the sample bounds need (a bottom-k that
    counts documents, sentences and bytes). Associative and order-free: the same sample on every
    runner, bundling and retry."""

    def __init__(self, bounds: SampleBounds):
        self.bounds = bounds

    def create_accumulator(self) -> list:
        return [[], 0, 0]  # entries, sentences, bytes (since the last trim)

    def _add(self, acc: list, entries: Iterable[SampleEntry]) -> list:
        for e in entries:
            acc[0].append(e)
            acc[1] += entry_count(e)
            acc[2] += e[3]
        b = self.bounds
        # Trim once twice the bounds are held: amortized O(log n) per document.
        if len(acc[0]) >= 2 * b.documents or acc[1] >= 2 * b.sentences or acc[2] >= 2 * b.bytes:
            kept = b.needed(acc[0])
            acc = [kept, sum(entry_count(e) for e in kept), sum(e[3] for e in kept)]
        return acc

    def add_input(self, acc: list, entry: SampleEntry) -> list:
        return self._add(acc, (entry,))

    def merge_accumulators(self, accs: Iterable[list]) -> list:
        out = self.create_accumulator()
        for a in accs:
            out = self._add(out, a[0])
        return out

    def extract_output(self, acc: list) -> list[SampleEntry]:
        return self.bounds.needed(acc[0])


def training_plan(sample: list[SampleEntry], bounds: SampleBounds
                  ) -> tuple[list[tuple[SampleEntry, int]], dict[str, object]]:
    """What the tokenizer trains on: (entry, how many of its first sentences) in sample order, and
    what was taken.

    The longest run of the sample's sentences (documents in key order) within the sentence and
    byte bounds. The stats: documents, sentences and bytes taken, and the bound the sample
    reached (``bounded_by``: "sentences", "bytes", "documents" (``sample_docs`` documents sampled)
    or None: the whole corpus). ``plan_sentences`` reads the sentences of a plan one at a time.
    """
    sample = sorted(sample)
    plan: list[tuple[SampleEntry, int]] = []
    sentences = nbytes = docs = 0
    bounded_by: str | None = "documents" if len(sample) >= bounds.documents else None
    for entry in sample:
        count, doc_bytes = entry_count(entry), entry[3]
        if sentences + count <= bounds.sentences and nbytes + doc_bytes <= bounds.bytes:
            plan.append((entry, count))  # the whole document fits (the usual case): no per-sentence work
            sentences += count
            nbytes += doc_bytes
            docs += 1 if count else 0
            continue
        taken = 0
        for s in entry_sentences(entry):
            size = len(s.encode("utf-8", "surrogatepass"))
            if sentences >= bounds.sentences:
                bounded_by = "sentences"
                break
            if nbytes + size > bounds.bytes:
                bounded_by = "bytes"
                break
            sentences += 1
            nbytes += size
            taken += 1
        if taken:
            plan.append((entry, taken))
            docs += 1
        if bounded_by in ("sentences", "bytes"):
            break
    else:  # every document fitted whole: a bound may still be reached exactly at a document's end
        if sentences >= bounds.sentences:
            bounded_by = "sentences"
        elif nbytes >= bounds.bytes:
            bounded_by = "bytes"
    return plan, {"documents": docs, "sentences": sentences, "bytes": nbytes, "bounded_by": bounded_by}


def plan_sentences(plan: list[tuple[SampleEntry, int]]) -> Iterator[str]:
    """The sentences of a training plan, in order, one at a time (the trainer copies what it keeps)."""
    for entry, count in plan:
        yield from itertools.islice(entry_sentences(entry), count)


def training_sentences(sample: list[SampleEntry], bounds: SampleBounds) -> tuple[list[str], dict[str, object]]:
    """``training_plan``'s sentences as a list, and its stats."""
    plan, stats = training_plan(sample, bounds)
    return list(plan_sentences(plan)), stats


class TrainTokenizer(beam.PTransform):
    """Sentenced documents -> a one-element PCollection with the trained tokenizer file's bytes.

    The sample is the documents with the smallest content hash, as many as its bounds need
    (``sample_docs`` documents, ``input_sentence_size`` sentences, ``effective_sample_bytes`` UTF-8 bytes;
    ``BoundedSample``: a distributed bottom-k that combines per worker, then merges, trimming as
    it goes), so it is the same on every runner and its memory is bounded whatever the corpus
    size; training runs on one worker on the first sentences of the sample within the bounds.
    After expansion, ``stats`` is a one-element PCollection with the training's cost: documents,
    sentences and bytes sampled, and the bound that cut the sample (the time is logged).

    ``make_room``: called right before training, to free memory for it (the runner's choice:
    ``pipelines.options.RunnerPlan``).
    """

    def __init__(self, cfg: TokenizerConfig, seed: int, output: str,
                 make_room: Callable[[], object] | None = None):
        super().__init__()
        self.cfg, self.seed, self.output, self.make_room = cfg, seed, output, make_room
        self.stats = None

    def expand(self, docs):
        seed, cfg, output, make_room = self.seed, self.cfg, self.output, self.make_room
        bounds = SampleBounds.of(cfg)

        def train(sample: list[SampleEntry]) -> tuple[bytes, dict[str, object]]:
            plan, stats = training_plan(sample, bounds)
            del sample  # the plan holds what training reads; the rest of the sample can go
            if not stats["sentences"]:
                raise UserError("tokenizer: the clean corpus is empty, nothing to train on (every document was "
                                "filtered, rejected or a duplicate: check the inputs, and the clean rules for "
                                "text unlike news or web prose)")
            # The peak of a build below the sample caps: start it from what is live, not from the
            # high-water mark of the stages before (whose freed pages glibc and pyarrow keep), and
            # with the stage data that waits for later stages out of memory where the runner can.
            if make_room is not None:
                make_room()
            release_free_memory()
            start = time.monotonic()
            model = train_tokenizer(plan_sentences(plan), cfg)
            # The time goes to the log, not the report: report.json stays byte-identical run to run.
            logging.getLogger("shardforge.tokenizer").info(
                "tokenizer trained on %d sentences (%.1f MB) in %.1f s", stats["sentences"],
                stats["bytes"] / 1e6, time.monotonic() - start)
            url = f"{output.rstrip('/')}/{model_path(cfg.model_type)}"
            unless_swept(lambda: write_bytes_atomic(url, model), "tokenizer model")
            return model, stats

        trained = (
            docs
            | "KeyForSample" >> beam.Map(lambda d: sample_entry(seed, d))
            | "BoundedSample" >> beam.CombineGlobally(BoundedSample(bounds))
            | "Train" >> beam.Map(train)
        )
        self.stats = trained | "TrainingStats" >> beam.Map(lambda t: t[1])
        return trained | "Model" >> beam.Map(lambda t: t[0])


def resolve_threads(num_threads: int) -> int:
    """Encode threads: num_threads if > 0, else the CPUs this worker process may use."""
    if num_threads > 0:
        return num_threads
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


# _Encode's tagged output: a batch's {source: (documents, tokens, <unk> tokens)}.
TOKEN_COUNTS = "token_counts"


class _Encode(BundleBatches):
    """Batched encoding: one library call per batch of sentences, never per sentence.

    Documents come one at a time; the DoFn encodes them in batches of ``batch_docs`` (fewer at a
    bundle's end: ``pipelines.localrunner.batching``). Each document's tokens do not depend on its batch.

    SentencePiece encodes a list on `num_threads` C++ threads (the GIL is
    released), the parallelism that helps on a worker (ENVIRONMENT.md: Beam's
    multi-process mode does not, on 2 cores); `tokenizers` (byte_bpe) uses its
    own thread pool. Encoding does not depend on the thread count, so this
    setting never changes the corpus.
    """

    def __init__(self, batch_docs: int, num_threads: int = 0):
        super().__init__(batch_docs)
        self.num_threads = num_threads
        self._threads = 1
        self._tok = None
        self._model_sha: str | None = None
        self._model_ref: bytes | None = None
        self.empty = Metrics.counter("tokenize", "empty_documents")
        self.sentences = Metrics.counter("tokenize", "sentences")

    def setup(self) -> None:
        self._threads = resolve_threads(self.num_threads)

    def _tokenizer(self, model: bytes):
        # The side input is usually the same object batch after batch: skip hashing it then.
        if self._tok is not None and model is self._model_ref:
            return self._tok
        sha = sha256_bytes(model)
        if self._tok is None or sha != self._model_sha:
            self._tok, self._model_sha = load_tokenizer(model), sha
        self._model_ref = model
        return self._tok

    def process(self, doc: SentencedDocument, model: bytes):
        self._tokenizer(model)  # the batch is encoded with the model of its last document
        yield from self.add(doc)

    def handle_batch(self, batch: Sequence[SentencedDocument]):
        """The batch's TokenizedDocuments, then (tagged TOKEN_COUNTS) its counts."""
        tok = self._tok
        flat = [s for d in batch for s in d.sentences]
        # One thread per ~64 sentences at most: tiny batches are not worth the thread start-up.
        threads = max(1, min(self._threads, len(flat) // 64))
        ids = tok.encode(flat, num_threads=threads)
        self.sentences.inc(len(flat))
        progress.tick("tokenize documents", len(batch), unit="doc")
        counts: dict[str, list[int]] = {}
        pos = 0
        for d in batch:
            doc_ids = ids[pos: pos + len(d.sentences)]
            pos += len(d.sentences)
            # map/filter keep the per-sentence conversion mostly in C (it rivals the encode itself
            # otherwise); TokenIds, not int tuples, for memory (pipelines.records.TokenIds).
            sents = tuple(filter(None, map(token_ids, doc_ids)))
            if not sents:
                self.empty.inc()
            n = sum(map(len, sents))
            c = counts.get(d.source)
            if c is None:
                c = counts[d.source] = [0, 0, 0]
            c[0] += 1
            c[1] += n
            c[2] += sum(s.count(UNK_ID) for s in doc_ids)  # the encoder's int lists: a count in C
            yield TokenizedDocument(d.doc_id, d.source, sents, n)
        yield beam.pvalue.TaggedOutput(TOKEN_COUNTS, {k: tuple(v) for k, v in sorted(counts.items())})


def encode_documents(docs: Sequence[SentencedDocument], model: bytes, num_threads: int = 1,
                     batch_docs: int | None = None) -> list[TokenizedDocument]:
    """Plain-Python form of the Tokenize stage (for tests and benchmarks): one DoFn, batches of batch_docs."""
    batch = batch_docs or max(1, len(docs))
    fn = _Encode(batch, num_threads)
    fn.setup()
    fn._tokenizer(model)
    return [t for i in range(0, len(docs), batch) for t in fn.handle_batch(docs[i: i + batch])
            if isinstance(t, TokenizedDocument)]


class Tokenize(beam.PTransform):
    """Sentenced documents + model (singleton side input) -> TokenizedDocuments.

    batch_docs: documents per encode call (fewer at a bundle's end);
    num_threads: SentencePiece threads per call (0: the worker's CPUs).
    After expansion, ``counts`` holds each batch's ``{source: (documents, tokens, <unk> tokens)}``
    (document tokens; documents without tokens included), counted as the batch is encoded: what
    the report's tokenizer section sums (``pipelines.report.summaries.TokenCounts``).
    """

    def __init__(self, model, batch_docs: int = 64, num_threads: int = 0):
        super().__init__()
        self.model = model
        self.batch_docs = batch_docs
        self.num_threads = num_threads
        self.counts = None  # set by expand

    def expand(self, docs):
        out = (
            docs
            | "Encode" >> beam.ParDo(_Encode(self.batch_docs, self.num_threads),
                                     model=beam.pvalue.AsSingleton(self.model)
                                     ).with_output_types(TokenizedDocument  # its compact coder
                                                         ).with_outputs(TOKEN_COUNTS, main="documents")
        )
        self.counts = out[TOKEN_COUNTS]
        return out.documents


def load_model(url: str) -> bytes:
    """Read and validate a tokenizer file to reuse (any kind; special ids checked); one clear error.

    A folder (a Hugging Face model's) means its ``tokenizer.json``."""
    try:
        try:
            model = read_bytes(url)
        except IsADirectoryError:
            model = read_bytes(f"{url.rstrip('/')}/tokenizer.json")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise UserError(f"tokenizer model not found: {url}") from None
    try:
        load_tokenizer(model)  # validates ids
    except UserError as e:
        raise UserError(f"{e} [model {url}]") from None
    return model


def store_model(model: bytes, output: str) -> bytes:
    """Copy a reused model into the corpus (at ``stored_path(model)``) and pass it on.

    A manifest names only files inside its corpus (docs/storage.md), so a
    corpus built with ``--tokenizer URL`` carries its own copy: it trains
    wherever it is read from, whatever the working directory was.
    """
    unless_swept(lambda: write_bytes_atomic(f"{output.rstrip('/')}/{stored_path(model)}", model), "tokenizer model")
    return model
