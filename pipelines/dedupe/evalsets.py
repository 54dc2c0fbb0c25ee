"""The evaluation sets of benchmark decontamination, and the n-grams both sides are compared by.

Plain Python and numpy, no Beam (``pipelines.dedupe.decontaminate`` is the stage):

- the evaluation files: listed (``eval_files``, one clear line for a path that matches nothing or a
  file of a kind not read), identified for the attempt tag (``eval_identity``), read as texts
  (``eval_texts``: JSONL and JSON records and Parquet rows, whose string values are ``record_text``;
  text files by blank-line paragraphs; ``.gz`` / ``.bz2`` / ``.xz``);
- word n-gram hashes (``ngram_hashes``, ``batch_ngram_hashes``): words are ``\\w+`` runs with
  apostrophes inside a word dropped, lower-cased (NFKC for non-ASCII words), each hashed with
  blake2b (memoized per process), and every n consecutive word hashes combined by a polynomial and a
  64-bit mixer; ``overlap_spans``: where a text's matched n-grams lie;
- the size of the bounded filter of the evaluation n-grams (``filter_shape``; the filter is
  ``pipelines.dedupe.bloom.Bloom``), and the hash partitions
  of the index (``partition_of``, ``split_parts``).
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import lzma
import posixpath
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from pipelines.dedupe.bloom import bloom_shape
from pipelines.records import UNSPACED, has_unspaced, unspaced_tokens
from pipelines.sources.streams import Prefixed, iter_json_array, skip_ws
from schemas.config import DecontaminateConfig
from schemas.errors import UserError
from shardforge.storage import is_transient, open_read, redact_url

# ------------------------------------------------------------------ n-gram hashes (plain numpy)

# A word: a run of word characters, apostrophes inside it dropped ("Academy's" is "academys" on both sides).
WORD = re.compile(r"\w+(?:['\u2019]\w+)*")
# In text holding Chinese or Japanese, each of their characters is a word of its own (as the clean rules
# count them) and the other words are runs of the other word characters.
_CJK = UNSPACED.pattern
_UNSPACED_WORD = re.compile(f"{_CJK}|(?:(?!{_CJK})\\w)+(?:['\u2019](?:(?!{_CJK})\\w)+)*")
_WORD_CACHE_MAX = 1 << 18
_word_cache: dict[str, int] = {}
_P = np.uint64(0x9E3779B97F4A7C15)  # the multiplier of the polynomial over a window's word hashes
_M1, _M2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


def _word_hash(word: str) -> int:
    key = word.lower() if word.isascii() else unicodedata.normalize("NFKC", word).lower()
    if "'" in key or "\u2019" in key:
        key = key.replace("'", "").replace("\u2019", "")
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8, person=b"sf-decon").digest()
    return int.from_bytes(digest, "little", signed=True)


def word_hashes(words: list[str]) -> np.ndarray:
    """Each word's 64-bit hash (int64), memoized per process (a Zipfian vocabulary hits the memo)."""
    cache = _word_cache
    if len(cache) > _WORD_CACHE_MAX:
        cache.clear()
    for w in set(words).difference(cache):
        cache[w] = _word_hash(w)
    return np.fromiter(map(cache.__getitem__, words), dtype=np.int64, count=len(words))


def _mix(h: np.ndarray) -> np.ndarray:
    h ^= h >> _S33
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    return h


def window_hashes(words: np.ndarray, n: int) -> np.ndarray:
    """The hash of every n consecutive word hashes (int64; empty when there are fewer than n words)."""
    m = len(words) - n + 1
    if m <= 0:
        return np.empty(0, dtype=np.int64)
    u = words.view(np.uint64)
    h = u[:m].copy()
    for j in range(1, n):
        h *= _P
        h += u[j:j + m]
    return _mix(h).view(np.int64)


def word_pattern(text: str) -> re.Pattern[str]:
    """The words of ``text``: ``WORD``'s, or, in text holding Chinese or Japanese, each of their
    characters one word."""
    return _UNSPACED_WORD if has_unspaced(text) else WORD


def text_words(text: str) -> list[str]:
    """The words n-grams are made of (``word_pattern``)."""
    return word_pattern(text).findall(text)


def window_of(text: str, words: list[str], n: int) -> int:
    """The n-gram length for a text and its words (``text_words``): n, or n words' worth of characters
    where characters of Chinese or Japanese (each one of the words) are most of its words (a 13-word
    n-gram is 22 characters there)."""
    if has_unspaced(text) and 2 * len(UNSPACED.findall(text)) > len(words):
        return unspaced_tokens(n)
    return n


def ngram_hashes(text: str, n: int) -> np.ndarray:
    """The hash of every word n-gram of ``text`` in order (position i: words i .. i+m-1, m =
    ``window_of``)."""
    words = text_words(text)
    m = window_of(text, words, n)
    return window_hashes(word_hashes(words), m) if len(words) >= m else np.empty(0, dtype=np.int64)


