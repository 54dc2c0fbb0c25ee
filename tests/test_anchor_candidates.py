"""Containment candidates where documents share paragraphs: excerpts found, shared paragraphs cheap.

Real prose whose documents reuse paragraphs from one pool, with excerpts planted
(``tests/planted_excerpts.py``), through the near step's own candidate and
screen functions: the default (query anchors, several longer roots per anchor
bucket, a quorum at the member) finds more of the excerpts than a star on each
bucket's longest entry from every anchor, for a fraction of its candidates.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.dedupe import candidates  # noqa: E402
from schemas.config import DedupeConfig  # noqa: E402
from tests.planted_excerpts import candidate_recall, planted_corpus  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return planted_corpus(tmp_path_factory.mktemp("excerpts"), megabytes=3, excerpts=200)


def test_query_anchors_find_more_excerpts_for_fewer_candidates(corpus, monkeypatch) -> None:
    texts, planted = corpus
    ours = candidate_recall(texts, planted, DedupeConfig())
    monkeypatch.setattr(candidates, "ANCHOR_ROOTS", 1)
    monkeypatch.setattr(candidates, "anchor_quorum", lambda queries: 1)
    star = candidate_recall(texts, planted, DedupeConfig(anchor_queries=0))
    assert ours["excerpts"] == star["excerpts"] >= 150
    # A longer page holding one of an excerpt's paragraphs wins that paragraph's buckets: the star
    # loses the excerpts whose every bucket went that way; several roots per bucket keep them.
    assert ours["found"] > star["found"]
    assert ours["found"] >= 0.95 * ours["excerpts"]
    assert ours["elements"] < star["elements"] / 2
    assert ours["pairs"] < star["pairs"] / 2


def test_without_anchors_only_band_keys_make_candidates(corpus) -> None:
    texts, planted = corpus
    none = candidate_recall(texts, planted, DedupeConfig(anchor_every=0))
    ours = candidate_recall(texts, planted, DedupeConfig())
    assert none["found"] < ours["found"] / 2  # excerpts of 15-60 % rarely share a band
    assert none["elements"] < ours["elements"]
