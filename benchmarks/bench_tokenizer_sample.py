"""How much text the tokenizer needs: held-out compression, training time and memory against the
size of the training sample, on real text.

    python benchmarks/bench_tokenizer_sample.py [--text FILE ...] [--vocabs 8000,32000]
        [--samples 1,2,4,8,16,24] [--held-out-mb 2]

The documents are ``--text`` files (one paragraph per line, a blank line after each document:
``benchmarks/debian_docs.py`` writes one from Debian's documentation packages) or, without it, the
real paragraphs of ``tests/prose.py`` (~4 MB unique, so larger samples stop growing). They are
ordered by the build's sample key (``pipelines.tokenizer.sample.sample_key``: the order the build's
sample takes); the first ``--held-out-mb`` of them are held out, and a sample of S MB is the first
sentences of the rest (split by the build's splitter, cut at 8192 characters) up to S MB of UTF-8,
as the build's ``sample_bytes`` bound takes them. Each model is trained by the build's own function
(``train_tokenizer``: SentencePiece unigram with the build's settings, ``--threads`` threads) in a
fresh child process, which reports its CPU seconds and peak RSS (the sentences it holds included,
as the build's training step holds its sample). The held-out text is encoded by the build's
tokenizer reader; **bytes per token** is its UTF-8 bytes over the tokens (higher is better), and
the table gives each sample's loss against the largest one. Results:
``benchmarks/results/tokenizer_sample.md``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, command_line, machine, write_results  # noqa: E402

MB = 1_000_000


def read_documents(paths: list[Path]) -> list[str]:
    """Documents of the --text files (blank-line separated), or the prose pool's paragraphs."""
    if not paths:
        from tests.prose import paragraph_pool

        pool = paragraph_pool()
        return ["\n".join(pool[i:i + 5]) for i in range(0, len(pool), 5)]
    docs = []
    for p in paths:
        docs += [d.strip() for d in p.read_text("utf-8").split("\n\n") if d.strip()]
    return docs


def split(docs: list[str], held_out_mb: float) -> tuple[list[str], list[str]]:
    """(held-out sentences, sample-ordered training sentences)."""
    from pipelines.clean.sentences import split_sentences
    from pipelines.tokenizer.sample import MAX_SENTENCE_CHARS, sample_key

    ordered = sorted(range(len(docs)), key=lambda i: sample_key(0, f"doc-{i}"))
    held, train, held_bytes = [], [], 0
    for i in ordered:
        sents = [s[:MAX_SENTENCE_CHARS].replace("\n", " ") for s in split_sentences(docs[i])]
        if held_bytes < held_out_mb * MB:
            held += sents
            held_bytes += sum(len(s.encode()) for s in sents)
        else:
            train += sents
    return held, train


def peak_rss_mb(reset: bool = False) -> float:
    """This process's peak RSS in MB (VmHWM). A child starts with its parent's peak (fork copies
    it, exec keeps it): ``reset`` starts it again from the current RSS (Linux >= 4.0)."""
    if reset:
        Path("/proc/self/clear_refs").write_text("5")
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(sentences_file: str, sample_bytes: int, vocab: int, threads: int, model_out: str) -> None:
    """Train on the first ``sample_bytes`` of the file's sentences; print CPU s and peak RSS as JSON."""
    peak_rss_mb(reset=True)
    from pipelines.tokenizer.train import train_tokenizer
    from schemas.config import TokenizerConfig

    sents, size = [], 0
    with open(sentences_file, encoding="utf-8") as f:
        for line in f:
            s = line.rstrip("\n")
            n = len(s.encode())
            if size + n > sample_bytes:
                break
            sents.append(s)
            size += n
    base = peak_rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    model = train_tokenizer(sents, TokenizerConfig(vocab_size=vocab, num_threads=threads))
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    Path(model_out).write_bytes(model)
    peak = peak_rss_mb()
    print(json.dumps({"sentences": len(sents), "bytes": size, "cpu": cpu, "wall": wall,
                      "base_mb": base, "peak_mb": peak}))