def batch_ngram_hashes(texts: list[str], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every text's n-gram hashes at once: (hashes, the index of the text each belongs to), in text
    order. The same hashes as ``ngram_hashes`` per text, in a fixed number of numpy calls per batch
    and window length (per text they cost more than the hashing: ~45 of ~100 ms per MB of prose)."""
    words = [text_words(t) for t in texts]
    windows = [window_of(t, ws, n) for t, ws in zip(texts, words, strict=True)]
    parts = [_same_window_hashes([i for i, m in enumerate(windows) if m == w], words, w)
             for w in sorted(set(windows))]
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    hashes, owner = np.concatenate([h for h, _ in parts]), np.concatenate([o for _, o in parts])
    order = np.argsort(owner, kind="stable")
    return hashes[order], owner[order]


def _same_window_hashes(which: list[int], words: list[list[str]], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``batch_ngram_hashes`` of the texts ``which`` (indices into ``words``), whose n-grams are n long."""
    counts = np.fromiter((len(words[i]) for i in which), dtype=np.int64, count=len(which))
    hashes = window_hashes(word_hashes([w for i in which for w in words[i]]), n)
    if not len(hashes):
        return hashes, np.empty(0, dtype=np.int64)
    ends = np.cumsum(counts)
    local = np.repeat(np.arange(len(which)), counts)[:len(hashes)]
    inside = np.arange(n, len(hashes) + n) <= ends[local]  # the window ends in the text it starts in
    return hashes[inside], np.asarray(which, dtype=np.int64)[local[inside]]


def eval_text(text: str) -> str:
    """An evaluation text as documents are compared: NFC (the clean stage's normal form)."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


# ------------------------------------------------------------------ the filter's size


def filter_shape(expected: int, max_bytes: int) -> tuple[int, int]:
    """(log2 of the bits, probes) of a ``Bloom`` for ``expected`` hashes: 32 bits a hash (a false positive
    rate near 3e-7, so a 500-word document is a false candidate about once in 6,000) within
    ``max_bytes``; past it the rate grows, and with it the candidates' work, never a wrong removal."""
    return bloom_shape(expected, 32, max_bytes)


# ------------------------------------------------------------------ the evaluation files


@dataclass(frozen=True)
class EvalFile:
    """One evaluation file: its URL, the name the report gives it, its size and content fingerprint."""

    url: str
    name: str
    size: int
    fingerprint: str


_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
_REFUSED = (".zst", ".zip", ".tar", ".7z")
PARQUET_BATCH_ROWS = 1024


def eval_files(cfg: DecontaminateConfig) -> list[EvalFile]:
    """Every file the configured paths match, with a name (its file name; the redacted URL where two
    share one); one clear line for a path that matches nothing or a file of a kind not read."""
    from pipelines.sources.rawfiles import fingerprint, list_raw_files

    found: dict[str, Any] = {}
    for path in cfg.paths:
        listed = [f for f in list_raw_files(path) if not (f.checksum or "").startswith("skipped:")]
        if not listed:
            raise UserError(f"--decontaminate {redact_url(path)}: no file matches it")
        for f in listed:
            found.setdefault(f.url, f)
    urls = sorted(found)
    names = [posixpath.basename(u.rstrip("/")) for u in urls]
    out = []
    for url, name in zip(urls, names, strict=True):
        if url.lower().endswith(_REFUSED):
            raise UserError(f"--decontaminate {redact_url(url)}: {name.rsplit('.', 1)[-1]} files are not read; give "
                            "JSONL, JSON, Parquet or text files (optionally .gz, .bz2 or .xz)")
        out.append(EvalFile(url, redact_url(url) if names.count(name) > 1 else name, found[url].size,
                            fingerprint(found[url])))
    return out


def eval_identity(cfg: DecontaminateConfig) -> list[list[Any]]:
    """What the attempt tag hashes of the evaluation files (names, sizes, fingerprints): other
    evaluation sets give other outputs, so another tag."""
    return [[e.name, e.size, e.fingerprint] for e in eval_files(cfg)] if cfg.paths else []


def _open_binary(url: str) -> IO[bytes]:
    raw: Any = open_read(url)
    lower = url.lower()
    for ext, opener in _OPENERS.items():
        if lower.endswith(ext):
            return opener(raw)
    return raw


def _open_text(url: str) -> IO[str]:
    return io.TextIOWrapper(_open_binary(url), encoding="utf-8", errors="replace", newline=None)


JSON_ITEM_MAX = 1 << 26  # bytes of one item of a JSON array; a longer one is a bad record


def _json_values(url: str) -> Iterator[Any]:
    """The records of a ``.json`` file: the items of a top-level array, split by the readers' streaming
    scanner (a file of any size is never held whole), or the one value it holds (None: not JSON)."""
    with _open_binary(url) as raw:
        head = skip_ws(raw)
        if not head:
            return
        if head.startswith(b"["):
            for item, length in iter_json_array(Prefixed(head[1:], raw), JSON_ITEM_MAX):
                try:
                    yield json.loads(item) if length <= JSON_ITEM_MAX else None
                except ValueError:
                    yield None
            return
        try:
            yield json.loads(head + raw.read())
        except ValueError:
            yield None


def _format_of(url: str) -> str:
    lower = url.lower()
    for ext in _OPENERS:
        lower = lower.removesuffix(ext)
    if lower.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if lower.endswith(".parquet"):
        return "parquet"
    return "json" if lower.endswith(".json") else "text"


def _parquet_rows(url: str, fields: list[str] | None) -> Iterator[dict[str, Any]]:
    """The rows of a Parquet file (a Hugging Face dataset's split, say) as records, a batch at a time:
    only the ``fields`` columns it has, where given (a file with none of them gives no text)."""
    import pyarrow.parquet as pq

    with _open_binary(url) as raw:
        pf = pq.ParquetFile(raw)
        names = pf.schema_arrow.names
        columns = [c for c in fields if c in names] if fields else names
        if not columns:
            return
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns):
            yield from batch.to_pylist()


