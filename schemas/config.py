"""Typed configs: the build config (data job) and the train config (trainer).

Configs are pydantic models with defaults from the papers and the literature;
unknown keys are errors (a typo must not silently fall back to a default).
``schemas.configfile`` reads them (YAML or JSON) and turns validation failures
into one readable UserError.
"""

from __future__ import annotations

import codecs
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


# ============================================================ build config

SourceFormat = Literal["auto", "jsonl", "json", "parquet", "arrow", "ccnews", "openwebtext", "text", "wikipedia", "warc"]


class SourceConfig(Strict):
    """One raw input: a name (ccnews | openwebtext | stories | yours) and a URL/glob."""

    name: str = Field(pattern=r"^[a-z0-9_]{1,40}$")
    # A file URL, a folder, or a glob. Doc ids name each file by its path under the folder this names
    # (a glob's fixed part): the same files in another folder or bucket build the same corpus.
    input: str
    format: SourceFormat = "auto"
    text_field: str = "text"
    # The text encoding of the source's text, JSON and JSONL files and tar members (Python's codec
    # names: cp1252, latin-1, utf-16-le, ...); stored as the codec's canonical name. Text with a
    # UTF-16/32 byte-order mark is read by its mark whatever this says; Parquet text is UTF-8.
    encoding: str = "utf-8"
    # Stories: many documents per file separated by lines that read this ("": blank lines; None: one
    # document per file).
    delimiter: str | None = None
    # Per-source line rules (C4's terminal punctuation suits web and news text only).
    # None: by source name (off for stories/books, on for everything else).
    line_rules: bool | None = None
    # Readers stop reading one record (JSON line, array item, archive member, text document)
    # past this many bytes and filter it as max_doc_bytes: memory stays bounded on huge inputs.
    max_record_bytes: int = Field(4_000_000, ge=1024)
    # Bounded work per input file (decompression bombs, docs/cleaning.md): once a file has
    # decompressed 16 MiB, it may not produce more than this many bytes per byte read from it
    # (every level of nesting together; gzip tops out near 1032:1, text compresses 3-15:1) ...
    max_expansion_ratio: float | None = Field(100.0, gt=1)
    # ... nor more than this many decompressed bytes in all (None: no limit). Over either limit
    # the rest of the file is rejected (reason max_expansion_ratio / max_decompressed_bytes).
    max_decompressed_bytes: int | None = Field(64 << 30, ge=1 << 20)
    # Keep only records whose news-please `language` field is one of these (when the field is
    # present); None: ignore the field (the English filter in cleaning still applies).
    languages: list[str] | None = None
    # A symbolic link matched by `input` whose target lies outside the folder it names (the glob's
    # fixed part) is not read (one `not_a_file` reject) unless this is true.
    follow_links: bool = False

    @field_validator("input")
    @classmethod
    def _input_names_something(cls, v: str) -> str:
        if not v.strip():  # read as a path, "" would be the working folder
            raise ValueError("empty: give a file URL, a folder or a glob")
        return v

    @field_validator("encoding")
    @classmethod
    def _known_text_encoding(cls, v: str) -> str:
        try:
            info = codecs.lookup(v)
        except LookupError:
            raise ValueError(f"{v!r} is no text encoding Python knows (e.g. utf-8, cp1252, latin-1, utf-16-le)") \
                from None
        if not getattr(info, "_is_text_encoding", True):  # rot13, base64, zlib: transforms, not encodings
            raise ValueError(f"{v!r} is a codec that transforms data, not a text encoding (e.g. utf-8, cp1252)")
        return info.name


class PiiConfig(Strict):
    """PII in kept documents replaced by placeholders (pipelines/clean/pii.py, docs/cleaning.md)."""

    email: bool = True
    ip: bool = True
    # Off by default: business and service numbers dominate web text, and only North American and
    # "+country" numbers are recognized (docs/cleaning.md, "PII").
    phone: bool = False
    # Only globally routable IP addresses (private, loopback and documentation ranges name no one).
    ip_public_only: bool = True
    # Dolma's placeholders; datatrove's style is a dummy value such as "email@example.com".
    email_placeholder: str = "|||EMAIL_ADDRESS|||"
    ip_placeholder: str = "|||IP_ADDRESS|||"
    phone_placeholder: str = "|||PHONE_NUMBER|||"


