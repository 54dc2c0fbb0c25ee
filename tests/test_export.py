"""trainer.export: the exported folder loads in transformers and computes what our model computes."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402

from schemas import SPECIAL_TOKENS  # noqa: E402
from schemas.config import ModelConfig  # noqa: E402
from trainer.export import build_tokenizer_json, choose_architecture, export_hf, spm_normalizer_spec  # noqa: E402
from trainer.model import Encoder  # noqa: E402

transformers = pytest.importorskip("transformers")

TEXTS = [
    "The cat sat on the mat.",
    "  Leading, trailing   and   repeated spaces  ",
    "Tabs\tand\nnewlines mix with words, which would be ﬁne (ligature) and ＦＵＬＬＷＩＤＴＨ ！",
    "Unseen characters like ζ and 東京 become unknown pieces.",
    "numbers 12345 and punctuation?! \"quoted\" — dashes",
]


@pytest.fixture(scope="module")
def spm_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A ~300-piece unigram model trained on generated English-like text."""
    rng = random.Random(0)
    syl = ["ka", "to", "ri", "men", "sa", "lo", "pe", "dra", "qui", "ne", "ver", "son", "tal", "mi", "gor", "th"]
    common = ("the a of and to in is was cat dog sat on mat house big small red blue ran quickly over "
              "river tree which would be fine numbers punctuation words spaces").split()
    words = common + ["".join(rng.choice(syl) for _ in range(rng.randint(1, 3))) for _ in range(300)]
    sents = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 14))).capitalize() + rng.choice(".?!,")
             for _ in range(3000)]
    prefix = str(tmp_path_factory.mktemp("spm") / "spm")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sents), model_prefix=prefix, vocab_size=300, model_type="unigram",
        bos_id=0, pad_id=1, eos_id=2, unk_id=3, user_defined_symbols=["<mask>"], num_threads=1,
        hard_vocab_limit=False, minloglevel=2)
    return prefix + ".model"


def _vocab(spm_path: str) -> int:
    return spm.SentencePieceProcessor(model_file=spm_path).get_piece_size()


def _trained_like(cfg: ModelConfig, vocab: int, seed: int = 0) -> Encoder:
    """A model whose every parameter is non-trivial (LayerNorm weights not 1, biases not 0),
    so a tensor mapped to the wrong place cannot go unnoticed."""
    torch.manual_seed(seed)
    m = Encoder(cfg, vocab)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return m.eval()


def test_tokenizer_matches_sentencepiece(spm_path: str) -> None:
    from tokenizers import Tokenizer

    sp = spm.SentencePieceProcessor(model_file=spm_path)
    data = Path(spm_path).read_bytes()
    spec = spm_normalizer_spec(data)
    assert spec["precompiled_charsmap"] and spec["add_dummy_prefix"] and spec["remove_extra_whitespaces"]
    tok = Tokenizer.from_str(build_tokenizer_json(data))
    assert tok.get_vocab_size() == sp.get_piece_size()
    rng = random.Random(1)
    pieces = [sp.id_to_piece(i).replace("\u2581", " ") for i in range(5, sp.get_piece_size())]
    generated = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))) for _ in range(200)]
    for text in TEXTS + generated:
        ids = tok.encode(text).ids
        assert ids[0] == SPECIAL_TOKENS["<s>"] and ids[-1] == SPECIAL_TOKENS["</s>"]
        assert ids[1:-1] == sp.encode(text), text
    assert tok.token_to_id("<mask>") == SPECIAL_TOKENS["<mask>"]
    masked = tok.encode("the <mask> sat").ids
    assert SPECIAL_TOKENS["<mask>"] in masked
    assert tok.decode(tok.encode(TEXTS[0]).ids) == sp.decode(sp.encode(TEXTS[0]))


def test_tokenizer_rejects_other_special_ids(tmp_path: Path) -> None:
    prefix = str(tmp_path / "bad")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["some words here and there"] * 50),
                                   model_prefix=prefix, vocab_size=30, hard_vocab_limit=False, minloglevel=2)
    with pytest.raises(ValueError, match="maps"):
        build_tokenizer_json(Path(prefix + ".model").read_bytes())


