"""MinHash signatures and LSH banding, vectorized with numpy (no Beam here).

Everything is a pure function of (text, parameters, seed): word hashes come
from blake2b, permutations are derived from the seed through blake2b too, and
no step depends on how documents are batched. So a document gets the same
signature on every machine, runner and batch size.

Pipeline per batch of documents:

1. ``normalize_text``: NFKC, lowercase, punctuation removed, whitespace collapsed.
2. words (a character of Chinese or Japanese is one: ``shingle_words``) ->
   stable 64-bit word hashes (blake2b, memoized per process); the split and a
   dictionary encoding of the batch run in Arrow, so only distinct words become
   Python strings.
3. word n-gram shingles -> 64-bit rolling combination of the n word hashes,
   finalized with the splitmix64 mixer and truncated to 32 bits, then made
   unique per document (one global sort of ``doc_index << 32 | shingle``).
4. MinHash: for each of P = bands x rows permutations, min over the document's
   shingles of ``((a * x + b) mod 2**64) >> 32`` (Dietzfelbinger's
   multiply-add-shift: a strongly universal family for 32-bit keys that needs
   no division, so it runs in three wrap-around uint64 passes over a block
   that stays in L2; a document's min is a plain ``min(axis=0)``, runs of
   short documents share a block and a ``reduceat``). Once a process has hashed
   enough (``KERNEL_AFTER``), the same arithmetic runs fused in one compiled
   loop (``pipelines.dedupe.minhash_kernel``, numba): bit-identical signatures, ~3x
   less CPU, after a one-time load of about 2 s (1.75-2.17 s measured) that small jobs never pay.
5. LSH: each band's ``rows`` values are mixed into one 64-bit band key.
6. Containment (``sampled``, ``anchor_keys``): shingles chosen by value alone, so a passage's are those
   of any document it was copied into; pairs of consecutive chosen shingles are extra bucket keys.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipelines.clean.stats import has_unspaced, spaced

# Unicode-aware "not a word character or whitespace": punctuation and symbols.
_PUNCT_RE = re.compile(r"[^\w\s]+")
# The same class split in two for normalize_text: its ASCII members (as bytes to delete,
# derived from the regex itself so the two can never disagree) and the rest.
_ASCII_PUNCT = bytes(c for c in range(128) if _PUNCT_RE.fullmatch(chr(c)))
_NON_ASCII_PUNCT_RE = re.compile(r"[^\x00-\x7f\w\s]+")
_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)
# Rows of the (shingles x permutations) block processed at once: ~460 KB of uint64
# at 112 permutations, small enough to stay in L2, large enough to amortize numpy calls.
_CHUNK_ROWS = 512
# Documents with at least this many shingles get their own min (no reduceat).
_SMALL_DOC = 64
# Bound on the per-process word-hash memo (a Zipfian vocabulary hits it constantly).
_WORD_CACHE_MAX = 1 << 20
_word_cache: dict[str, int] = {}

# When signatures switch to the compiled kernel: after this many (shingle x permutation)
# products in a process. The kernel saves ~1.5 ns per product and costs ~2 s to load
# (numba's import and its cached code), so it pays after ~1e9 products (about 20,000
# news-length documents at 112 permutations); smaller jobs keep numpy and start faster.
KERNEL_AFTER = 1_000_000_000
# "auto" (the rule above), "numba" (always; an error if numba is missing) or "numpy" (never).
KERNEL_ENV = "SHARDFORGE_MINHASH_KERNEL"
_log = logging.getLogger("shardforge.minhash")


def normalize_text(text: str) -> str:
    """NFKC, lowercase, punctuation/symbols removed, whitespace collapsed to single spaces.

    The definition is ``" ".join(_PUNCT_RE.sub("", nfkc(text).lower()).split())``;
    this computes it faster. ASCII characters are deleted by a bytes
    translation (UTF-8 never uses bytes < 0x80 inside a multi-byte character,
    so this touches no other character), and the regex only has to look for
    the rarer non-ASCII punctuation. ASCII text needs neither NFKC nor the
    regex. 4x faster on English prose (tests pin the equality).
    """
    if text.isascii():
        return " ".join(text.lower().encode("ascii").translate(None, _ASCII_PUNCT).decode("ascii").split())
    text = unicodedata.normalize("NFKC", text).lower()
    text = text.encode("utf-8", "surrogatepass").translate(None, _ASCII_PUNCT).decode("utf-8", "surrogatepass")
    return " ".join(_NON_ASCII_PUNCT_RE.sub("", text).split())


def normalized_text_hash(text: str) -> str:
    """Hex blake2b-128 of ``normalize_text(text)``: the key of exact deduplication."""
    return hash_normalized(normalize_text(text))


def hash_normalized(normalized: str) -> str:
    """``normalized_text_hash`` of a text already passed through ``normalize_text``."""
    return hashlib.blake2b(normalized.encode("utf-8"), digest_size=16).hexdigest()


def _blake64(data: bytes, person: bytes = b"sf-minhash") -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=person).digest(), "little")


def word_hash(word: str) -> int:
    """Stable 64-bit hash of one word (memoized; blake2b, never Python's hash())."""
    h = _word_cache.get(word)
    if h is None:
        if len(_word_cache) >= _WORD_CACHE_MAX:
            _word_cache.clear()
        h = _blake64(word.encode("utf-8"))
        _word_cache[word] = h
    return h


def _word_hashes(words: list[str]) -> np.ndarray:
    """uint64 hashes of many words: one C-level dict lookup each, blake2b only for unseen words."""
    hs = list(map(_word_cache.get, words))
    if None in hs:
        hs = [h if h is not None else word_hash(w) for h, w in zip(hs, words, strict=True)]
    return np.array(hs, dtype=np.uint64)


def _split_hashed(normalized: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(words per text, uint64 hash of every word in order) of texts already normalized.

    The split and a dictionary encoding run in Arrow's C++ (no Python string
    per word); only the batch's distinct words reach the Python memo. Splitting
    on " " is ``str.split()`` here: ``normalize_text`` leaves single spaces
    and no other whitespace.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    lens = np.fromiter((t.count(" ") + 1 if t else 0 for t in normalized), dtype=np.int64, count=len(normalized))
    nonempty = [t for t in normalized if t]
    if not nonempty:
        return lens, np.empty(0, dtype=np.uint64)
    words = pc.split_pattern(pa.array(nonempty, pa.large_string()), " ").flatten()
    enc = words.dictionary_encode()
    uniq = _word_hashes(enc.dictionary.to_pylist())
    return lens, uniq[enc.indices.to_numpy(zero_copy_only=False)]


def _fmix64(h: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, in place on a uint64 array (full avalanche)."""
    h ^= h >> _U64(30)
    h *= _U64(0xBF58476D1CE4E5B9)
    h ^= h >> _U64(27)
    h *= _U64(0x94D049BB133111EB)
    h ^= h >> _U64(31)
    return h


def _affine(x: np.ndarray, a: np.ndarray, b: np.ndarray, block: np.ndarray) -> np.ndarray:
    """``(a * x + b) mod 2**64`` for every shingle of ``x`` (rows) and permutation (columns), into ``block``.

    No ">> 32" here: the shift is monotone, so min(h) >> 32 == min(h >> 32); it
    is applied once to the (docs x permutations) result.
    """
    blk = block[: x.size]
    np.multiply(x[:, None], a[None, :], out=blk)
    blk += b[None, :]
    return blk


class _KernelChoice:
    """Per process: how many (shingle x permutation) products were hashed, and the kernel once loaded."""

    def __init__(self) -> None:
        self.products = 0
        self.fn = None
        self.unavailable = False

    def for_batch(self, products: int):
        """The compiled ``min_affine`` for a batch of ``products`` values, or None for numpy.

        Loads numba once the process's count passes ``KERNEL_AFTER`` (at once
        with ``SHARDFORGE_MINHASH_KERNEL=numba``). Without numba the numpy
        path runs, and the log says so once.
        """
        mode = os.environ.get(KERNEL_ENV, "auto")
        if mode not in ("auto", "numba", "numpy"):
            from schemas.errors import UserError

            raise UserError(f"{KERNEL_ENV}={mode!r}: expected auto, numba or numpy")
        self.products += products
        if mode == "numpy" or self.unavailable:
            return None
        if self.fn is None and (mode == "numba" or self.products >= KERNEL_AFTER):
            try:
                from pipelines.dedupe.minhash_kernel import min_affine
            except ImportError as e:
                if mode == "numba":
                    raise
                self.unavailable = True
                _log.warning("numba is not installed (%s): MinHash signatures stay on numpy, ~3x more CPU", e)
                return None
            self.fn = min_affine
        return self.fn


_kernel = _KernelChoice()


def shingle_words(normalized: str) -> str:
    """A normalized text's words as shingles count them: each character of a script written without spaces
    (Chinese, Japanese: ``schemas.tokenizer_files.UNSPACED``) is a word of its own, as the clean rules
    count them (else a paragraph of Chinese would be one word, and an edit anywhere in it a different word)."""
    return " ".join(spaced(normalized).split()) if has_unspaced(normalized) else normalized


def shingle_sets(texts: Sequence[str], ngram: int, normalized: bool = False) -> list[np.ndarray]:
    """Per text, the sorted unique uint32 hashes of its word n-gram shingles.

    Words are those of ``normalize_text`` (pass ``normalized=True`` for texts
    already normalized), a character of Chinese or Japanese one word
    (``shingle_words``). A text with fewer than ``ngram`` words is one shingle
    of all its words; an empty text has no shingles. Computed for the whole
    batch at once.
    """
    return shingles_and_anchors(texts, ngram, normalized)[0]


def shingles_and_anchors(texts: Sequence[str], ngram: int, normalized: bool = False, anchor_every: int = 0,
                         ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``shingle_sets`` of the texts, and per text its anchor keys (``anchor_keys``; none when
    ``anchor_every`` is 0): sorted unique int64."""
    empty = np.empty(0, dtype=np.int64)
    lens, wh = _split_hashed([shingle_words(t if normalized else normalize_text(t)) for t in texts])
    total = int(lens.sum())
    if total == 0:
        return [np.empty(0, dtype=np.uint32) for _ in texts], [empty for _ in texts]
    starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
    doc_of_word = np.repeat(np.arange(len(texts), dtype=np.uint64), lens)

    # Rolling combination over every window of the concatenated word stream;
    # windows that cross a document boundary are masked out below.
    n_win = total - ngram + 1
    with np.errstate(over="ignore"):
        if n_win > 0:
            h = wh[:n_win].copy()
            rot = np.empty_like(h)
            for k in range(1, ngram):
                np.left_shift(h, _U64(23), out=rot)  # rotate so word order matters
                h >>= _U64(41)
                h |= rot
                h ^= wh[k : k + n_win]
                h *= _U64(0x9E3779B97F4A7C15)
            h = _fmix64(h)
            # A window is valid unless it starts in the last ngram - 1 words of its document.
            valid = np.ones(n_win, dtype=bool)
            ends = starts + lens
            for k in range(1, ngram):
                pos = ends - k
                valid[pos[(pos >= starts) & (pos < n_win)]] = False
            keys = doc_of_word[:n_win][valid]
            keys <<= _U64(32)
            keys |= h[valid] & _MASK32
        else:
            keys = np.empty(0, dtype=np.uint64)
        # The windows in text order, before short documents and the sort: what anchors are made of.
        anchors = anchor_keys(keys, len(texts), anchor_every) if anchor_every else [empty for _ in texts]
        # Short documents (fewer than ngram words, at least one): one shingle of all words.
        short = np.nonzero((lens > 0) & (lens < ngram))[0]
        if short.size:
            extra = np.empty(short.size, dtype=np.uint64)
            for j, d in enumerate(short):
                s = wh[starts[d] : starts[d] + lens[d]].copy()
                acc = _U64(0x2545F4914F6CDD1D) ^ _U64(int(lens[d]))
                for v in s:
                    acc = ((acc << _U64(23)) | (acc >> _U64(41))) ^ v
                    acc = acc * _U64(0x9E3779B97F4A7C15)
                extra[j] = acc
            extra = _fmix64(extra)
            keys = np.concatenate([keys, (short.astype(np.uint64) << _U64(32)) | (extra & _MASK32)])
    # Sort by (doc, shingle) and drop repeats (faster than np.unique's hash path).
    keys.sort()
    if keys.size > 1:
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    docs = (keys >> _U64(32)).astype(np.int64)
    vals = (keys & _MASK32).astype(np.uint32)
    bounds = np.searchsorted(docs, np.arange(len(texts) + 1))
    return [vals[bounds[i] : bounds[i + 1]] for i in range(len(texts))], anchors


# Containment needs its own evidence: a passage that is 20 % of a longer document shares 20 % of
# its MinHash values with it, too few for LSH bands. Both helpers below select shingles by their
# value alone (a consistent sample), so a passage's selected shingles are those of the longer
# document at the same place: ``sampled`` for the screen's containment estimate (SAMPLE_EVERY),
# ``anchor_keys`` for candidates (ANCHOR_EVERY; nested in the screen's sample).
SAMPLE_EVERY = 16
ANCHOR_EVERY = 16  # DedupeConfig.anchor_every's default
_ANCHOR_SALT = _U64(0x5F3759DF2545F491)


def sampled(shingles: np.ndarray, every: int) -> np.ndarray:
    """bool mask: the shingles (32-bit values) in the consistent 1-in-``every`` sample.

    A value is in when the top half of its Fibonacci product falls in the lowest ``1/every`` of the
    range, so the 1-in-32 sample is inside the 1-in-16 one."""
    with np.errstate(over="ignore"):
        x = np.asarray(shingles, dtype=np.uint64) * _U64(0x9E3779B97F4A7C15)
    return (x >> _U64(32)) < _U64((1 << 32) // every)


def anchor_keys(stream: np.ndarray, n_texts: int, every: int) -> list[np.ndarray]:
    """Per text, the sorted unique int64 keys of its consecutive sampled shingles, paired in text order.

    ``stream``: ``text index << 32 | shingle`` of every window in text order. A shingle is sampled
    1 in ``every`` (``sampled``); each pair of consecutive sampled shingles of a text, mixed, is one
    key. A passage copied into another document (or cut from it) keeps the pairs that lie inside
    it, whatever the rest of either document: two such documents share a bucket however low their
    Jaccard. A pair spans ~``every`` words, so unrelated documents rarely share one.
    """
    empty = np.empty(0, dtype=np.int64)
    s = stream[sampled(stream & _MASK32, every)]
    if s.size < 2:
        return [empty for _ in range(n_texts)]
    docs = s >> _U64(32)
    vals = s & _MASK32
    same = docs[1:] == docs[:-1]
    with np.errstate(over="ignore"):
        pairs = _fmix64(((vals[:-1] << _U64(32)) | vals[1:])[same] ^ _ANCHOR_SALT).view(np.int64)
    pdoc = docs[:-1][same].astype(np.int64)
    order = np.lexsort((pairs, pdoc))
    pairs, pdoc = pairs[order], pdoc[order]
    if pairs.size > 1:
        keep = np.concatenate(([True], (pairs[1:] != pairs[:-1]) | (pdoc[1:] != pdoc[:-1])))
        pairs, pdoc = pairs[keep], pdoc[keep]
    bounds = np.searchsorted(pdoc, np.arange(n_texts + 1))
    return [pairs[bounds[i]:bounds[i + 1]] for i in range(n_texts)]


@dataclass(frozen=True)
class MinHasher:
    """MinHash + LSH banding parameters; permutations derived from ``seed`` (stable forever)."""

    ngram: int = 5
    bands: int = 14
    rows: int = 8
    seed: int = 42
    anchors: int = 0  # anchor keys after the band keys: 1 shingle in this many sampled (0: none)
    anchor_queries: int = 0  # a document's smallest anchor keys that are members of a large bucket (0: all)

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows

    def permutations(self) -> tuple[np.ndarray, np.ndarray]:
        """(a, b) uint64 arrays of length num_perm; a is odd."""
        a = np.array([_blake64(f"a|{self.seed}|{i}".encode()) | 1 for i in range(self.num_perm)], dtype=np.uint64)
        b = np.array([_blake64(f"b|{self.seed}|{i}".encode()) for i in range(self.num_perm)], dtype=np.uint64)
        return a, b

    def signatures(self, shingles: Sequence[np.ndarray]) -> np.ndarray:
        """(len(shingles), num_perm) uint32 MinHash signatures; an empty set gets all 0xFFFFFFFF."""
        a, b = _perms_cached(self.seed, self.num_perm)
        n = len(shingles)
        sig = np.full((n, self.num_perm), 0xFFFFFFFFFFFFFFFF, dtype=np.uint64)
        lens = np.fromiter((len(s) for s in shingles), dtype=np.int64, count=n)
        if lens.sum() == 0:
            return sig.astype(np.uint32)
        kernel = _kernel.for_batch(int(lens.sum()) * self.num_perm)
        if kernel is not None:
            bounds = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(lens, out=bounds[1:])
            kernel(np.concatenate([np.asarray(s, dtype=np.uint32) for s in shingles]), bounds, a, b, sig)
            sig >>= _U64(32)
            return sig.astype(np.uint32)
        x = np.concatenate([np.asarray(s, dtype=np.uint64) for s in shingles])
        ends = np.cumsum(lens)
        starts = ends - lens
        block = np.empty((_CHUNK_ROWS, self.num_perm), dtype=np.uint64)
        i = 0
        while i < n:
            if lens[i] >= min(_SMALL_DOC, _CHUNK_ROWS):
                # One document: a plain min over its rows (much faster than reduceat),
                # in cache-sized pieces.
                for lo in range(starts[i], ends[i], _CHUNK_ROWS):
                    blk = _affine(x[lo:min(lo + _CHUNK_ROWS, ends[i])], a, b, block)
                    np.minimum(sig[i], blk.min(axis=0), out=sig[i])
                i += 1
                continue
            # A run of small documents in one block: min per document segment.
            j, rows = i, 0
            while j < n and lens[j] < min(_SMALL_DOC, _CHUNK_ROWS) and rows + lens[j] <= _CHUNK_ROWS:
                rows += lens[j]
                j += 1
            docs = np.arange(i, j)[lens[i:j] > 0]  # empty sets keep all-ones
            if docs.size:
                blk = _affine(x[starts[i]:ends[j - 1]], a, b, block)
                sig[docs] = np.minimum.reduceat(blk, starts[docs] - starts[i], axis=0)
            i = j
        sig >>= _U64(32)  # all-ones (an empty set) becomes 0xFFFFFFFF
        return sig.astype(np.uint32)

    def band_keys(self, sig: np.ndarray) -> np.ndarray:
        """(n, bands) int64 LSH keys: each band's rows mixed with the band index (distinct per band)."""
        n = sig.shape[0]
        s = sig.reshape(n, self.bands, self.rows).astype(np.uint64)
        with np.errstate(over="ignore"):
            h = np.broadcast_to(
                _fmix64(np.arange(1, self.bands + 1, dtype=np.uint64) * _U64(0xD6E8FEB86659FD93)),
                (n, self.bands),
            ).copy()
            for r in range(self.rows):
                h ^= s[:, :, r]
                h *= _U64(0x9E3779B97F4A7C15)
                h = (h << _U64(29)) | (h >> _U64(35))
            h = _fmix64(h)
        return h.view(np.int64)


_PERM_CACHE: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}


SketchArrays = tuple[list[str], np.ndarray, "np.ndarray | list[np.ndarray]", list[np.ndarray], list[np.ndarray]]


def sketch_arrays(texts: Sequence[str], hasher: MinHasher, before: Sequence[str | None] | None = None) -> SketchArrays:
    """A batch of texts' exact hashes (of the normalized text), MinHash signatures, bucket keys (the
    LSH band keys, then the anchor keys when ``hasher.anchors``), shingle sets, and the shingles of
    ``before`` (each text as it was before cleaning cut lines from it; None: nothing was cut) that
    the text lost (sorted unique; empty where nothing was cut). Vectorized; each text's values do
    not depend on the batch. Pure, without Beam: it may run in a document process
    (``pipelines.localrunner.docpool``)."""
    norms = [normalize_text(t) for t in texts]
    shingles, anchors = shingles_and_anchors(norms, hasher.ngram, normalized=True, anchor_every=hasher.anchors)
    sigs = hasher.signatures(shingles)
    keys = hasher.band_keys(sigs)
    if hasher.anchors:
        keys = [np.concatenate([k, a]) for k, a in zip(keys, anchors, strict=True)]
    empty = np.empty(0, dtype=np.uint32)
    lost = [empty] * len(texts)
    cut = [i for i, b in enumerate(before or ()) if b is not None]
    if cut:
        raw = shingle_sets([before[i] for i in cut], hasher.ngram)  # type: ignore[index]
        for i, r in zip(cut, raw, strict=True):
            lost[i] = np.setdiff1d(r, shingles[i], assume_unique=True)
    return [hash_normalized(n) for n in norms], sigs, keys, shingles, lost


def _perms_cached(seed: int, num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    key = (seed, num_perm)
    if key not in _PERM_CACHE:
        _PERM_CACHE[key] = MinHasher(ngram=1, bands=num_perm, rows=1, seed=seed).permutations()
    return _PERM_CACHE[key]


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """Fraction of equal MinHash values: an unbiased estimate of the Jaccard similarity."""
    return float(np.mean(np.asarray(sig_a) == np.asarray(sig_b)))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted-unique shingle arrays (1.0 for two empty sets)."""
    if a.size == 0 and b.size == 0:
        return 1.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


def candidate_probability(s: float, bands: int, rows: int) -> float:
    """LSH S-curve: probability that a pair with Jaccard s shares at least one band."""
    return 1.0 - (1.0 - s**rows) ** bands


def lsh_threshold(bands: int, rows: int) -> float:
    """The S-curve's steepest point, approximately (1/b)^(1/r)."""
    return (1.0 / bands) ** (1.0 / rows)


def estimate_margin(threshold: float, num_perm: int, sigmas: float = 2.0) -> float:
    """``sigmas`` standard errors of a num_perm-value Jaccard estimate at ``threshold``."""
    return sigmas * math.sqrt(threshold * (1.0 - threshold) / num_perm)


def overlap(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(Jaccard, overlap coefficient |A&B| / min(|A|, |B|)) of two sorted-unique shingle arrays.

    Two empty sets are identical (1.0, 1.0); one empty set overlaps nothing.
    """
    if a.size == 0 and b.size == 0:
        return 1.0, 1.0
    if a.size == 0 or b.size == 0:
        return 0.0, 0.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter), inter / min(a.size, b.size)


@dataclass(frozen=True)
class NearRule:
    """When a document may be removed as a near duplicate of another: true similarity, never LSH alone.

    ``judge(a, b)`` asks whether ``b`` may go, ``a`` staying (the order matters). Yes when:

    1. their Jaccard >= ``threshold``; or
    2. (``containment`` set) ``b`` lies in ``a``: ``|A & B| / |B| >= containment``, with ``b`` holding
       >= ``min_shingles`` shingles and the Jaccard >= ``min_jaccard`` (0 by default: a passage
       published on its own, a truncated copy or a text quoted whole in a longer one is a copy
       whatever the share of the longer one it is; the longer one is never removed for it); or
    3. (``cleaning``) the texts before cleaning cut lines from them (``a_lost``, ``b_lost``: the
       shingles each lost) have Jaccard >= ``threshold``, and what is kept of ``b`` lies in what is
       kept of ``a`` as far as that Jaccard implies for sets of one size (``2t / (1 + t)``: 0.82 at
       0.7). A copy whose edits cost it a paragraph to the line rules (a substitution that takes a
       full stop, a truncation mid-sentence) is judged as the copy it was; two pages that share only
       a template the line rules remove keep nothing in common and stay.
    """

    threshold: float
    containment: float | None = None
    min_jaccard: float = 0.0
    min_shingles: int = 50
    cleaning: bool = True

    @property
    def kept_share(self) -> float:
        """The share of ``b`` that must lie in ``a`` on the cleaning path: what Jaccard ``threshold`` implies."""
        return 2 * self.threshold / (1 + self.threshold)

    def accepts(self, a: np.ndarray, b: np.ndarray) -> bool:
        """True if ``b`` may be removed as a near duplicate of ``a`` (sorted-unique shingle arrays)."""
        return self.judge(a, b)[0]

    def judge(self, a: np.ndarray, b: np.ndarray, a_lost: np.ndarray | None = None,
              b_lost: np.ndarray | None = None) -> tuple[bool, float]:
        """(may ``b`` be removed as a near duplicate of ``a``?, their true Jaccard)."""
        if a.size == 0 and b.size == 0:
            return True, 1.0
        if a.size == 0 or b.size == 0:
            return False, 0.0
        inter = np.intersect1d(a, b, assume_unique=True).size
        j = inter / (a.size + b.size - inter)
        if j >= self.threshold:
            return True, j
        if (self.containment is not None and inter / b.size >= self.containment and j >= self.min_jaccard
                and b.size >= self.min_shingles):
            return True, j
        lost = (a_lost is not None and a_lost.size > 0) or (b_lost is not None and b_lost.size > 0)
        if self.cleaning and lost and inter / b.size >= self.kept_share:
            ra = a if a_lost is None or not a_lost.size else np.union1d(a, a_lost)
            rb = b if b_lost is None or not b_lost.size else np.union1d(b, b_lost)
            return jaccard(ra, rb) >= self.threshold, j
        return False, j