class CleanConfig(Strict):
    """Cleaning rules; defaults from C4 and Gopher (see docs/cleaning.md)."""

    invalid_utf8: Literal["reject", "repair"] = "reject"
    max_doc_bytes: int = 1_000_000
    min_words: int = 50
    max_words: int = 100_000
    min_mean_word_len: float = 3.0
    max_mean_word_len: float = 10.0
    max_symbol_word_ratio: float = 0.1
    max_bullet_lines: float = 0.9
    max_ellipsis_lines: float = 0.3
    min_alpha_words: float = 0.8
    min_stop_words: int = 2
    max_dup_line_frac: float = 0.3
    max_dup_para_frac: float = 0.3
    # Gopher also bounds the characters in duplicated lines / paragraphs.
    max_dup_line_char_frac: float = 0.2
    max_dup_para_char_frac: float = 0.2
    max_top_ngram_frac: dict[int, float] = {2: 0.2, 3: 0.18, 4: 0.16}
    max_dup_ngram_frac: dict[int, float] = {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}
    line_rules: bool = True
    line_min_words: int = 5
    # "c4": C4's reference end marks (. ? ! and a straight "), lines ending in "..." dropped;
    # "typographic": also closing curly quotes, and "..." lines kept (the default of earlier shardforge releases).
    line_end_marks: Literal["c4", "typographic"] = "c4"
    # C4 drops lines holding a "word" longer than this (minified code, base64 blobs).
    line_max_word_chars: int = 1000
    # Ours (not C4/Gopher): pages whose characters are mostly inside <tags> are HTML, not text.
    max_markup_frac: float = 0.2
    min_sentences: int = 3
    # The language rule (reason "language"; "english" is accepted as its old name in
    # disabled_rules). english_only=False switches it off; the language is still recorded.
    english_only: bool = True
    # Documents whose detected language is in this list are kept (codes as CLD2 spells them:
    # "en", "de", "zh", "zh-Hant", ...); an empty list keeps every language.
    languages: list[str] = ["en"]
    # "cld2": pycld2 (model inside the wheel, 165 languages); "stopwords": the older English
    # stop-word heuristic (it can only tell en/de/fr/es/nl/it/pt apart).
    language_id: Literal["cld2", "stopwords"] = "cld2"
    # cld2: least share of the text in the detected language (see docs/cleaning.md).
    min_language_score: float = Field(0.5, ge=0, le=1)
    # stopwords: least English stop-word share.
    min_english_score: float = 0.05
    # Rules named here are switched off (e.g. ["min_words"] for a toy corpus).
    disabled_rules: list[str] = []
    # E-mail / IP / phone replaced by placeholders in the kept documents (after the rules).
    pii: PiiConfig = PiiConfig()


