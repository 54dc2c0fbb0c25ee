"""Tokenizer kinds on real text: byte-level BPE (tokenizers) vs SentencePiece unigram / BPE.

    python benchmarks/bench_tokenizer_kinds.py [--vocab 8000] [--copies 8]

The text is the real news articles of tests/realtext.py (gensim's Lee corpus,
343 articles, 0.38 MB), split into sentences by the build's splitter; the
held-out measures train on the even articles and encode the odd ones. Each
kind is trained with the build's own function (``train_tokenizer``, the job's
settings: SentencePiece on 1 thread, tokenizers on its own pool) and encoded
through the build's reader of tokenizer files (``schemas.tokenizer_files``,
the call the Tokenize stage makes). Training speed is sentences-in to
file-out; encoding speed is MB of UTF-8 per second over the whole text
repeated ``--copies`` times (one call per 4096 sentences, as the stage batches). One
run each (the machine is shared). Results: benchmarks/results/tokenizer_kinds.md.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, command_line, machine, write_results  # noqa: E402
from pipelines.clean.sentences import split_sentences  # noqa: E402
from pipelines.tokenizer.encode import resolve_threads  # noqa: E402
from pipelines.tokenizer.train import train_tokenizer
from schemas import UNK_ID  # noqa: E402
from schemas.config import TokenizerConfig  # noqa: E402
from schemas.tokenizer_files import load_tokenizer  # noqa: E402
from tests.realtext import news_documents  # noqa: E402

BATCH = 4096


def sentences_of(docs: list[str]) -> list[str]:
    return [s for d in docs for s in split_sentences(d)]


def encode_all(tok, sents: list[str], threads: int) -> list[list[int]]:
    # tokenizers reads TOKENIZERS_PARALLELISM at each batch call: false runs it on the calling thread.
    os.environ["TOKENIZERS_PARALLELISM"] = "false" if threads == 1 else "true"
    out: list[list[int]] = []
    for i in range(0, len(sents), BATCH):
        out += tok.encode(sents[i: i + BATCH], num_threads=threads)
    return out


def main() -> None:
    ap = bench_parser(__doc__, "tokenizer_kinds")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--copies", type=int, default=8, help="times the text is repeated for the encode timing")
    args = ap.parse_args()
    docs = news_documents()
    all_sents = sentences_of(docs)
    train, held_out = sentences_of(docs[::2]), sentences_of(docs[1::2])
    words = sum(len(s.split()) for s in held_out)
    big = all_sents * args.copies
    mb = sum(len(s.encode()) for s in big) / 1e6
    threads = resolve_threads(0)
    kinds = {
        "SentencePiece unigram, earlier defaults (coverage 0.9995, no byte fallback)":
            TokenizerConfig(vocab_size=args.vocab, character_coverage=0.9995, byte_fallback=False),
        "SentencePiece unigram, defaults (coverage 1.0, byte fallback)": TokenizerConfig(vocab_size=args.vocab),
        "SentencePiece BPE, defaults": TokenizerConfig(model_type="bpe", vocab_size=args.vocab),
        "byte-level BPE (tokenizers)": TokenizerConfig(model_type="byte_bpe", vocab_size=args.vocab),
    }
    rows = []
    for name, cfg in kinds.items():
        t0 = time.perf_counter()
        model = train_tokenizer(all_sents, cfg)
        train_s = time.perf_counter() - t0
        tok = load_tokenizer(model)
        speeds = []
        for t in (1, threads):
            t0 = time.perf_counter()
            encode_all(tok, big, t)
            speeds.append(mb / (time.perf_counter() - t0))
        held = load_tokenizer(train_tokenizer(train, cfg))
        ids = [i for s in held.encode(held_out) for i in s]
        unk = sum(i == UNK_ID for i in ids)
        rows.append((name, tok.vocab_size, train_s, speeds, unk, len(ids), len(ids) / words))
        print(f"{name}: train {train_s:.2f}s, encode {speeds[0]:.1f}/{speeds[-1]:.1f} MB/s, "
              f"<unk> {unk}/{len(ids)}", flush=True)
    sp_unigram = rows[1]
    lines = [
        "# Tokenizer kinds on real text",
        "",
        f"`{command_line()}`",
        "",
        machine("sentencepiece", "tokenizers", load=True),
        "",
        f"Text: {len(docs)} real news articles (tests/realtext.py), {len(all_sents):,} sentences, "
        f"{sum(len(s.encode()) for s in all_sents) / 1e6:.2f} MB; training on all of it, encoding it "
        f"{args.copies}× ({mb:.1f} MB) in calls of {BATCH} sentences. Held out: trained on the "
        f"even articles, encoded the odd ones ({words:,} words). vocab_size {args.vocab}. One run.",
        "",
        f"| kind | pieces | train (s) | train vs SP unigram | encode 1 thread (MB/s) | encode {threads} threads "
        "(MB/s) | encode vs SP unigram | held-out `<unk>` | tokens per word |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, vocab, train_s, speeds, unk, n, tpw in rows:
        lines.append(f"| {name} | {vocab} | {train_s:.2f} | {train_s / sp_unigram[2]:.2f}× | {speeds[0]:.1f} | "
                     f"{speeds[-1]:.1f} | {speeds[-1] / sp_unigram[3][-1]:.2f}× | {unk} of {n:,} "
                     f"({100 * unk / n:.3f} %) | {tpw:.2f} |")
    lines += ["", "Threads: SentencePiece encodes a list on `num_threads` C++ threads; tokenizers on its own "
              "pool (1 thread here: `TOKENIZERS_PARALLELISM=false`). Training: SentencePiece with 1 thread "
              "(the build's setting, for byte-identical models); tokenizers with its pool (its output does "
              "not depend on it)."]
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