EXPORTS = {
    "roberta": ({}, "XLMRobertaForMaskedLM"),
    "albert_factorized_shared": ({"embedding_size": 32, "share": "all", "sentence_head": "sop"}, "AlbertForMaskedLM"),
    "albert_factorized": ({"embedding_size": 16, "layers": 3}, "AlbertForMaskedLM"),
    "albert_shared_eq": ({"share": "all", "layers": 3}, "AlbertForMaskedLM"),
    "shared_attention_sbo": ({"share": "attention", "span_boundary": True, "layers": 3}, "AlbertForMaskedLM"),
}


@pytest.mark.parametrize("variant", list(EXPORTS))
def test_export_loads_and_matches_logits(spm_path: str, tmp_path: Path, variant: str) -> None:
    kw, cls = EXPORTS[variant]
    cfg = ModelConfig(**kw)
    model = _trained_like(cfg, _vocab(spm_path))
    out = tmp_path / "hf"
    export_hf(model, cfg, spm_path, str(out))
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "spm.model"} <= set(os.listdir(out))
    assert json.loads((out / "config.json").read_text())["architectures"] == [cls]

    hf, info = transformers.AutoModelForMaskedLM.from_pretrained(str(out), output_loading_info=True)
    assert type(hf).__name__ == cls
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    hf.eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    assert (tok.mask_token_id, tok.pad_token_id) == (SPECIAL_TOKENS["<mask>"], SPECIAL_TOKENS["<pad>"])
    enc = tok(TEXTS, padding=True, return_tensors="pt")  # right-padded batch of unequal lengths
    assert (enc["attention_mask"] == 0).any()
    args = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    if model.dims.type_vocab_size == 2:  # exercise segment B's embedding too
        tt = torch.zeros_like(enc["input_ids"])
        tt[:, 6:] = 1
        args["token_type_ids"] = tt
    with torch.no_grad():
        ours = model(**args)["logits"]
        theirs = hf(**args).logits
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(theirs[real], ours[real], atol=1e-4, rtol=0)


def test_fill_mask_pipeline_runs(spm_path: str, tmp_path: Path) -> None:
    for kw in ({}, {"embedding_size": 32, "share": "all"}):
        cfg = ModelConfig(**kw)
        out = tmp_path / f"hf{len(kw)}"
        export_hf(_trained_like(cfg, _vocab(spm_path)), cfg, spm_path, str(out))
        fill = transformers.pipeline("fill-mask", model=str(out), device="cpu")
        preds = fill("The cat <mask> on the mat.", top_k=3)
        assert len(preds) == 3
        assert all(0 <= p["token"] < _vocab(spm_path) and "<mask>" not in p["sequence"] for p in preds)


def test_export_to_an_fsspec_url(spm_path: str, tmp_path: Path) -> None:
    import fsspec

    mem = fsspec.filesystem("memory")
    mem.pipe("/sf-export/spm.model", Path(spm_path).read_bytes())
    cfg = ModelConfig(embedding_size=16)
    model = _trained_like(cfg, _vocab(spm_path))
    export_hf(model, cfg, "memory://sf-export/spm.model", "memory://sf-export/hf")
    local = tmp_path / "copy"
    local.mkdir()
    for name in mem.ls("/sf-export/hf", detail=False):
        if mem.isfile(name):
            (local / name.rsplit("/", 1)[-1]).write_bytes(mem.cat(name))
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(local)).eval()
    ids = torch.tensor([[0, 10, 20, 30, 2]])
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=ids).logits, model(ids)["logits"], atol=1e-4, rtol=0)


def test_export_refuses_what_it_cannot_express(spm_path: str, tmp_path: Path) -> None:
    vocab = _vocab(spm_path)
    cfg = ModelConfig(embedding_size=16)
    model = Encoder(cfg, vocab)
    assert choose_architecture(model.dims) == "albert"
    with pytest.raises(ValueError, match="factorized"):
        export_hf(model, cfg, spm_path, str(tmp_path / "a"), architecture="xlm-roberta")
    with pytest.raises(ValueError, match="pieces"):
        export_hf(Encoder(ModelConfig(), vocab + 5), ModelConfig(), spm_path, str(tmp_path / "b"))
    with pytest.raises(ValueError, match="cfg"):
        export_hf(model, ModelConfig(), spm_path, str(tmp_path / "c"))
    assert not (tmp_path / "b").exists()