class DedupeConfig(Strict):
    exact: bool = True
    near: bool = True
    # 3-word shingles: a substituted word costs 3 shingles, not 5 (3% substitution: J 0.84, not 0.76).
    ngram: int = Field(3, ge=1, le=20)
    # 28 x 4 = 112 permutations: a pair at Jaccard 0.5 is a candidate 84% of the time, at 0.7 99.99%
    # (14 x 8: 5% and 57%); candidates are verified, so the low knee costs work, not precision.
    bands: int = Field(28, ge=1)
    rows: int = Field(4, ge=1)
    # A removed document's true shingle Jaccard with the document kept for it reaches `threshold`,
    # or it lies in that document: |A&B| / |A| reaches `containment` (a truncated copy, an excerpt, a
    # text quoted whole in a longer one: the longer one is kept) while Jaccard is at least
    # `containment_min_jaccard` (0: whatever share of the longer one it is) and it has at least
    # `containment_min_shingles` shingles (a short snippet of a long article is not its copy).
    threshold: float = Field(0.7, gt=0, le=1)
    containment: float | None = Field(0.9, gt=0, le=1)
    containment_min_jaccard: float = Field(0.0, ge=0, le=1)
    containment_min_shingles: int = Field(50, ge=1)
    # Also judge a copy by its text before C4's line rules cut lines from it (a substitution that takes
    # a full stop, a cut mid-sentence cost it a paragraph there): Jaccard >= `threshold` before them,
    # and what is kept of it lies in what is kept of the other (docs/dedupe.md, section 2b).
    before_line_rules: bool = True
    # Containment candidates: 1 shingle in `anchor_every` (chosen by value) is an anchor, and each pair
    # of consecutive anchors is an extra LSH key, so a passage and a longer text holding it meet
    # whatever their Jaccard (0: band keys only). 16, not 32: a passage of ~130 shingles then holds
    # fewer than two anchors 3 times in 1,000, not 9 in 100 (docs/dedupe.md, section 2b).
    anchor_every: int = Field(16, ge=0, le=4096)
    # In an anchor bucket shared by many documents (a paragraph or template many pages reuse), only a
    # document's `anchor_queries` smallest anchors (by value) pair it with the bucket's root, which is
    # then screened only if it met half of them; every anchor does in a bucket of <= 3 documents.
    # On prose that reuses paragraphs: 2.8-6x fewer candidates, the same passages found
    # (docs/dedupe.md, section 2b). 0: every anchor, always.
    anchor_queries: int = Field(4, ge=0, le=4096)
    seed: int = 42
    # Guard against transitive-closure blow-ups: verified edges only, and
    # members must be similar to their cluster's kept document.
    max_cluster_size: int = 1000
    # Large-star/small-star rounds of the connected-components step (the Beam
    # graph is unrolled; unconverged clusters only lose recall, see docs/dedupe.md).
    components_rounds: int = Field(12, ge=1, le=64)
    # Persisted signature index of an existing corpus (incremental dedupe).
    index: str | None = None
    # Against an index, every worker that reads its parts holds a filter of this run's new band keys
    # (and one of its exact hashes), 20-40 bits a key (~53 bytes a KB of new text), at most this
    # size each. Past it (~5.8 GB of new text at 256) the filter lets more through: more old entries
    # are read and shuffled, never more memory or another verdict (docs/dedupe.md, section 3).
    index_filter_mb: float = Field(256.0, gt=0, le=16384)
    # C4-style: drop every repeat of a span of `span_sentences` consecutive sentences after
    # its first occurrence (smallest doc_id, position), within this batch (docs/dedupe.md).
    repeated_spans: bool = False
    span_sentences: int = Field(3, ge=1, le=64)


class DecontaminateConfig(Strict):
    """Benchmark decontamination (pipelines/dedupe/decontaminate.py, docs/dedupe.md)."""

    # Evaluation sets: JSONL, JSON, Parquet or text files (.gz / .bz2 / .xz too), any fsspec URL or glob; empty: off.
    paths: list[str] = []
    # A document sharing a word n-gram of this many words with an evaluation text is contaminated (GPT-3: 13).
    ngram: int = Field(13, ge=4, le=64)
    # "document": the document is removed (filtered: decontaminated); "spans": only the overlapping words.
    mode: Literal["document", "spans"] = "document"
    # spans: a document with more overlaps than this, or left shorter than an n-gram, is removed whole.
    max_spans: int = Field(10, ge=1)
    # JSON records: the fields whose strings are the text (None: every string value of the record).
    fields: list[str] | None = None
    # The evaluation n-grams' in-memory filter (every document is tested against it) is at most this size.
    filter_mb: float = Field(64.0, gt=0, le=4096)


# The default byte bound of the tokenizer's training sample (TokenizerConfig.effective_sample_bytes).
SAMPLE_BYTES_PER_PIECE = 2_000
SAMPLE_BYTES_MIN = 16_000_000


def default_sample_bytes(vocab_size: int) -> int:
    """The training sample's byte bound when ``tokenizer.sample_bytes`` is unset."""
    return max(SAMPLE_BYTES_MIN, SAMPLE_BYTES_PER_PIECE * vocab_size)


