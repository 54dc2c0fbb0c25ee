"""Benchmark: trainer.masking.Masker against Hugging Face collators and a per-sequence span masker.

One 256 × 512 batch, masked on CPU (and on CUDA when available) by:
- ours, every scheme (token, whole_word, span, ngram);
- transformers.DataCollatorForLanguageModeling (token MLM, and whole_word_mask=True,
  which replaced DataCollatorForWholeWordMask in transformers 5), with an
  offline in-memory tokenizer;
- a pure-Python SpanBERT-style masker written here the way SpanBERT's reference
  does it: loop over sequences, draw one anchor and one span length at a time.

Prints ratios (baseline time / ours) and writes benchmarks/results/masking.md.
Run: ``python benchmarks/bench_masking.py [--batch 256] [--length 512] [--repeat 5]``.
"""

from __future__ import annotations

import os
import statistics
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, interleaved, machine, write_results  # noqa: E402
from schemas import MASK_ID, PAD_ID, SPECIAL_TOKENS  # noqa: E402
from schemas.config import MaskingConfig  # noqa: E402
from trainer.masking import Masker, word_start_table  # noqa: E402

SPECIAL_PIECES = sorted(SPECIAL_TOKENS, key=SPECIAL_TOKENS.__getitem__)
SPECIAL_IDS = sorted(SPECIAL_TOKENS.values())
HF_TOK = "HF DataCollatorForLanguageModeling (special mask computed by HF)"
HF_TOK_GIVEN = "HF DataCollatorForLanguageModeling (special mask given)"
HF_WWM = "HF whole_word_mask=True (ex-DataCollatorForWholeWordMask)"
PY_SPAN = "per-sequence Python span masker (SpanBERT-style)"


# ---------------------------------------------------------------- inputs


def make_vocab(vocab_size: int, rng: np.random.Generator) -> list[str]:
    """Pieces: the specials, then ~65% word-start ("\u2581...") pieces, like a unigram model."""
    pieces = list(SPECIAL_PIECES)
    for i in range(len(pieces), vocab_size):
        pieces.append(("\u2581" if rng.random() < 0.65 else "") + f"p{i}")
    return pieces


