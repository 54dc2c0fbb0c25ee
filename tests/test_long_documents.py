"""Books and long stories: the length rules (Gopher's 100,000 words, the 1 MB document cap) left them out
whole, counted in the report only; a build now says so with the flags that keep them."""

from __future__ import annotations

import json

from forkserver import run_python
from prose import paragraph_pool

from pipelines.jobs.build_config import build_config_from_options
from pipelines.options import BuildOptions
from pipelines.report.record import build_warnings


def test_max_words_and_max_doc_bytes_flags_set_the_rules_and_the_readers_room(tmp_path) -> None:
    cfg = tmp_path / "two.yaml"
    cfg.write_text("sources: [{name: books, input: 'b/*.txt'}, {name: web, input: 'w/*', max_record_bytes: 99000000}]\n")
    built = build_config_from_options(BuildOptions(["--config", str(cfg), "--max_words", "1000000",
                                                    "--max_doc_bytes", "16MB"]))
    assert (built.clean.max_words, built.clean.max_doc_bytes) == (1_000_000, 16_000_000)
    # each reader keeps records up to 4x the document cap (JSON escapes), never less than it had
    assert [s.max_record_bytes for s in built.sources] == [64_000_000, 99_000_000]
    plain = build_config_from_options(BuildOptions(["--input", "x"]))
    assert (plain.clean.max_words, plain.clean.max_doc_bytes, plain.sources[0].max_record_bytes) == (
        100_000, 1_000_000, 4_000_000)


def test_documents_left_out_for_length_are_a_warning_from_one_in_a_hundred() -> None:
    def warnings(filtered: dict[str, int], clean: dict | None = None) -> list[str]:
        manifest = {"config": {"clean": clean or {}, "packing": {"valid_fraction": 0}}, "totals": {},
                    "accounting": {"books": {"input": 200, "filtered": filtered}}}
        return build_warnings(manifest)

    assert warnings({"max_words": 2}) == []  # 1 %: not more than one in a hundred
    (line,) = warnings({"max_words": 2, "max_doc_bytes": 1})
    assert line.startswith("warning: 3 of 200 documents of source 'books' (2%) were longer than the length rules "
                           "allow and left out whole (2 max_words: over 100,000 words; 1 max_doc_bytes: over "
                           "1,000,000 bytes): books and long stories are kept with --max_words N and "
                           "--max_doc_bytes BYTES"), line
    (line,) = warnings({"max_doc_bytes": 150}, {"max_doc_bytes": 2_000_000})  # one line, not the 50 % one too
    assert "(150 max_doc_bytes: over 2,000,000 bytes)" in line and "--delimiter LINE" in line


def test_a_build_of_long_stories_warns_and_keeps_them_with_the_flags(tmp_path) -> None:
    """Real prose (Wikipedia and news paragraphs, none twice) as two 'books' of ~110k and ~20k words."""
    pool = paragraph_pool()
    raw = tmp_path / "raw"
    raw.mkdir()
    books, words = [[], []], 0
    for para in pool:
        book = 0 if words < 110_000 else 1
        books[book].append(para)
        words += len(para.split())
        if words > 130_000:
            break
    for name, book in zip(("long.txt", "short.txt"), books, strict=True):
        (raw / name).write_text("\n\n".join(book))
    args = ["-m", "pipelines.build", "--input", f"books={raw}", "--vocab_size", "2000", "--no_near_dedupe"]
    r = run_python([*args, "--output", str(tmp_path / "o1")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    (line,) = [x for x in r.stderr.splitlines() if "longer than the length rules" in x]
    assert line.startswith("warning: 1 of 2 documents of source 'books' (50%)") and "1 max_words" in line, line
    r = run_python([*args, "--output", str(tmp_path / "o2"), "--max_words", "1000000"], capture_output=True,
                   text=True)
    assert r.returncode == 0 and "longer than the length rules" not in r.stderr, r.stderr[-2000:]
    assert json.loads((tmp_path / "o2" / "report.json").read_text())["totals"]["kept"] == 2