class TokenizerConfig(Strict):
    model_url: str | None = None  # reuse an existing tokenizer file (spm.model or tokenizer.json) instead of training
    # unigram / bpe: SentencePiece; byte_bpe: byte-level BPE (RoBERTa / GPT-2) trained with `tokenizers`.
    model_type: Literal["unigram", "bpe", "byte_bpe"] = "unigram"
    vocab_size: int = Field(8000, ge=64, le=1 << 20)
    sample_docs: int = Field(200_000, ge=1)
    # Sentences the tokenizer trains on at most (the first of the sample); SentencePiece requires > 100.
    input_sentence_size: int = Field(2_000_000, gt=100)
    # UTF-8 bytes of sentences the tokenizer trains on at most (the first of the sample, like
    # input_sentence_size): training time and memory stay bounded whatever the corpus size. At
    # least 32 KiB, so the longest sentence (8192 characters) always fits. None: 2,000 bytes per
    # piece of the vocabulary, at least 16 MB (effective_sample_bytes; docs/tokenizer.md).
    sample_bytes: int | None = Field(None, ge=32_768)
    # SentencePiece only. Coverage 1.0 gives every character of the sample a piece (English: ~100
    # characters); byte fallback spells any other character as <0xNN> byte pieces, so no text
    # becomes <unk>. Lower the coverage (0.9995) for scripts with thousands of characters (CJK).
    character_coverage: float = Field(1.0, gt=0, le=1)
    byte_fallback: bool = True
    normalization_rule: str = "nmt_nfkc"
    # SentencePiece training threads. The model depends on this count, not on the machine: the same
    # count gives the same bytes on any number of cores (docs/tokenizer.md, Determinism); more
    # threads train faster where there are cores for them. Byte-level BPE ignores it (RAYON_NUM_THREADS).
    num_threads: int = Field(1, ge=1)
    encode_batch: int = 512
    # SentencePiece threads per encode call (0: the worker's CPUs); ids do not depend on it.
    encode_threads: int = Field(0, ge=0)

    @property
    def effective_sample_bytes(self) -> int:
        """The byte bound of the training sample: ``sample_bytes``, or by default
        SAMPLE_BYTES_PER_PIECE per piece of the vocabulary and at least SAMPLE_BYTES_MIN.

        Held-out compression of an 8k-piece unigram model on real text stops improving at 16 MB
        of sample (2,000 bytes a piece); at 32k pieces it still gains ~0.3 % per 16 MB at 64 MB
        (benchmarks/results/tokenizer_sample.md). Training holds ~20 bytes of memory per sample
        byte, so the bound is also the trainer's memory.
        """
        return self.sample_bytes if self.sample_bytes is not None else default_sample_bytes(self.vocab_size)


PackingRule = Literal["full_sentences", "doc_sentences", "segment_pair_nsp", "sentence_pair_nsp", "sop"]
PAIR_RULES = ("segment_pair_nsp", "sentence_pair_nsp", "sop")


class PackingConfig(Strict):
    rule: PackingRule = "full_sentences"
    max_seq_len: int = Field(512, ge=8, le=1 << 16)
    short_seq_prob: float | None = Field(None, ge=0, le=1)  # None: 0.1 for pair rules, 0 otherwise
    valid_fraction: float = Field(0.01, ge=0, lt=1)
    # Documents are packed within deterministic groups (by doc hash), in
    # parallel; a group's documents must fit one worker's memory. `groups`
    # fixes the count; None derives it from the corpus: ceil(tokens / group_tokens).
    # 4M tokens (~17 MB of English text): a worker packs a group in ~250 MB, and a group's
    # end costs one short sequence per ~8,000 of 512 tokens.
    groups: int | None = Field(None, ge=1)
    group_tokens: int = Field(4_000_000, ge=1)

    @property
    def effective_short_seq_prob(self) -> float:
        if self.short_seq_prob is not None:
            return self.short_seq_prob
        return 0.1 if self.rule in PAIR_RULES else 0.0


class ShardConfig(Strict):
    target_bytes: int = Field(256 * 1024 * 1024, ge=1024)
    target_samples: int | None = Field(None, ge=1)


class BuildConfig(Strict):
    sources: list[SourceConfig]
    clean: CleanConfig = CleanConfig()
    dedupe: DedupeConfig = DedupeConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    packing: PackingConfig = PackingConfig()
    shards: ShardConfig = ShardConfig()
    # Documents overlapping evaluation sets removed (docs/dedupe.md, "Decontamination"); off without paths.
    decontaminate: DecontaminateConfig = DecontaminateConfig()
    seed: int = 1234
    # Write the clean and tokenized Parquet intermediates (repack starts from them).
    write_intermediates: bool = True

    @model_validator(mode="after")
    def _unique_sources(self) -> BuildConfig:
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique, got {names}")
        if not self.sources:
            raise ValueError("at least one source is required")
        return self


# ============================================================ train config

ModelSize = Literal["tiny", "small", "base", "large"]
# Each named size's shape: what trainer/model.py builds, and what an override is checked against before any work.
MODEL_SIZES: dict[str, dict[str, int]] = {
    "tiny": {"hidden": 64, "layers": 2, "heads": 2, "intermediate": 128},
    "small": {"hidden": 512, "layers": 4, "heads": 8, "intermediate": 2048},
    "base": {"hidden": 768, "layers": 12, "heads": 12, "intermediate": 3072},
    "large": {"hidden": 1024, "layers": 24, "heads": 16, "intermediate": 4096},
}


