"""A large, fixed sample of real and hostile text for the cleaning stage's equivalence test and
benchmark (tests/test_clean_equivalence.py, benchmarks/bench_clean.py).

Real text: gensim's Lee news corpus (tests/realtext.py) as shipped, split into lines and into
paragraphs, and framed as web pages with boilerplate lines; the UDHR windows in 447 languages
(tests/data/udhr_windows.jsonl), alone and joined. Derived text exercises the repetition rules
(a sentence, a line or a paragraph repeated), and hostile inputs every guard and edge: empty and
blank pages, control characters, a 200k-character line, a 1.2 MB page, undecodable bytes, curly
quotes, ``...`` and ``…`` line ends, bullets, hashtags, markup, braces, number tables, CRLF,
no-break and zero-width spaces, combining accents. Then random mixtures of all of these pieces
with random separators. Everything is a function of fixed seeds: the same sample every run.

    from clean_sample import sample_documents, variant_configs   # in tests
    # from tests.clean_sample import ...                         # in scripts run from the repository root
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from pipelines.records import Document
from schemas.config import CleanConfig

try:  # pytest puts tests/ on sys.path; scripts run from the repository root use the package path
    from realtext import news_documents
except ImportError:  # pragma: no cover - the benchmark's import path
    from tests.realtext import news_documents

UDHR = Path(__file__).parent / "data" / "udhr_windows.jsonl"
SEED = 16


def _sentences(text: str) -> list[str]:
    """A crude split at '. ' (the sample needs lines, not linguistics; it must not depend on the
    splitter under test)."""
    parts = [p.strip() for p in text.replace(". ", ".\x00").split("\x00")]
    return [p for p in parts if p]


def udhr_texts() -> list[str]:
    return [json.loads(line)["text"] for line in UDHR.read_text(encoding="utf-8").splitlines()]


def hostile_texts(lee: list[str]) -> list[str]:
    """Edge and hostile inputs, each aimed at a guard, a rule or a normalization step."""
    a, b, c = lee[0], lee[1], lee[2]
    lines = _sentences(a)
    return [
        "", "   ", "\n\n\n", "\t\x00\x07 \u200b", "\ufeff" + a,
        " ".join(lee[:180]),  # one line of ~200k characters
        (a + "\n") * 1100,  # 1.2 MB of UTF-8
        "\u00e9" * 600_000,  # 600k characters, 1.2 MB
        a.replace("the", "th\udcffe", 1),  # an undecodable byte, kept as a lone surrogate
        "\n".join(f"\u201c{s}\u201d" for s in lines), "\n".join(f"{s[:-1]}..." for s in lines),
        "\n".join(f"{s[:-1]}\u2026" for s in lines), "\n".join(f"\u2019{s}\u2019" for s in lines),
        "\n".join(f"\u2022 {s}" for s in lines), "\n".join(f"- {s}" for s in lines) + "\n" + b,
        "\n".join(f"* {s}" for s in lines[:2]) + "\n" + b, a + " " + " ".join(f"#tag{i}" for i in range(40)),
        a + " ... " * 30, a + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.",
        a + "\nThe function returns {value: 1} when done.",
        "<div>" + "</div><div>".join(lines) + "</div>" + "<span class='x'>y</span>" * 50,
        a.replace("the", "<b>the</b>", 3),
        a + "\n" + "\n".join(" ".join(f"{i * j}.{j}%" for j in range(12)) for i in range(40)),
        "Apples bananas cherries dates figs grapes. " * 5 + "Plums peaches pears apricots kiwis. " * 9,
        " ".join(w * 4 for w in a.split()), " ".join(w[:2] for w in a.split()),
        a.replace(" ", "\r\n", 20), a.replace(" ", "\u00a0 \t", 30), a.replace(" ", "  \u3000 ", 30),
        a.replace("e", "e\u0301"), a.replace("a", "\u212b"), b + "\n" + "x" * 1500 + " and then it ended.",
        b + "\nThe token " + "y" * 1001 + " ends this line here ok.",
        "Please enable JavaScript to view the comments.\n" + b + "\nThis site uses cookies, see our cookie policy.",
        "Read our Privacy Policy and Terms of Use before you go on reading this.\n" + c,
        "\n".join([lines[0]] * 8 + lines), "\n\n".join([lines[0]] * 6 + [b]),
        " ".join([lines[1]] * 12), " ".join(a.split()[:30]) + ". " + " ".join(a.split()[:30]) + ".",
        " ".join(["word."] * 120_000), "Mr. Smith went to Washington. Dr. No. 5 arrived. U.S. troops left. Ok.",
        "\u0391\u03a3 \u03a3\u03a3. " * 30 + a, "\u0130stanbul " * 80 + a, "\uffff " + a,
        "\u00b2 \u00bd 1 2 3 " * 60 + a,
    ]


def web_page(text: str, rng: random.Random) -> str:
    """A news article framed as a web page: menu, cookie banner, share buttons, comments."""
    body = "\n".join(_sentences(text)) if rng.random() < 0.5 else text
    return ("Home | News | Sport | Contact\nThis site uses cookies.\n" + body
            + "\nShare on Facebook\nPlease enable JavaScript to view the comments.\nRead more")


def mixtures(pieces: list[str], n: int, rng: random.Random) -> list[str]:
    """Random documents made of 1-14 pieces joined by random separators."""
    seps = ["\n", "\n\n", "\n\n\n", " ", "\r\n", " \t ", "\u2028", "\n \n", ". "]
    return [rng.choice(seps).join(rng.choice(pieces) for _ in range(rng.randint(1, 14))) for _ in range(n)]


def sample_texts(mixed: int = 700) -> list[str]:
    """The whole sample (about 2,900 texts, 6 MB), in a fixed order."""
    rng = random.Random(SEED)
    lee = news_documents()
    udhr = udhr_texts()
    texts = list(lee)
    texts += ["\n".join(_sentences(t)) for t in lee[:150]]
    texts += ["\n\n".join(_sentences(t)) for t in lee[150:300]]
    texts += [web_page(t, rng) for t in lee[:200]]
    texts += udhr
    texts += [" ".join(udhr[i:i + 6]) for i in range(0, len(udhr), 6)]
    texts += ["\n\n".join(udhr[i:i + 12]) for i in range(0, len(udhr), 12)]
    spam = []
    for t in lee[:60]:
        s = _sentences(t)
        spam.append(" ".join([s[0]] * rng.randint(3, 20)) + " " + t)
        spam.append(t + "\n" + "\n".join([s[-1]] * rng.randint(2, 8)))
    texts += spam
    hostile = hostile_texts(lee)
    texts += hostile
    small = [h for h in hostile if len(h) < 20_000]
    pieces = [s for t in lee[:120] for s in _sentences(t)] + udhr[:150] + small + [
        "Menu", "Share this", "- item one", "\u2022 point", "Click here...", "\u201cQuoted.\u201d", "{}", "#", "<br>"]
    texts += mixtures(pieces, mixed, rng)
    return texts


def sample_documents(mixed: int = 700) -> list[Document]:
    """The sample as Documents of a news source (line rules on by name)."""
    return [Document(f"s{i:05d}", "ccnews", t) for i, t in enumerate(sample_texts(mixed))]


def variant_configs() -> list[CleanConfig]:
    """Configurations beside the default that move every threshold and switch into every branch."""
    return [
        CleanConfig(line_end_marks="typographic"),
        CleanConfig(language_id="stopwords"),
        CleanConfig(english_only=False),
        CleanConfig(languages=[]),
        CleanConfig(languages=["de", "fr", "es", "ru", "zh"], min_language_score=0.3),
        CleanConfig(invalid_utf8="repair", max_doc_bytes=5_000_000, max_words=10_000_000),
        CleanConfig(disabled_rules=["min_words", "min_sentences", "stop_words", "mean_word_len", "english"]),
        CleanConfig(disabled_rules=["min_words", "min_sentences", "stop_words", "mean_word_len"],
                    language_id="stopwords"),
        CleanConfig(max_top_ngram_frac={1: 0.3, 2: 0.05, 3: 0.04, 4: 0.03, 6: 0.02},
                    max_dup_ngram_frac={4: 0.1, 5: 0.02, 7: 0.01, 10: 0.0}),
        CleanConfig(line_min_words=1, line_max_word_chars=12, min_words=5, min_sentences=1),
        CleanConfig(max_dup_ngram_frac={3: -0.1}, max_top_ngram_frac={2: 0.5, 5: -0.1}, languages=[]),
        CleanConfig(max_dup_ngram_frac={10: 0.2, 6: 0.01}, max_top_ngram_frac={}),
        CleanConfig(line_min_words=0, line_max_word_chars=-1, max_bullet_lines=0.1, max_ellipsis_lines=0.05,
                    max_symbol_word_ratio=0.01, min_alpha_words=0.95, max_dup_line_frac=0.05),
        CleanConfig(disabled_rules=["javascript", "policy", "long_word", "min_line_words", "terminal_punct",
                                    "markup", "top_ngrams", "dup_ngrams"], max_dup_line_char_frac=0.01),
        CleanConfig(disabled_rules=["dup_lines", "dup_line_chars", "terminal_punct"], max_dup_para_frac=0.05),
        CleanConfig(disabled_rules=["dup_lines", "dup_line_chars", "terminal_punct"], max_dup_para_frac=1.0,
                    max_dup_para_char_frac=0.01),
    ]
