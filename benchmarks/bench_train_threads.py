"""Tokenizer training threads: SentencePiece on 1 thread, the build's default, against N.

    python benchmarks/bench_train_threads.py [--mb 20] [--threads 1,2,4] [--repeat 2]

The build trains its tokenizer in one step on one worker (``TrainTokenizer``): below the sample
caps on the whole kept corpus, and at 100 MB that step is ~30% of the build's CPU. Its only
parallelism is SentencePiece's own threads (``tokenizer.num_threads``), whose model depends on the
thread count but not on the machine (docs/tokenizer.md, Determinism). This trains the build's
default unigram model (``train_tokenizer`` with the build's settings) on the sentences of
real prose (tests/prose.py: public-domain text from installed packages) at each thread
count, alternating the counts over the repeats, and prints wall and CPU seconds, the speed-up
over 1 thread, and each model's sha256 (the same count must give the same bytes every run).
Only the trainer's EM and pruning run on threads; loading the sentences and the seed pieces'
suffix array run on one, so the speed-up stays below the thread count even with the cores free.
Results: benchmarks/results/train_threads.md.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, command_line, machine, scratch_dir, write_results  # noqa: E402
from pipelines.clean.sentences import split_sentences  # noqa: E402
from pipelines.tokenizer.train import train_tokenizer  # noqa: E402
from schemas.config import TokenizerConfig  # noqa: E402
from tests.prose import write_prose_corpus  # noqa: E402


def prose_sentences(mb: float, seed: int) -> list[str]:
    with scratch_dir("sf-threads-") as work:
        raw = work / "raw.jsonl"
        write_prose_corpus(raw, mb, seed)
        with open(raw, encoding="utf-8") as f:
            return [s for line in f for s in split_sentences(json.loads(line)["text"])]


def train_once(sents: list[str], threads: int, vocab: int) -> tuple[float, float, str]:
    cfg = TokenizerConfig(vocab_size=vocab, num_threads=threads)
    w, c = time.perf_counter(), time.process_time()
    model = train_tokenizer(sents, cfg)
    return time.perf_counter() - w, time.process_time() - c, hashlib.sha256(model).hexdigest()


def main() -> int:
    ap = bench_parser(__doc__, "train_threads")
    ap.add_argument("--mb", type=float, default=20.0, help="MB of prose to train on (default 20).")
    ap.add_argument("--threads", default="1,2,4", help="Thread counts, comma-separated (default 1,2,4).")
    ap.add_argument("--repeat", type=int, default=2, help="Runs per count, alternated (default 2).")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=7, help="Corpus seed.")
    args = ap.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    sents = prose_sentences(args.mb, args.seed)
    mb = sum(len(s.encode("utf-8")) for s in sents) / 1e6
    runs: dict[int, list[tuple[float, float, str]]] = {n: [] for n in counts}
    for r in range(args.repeat):
        for n in (counts if r % 2 == 0 else counts[::-1]):
            runs[n].append(train_once(sents, n, args.vocab))
            wall, cpu, digest = runs[n][-1]
            print(f"{n} thread{'s' if n > 1 else ''}: wall {wall:.1f} s, CPU {cpu:.1f} s, model {digest[:12]}", flush=True)
    base = statistics.median(w for w, _, _ in runs[counts[0]])
    lines = [f"SentencePiece unigram, vocab {args.vocab}, trained on {len(sents):,} sentences ({mb:.1f} MB) of real "
             f"prose (tests/prose.py, seed {args.seed}); {args.repeat} runs per count, alternated.", "",
             "| threads | wall s (median) | runs | CPU s (median) | speed-up vs " f"{counts[0]} | same model every run |",
             "|---:|---:|---|---:|---:|---|"]
    for n in counts:
        walls = [w for w, _, _ in runs[n]]
        wall = statistics.median(walls)
        same = len({d for _, _, d in runs[n]}) == 1
        lines.append(f"| {n} | {wall:.1f} | {', '.join(f'{w:.1f}' for w in walls)} | "
                     f"{statistics.median(c for _, c, _ in runs[n]):.1f} | {base / wall:.2f}x | "
                     f"{'yes' if same else 'NO'} ({runs[n][0][2][:12]}) |")
    text = "\n".join(lines)
    print(text)
    write_results(Path(args.out),
                  ["# Tokenizer training threads", "", f"`{command_line()}`", "", machine("sentencepiece", load=True),
                   "", text, ""])
    return 0 if all(len({d for _, _, d in rs}) == 1 for rs in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