class ModelConfig(Strict):
    size: ModelSize = "tiny"
    # Explicit overrides of the named size (None: take the size's value).
    hidden: int | None = None
    layers: int | None = None
    heads: int | None = None
    intermediate: int | None = None
    # ALBERT: factorized embedding size E < H (None: E = H).
    embedding_size: int | None = None
    # ALBERT cross-layer parameter sharing.
    share: Literal["none", "all", "attention", "ffn"] = "none"
    dropout: float = Field(0.1, ge=0, lt=1)
    # The attention probabilities' own rate (None: ``dropout``). MosaicBERT trains with 0 here and 0.1 elsewhere.
    attention_dropout: float | None = Field(None, ge=0, lt=1)
    max_positions: int = 514
    sentence_head: Literal["none", "nsp", "sop"] = "none"
    span_boundary: bool = False  # SpanBERT SBO head
    masked_only_head: bool = True  # project to the vocabulary only at masked positions
    # --- what an existing model (--init, trainer/hf_init.py) may differ in; defaults are RoBERTa's.
    type_vocab_size: int | None = Field(None, ge=1)  # None: 2 with a sentence head, else 1
    layer_norm_eps: float = Field(1e-5, gt=0)  # BERT / ALBERT: 1e-12
    hidden_act: Literal["gelu", "gelu_new"] = "gelu"  # FFN: exact (erf) GELU, or ALBERT's tanh form
    lm_head_act: Literal["gelu", "gelu_new"] = "gelu"  # RoBERTa's head is always erf GELU; BERT/ALBERT's hidden_act
    # The Hugging Face class export writes (auto: XLM-RoBERTa, or ALBERT for factorized / shared models).
    architecture: Literal["auto", "roberta", "xlm-roberta", "bert", "albert"] = "auto"

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> ModelConfig:
        """Every attention head takes hidden / heads dimensions: refuse heads that do not divide hidden."""
        size_hidden, size_heads = MODEL_SIZES[self.size]["hidden"], MODEL_SIZES[self.size]["heads"]
        hidden, heads = self.hidden or size_hidden, self.heads or size_heads
        if hidden % heads:
            size = f" (size {self.size}'s)"
            raise ValueError(f"hidden {hidden}{'' if self.hidden else size} is not divisible by heads {heads}"
                             f"{'' if self.heads else size}: set heads to a divisor of {hidden}, or hidden to "
                             f"a multiple of {heads}")
        return self


class MaskingConfig(Strict):
    scheme: Literal["token", "whole_word", "span", "ngram"] = "token"
    rate: float = Field(0.15, gt=0, lt=1)
    mask_prob: float = Field(0.8, ge=0, le=1)
    random_prob: float = Field(0.1, ge=0, le=1)
    span_p: float = Field(0.2, gt=0, le=1)
    span_max: int = Field(10, ge=1)
    ngram_max: int = Field(3, ge=1)

    @model_validator(mode="after")
    def _probs(self) -> MaskingConfig:
        if self.mask_prob + self.random_prob > 1 + 1e-9:
            raise ValueError("mask_prob + random_prob must be <= 1")
        return self


class OptimConfig(Strict):
    name: Literal["adamw", "lamb"] = "adamw"
    lr: float = Field(5e-4, gt=0)
    beta1: float = 0.9
    beta2: float = 0.98
    eps: float = 1e-6
    weight_decay: float = 0.01
    warmup_steps: int = Field(0, ge=0)
    # Hugging Face's warmup_ratio: warmup_steps = ceil(ratio × steps) once the steps are known (max_tokens
    # included); only when warmup_steps is 0, as in Hugging Face.
    warmup_ratio: float | None = Field(None, ge=0, lt=1)
    # After the warmup: linear decay to 0 at the last step (BERT / RoBERTa), cosine decay to 0, or constant.
    schedule: Literal["linear", "cosine", "constant"] = "linear"
    clip_norm: float | None = 1.0
    # The optimizer step's kernels: auto (AdamW fused on CUDA, LAMB multi-tensor on CUDA, per-tensor loops on
    # CPU), fused (AdamW's single fused kernel; CPU too), foreach (multi-tensor ops), loop (per tensor), or
    # compiled (torch.compile of the step, the learning rate a tensor so the schedule does not recompile it).
    impl: Literal["auto", "fused", "foreach", "loop", "compiled"] = "auto"