def make_batch(batch: int, length: int, vocab_size: int, rng: np.random.Generator) -> torch.Tensor:
    """Full-length rows `<s> ... </s>` with a document separator in the middle."""
    ids = rng.integers(len(SPECIAL_IDS), vocab_size, size=(batch, length))
    ids[:, 0] = SPECIAL_TOKENS["<s>"]
    ids[:, -1] = SPECIAL_TOKENS["</s>"]
    ids[:, length // 2] = SPECIAL_TOKENS["</s>"]
    return torch.from_numpy(ids).long()


def hf_tokenizer(pieces: list[str]):  # -> transformers.PreTrainedTokenizerFast
    """An in-memory WordLevel tokenizer over our pieces (no hub access)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(WordLevel({p: i for i, p in enumerate(pieces)}, unk_token="<unk>"))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
    )


def offsets_for(ids: torch.Tensor, ws: torch.Tensor) -> np.ndarray:
    """Character offsets as a fast tokenizer would report them: a gap before each word start."""
    starts = ws[ids].long()
    width = 3
    begin = torch.cumsum(width + starts, dim=1) - width  # a word start skips one extra char
    off = torch.stack([begin, begin + width], dim=-1)
    special = torch.isin(ids, torch.tensor(SPECIAL_IDS))
    off[special] = 0
    return off.numpy()


# ---------------------------------------------------------------- baseline: per-sequence spans


class PythonSpanMasker:
    """SpanBERT-style masking, one sequence and one span at a time (the reference's shape).

    Draw an anchor token uniformly; skip it if already masked; extend to whole
    words until the sampled number of words; stop at the budget; decide
    80/10/10 per span.
    """

    def __init__(self, ws: list[bool], special: set[int], vocab_size: int, p: float = 0.2, hi: int = 10,
                 rate: float = 0.15, seed: int = 0) -> None:
        self.ws, self.special, self.vocab_size, self.rate = ws, special, vocab_size, rate
        self.lens = list(range(1, hi + 1))
        d = [p * (1 - p) ** (k - 1) for k in self.lens]
        self.len_distrib = [x / sum(d) for x in d]
        self.rng = np.random.RandomState(seed)

    def _word_start(self, row: list[int], i: int) -> int:
        while i > 0 and not self.ws[row[i]] and row[i - 1] not in self.special:
            i -= 1
        return i

    def _word_end(self, row: list[int], i: int) -> int:
        i += 1
        while i < len(row) and not self.ws[row[i]] and row[i] not in self.special:
            i += 1
        return i

    def mask_row(self, row: list[int]) -> tuple[list[int], list[int]]:
        n = len(row)
        maskable = [i for i, t in enumerate(row) if t not in self.special]
        budget = int(round(self.rate * len(maskable)))
        masked: set[int] = set()
        spans: list[tuple[int, int]] = []
        while len(masked) < budget:
            span_len = self.rng.choice(self.lens, p=self.len_distrib)
            anchor = maskable[self.rng.choice(len(maskable))]
            if anchor in masked:
                continue
            left = self._word_start(row, anchor)
            right, words = left, 0
            while words < span_len and right < n and row[right] not in self.special and len(masked) < budget:
                end = self._word_end(row, right)
                for i in range(right, end):
                    if len(masked) >= budget:
                        break
                    masked.add(i)
                right, words = end, words + 1
            spans.append((left, right))
        out, labels = list(row), [-100] * n
        for left, right in spans:
            r = self.rng.random_sample()
            for i in range(left, right):
                if i not in masked or labels[i] != -100:
                    continue
                labels[i] = row[i]
                if r < 0.8:
                    out[i] = MASK_ID
                elif r < 0.9:
                    out[i] = int(self.rng.randint(len(self.special), self.vocab_size))
        return out, labels

    def __call__(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = [self.mask_row(r) for r in ids.tolist()]
        return {
            "input_ids": torch.tensor([r[0] for r in rows]),
            "labels": torch.tensor([r[1] for r in rows]),
        }


# ---------------------------------------------------------------- timing


def time_interleaved(
    fns: dict[str, Callable[[], object]], repeat: int, sync: bool = False
) -> dict[str, tuple[float, float]]:
    """(median, min) wall seconds per function over `repeat` round-robin runs after one warm-up
    call each; the min is the least disturbed run. `sync`: wait for CUDA around each run."""
    times = interleaved(fns, repeat, sync=torch.cuda.synchronize if sync else None)
    return {k: (statistics.median(t.wall for t in v), min(t.wall for t in v)) for k, v in times.items()}


def show(row: tuple[str, str, tuple[float, float]]) -> None:
    what, device, (med, low) = row
    print(f"{what:<66} {device:<4} median {med * 1e3:9.2f} ms  min {low * 1e3:9.2f} ms", flush=True)


def main() -> None:
    ap = bench_parser(__doc__, "masking")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    pieces = make_vocab(args.vocab, rng)
    ws = word_start_table(pieces, SPECIAL_IDS)
    ids = make_batch(args.batch, args.length, args.vocab, rng)
    sids = torch.arange(args.batch)
    B, L = ids.shape
    rows: list[tuple[str, str, tuple[float, float]]] = []  # (what, device, (median s, min s))

    def ours(scheme: str, device: str) -> Callable[[], object]:
        m = Masker(MaskingConfig(scheme=scheme), args.vocab, SPECIAL_IDS, MASK_ID, PAD_ID, ws).to(device)
        x, s = ids.to(device), sids.to(device)
        return lambda: m(x, s, epoch=0, seed=0)

    from transformers import DataCollatorForLanguageModeling

    tok = hf_tokenizer(pieces)
    special_mask = torch.isin(ids, torch.tensor(SPECIAL_IDS)).long()
    offsets = offsets_for(ids, ws)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_tok = DataCollatorForLanguageModeling(tok, mlm_probability=0.15)
        hf_wwm = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, whole_word_mask=True)
    py_span = PythonSpanMasker(ws.tolist(), set(SPECIAL_IDS), args.vocab)
    fns: dict[str, Callable[[], object]] = {
        f"ours: {scheme}": ours(scheme, "cpu") for scheme in ("token", "whole_word", "span", "ngram")
    }
    fns |= {
        HF_TOK: lambda: hf_tok.torch_mask_tokens(ids.clone()),
        HF_TOK_GIVEN: lambda: hf_tok.torch_mask_tokens(ids.clone(), special_tokens_mask=special_mask),
        HF_WWM: lambda: hf_wwm.torch_mask_tokens(
            ids.clone(), special_tokens_mask=special_mask, offset_mapping=offsets
        ),
        PY_SPAN: lambda: py_span(ids),
    }
    for name, stats in time_interleaved(fns, args.repeat).items():
        rows.append((name, "cpu", stats))
        show(rows[-1])

    if torch.cuda.is_available():
        gpu_fns = {f"ours: {scheme}": ours(scheme, "cuda") for scheme in ("token", "whole_word", "span", "ngram")}
        for name, stats in time_interleaved(gpu_fns, args.repeat * 4, sync=True).items():
            rows.append((name, "cuda", stats))
            show(rows[-1])

    t = {(w, d): s[0] for w, d, s in rows}
    ratios = [
        ("HF token MLM (HF computes special mask) / ours token",
         t[(HF_TOK, "cpu")], t[("ours: token", "cpu")]),
        ("HF token MLM (special mask given) / ours token",
         t[(HF_TOK_GIVEN, "cpu")], t[("ours: token", "cpu")]),
        ("HF whole-word / ours whole_word",
         t[(HF_WWM, "cpu")], t[("ours: whole_word", "cpu")]),
        ("per-sequence Python spans / ours span",
         t[(PY_SPAN, "cpu")], t[("ours: span", "cpu")]),
    ]
    if torch.cuda.is_available():
        for scheme in ("token", "whole_word", "span", "ngram"):
            ratios.append((f"ours {scheme}: CPU / CUDA", t[(f"ours: {scheme}", "cpu")], t[(f"ours: {scheme}", "cuda")]))
    print()
    for name, a, b in ratios:
        print(f"{name:<55} {a / b:8.2f}x")

    lines = [
        "# Dynamic masking benchmark",
        "",
        f"Batch {B} × {L} (vocab {args.vocab}, ~65% word-start pieces, `<s>`/`</s>` plus one mid-row `</s>`), "
        f"median of {args.repeat} interleaved runs after a warm-up, torch threads {torch.get_num_threads()}.",
        "",
        f"Machine: {machine('transformers', torch_details=True, load=True)}.",
        "",
        "Command: `python benchmarks/bench_masking.py"
        + (f" --batch {B} --length {L}" if (B, L) != (256, 512) else "")
        + (f" --threads {args.threads}" if args.threads else "")
        + (f" --repeat {args.repeat}" if args.repeat != 7 else "")
        + "`",
        "",
        "| method | device | median ms / batch | min ms |",
        "|---|---|---:|---:|",
        *[f"| {w} | {d} | {s[0] * 1e3:.2f} | {s[1] * 1e3:.2f} |" for w, d, s in rows],
        "",
        "Ratios are baseline median / ours median (> 1: ours is faster).",
        "",
        "| ratio | × |",
        "|---|---:|",
        *[f"| {n} | {a / b:.2f} |" for n, a, b in ratios],
        "",
        "HF's whole-word mode replaces every selected token by `<mask>` (it disables the 10% random "
        "replacement) and builds a [B, L, L] same-word tensor; ours keeps 80/10/10. HF timings cover "
        "`torch_mask_tokens` only (no padding/collation), like ours.",
        "",
    ]
    print()
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
