"""The benchmarks' real-prose pool travels as a JSON dump to machines without gensim (a GPU image)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import prose  # noqa: E402


@pytest.fixture
def fresh_pool():
    prose.paragraph_pool.cache_clear()
    yield
    prose.paragraph_pool.cache_clear()


def test_a_corpus_from_the_dump_has_the_same_bytes(tmp_path, monkeypatch, fresh_pool) -> None:
    dump = tmp_path / "pool.json"
    assert prose.main(["--dump-pool", str(dump)]) == 0
    prose.write_prose_corpus(tmp_path / "from-gensim.jsonl", 0.2)

    prose.paragraph_pool.cache_clear()
    monkeypatch.setenv(prose.POOL_ENV, str(dump))

    def no_gensim():
        raise AssertionError("gensim's files read although a dump was given")

    monkeypatch.setattr(prose, "_wiki_paragraphs", no_gensim)
    monkeypatch.setattr(prose, "_news_paragraphs", no_gensim)
    prose.write_prose_corpus(tmp_path / "from-dump.jsonl", 0.2)
    assert (tmp_path / "from-dump.jsonl").read_bytes() == (tmp_path / "from-gensim.jsonl").read_bytes()


@pytest.mark.parametrize("content", ["{}", "[]", "[1, 2]"])
def test_a_file_that_is_not_a_pool_is_named(tmp_path, monkeypatch, fresh_pool, content: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    monkeypatch.setenv(prose.POOL_ENV, str(bad))
    with pytest.raises(SystemExit, match="not a paragraph pool"):
        prose.paragraph_pool()