class MixSource(Strict):
    """One corpus of a weighted mix: a token share (`weight`) or an upsampling factor (`repeat`)."""

    data: str  # manifest URL or corpus root
    weight: float | None = Field(None, gt=0)  # share of training tokens (normalized over the mix)
    repeat: float | None = Field(None, gt=0)  # fairseq-style upsampling: share ∝ repeat × train tokens
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,40}$")  # for logs (default: folder name)

    @model_validator(mode="after")
    def _one_weight(self) -> MixSource:
        if (self.weight is None) == (self.repeat is None):
            raise ValueError(f"mix source {self.data!r}: give exactly one of weight or repeat")
        return self


class TrackersConfig(Strict):
    """Experiment trackers besides metrics.jsonl (trainer/loggers.py); each is an optional extra."""

    tensorboard: bool = True  # TensorBoard event files in {output}/tb (local run folders)
    # Weights & Biases (pip install 'shardforge[wandb]'); mode None: WANDB_MODE or wandb's own default.
    wandb: bool = False
    wandb_project: str = "shardforge"
    wandb_entity: str | None = None
    wandb_mode: Literal["online", "offline", "disabled"] | None = None
    # MLflow (pip install 'shardforge[mlflow]'); tracking_uri None: MLFLOW_TRACKING_URI or ./mlruns.
    mlflow: bool = False
    mlflow_tracking_uri: str | None = None
    mlflow_experiment: str = "shardforge"
    run_name: str | None = None  # None: the run folder's name
    # Exponential moving average of the training loss (loss_smooth), debiased: weight of the past.
    loss_smoothing: float = Field(0.98, ge=0, lt=1)


# The devices the trainer (and evaluation) place a model on: trainer/distributed.py pick_device.
DEVICE_PATTERN = r"auto|cpu|mps|cuda(:\d+)?"


def device_error(v: str) -> str:
    return f"{v!r} is not a device: give auto, cpu, cuda (each rank's GPU), cuda:N (GPU N) or mps"


