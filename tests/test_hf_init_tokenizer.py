"""--init refuses a model trained with another tokenizer than the corpus's, in one line with the override.

Vocabulary size and pad id can match by chance (ALBERT's unigram weights and a
WordPiece corpus of the same size): the manifest records the corpus
tokenizer's sha256, which one of the model folder's tokenizer files must have,
or its tokenizer.json must give every id the same token. The models and
tokenizers are made here (tests/test_hf_init.py); the text is real news.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from realtext import news_documents, write_jsonl
from test_hf_init import ROOT, save_hf, wordpiece_json

from schemas.errors import UserError
from schemas.tokenizer_files import load_tokenizer

pytestmark = pytest.mark.slow


def swapped(tokenizer_json: bytes, a: str, b: str) -> bytes:
    """The same tokenizer with the ids of two tokens exchanged: as large, the same pad id, other ids."""
    spec = json.loads(tokenizer_json)
    vocab = spec["model"]["vocab"]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    return json.dumps(spec).encode()


def test_init_refuses_a_model_of_another_tokenizer_in_one_line(tmp_path):
    from pipelines.jobs.build import run_build
    from schemas.config import BuildConfig
    from shardforge.storage.contract import load_manifest

    docs = news_documents(limit=30)
    wp = wordpiece_json(docs)
    n = load_tokenizer(wp).vocab_size
    (tmp_path / "wp.json").write_bytes(wp)
    corpus = str(tmp_path / "corpus")
    run_build(BuildConfig.model_validate({
        "sources": [{"name": "news", "input": write_jsonl(str(tmp_path / "news.jsonl"), docs)}],
        "clean": {"min_words": 1, "english_only": False}, "tokenizer": {"model_url": str(tmp_path / "wp.json")},
        "packing": {"max_seq_len": 48}}), corpus)
    manifest, _ = load_manifest(corpus)
    init = tmp_path / "albert"
    save_hf(str(init), "albert", vocab=n, max_position_embeddings=64)  # pad 0, as the WordPiece corpus's [PAD]
    other = swapped(wp, "the", "of")
    (init / "tokenizer.json").write_bytes(other)

    env = {**os.environ, "PYTHONPATH": ROOT}
    args = [sys.executable, "-m", "trainer.train", "--data", corpus, "--init", str(init), "--steps", "1",
            "--batch_size", "4", "--output", str(tmp_path / "run"), "--device", "cpu"]
    r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert "the model was trained with another tokenizer than the corpus" in line
    assert manifest.tokenizer.sha256[:12] in line and "--set init_tokenizer_check=false" in line

    # The override, spelled out in that line, trains.
    r = subprocess.run([*args, "--set", "init_tokenizer_check=false"], capture_output=True, text=True, cwd=ROOT,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "init_tokenizer_check=false: not checking" in r.stderr

    from trainer.hf_init import check_tokenizer

    # The corpus's own file passes, so does the same vocabulary in other bytes (a converted or
    # reformatted copy); no tokenizer file at all is refused too.
    (init / "tokenizer.json").write_bytes(wp)
    check_tokenizer(str(init), manifest, corpus)
    (init / "tokenizer.json").write_text(json.dumps(json.loads(wp), indent=2))
    check_tokenizer(str(init), manifest, corpus)
    os.remove(init / "tokenizer.json")
    with pytest.raises(UserError, match="no tokenizer file .* put the model's tokenizer.json there"):
        check_tokenizer(str(init), manifest, corpus)

