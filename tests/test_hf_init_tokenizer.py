"""--init and the model's tokenizer: refused when it is another than the corpus's; exported as the model's.

Vocabulary size and pad id can match by chance (ALBERT's unigram weights and a
WordPiece corpus of the same size): the manifest records the corpus
tokenizer's sha256, which one of the model folder's tokenizer files must have,
or its tokenizer.json must give every id the same token. The export of a run
started from a model gives what the model's own tokenizer gives: segment ids
for a BERT / ALBERT pair, the mask token placed by its text. The models and
tokenizers are made here (tests/test_hf_init.py); the text is real news.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from forkserver import run_python
from realtext import news_documents, write_jsonl
from test_hf_init import ROOT, albert_unigram_json, roberta_bpe_json, save_hf, wordpiece_json

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
    args = ["-m", "trainer.train", "--data", corpus, "--init", str(init), "--steps", "1",
            "--batch_size", "4", "--output", str(tmp_path / "run"), "--device", "cpu"]
    r = run_python(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert "the model was trained with another tokenizer than the corpus" in line
    assert manifest.tokenizer.sha256[:12] in line and "--set init_tokenizer_check=false" in line

    # The override, spelled out in that line, trains.
    r = run_python([*args, "--set", "init_tokenizer_check=false"], capture_output=True, text=True, cwd=ROOT,
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



# arch -> (the model's tokenizer.json, its tokenizer class as a hub folder names it)
INIT_TOKENIZERS = {"bert": (wordpiece_json, "BertTokenizer"), "albert": (albert_unigram_json, "AlbertTokenizer"),
                   "roberta": (roberta_bpe_json, "RobertaTokenizer")}


@pytest.mark.parametrize("arch", list(INIT_TOKENIZERS))
def test_init_export_tokenizer_gives_the_models_inputs_and_fills_masks(tmp_path, arch):
    """A model started from with --init, exported: its tokenizer gives a pair the token types of the model's
    own tokenizer.json (segment B = 1 for BERT / ALBERT, and token_type_ids by default, as the BERT
    tokenizer class does; none for RoBERTa), the exported model's logits on that pair are our model's,
    and the plain fill-mask pipeline finds the mask token as the model's own tokenizer places it."""
    from tokenizers import Tokenizer
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    from trainer.export import export_hf
    from trainer.hf_init import build_encoder, init_model_config

    make, cls = INIT_TOKENIZERS[arch]
    data = make([s for d in news_documents(limit=30) for s in d.split(". ")])
    init, out = tmp_path / "model", tmp_path / "hf"
    save_hf(str(init), arch, vocab=load_tokenizer(data).vocab_size, max_position_embeddings=66)
    (init / "tokenizer.json").write_bytes(data)
    (init / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": cls}))
    model = build_encoder(str(init)).eval()  # the trainer's model of that folder
    export_hf(model, init_model_config(str(init)), str(init / "tokenizer.json"), str(out))

    tok_cfg = json.loads((out / "tokenizer_config.json").read_text())
    segments = arch != "roberta"
    assert tok_cfg["split_special_tokens"] is False
    assert ("token_type_ids" in tok_cfg["model_input_names"]) == segments
    assert tok_cfg.get("do_lower_case") == (True if arch == "bert" else None)  # the WordPiece normalizer lowercases
    tok = AutoTokenizer.from_pretrained(str(out))
    raw = Tokenizer.from_str(data.decode())  # the model's own tokenizer.json, as the build encodes with it
    firsts = ["The council approved the plan.", "Fire crews were called out"]
    seconds = ["It meets on Monday.", "The government said it would act on the report"]
    enc = tok(firsts, seconds, padding=True, return_tensors="pt")
    assert ("token_type_ids" in enc) == segments
    for i, (a, b) in enumerate(zip(firsts, seconds, strict=True)):
        want = raw.encode(a, b)
        n = len(want.ids)
        assert enc["input_ids"][i, :n].tolist() == want.ids
        if segments:
            assert enc["token_type_ids"][i, :n].tolist() == want.type_ids and 1 in want.type_ids
    if arch == "bert":  # the BERT class's own default call gives the same (the regression this guards)
        src = AutoTokenizer.from_pretrained(str(init))
        assert dict(tok(firsts[0], seconds[0])) == dict(src(firsts[0], seconds[0]))
    hf = AutoModelForMaskedLM.from_pretrained(str(out)).eval()
    with torch.no_grad():
        ours = model(**enc)["logits"]
        theirs = hf(**enc).logits
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(theirs[real], ours[real], atol=1e-4, rtol=0)

    text = f"The council approved the {tok.mask_token} plan."
    preds = pipeline("fill-mask", model=str(out), device="cpu")(text, top_k=2)
    assert len(preds) == 2 and all(p["token"] < hf.config.vocab_size for p in preds)
    placed = tok(text)["input_ids"]
    assert placed == raw.encode(text).ids and placed.count(tok.mask_token_id) == 1  # the model's own placing
    # Split, the mask token's string is text again, as the build encoded documents (running text: after a
    # space, which makes a difference to RoBERTa's byte-level tokenizer only).
    as_text = tok(" " + text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    assert as_text == load_tokenizer(data).encode([text])[0] and tok.mask_token_id not in as_text
