"""Training the tokenizer: SentencePiece (unigram / BPE) or byte-level BPE on the sample, in one step.

SentencePiece trains with one thread on an unshuffled input in a content-keyed order, because its
output differs across thread counts and its own sampling is not seeded: the same sample then gives
the same model bytes. The byte-level BPE trainer gives the same bytes whatever its thread count.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Iterable, Sequence

import apache_beam as beam

from pipelines.coders import TokenizedDocumentCoder  # noqa: F401  (registers the coder of TokenizedDocument)
from pipelines.localrunner.heap import release_free_memory
from pipelines.records import reason_key
from pipelines.tokenizer.model import model_path
from pipelines.tokenizer.sample import (
    MAX_SENTENCE_CHARS,
    BoundedSample,
    SampleBounds,
    SampleEntry,
    plan_sentences,
    sample_entry,
    training_plan,
)
from schemas import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID
from schemas.config import TokenizerConfig
from schemas.errors import UserError
from schemas.tokenizer_files import (
    BYTE_BPE,
    load_tokenizer,
)
from shardforge.storage import unless_swept, write_bytes_atomic

# Byte-level BPE: pairs seen fewer times are never merged (the tokenizers / RoBERTa default is 2).
BYTE_BPE_MIN_FREQUENCY = 2


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
    rarest = ("the rarest characters then become byte pieces" if cfg.byte_fallback
              else "the rarest characters then become <unk>")
    return UserError(f"tokenizer: vocab_size {cfg.vocab_size} is smaller than the {need} pieces the model must "
                     f"hold (special tokens, {'256 byte pieces, ' if cfg.byte_fallback else ''}and every "
                     f"character kept at character_coverage {cfg.character_coverage}); raise vocab_size"
                     f"{' or set byte_fallback: false' if cfg.byte_fallback else ''}; for text of many characters "
                     f"(Chinese, Japanese) lower tokenizer.character_coverage"
                     f"{', e.g. 0.9995 as SentencePiece advises' if cfg.character_coverage > 0.9995 else ' further'} "
                     f"({rarest}; tokenizer: {{character_coverage: ...}} in a --config file)")


_CALLBACK_INTERRUPTED = "INTERNAL: KeyboardInterrupt"  # how SentencePiece says a callback raised KeyboardInterrupt


class _Reading:
    """The sentences as SentencePiece reads them, keeping what their iterator raised (a Ctrl-C landing in
    it, a storage error): SentencePiece reports it only as a RuntimeError naming its type
    ("INTERNAL: KeyboardInterrupt: <EMPTY MESSAGE>"), which hid a Ctrl-C from the command's handling."""

    def __init__(self, sentences: Iterable[str]) -> None:
        self.it = iter(sentences)
        self.raised: BaseException | None = None

    def __iter__(self) -> _Reading:
        return self

    def __next__(self) -> str:
        try:
            return next(self.it)
        except StopIteration:
            raise
        except BaseException as e:
            self.raised = e
            raise


def train_sentencepiece(sentences: Iterable[str], cfg: TokenizerConfig) -> bytes:
    """Train a SentencePiece model on the sentences (in the given order); returns the model bytes. What the
    sentences' iterator raises is raised as itself."""
    reading = _Reading(sentences)
    try:
        return _train_sentencepiece(reading, cfg)
    except RuntimeError as e:
        if reading.raised is not None:
            raise reading.raised from None
        if str(e).startswith(_CALLBACK_INTERRUPTED):  # a Ctrl-C landing in the callback outside the read above
            raise KeyboardInterrupt from None
        err = _required_pieces_error(e, cfg)
        if err is None:
            raise
        raise err from None


def _train_sentencepiece(sentences: Iterable[str], cfg: TokenizerConfig) -> bytes:
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=sentences,
        model_writer=buf,
        vocab_size=cfg.vocab_size,
        model_type=cfg.model_type,
        character_coverage=cfg.character_coverage,
        byte_fallback=cfg.byte_fallback,
        normalization_rule_name=cfg.normalization_rule,
        input_sentence_size=cfg.input_sentence_size,
        shuffle_input_sentence=False,
        max_sentence_length=4 * MAX_SENTENCE_CHARS,  # bytes: a sentence cut to its characters always fits
        bos_id=BOS_ID, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID,
        user_defined_symbols=["<mask>"],
        hard_vocab_limit=False,
        num_threads=cfg.num_threads,
        minloglevel=2,
    )
    return buf.getvalue()


def _said(key: str) -> str:
    """A report's reason key as the one line says it: ``rejected:missing_text_field`` -> ``missing_text_field``,
    ``duplicate:exact`` -> ``exact duplicate``."""
    bucket, _, reason = key.partition(":")
    return f"{reason} duplicate" if bucket == "duplicate" else reason


def empty_corpus_message(why: dict[str, int], hints: dict[str, str]) -> str:
    """The one line for a build that has nothing left to train its tokenizer on: how many documents
    left for which reasons (``why``: counts by ``pipelines.records.reason_key``; most first), and what
    to check for the commonest one (``hints``: by reason)."""
    lost = sum(why.values())
    head = "tokenizer: the clean corpus is empty, nothing to train on"
    if not lost:
        return f"{head} (no document held a sentence: check the inputs)"
    top = sorted(((_said(k), n) for k, n in why.items()), key=lambda kv: (-kv[1], kv[0]))
    counts = ", ".join(f"{n} {reason}" for reason, n in top[:4]) + (", ..." if len(top) > 4 else "")
    hint = hints.get(top[0][0], "check the inputs, and the clean rules for text unlike news or web prose")
    every = "the one document" if lost == 1 else f"all {lost:,} documents"
    return f"{head}: {every} left it ({counts}): {hint}"


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
                 make_room: Callable[[], object] | None = None, losses=None,
                 hints: dict[str, str] | None = None):
        super().__init__()
        self.cfg, self.seed, self.output, self.make_room = cfg, seed, output, make_room
        # What left the corpus (the Rejects and Duplicates): their reasons counted for the one line that
        # says why nothing is left to train on, with ``hints`` for the reasons that have one.
        self.losses, self.hints = losses, hints or {}
        self.stats = None

    def expand(self, docs):
        seed, cfg, output, make_room, hints = self.seed, self.cfg, self.output, self.make_room, self.hints
        bounds = SampleBounds.of(cfg)

        def train(sample: list[SampleEntry], why: dict[str, int] | None = None) -> tuple[bytes, dict[str, object]]:
            plan, stats = training_plan(sample, bounds)
            del sample  # the plan holds what training reads; the rest of the sample can go
            if not stats["sentences"]:
                raise UserError(empty_corpus_message(why or {}, hints))
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
            unless_swept(lambda: write_bytes_atomic(url, model, create=True), "tokenizer model")
            return model, stats

        side = {}
        if self.losses is not None:
            why = (self.losses | "WhyLost" >> beam.Map(reason_key)
                   | "CountLosses" >> beam.combiners.Count.PerElement())
            side["why"] = beam.pvalue.AsDict(why)
        trained = (
            docs
            | "KeyForSample" >> beam.Map(lambda d: sample_entry(seed, d))
            | "BoundedSample" >> beam.CombineGlobally(BoundedSample(bounds))
            | "Train" >> beam.Map(train, **side)
        )
        self.stats = trained | "TrainingStats" >> beam.Map(lambda t: t[1])
        return trained | "Model" >> beam.Map(lambda t: t[0])
