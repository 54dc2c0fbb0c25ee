"""Containment candidates where documents share paragraphs: excerpts found, shared paragraphs cheap.

Real prose whose documents reuse paragraphs from one pool, with excerpts planted
(``tests/planted_excerpts.py``), through the near step's own candidate and
screen functions: the default (every anchor in a small bucket, only query
anchors at a quorum in a large one) finds the excerpts that a star from every
anchor finds, for well under half its candidates.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schemas.config import DedupeConfig  # noqa: E402
from tests.planted_excerpts import candidate_recall, planted_corpus  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return planted_corpus(tmp_path_factory.mktemp("excerpts"), megabytes=10, excerpts=600)


def test_query_anchors_find_what_every_anchor_finds_for_fewer_candidates(corpus) -> None:
    texts, planted = corpus
    ours = candidate_recall(texts, planted, DedupeConfig())
    star = candidate_recall(texts, planted, DedupeConfig(anchor_queries=0))
    assert ours["excerpts"] == star["excerpts"] >= 500
    # Where a passage's text meets a paragraph boundary of its source, its anchors are in small buckets:
    # every one of those is a candidate, as in the star; a paragraph many pages share costs 4 queries.
    assert ours["found"] >= star["found"] - 0.01 * ours["excerpts"]
    assert ours["found"] >= 0.9 * ours["excerpts"]
    assert ours["elements"] < star["elements"] / 2
    assert ours["pairs"] < star["pairs"] / 2


def test_without_anchors_only_band_keys_make_candidates(corpus) -> None:
    texts, planted = corpus
    none = candidate_recall(texts, planted, DedupeConfig(anchor_every=0))
    ours = candidate_recall(texts, planted, DedupeConfig())
    assert none["found"] < 0.6 * ours["found"]  # an excerpt of 15-60 % shares a band only when it is most of it
    assert none["elements"] < ours["elements"]