class TrainConfig(Strict):
    data: str  # manifest URL (or corpus root holding manifest.json); with `mix`, the first source
    # Several corpora mixed by weight (trainer/mixing.py); empty: train on `data` alone.
    mix: list[MixSource] = []
    output: str = "runs/run"  # run folder: metrics, checkpoints (any fsspec URL)
    steps: int = Field(100, ge=1)  # total optimizer steps of the run (the LR schedule spans these)
    # Train on about this many real tokens instead: the steps follow from the corpus's mean sequence
    # length and the global batch (the run prints the count it chose); None: `steps` decides.
    max_tokens: int | None = Field(None, ge=1)
    # Stop (with a checkpoint) once this step is reached, e.g. before a scheduled preemption.
    stop_at: int | None = Field(None, ge=1)
    # Resuming a run that trained on another corpus (BERT's 128-token phase, then 512): model, optimizer,
    # schedule and step carry on, and this corpus is read from its start. Without it that is refused.
    switch_corpus: bool = False
    batch_size: int = Field(8, ge=1)  # sequences per micro-batch per rank
    # Global batch target; gradient accumulation fills it (None: one micro-batch).
    global_batch_sequences: int | None = None
    global_batch_tokens: int | None = None
    # Micro-batches per optimizer step, set directly (Hugging Face's gradient_accumulation_steps);
    # when set it wins over the global batch targets above.
    gradient_accumulation: int | None = Field(None, ge=1)
    # DOC-SENTENCES: batch by token budget instead of by count.
    tokens_per_batch: int | None = None
    model: ModelConfig = ModelConfig()
    masking: MaskingConfig = MaskingConfig()
    # The masking evaluation uses (None: the training masking). A recipe that trains at another mask
    # rate evaluates at the standard 15 % so that its valid loss compares with everyone else's.
    eval_masking: MaskingConfig | None = None
    optim: OptimConfig = OptimConfig()
    seed: int = 0
    num_workers: int = 0
    shuffle_buffer: int = 1000
    # Evaluate on the valid split every N steps and at the last step (0: at the last step only), so a
    # long run shows its validation curve as it goes; each evaluation takes the first eval_batches
    # batches (0: no evaluation at all).
    eval_every: int = Field(1000, ge=0)
    eval_batches: int = Field(10, ge=0)
    log_every: int = Field(10, ge=0)  # 0: progress lines at the first and last step and evaluations only
    # A checkpoint every N steps and at the last step (0: at the last step and forced saves only). A
    # paper's run (500k steps, hours to days) must not lose all its work to one crash.
    checkpoint_every: int = Field(1000, ge=0)
    keep_last: int = Field(3, ge=0)  # 0: keep every checkpoint
    resume: bool = True
    device: str = "auto"
    # Seconds a rank waits for the others in a collective (a step's all-reduce, a barrier) before the run
    # fails: a rank that hung stops the run (Hugging Face's ddp_timeout; torch's own default is 10 min on
    # NCCL and 30 on gloo). Raise it where one rank may do long work the others wait for.
    ddp_timeout: float = Field(600, gt=0)
    # auto: bf16 on a CUDA GPU with bf16, fp16 (+ loss scaler) on one without, fp32 on CPU (trainer/precision.py).
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    compile: bool | Literal["auto"] = "auto"  # torch.compile; auto: on CUDA only
    # torch.compile's mode for the model: reduce-overhead records CUDA graphs of the compiled step (CUDA only).
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "default"
    # What torch.compile compiles: the whole model (one graph: cross-layer fusion, a compile of ~1.5 min at base
    # and ~3 at large on an H200's host), or each transformer block and the LM head (regional compilation: one
    # block's code compiled once and reused by every layer, so compiling costs about one layer's).
    compile_scope: Literal["model", "layers"] = "model"
    # Masking on the device (trainer/fused_masking.py; the same masks bit for bit): auto is fused on CUDA
    # (a few compiled kernels instead of 136-336 small ops) and the reference ops on CPU.
    masking_impl: Literal["auto", "fused", "reference"] = "auto"
    # Mask ahead (trainer/batch.py, MaskAhead): copy and mask the next batch on a side CUDA stream while
    # the current step computes (the same batches, masks and losses); auto is on on CUDA, off on CPU.
    # Off by default until its CUDA test and its share of the step have run on a GPU (benchmarks/gpu.sh).
    masking_overlap: Literal["auto", "on", "off"] = "off"
    # Ragged batches run unpadded (real tokens only, varlen attention); full-length ones always drop the mask.
    unpad: bool = True
    # Activation checkpointing (run_mlm's gradient_checkpointing): each layer keeps only its input for the
    # backward pass and recomputes the rest there, so activations take about one layer's memory instead of
    # every layer's, for about one more forward pass of compute (trainer/model.py). Same losses and gradients.
    activation_checkpointing: bool = False
    corrupt_shards: Literal["fail", "skip"] = "fail"
    follow: bool = False
    # Continue pretraining a Hugging Face model folder (trainer/hf_init.py): its shape and weights.
    init: str | None = None
    # --init refuses a model whose tokenizer is not the corpus's (sha256 or vocabulary); false skips that check.
    init_tokenizer_check: bool = True
    # Recipes (trainer/recipes/*.yaml, docs/recipes.md): the recipe this config started from, and
    # the packing rule(s) the corpus must have (checked against the manifest; None: any rule).
    recipe: str | None = None
    packing_rules: list[PackingRule] | None = None
    trackers: TrackersConfig = TrackersConfig()

    @field_validator("device")
    @classmethod
    def _known_device(cls, v: str) -> str:
        """The devices the trainer places a run on (trainer/distributed.py pick_device)."""
        if not re.fullmatch(DEVICE_PATTERN, v):
            raise ValueError(device_error(v))
        return v

    @model_validator(mode="before")
    @classmethod
    def _data_from_mix(cls, values: Any) -> Any:
        if isinstance(values, dict) and values.get("mix") and not values.get("data"):
            first = values["mix"][0]
            values = {**values, "data": first.get("data") if isinstance(first, dict) else first.data}
        return values

    @model_validator(mode="after")
    def _check_mix(self) -> TrainConfig:
        if self.mix:
            if self.data not in [m.data for m in self.mix]:
                raise ValueError("give either data (one corpus) or mix (several), not both")
            if self.follow:
                raise ValueError("follow (a served corpus) cannot be combined with mix")
            seen = [m.data.rstrip("/") for m in self.mix]
            twice = sorted({d for d in seen if seen.count(d) > 1})
            if twice:  # its batches would be drawn from two places at once: one source with its whole weight
                raise ValueError(f"mix lists {twice[0]!r} twice: give each corpus once, with its whole weight")
        return self