def train_in_child(sentences_file: Path, sample_bytes: int, vocab: int, threads: int,
                   model_out: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(sentences_file), str(sample_bytes),
                          str(vocab), str(threads), str(model_out)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def held_out_bytes_per_token(model: bytes, held: list[str]) -> float:
    from schemas.tokenizer_files import load_tokenizer

    tok = load_tokenizer(model)
    tokens = sum(len(ids) for ids in tok.encode(held))
    return sum(len(s.encode()) for s in held) / tokens


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        a = sys.argv[2:]
        child(a[0], int(a[1]), int(a[2]), int(a[3]), a[4])
        return
    ap = bench_parser(__doc__, "tokenizer_sample")
    ap.add_argument("--text", type=Path, action="append", default=[],
                    help="documents: one paragraph per line, a blank line after each (repeatable)")
    ap.add_argument("--vocabs", default="8000,32000", help="vocabulary sizes, comma-separated")
    ap.add_argument("--samples", default="1,2,4,8,16,24", help="sample sizes in MB, comma-separated")
    ap.add_argument("--held-out-mb", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=1, help="SentencePiece training threads")
    args = ap.parse_args()
    vocabs = [int(v) for v in args.vocabs.split(",")]
    samples = [float(s) for s in args.samples.split(",")]

    docs = read_documents(args.text)
    held, train = split(docs, args.held_out_mb)
    train_mb = sum(len(s.encode()) for s in train) / MB
    held_mb = sum(len(s.encode()) for s in held) / MB
    source = ", ".join(str(p) for p in args.text) or "tests/prose.py paragraph pool"
    print(f"{len(docs):,} documents: {held_mb:.1f} MB held out, {train_mb:.1f} MB to sample from")
    rows: dict[int, list[tuple[float, dict, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="tok-sample-") as tmp:
        sentences_file = Path(tmp) / "train.txt"
        sentences_file.write_text("".join(s + "\n" for s in train), encoding="utf-8")
        for vocab in vocabs:
            rows[vocab] = []
            for s in samples:
                if s > train_mb:
                    print(f"  vocab {vocab}: {s} MB is more than the text holds; skipped")
                    continue
                model_file = Path(tmp) / f"v{vocab}-{s}.model"
                r = train_in_child(sentences_file, int(s * MB), vocab, args.threads, model_file)
                bpt = held_out_bytes_per_token(model_file.read_bytes(), held)
                rows[vocab].append((s, r, bpt))
                print(f"  vocab {vocab}, {r['bytes'] / MB:.1f} MB ({r['sentences']:,} sentences): "
                      f"{bpt:.4f} bytes/token, {r['cpu']:.1f} CPU-s, peak {r['peak_mb']:.0f} MB")

    lines = ["# Tokenizer sample size: held-out compression, training cost", "",
             f"`{command_line()}`", "", f"Machine: {machine('sentencepiece')}", "",
             f"Text: {source}: {len(docs):,} documents; {held_mb:.1f} MB of sentences held out, "
             f"{train_mb:.1f} MB to sample from. SentencePiece unigram, the build's settings, "
             f"{args.threads} training thread(s); one child process per model.", ""]
    for vocab, rs in rows.items():
        if not rs:
            continue
        best = rs[-1][2]
        lines += [f"## vocab_size {vocab}", "",
                  "| sample MB | sentences | held-out bytes/token | loss vs the largest sample "
                  "| training CPU-s | peak RSS MB | RSS over the start, MB per sample MB |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for _, r, bpt in rs:
            grow = (r["peak_mb"] - r["base_mb"]) / (r["bytes"] / MB)
            lines.append(f"| {r['bytes'] / MB:.1f} | {r['sentences']:,} | {bpt:.4f} | "
                         f"{100 * (best - bpt) / best:.2f} % | {r['cpu']:.1f} | {r['peak_mb']:.0f} | {grow:.1f} |")
        lines.append("")
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