def record_text(value: Any, fields: list[str] | None = None) -> str:
    """A JSON record's text: its string values (only ``fields`` of an object, where given; nested
    lists and objects included), joined by newlines."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        items = [value[f] for f in fields if f in value] if fields else list(value.values())
    elif isinstance(value, list):
        items = value
    else:
        return ""
    return "\n".join(t for t in (record_text(v) for v in items) if t)


def eval_texts(url: str, fields: list[str] | None = None, block_chars: int = 1 << 20) -> Iterator[str | None]:
    """The texts of one evaluation file, in order (None for a JSON line that does not parse)."""
    kind = _format_of(url)
    if kind == "parquet":
        for row in _parquet_rows(url, fields):
            yield record_text(row, fields)
        return
    if kind == "json":
        for value in _json_values(url):
            yield None if value is None else record_text(value, fields)
        return
    with _open_text(url) as f:
        if kind == "jsonl":
            for line in f:
                if line.strip():
                    try:
                        yield record_text(json.loads(line), fields)
                    except ValueError:
                        yield None
        else:
            block: list[str] = []
            size = 0
            for line in f:
                if line.strip():
                    block.append(line)
                    size += len(line)
                if (not line.strip() or size >= block_chars) and block:
                    yield "".join(block)
                    block, size = [], 0
            if block:
                yield "".join(block)


def readable_texts(ef: EvalFile, fields: list[str] | None = None) -> Iterator[str | None]:
    """``eval_texts`` of an evaluation file, where a file that does not decode (a cut .gz, a file named
    .parquet that is none) is one line naming it: a build must not leave a benchmark half read."""
    try:
        yield from eval_texts(ef.url, fields)
    except Exception as e:  # noqa: BLE001 - turned into the user's one line, or re-raised
        if is_transient(e):
            raise  # a dropped connection is not a bad file: the runner retries the bundle
        kind = {"jsonl": "JSONL", "json": "JSON", "parquet": "Parquet"}.get(_format_of(ef.url), "text")
        reason = " ".join(str(e).split())[:200]
        raise UserError(f"--decontaminate {ef.name}: does not read as {kind} to its end ({type(e).__name__}: "
                        f"{reason}); an evaluation set is read whole: repair the file or leave it out") from None


def partition_of(hashes: np.ndarray, log2_parts: int) -> np.ndarray:
    """The index partition of each hash: its top ``log2_parts`` bits."""
    if not log2_parts:
        return np.zeros(len(hashes), dtype=np.int64)
    return (hashes.view(np.uint64) >> np.uint64(64 - log2_parts)).astype(np.int64)


def split_parts(hashes: np.ndarray, log2_parts: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(partition, the sorted distinct hashes in it)`` for each partition ``hashes`` reach."""
    hashes = np.unique(hashes)
    parts = partition_of(hashes, log2_parts)
    order = np.argsort(parts, kind="stable")
    hashes, parts = hashes[order], parts[order]
    keys, firsts = np.unique(parts, return_index=True)
    yield from zip(keys.tolist(), np.split(hashes, firsts[1:]), strict=True)


def overlap_spans(text: str, n: int, matched: set[int]) -> list[tuple[int, int]]:
    """Character spans of ``text`` covered by its n-grams whose hash is in ``matched``, merged."""
    spans = [m.span() for m in word_pattern(text).finditer(text)]
    words = [text[s:e] for s, e in spans]
    n = window_of(text, words, n)
    hashes = window_hashes(word_hashes(words), n)
    covered = np.zeros(len(spans) + 1, dtype=np.int32)
    for i in np.flatnonzero(np.isin(hashes, np.fromiter(matched, dtype=np.int64, count=len(matched)))).tolist():
        covered[i] += 1
        covered[i + n] -= 1
    out: list[tuple[int, int]] = []
    last = -2
    for i in np.flatnonzero(np.cumsum(covered[:-1]) > 0).tolist():
        if i == last + 1:
            out[-1] = (out[-1][0], spans[i][1])
        else:
            out.append(spans[i])
        last = i
    return out


def expected_words(f: EvalFile) -> int:
    """An upper estimate of a file's words (so of its n-grams): ~6 bytes a word, 4x for compression."""
    grow = 4 if f.url.lower().endswith((*_OPENERS, ".parquet")) else 1
    return max(1, f.size * grow // 6)
