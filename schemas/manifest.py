"""The corpus manifest: the commit marker and table of contents of a corpus.

``manifest.json`` at the corpus root is written last; a corpus without one
does not exist. It is canonical JSON (sorted keys, no wall-clock fields), so
the same input and config give a byte-identical manifest.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from schemas import SCHEMA_VERSION, SPECIAL_TOKENS
from schemas.config import PackingRule
from schemas.configfile import format_validation_error
from schemas.errors import UserError

MANIFEST_NAME = "manifest.json"
Split = Literal["train", "valid"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- the path rule
# Every name in a manifest that a reader opens (shard names, the tokenizer path,
# intermediates) is a plain relative path inside the corpus: '/'-separated
# segments of letters, digits, '.', '_' and '-', no segment '.' or '..'. That
# rules out schemes (gs://, http://, file:), absolute paths, drive letters,
# backslashes, '~', glob and percent escapes: a manifest from anywhere can then
# only make a reader open objects under the corpus root it was given.
# Readers never open other manifest values (config, inputs, parent URLs): they are records.
_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")
MAX_NAME_LEN = 1024
NOT_INSIDE = "not a plain relative path inside the corpus"
PATH_RULE = ("a manifest names only plain relative paths inside the corpus: '/'-separated [A-Za-z0-9._-] "
             "segments, no scheme, no absolute path, no '.' or '..' segment, no backslash (docs/storage.md)")


def check_corpus_name(name: str) -> str:
    """name if it is a plain relative path inside the corpus (the path rule); else ValueError saying why."""
    shown = name[:80] + ("…" if len(name) > 80 else "")
    if not name or len(name) > MAX_NAME_LEN:
        raise ValueError(f"name {shown!r} is empty or longer than {MAX_NAME_LEN} characters, {NOT_INSIDE}")
    if any(seg in ("", ".", "..") or not _SEGMENT.match(seg) for seg in name.split("/")):
        raise ValueError(f"unsafe name {shown!r}, {NOT_INSIDE}")
    return name


CorpusName = Annotated[str, AfterValidator(check_corpus_name)]


class ShardInfo(_M):
    name: CorpusName  # path relative to the corpus root, e.g. "train-000000.tar"
    split: Split
    samples: int = Field(ge=0)
    tokens: int = Field(ge=0)
    bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class TokenizerInfo(_M):
    path: CorpusName  # relative to the corpus root; a reused model is copied into the corpus at build time
    sha256: str
    # File kind (schemas.tokenizer_files): "sentencepiece" (spm.model), "byte_bpe" (tokenizers JSON) or
    # "hf_json" (an existing model's tokenizer.json, its own special ids).
    kind: Literal["sentencepiece", "byte_bpe", "hf_json"] = "sentencepiece"
    model_type: str  # unigram | bpe (SentencePiece) | byte_bpe | hf_json's model: wordpiece, bpe, unigram
    vocab_size: int
    # Role (<s> </s> <pad> <unk> <mask>) -> id. shardforge's fixed ids for its own tokenizers; an hf_json
    # tokenizer's own (BERT: <s> is [CLS] = 101), which packing, loader and masking follow.
    special_ids: dict[str, int] = dict(SPECIAL_TOKENS)
    # Role -> token string, for an hf_json tokenizer (e.g. "<s>": "[CLS]"); None for shardforge's own.
    special_tokens: dict[str, str] | None = None
    normalization_rule: str
    # Whole-word / span / n-gram masking need to know which ids start a word;
    # the trainer derives that table from the model file by this rule.
    word_start_rule: str = "piece starts with U+2581 or is a special token"


class SourceAccount(_M):
    """Where every input record of one source went. input = kept + filtered + duplicate + rejected."""

    input: int = 0
    kept: int = 0
    filtered: dict[str, int] = {}
    duplicate: dict[str, int] = {}  # exact | near | span
    rejected: dict[str, int] = {}
    # Tokens of the kept documents (specials excluded, train and valid): what a mix of sources is
    # planned on (trainer --mix, docs/loader.md). Not part of the accounting identity.
    tokens: int = 0

    @property
    def total_out(self) -> int:
        return self.kept + sum(self.filtered.values()) + sum(self.duplicate.values()) + sum(self.rejected.values())

    @property
    def balanced(self) -> bool:
        return self.input == self.total_out


class InputFile(_M):
    """A raw file absorbed by a corpus version (continuous ingest, pipelines.jobs.ingest).

    fingerprint: "md5:…", "crc32c:…", "etag:…" from the object store's listing,
    or "sha256:…" of the content where the store has none (local files).
    """

    path: str  # URL as listed (credentials redacted)
    source: str
    size: int = Field(ge=0)
    fingerprint: str


class SplitTotals(_M):
    shards: int = 0
    samples: int = 0
    tokens: int = 0
    bytes: int = 0
    documents: int = 0


KIND = "shardforge-corpus"  # a manifest's "kind"


class Manifest(_M):
    schema_version: int = SCHEMA_VERSION
    kind: Literal["shardforge-corpus"] = KIND
    version: int = 1
    # The manifest this one was derived from: a sibling "manifest-v{N}.json" (serve, ingest; opened
    # only in that form) or, for a repack, the parent's URL (a record, never opened by a reader).
    parent: str | None = None
    config: dict[str, Any]  # the full build config that produced this corpus
    packing_rule: PackingRule
    max_seq_len: int = Field(ge=8, le=1 << 16)  # what a build config allows (schemas.config.PackingConfig)
    ids_dtype: Literal["uint16", "int32"]
    members: list[str]  # sample members present (subset of schemas.sample.ALLOWED_MEMBERS)
    tokenizer: TokenizerInfo
    shards: list[ShardInfo]
    totals: dict[str, SplitTotals]
    accounting: dict[str, SourceAccount]
    counters: dict[str, int] = {}  # other stage counters (e.g. split_long_sentences)
    intermediates: dict[str, CorpusName] = {}  # name -> relative path (clean, tokenized, dedupe index)
    # Continuous ingest: the raw files this version absorbed (only this version's; the
    # parent chain holds the earlier ones). Empty for a plain build.
    inputs: list[InputFile] = []

    @model_validator(mode="after")
    def _check(self) -> Manifest:
        names = [s.name for s in self.shards]
        if len(set(names)) != len(names):
            raise ValueError("shard names must be unique")
        if self.schema_version > SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is newer than this shardforge "
                             f"({SCHEMA_VERSION}); upgrade shardforge")
        return self

    def shards_of(self, split: Split) -> list[ShardInfo]:
        return [s for s in self.shards if s.split == split]

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, indent=1) + "\n"


def repack_origin(m: Manifest) -> str | None:
    """The corpus a repack was packed from (the folder of the manifest its ``parent`` records); None for
    a build, a served version, or a corpus that keeps its own tokenized documents."""
    if m.version != 1 or not m.parent or "/" not in m.parent or m.intermediates.get("tokenized"):
        return None
    return m.parent.rsplit("/", 1)[0]


# Fewer masked tokens than this in a whole evaluation make its loss noisy. On the demo's run (loss 4.5) the
# loss moved with the masking draw alone by 0.068 nats (standard deviation of 8 seeds) over 276 masked
# tokens and by 0.025 over 2,070: ~1.1 / sqrt(masked), so ~0.035 at 1,000 and ~0.14 at 66.
FEW_MASKED = 1000


def valid_fraction_for(m: Manifest, masked: int) -> float | None:
    """The valid fraction that gives about FEW_MASKED masked tokens where the corpus's gave ``masked``: its
    own scaled up, rounded up to two digits, at most 0.5; None where the manifest records none."""
    fraction = m.config.get("packing", {}).get("valid_fraction")
    if not fraction:
        return None
    return _two_digits_up(fraction * FEW_MASKED / max(masked, 1))


def valid_fraction_for_empty(tokens: int, documents: int, rate: float) -> float:
    """The valid fraction for a corpus whose valid split came out empty: about FEW_MASKED masked tokens at
    ``rate`` out of its ``tokens``, and at least 3 of its ``documents`` expected (the split is drawn per
    document), rounded up to two digits, at most 0.5."""
    return _two_digits_up(max(FEW_MASKED / max(tokens * rate, 1.0), 3 / max(documents, 1)))


def _two_digits_up(want: float) -> float:
    want = min(0.5, want)
    step = 10.0 ** (math.floor(math.log10(want)) - 1)
    return min(0.5, math.ceil(round(want / step, 6)) * step)


def manifest_url(url: str) -> str:
    """Accept either the corpus root or the manifest URL itself."""
    return url if url.endswith(".json") else url.rstrip("/") + "/" + MANIFEST_NAME


def corpus_root(manifest_url_: str) -> str:
    return manifest_url_.rsplit("/", 1)[0] if "/" in manifest_url_ else "."


LATEST_NAME = "latest"  # served corpora: a text file naming the latest "manifest-v{N}.json"


def latest_manifest_name(pointer: str, where: str = LATEST_NAME) -> str:
    """The manifest a ``latest`` pointer's text names; UserError unless it is one plain ``*.json`` segment
    (the path rule: a pointer can only name a manifest beside it)."""
    name = pointer.strip()
    if not _SEGMENT.match(name) or not name.endswith(".json"):
        raise UserError(f"{where} does not name a manifest: {name[:80]!r}")
    return name


def check_tokenizer_model(m: Manifest, data: bytes, where: str) -> None:
    """UserError unless ``data`` is the tokenizer model the manifest records (its sha256)."""
    got = hashlib.sha256(data).hexdigest()
    if got != m.tokenizer.sha256:
        raise UserError(f"tokenizer model {where} has sha256 {got[:12]}…, the manifest says "
                        f"{m.tokenizer.sha256[:12]}…: it changed after the build")


def check_tokenizer(m: Manifest, tok: Any, where: str) -> None:
    """UserError unless a loaded tokenizer (``schemas.tokenizer_files``) is what the manifest records: its kind,
    its size (vocab_size) and every special id inside it."""
    if tok.kind != m.tokenizer.kind:
        raise UserError(f"tokenizer model {where} is a {tok.kind} file, the manifest says {m.tokenizer.kind}")
    n = tok.vocab_size
    if n != m.tokenizer.vocab_size:
        raise UserError(f"tokenizer model has {n} pieces, the manifest says vocab_size {m.tokenizer.vocab_size}")
    bad = {k: v for k, v in m.tokenizer.special_ids.items() if not 0 <= v < n}
    if bad:
        raise UserError(f"manifest special_ids {bad} are outside the tokenizer's vocabulary of {n}")


def parse_manifest(text: str, where: str = "manifest") -> Manifest:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:  # not JSON; an integer of more digits than Python reads; too deep
        why = "nested too deep" if isinstance(e, RecursionError) else str(e).splitlines()[0]
        raise UserError(f"{where} is not valid JSON ({why}); is this a shardforge corpus?") from None
    if not isinstance(data, dict) or (data.get("kind") != KIND and not {"packing_rule", "shards"} <= set(data)):
        # Another JSON file (raw data, a config): what a manifest would need says nothing useful.
        raise UserError(f"{where} is JSON but not a shardforge manifest (it would hold \"kind\": \"{KIND}\" and "
                        "the corpus's shards); a corpus is the folder a build writes: give that folder")
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        why = format_validation_error(e).replace("Value error, ", "")
        rule = f"; {PATH_RULE}" if NOT_INSIDE in why else ""
        raise UserError(f"{where} is not a valid shardforge manifest: {why}{rule}") from None


def accounting_totals(m: Manifest) -> dict[str, int]:
    """The accounting over all sources: records in, and how many ended in each bucket."""
    acc = m.accounting.values()
    return {"input": sum(a.input for a in acc), "kept": sum(a.kept for a in acc),
            "filtered": sum(sum(a.filtered.values()) for a in acc),
            "duplicate": sum(sum(a.duplicate.values()) for a in acc),
            "rejected": sum(sum(a.rejected.values()) for a in acc)}


def manifest_summary(m: Manifest) -> dict[str, Any]:
    """What a manifest says about its corpus, as a plain dict: rule, tokenizer, totals per split and over all,
    and the accounting (what ``shardforge inspect`` and ``shardforge status`` print)."""
    totals = {k: sum(getattr(t, k) for t in m.totals.values()) for k in ("documents", "tokens", "samples", "shards")}
    acc = accounting_totals(m)
    return {
        "schema_version": m.schema_version,
        "version": m.version,
        "parent": m.parent,
        "packing_rule": m.packing_rule,
        "max_seq_len": m.max_seq_len,
        "ids_dtype": m.ids_dtype,
        "members": m.members,
        "tokenizer": {"path": m.tokenizer.path, "kind": m.tokenizer.kind, "model_type": m.tokenizer.model_type,
                      "vocab_size": m.tokenizer.vocab_size, "sha256": m.tokenizer.sha256,
                      "special_ids": m.tokenizer.special_ids},
        "splits": {split: t.model_dump() for split, t in sorted(m.totals.items())},
        "shards": len(m.shards),
        "samples": totals["samples"],
        "tokens": totals["tokens"],
        "bytes": sum(t.bytes for t in m.totals.values()),
        "totals": totals,
        "documents": {"input": acc["input"], "kept": acc["kept"]},
        "accounting": acc,
    }
