"""trainer.export (+ trainer.hf_tokenizer): the exported folder loads in transformers and computes what our model computes."""

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
from trainer.export import choose_architecture, export_hf  # noqa: E402
from trainer.hf_tokenizer import (  # noqa: E402
    bpe_merges,
    build_tokenizer_json,
    spm_model_type,
    spm_normalizer_spec,
    spm_pieces,
)
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
    assert spm_model_type(data) == "unigram"
    assert json.loads(build_tokenizer_json(data))["model"]["type"] == "Unigram"
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
    # bert-base recipe's shape: E = H, no sharing, an NSP head (two token types): exported as XLM-R.
    "roberta_nsp": ({"sentence_head": "nsp", "layers": 3}, "XLMRobertaForMaskedLM"),
    "albert_factorized_shared": ({"embedding_size": 32, "share": "all", "sentence_head": "sop"}, "AlbertForMaskedLM"),
    "albert_factorized": ({"embedding_size": 16, "layers": 3}, "AlbertForMaskedLM"),
    "albert_shared_eq": ({"share": "all", "layers": 3}, "AlbertForMaskedLM"),
    "shared_attention_sbo": ({"share": "attention", "span_boundary": True, "layers": 3}, "AlbertForMaskedLM"),
}


def _assert_pair_layout(ids: list[int], types: list[int] | None) -> None:
    """A pair as the shards hold one: <s> A </s> B </s>, type 0 up to the first </s> and 1 after it
    (0 on padding)."""
    eos, pad = SPECIAL_TOKENS["</s>"], SPECIAL_TOKENS["<pad>"]
    first, n = ids.index(eos), len(ids) - ids.count(pad)
    assert ids[first + 1] != eos and ids[n - 1] == eos and ids[first + 1:n].count(eos) == 1
    assert types == [0] * (first + 1) + [1] * (n - first - 1) + [0] * (len(ids) - n)


@pytest.mark.parametrize("variant", list(EXPORTS))
def test_export_loads_and_matches_logits(spm_path: str, tmp_path: Path, variant: str) -> None:
    """The exported model computes our logits on what the exported tokenizer gives for sentence pairs:
    a model with a second token type (a sentence head's) gets segment B as type 1 from the default
    call, as pretraining on pairs did; a model with one gets no token_type_ids."""
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
    enc = tok(TEXTS, TEXTS[::-1], padding=True, return_tensors="pt")  # right-padded pairs of unequal lengths
    assert (enc["attention_mask"] == 0).any()
    two_types = model.dims.type_vocab_size == 2
    assert ("token_type_ids" in enc) == two_types == (hf.config.type_vocab_size == 2)
    for i, ids in enumerate(enc["input_ids"].tolist()):
        if two_types:
            _assert_pair_layout(ids, enc["token_type_ids"][i].tolist())
        elif cls.startswith("XLMRoberta"):  # RoBERTa's <s> A </s></s> B </s>
            assert ids.count(SPECIAL_TOKENS["</s>"]) == 3
    if not two_types:  # asked for, they are all 0: one token type row, none to overrun
        asked = tok(TEXTS[0], TEXTS[1], return_token_type_ids=True)["token_type_ids"]
        assert set(asked) == {0}
    with torch.no_grad():
        ours = model(**enc)["logits"]
        theirs = hf(**enc).logits
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(theirs[real], ours[real], atol=1e-4, rtol=0)
    if two_types:  # segment B's embedding mattered: the same pairs with all-zero types differ
        with torch.no_grad():
            zeros = hf(**{**enc, "token_type_ids": torch.zeros_like(enc["token_type_ids"])}).logits
        assert (zeros[real] - theirs[real]).abs().max() > 1e-3


def test_fill_mask_pipeline_runs(spm_path: str, tmp_path: Path) -> None:
    """The plain pipeline call works on an export; what differs from the corpus's encoding (a special
    token's string written in the input is that token) is what split_special_tokens=True undoes."""
    from schemas.tokenizer_files import load_tokenizer

    build = load_tokenizer(Path(spm_path).read_bytes())  # how the build encoded documents
    text = "The cat <mask> on the mat </s><s> <pad>."
    for kw in ({}, {"embedding_size": 32, "share": "all"}):
        cfg = ModelConfig(**kw)
        out = tmp_path / f"hf{len(kw)}"
        export_hf(_trained_like(cfg, _vocab(spm_path)), cfg, spm_path, str(out))
        assert json.loads((out / "tokenizer_config.json").read_text())["split_special_tokens"] is False
        fill = transformers.pipeline("fill-mask", model=str(out), device="cpu")
        preds = fill("The cat <mask> on the mat.", top_k=3)
        assert len(preds) == 3
        assert all(0 <= p["token"] < _vocab(spm_path) and "<mask>" not in p["sequence"] for p in preds)

        tok = fill.tokenizer
        placed_only = {i for name, i in SPECIAL_TOKENS.items() if name != "<unk>"}  # "<" may be unknown
        placed = tok(text, add_special_tokens=False)["input_ids"]
        assert [i for i in placed if i in placed_only] == [SPECIAL_TOKENS[t] for t in ("<mask>", "</s>", "<s>", "<pad>")]
        as_text = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert as_text == build.encode([text])[0] and not set(as_text) & placed_only
        split = transformers.AutoTokenizer.from_pretrained(str(out), split_special_tokens=True)
        assert split(text, add_special_tokens=False)["input_ids"] == as_text
        with pytest.raises(Exception, match="No mask_token"):  # the corpus's reading: "<mask>" is text
            fill("The cat <mask> on the mat.", tokenizer_kwargs={"split_special_tokens": True})


def test_the_model_cards_snippet_runs_on_an_export(spm_path: str, tmp_path: Path, capsys) -> None:
    from trainer.model_card import USAGE

    cfg = ModelConfig(embedding_size=32, share="all", sentence_head="sop")
    out = tmp_path / "hf"
    export_hf(_trained_like(cfg, _vocab(spm_path)), cfg, spm_path, str(out))
    code = USAGE.split("```python\n")[1].split("```")[0].replace("PATH_OR_HUB_ID", str(out))
    exec(compile(code, "README.md", "exec"), {})
    assert "'score'" in capsys.readouterr().out  # the pipeline's predictions were printed


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


# ================================================================= BPE models

# What byte fallback, normalization and whitespace handling must get right: characters the model never
# saw (CJK, emoji, a skin-tone modifier), NFKC-folded ones, runs and kinds of whitespace, punctuation.
BPE_TEXTS = TEXTS + [
    "東京 is big 😀 and 👍🏽 too",
    "ζωή café naïve — ﬁne Ａ ｂ",
    "a    b\t\tc\n\nd   ",
    "   ",
    "",
    "!!!???...,,,;;::",
    "\u2581 literal whitespace\u2581symbol, nbsp\u00a0and ideographic\u3000space",
    "x\u200by zero width",
    "aaaaaaaaaaaaaaa kakakakaka thththth",
]


def _train(tmp: Path, name: str, sents: list[str], **kw: object) -> str:
    prefix = str(tmp / name)
    args = dict(model_type="bpe", vocab_size=700, byte_fallback=True, bos_id=0, pad_id=1, eos_id=2, unk_id=3,
                user_defined_symbols=["<mask>"], num_threads=1, hard_vocab_limit=False, minloglevel=2)
    args.update(kw)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sents), model_prefix=prefix, **args)
    return prefix + ".model"


def _corpus(seed: int, n: int = 3000) -> tuple[list[str], list[str]]:
    """(sentences, words): English-like text with some accented and Greek words."""
    rng = random.Random(seed)
    syl = ["ka", "to", "ri", "men", "sa", "lo", "pe", "dra", "qui", "ne", "ver", "son", "tal", "mi", "gor", "th"]
    common = ("the a of and to in is was cat dog sat on mat house big small red blue ran quickly over "
              "river tree 2024 42 ζωή café naïve").split()
    words = common + ["".join(rng.choice(syl) for _ in range(rng.randint(1, 3))) for _ in range(300)]
    sents = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 14))).capitalize() + rng.choice(".?!,;:")
             for _ in range(n)]
    return sents, words


@pytest.fixture(scope="module")
def bpe_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 700-piece BPE model with byte fallback (256 byte pieces, ~440 learned ones)."""
    return _train(tmp_path_factory.mktemp("bpe"), "bpe", _corpus(0)[0])


def _varied_texts(sp: spm.SentencePieceProcessor, n: int, seed: int) -> list[str]:
    """n texts mixing whole words, concatenated pieces (so merges meet in unusual orders) and single
    characters from a pool of unseen characters, whitespace and punctuation."""
    rng = random.Random(seed)
    words = _corpus(0)[1]
    pieces = [sp.id_to_piece(i).replace("\u2581", " ") for i in range(sp.get_piece_size())
              if not (sp.is_byte(i) or sp.is_control(i) or sp.is_unknown(i)) and i != SPECIAL_TOKENS["<mask>"]]
    pool = list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789.,;:!?'\"()-—…") + [
        " ", "  ", "   ", "\t", "\n", "é", "ß", "ζ", "東", "京", "😀", "👍🏽", "ﬁ", "Ａ", "\u00a0", "\u3000"]
    out = []
    for i in range(n):
        parts = []
        for _ in range(rng.randint(1, 15)):
            r = rng.random()
            parts.append(rng.choice(pool) if r < 0.3 else rng.choice(pieces) if r < 0.6 else rng.choice(words) + " ")
        out.append("".join(parts) if i % 7 else "".join(parts).replace(" ", ""))  # some long unbroken words
    return out


def test_bpe_tokenizer_matches_sentencepiece(bpe_path: str) -> None:
    from tokenizers import Tokenizer

    sp = spm.SentencePieceProcessor(model_file=bpe_path)
    data = Path(bpe_path).read_bytes()
    assert spm_model_type(data) == "bpe"
    doc = json.loads(build_tokenizer_json(data))
    assert doc["model"]["type"] == "BPE" and doc["model"]["byte_fallback"] and doc["model"]["unk_token"] == "<unk>"
    assert len(doc["model"]["merges"]) >= sp.get_piece_size() - 300  # roughly one per learned piece, or more
    tok = Tokenizer.from_str(json.dumps(doc))
    assert tok.get_vocab_size() == sp.get_piece_size()
    texts = BPE_TEXTS + _varied_texts(sp, 400, seed=2)
    fallback = 0
    for text in texts:
        want = sp.encode(text)
        ids = tok.encode(text).ids
        assert ids[0] == SPECIAL_TOKENS["<s>"] and ids[-1] == SPECIAL_TOKENS["</s>"]
        assert ids[1:-1] == want, (text, [sp.id_to_piece(i) for i in ids[1:-1]], [sp.id_to_piece(i) for i in want])
        fallback += any(sp.is_byte(i) for i in want)
        assert tok.decode(ids[1:-1], skip_special_tokens=False) == sp.decode(want), text
    assert fallback >= 50  # the byte-fallback path was really exercised


def masked_word_ids(sp: spm.SentencePieceProcessor, sentence: str, word: str) -> tuple[str, list[int]]:
    """(the sentence with `word` replaced by "<mask>", sentencepiece's ids of the sentence with the word's
    pieces replaced by the one <mask> id): what masked-LM training saw for that masked word."""
    start = sentence.index(word)
    end = start + len(word)
    pieces = sp.encode(sentence, out_type="proto").pieces
    a = next(i for i, p in enumerate(pieces) if p.end > start)
    b = next((i for i, p in enumerate(pieces) if p.begin >= end), len(pieces))
    assert pieces[b - 1].end == end and pieces[a].surface.strip() == sentence[start: pieces[a].end], (sentence, word)
    ids = [p.id for p in pieces]
    return sentence[:start] + "<mask>" + sentence[end:], ids[:a] + [SPECIAL_TOKENS["<mask>"]] + ids[b:]


def test_placed_mask_keeps_the_ids_around_it(bpe_path: str, spm_path: str) -> None:
    """A <mask> placed in the text replaces the masked word's pieces and nothing else: the ids around it
    are sentencepiece's ids of the whole sentence, as the shards hold them. It takes the space before it,
    and the text after it continues without a new dummy prefix ("at the <mask>." -> ▁at ▁the <mask> .);
    sentencepiece itself would put a lone ▁ before it. Written in a document, "<mask>" is text."""
    from tokenizers import Tokenizer

    from schemas.tokenizer_files import load_tokenizer

    cases = [("the cat sat on the mat", "cat"), ("at the river.", "river"), ("The cat ran.", "The"),
             ("a big dog, then a cat", "dog"), ("Is it the house?", "house")]
    for path in (bpe_path, spm_path):
        sp = spm.SentencePieceProcessor(model_file=path)
        data = Path(path).read_bytes()
        tok = Tokenizer.from_str(build_tokenizer_json(data))
        for sentence, word in cases:
            text, want = masked_word_ids(sp, sentence, word)
            assert tok.encode(text, add_special_tokens=False).ids == want, text
        after = tok.encode("at the <mask>.", add_special_tokens=False).ids
        assert after[-2:] == [SPECIAL_TOKENS["<mask>"], sp.piece_to_id(".")]  # never <mask> ▁ .
        assert sp.encode("the <mask> sat") != tok.encode("the <mask> sat", add_special_tokens=False).ids
        # Written in a document (transformers' split_special_tokens), "<mask>" is ordinary pieces: the build's.
        tok.encode_special_tokens = True
        placed_only = {i for name, i in SPECIAL_TOKENS.items() if name != "<unk>"}  # <unk>: "<" may be unknown
        for text in ("the <mask> sat", "at the <mask>.", "</s><s> <unk> <pad>"):
            ids = tok.encode(text, add_special_tokens=False).ids
            assert ids == load_tokenizer(data).encode([text])[0] and not set(ids) & placed_only


def test_bpe_merges_follow_the_merge_order(bpe_path: str) -> None:
    data = Path(bpe_path).read_bytes()
    pieces = spm_pieces(data)
    ids = {p.piece: i for i, p in enumerate(pieces)}
    merges = bpe_merges(pieces)
    assert len(set(merges)) == len(merges)
    ranks = [ids[a + b] for a, b in merges]
    assert ranks == sorted(ranks)  # BPE scores are minus the merge order, so by id is by score
    normal = [p for p in pieces if p.type == 1]
    learned = {p.piece for p in normal if len(p.piece) > 1}
    assert learned == {a + b for a, b in merges}  # every learned piece is reachable, nothing else
    assert all(a in ids and b in ids for a, b in merges)


def test_unigram_stand_in_would_differ(bpe_path: str) -> None:
    """The old export (a Unigram over the BPE pieces and scores) gives other ids: the test above can fail."""
    from tokenizers import Tokenizer
    from tokenizers.models import Unigram

    sp = spm.SentencePieceProcessor(model_file=bpe_path)
    data = Path(bpe_path).read_bytes()
    doc = json.loads(build_tokenizer_json(data))
    stand_in = json.loads(Tokenizer(Unigram([(p.piece, p.score) for p in spm_pieces(data)], unk_id=3,
                                            byte_fallback=True)).to_str())
    doc["model"] = stand_in["model"]
    tok = Tokenizer.from_str(json.dumps(doc))
    texts = _varied_texts(sp, 200, seed=3)
    assert sum(tok.encode(t, add_special_tokens=False).ids != sp.encode(t) for t in texts) > 10


def test_bpe_without_byte_fallback_fuses_unknowns(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    path = _train(tmp_path, "nobf", _corpus(4, 1500)[0], vocab_size=300, byte_fallback=False)
    sp = spm.SentencePieceProcessor(model_file=path)
    tok = Tokenizer.from_str(build_tokenizer_json(Path(path).read_bytes()))
    assert sp.encode("東京😀 big").count(SPECIAL_TOKENS["<unk>"]) == 1  # a run of unknowns is one <unk>
    for text in BPE_TEXTS + _varied_texts(sp, 150, seed=5):
        assert tok.encode(text, add_special_tokens=False).ids == sp.encode(text), text


def test_bpe_export_loads_and_fills_masks(bpe_path: str, tmp_path: Path) -> None:
    sp = spm.SentencePieceProcessor(model_file=bpe_path)
    cfg = ModelConfig()
    model = _trained_like(cfg, sp.get_piece_size())
    out = tmp_path / "hf"
    export_hf(model, cfg, bpe_path, str(out))
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    for text in BPE_TEXTS:
        assert tok(text)["input_ids"][1:-1] == sp.encode(text), text
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(out)).eval()
    enc = tok(BPE_TEXTS[:6], padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])["logits"]
        theirs = hf(**enc).logits
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(theirs[real], ours[real], atol=1e-4, rtol=0)
    fill = transformers.pipeline("fill-mask", model=str(out), device="cpu")
    preds = fill("The cat <mask> on the mat 東京.", top_k=3)
    assert len(preds) == 3 and all(0 <= p["token"] < sp.get_piece_size() for p in preds)
    with pytest.raises(Exception, match="No mask_token"):  # split: "<mask>" written in text is text
        fill("The cat <mask> on the mat 東京.", tokenizer_kwargs={"split_special_tokens": True})


def test_export_refuses_models_it_cannot_reproduce(tmp_path: Path) -> None:
    sents = _corpus(6, 800)[0]
    # Pieces spanning words: the exported pre-tokenizer splits at whitespace, so it could never emit them.
    path = _train(tmp_path, "span", ["the cat sat", "the cat ran", "a the cat"] * 300 + sents[:200],
                  vocab_size=600, split_by_whitespace=False)
    assert any("\u2581" in p.piece[1:] for p in spm_pieces(Path(path).read_bytes()))
    with pytest.raises(ValueError, match="whitespace"):
        build_tokenizer_json(Path(path).read_bytes())
    path = _train(tmp_path, "char", sents, model_type="char", vocab_size=200, byte_fallback=False)
    assert spm_model_type(Path(path).read_bytes()) == "char"
    with pytest.raises(ValueError, match="only unigram and bpe"):
        build_tokenizer_json(Path(path).read_bytes())


def test_other_user_defined_pieces_are_matched_whole(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    path = _train(tmp_path, "uds", _corpus(7, 1000)[0], user_defined_symbols=["<mask>", "[SEP2]", "東京"])
    sp = spm.SentencePieceProcessor(model_file=path)
    tok = Tokenizer.from_str(build_tokenizer_json(Path(path).read_bytes()))
    for piece in ("[SEP2]", "東京"):
        assert sp.piece_to_id(piece) in tok.encode(f"big {piece} river", add_special_tokens=False).ids
    # Whole, not byte fallback; without sentencepiece's lone "\u2581" before it (see test_mask_splits_the_text).
    assert tok.encode("東京", add_special_tokens=False).ids == [sp.piece_to_id("東京")]
    assert sp.encode("東京") == [sp.piece_to_id("\u2581"), sp.piece_to_id("東京")]


# ================================================================= the build's default tokenizers


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_default_byte_fallback_models_export_with_sentencepiece_ids_on_real_text(model_type: str) -> None:
    """What a build trains by default (byte fallback on, coverage 1.0): trained on half of the real
    articles, the exported tokenizer gives sentencepiece's ids on the other half, byte pieces included."""
    from realtext import news_documents
    from tokenizers import Tokenizer

    from pipelines.clean.sentences import split_sentences
    from pipelines.tokenizer.train import train_sentencepiece
    from schemas.config import TokenizerConfig

    docs = news_documents()
    train = [s for d in docs[::2] for s in split_sentences(d)]
    held_out = [s for d in docs[1::2] for s in split_sentences(d)] + BPE_TEXTS
    data = train_sentencepiece(train, TokenizerConfig(model_type=model_type, vocab_size=2000))
    sp = spm.SentencePieceProcessor(model_proto=data)
    tok = Tokenizer.from_str(build_tokenizer_json(data))
    bytes_seen = 0
    for text in held_out:
        want = sp.encode(text)
        assert tok.encode(text, add_special_tokens=False).ids == want, text
        assert SPECIAL_TOKENS["<unk>"] not in want
        bytes_seen += sum(sp.is_byte(i) for i in want)
        assert tok.decode(want) == sp.decode(want)
    assert bytes_seen > 0  # characters the model never saw went through byte fallback, in both


def test_byte_bpe_tokenizer_is_exported_as_roberta(tmp_path: Path) -> None:
    """A byte-level BPE tokenizer.json (pipelines' byte_bpe kind) exports as a RoBERTa tokenizer folder."""
    from realtext import news_documents
    from tokenizers import Tokenizer

    from pipelines.clean.sentences import split_sentences
    from pipelines.tokenizer.train import train_byte_bpe
    from schemas.config import TokenizerConfig
    from schemas.tokenizer_files import load_tokenizer

    sents = [s for d in news_documents(120) for s in split_sentences(d)]
    data = train_byte_bpe(sents, TokenizerConfig(model_type="byte_bpe", vocab_size=1000))
    path = tmp_path / "tokenizer.json"
    path.write_bytes(data)
    vocab = Tokenizer.from_str(data.decode()).get_vocab_size()
    raw = Tokenizer.from_str(data.decode())
    one_two, three = raw.encode("one two", add_special_tokens=False).ids, raw.encode("three", add_special_tokens=False).ids
    build = load_tokenizer(data)  # how the build encodes a corpus with it
    for arch in ("xlm-roberta", "albert"):
        out = tmp_path / arch
        cfg = ModelConfig() if arch == "xlm-roberta" else ModelConfig(embedding_size=16, sentence_head="sop")
        export_hf(Encoder(cfg, vocab), cfg, str(path), str(out))
        assert {"tokenizer.json", "vocab.json", "merges.txt"} <= set(os.listdir(out))
        fast = transformers.RobertaTokenizerFast.from_pretrained(str(out))
        auto = transformers.AutoTokenizer.from_pretrained(str(out))
        for text in sents[:50] + ["A <mask> in 1977 cost $5 & 30% of £3."]:
            ids = auto(text, split_special_tokens=True)["input_ids"]
            assert ids[1:-1] == build.encode([text])[0]  # the literal "<mask>" too: text is text when split
            if "<mask>" not in text:
                assert ids[1:-1] == raw.encode(text, add_special_tokens=False).ids
                assert auto(text)["input_ids"] == ids
            # RobertaTokenizerFast, RoBERTa's own pipeline, agrees on text
            assert fast(text, split_special_tokens=True)["input_ids"] == ids
        # A <mask> placed in the text (the default): the ids around it are the shards' (no space inserted after it).
        placed = auto("at the <mask>.", add_special_tokens=False)["input_ids"]
        assert placed == raw.encode("at the", add_special_tokens=False).ids + [4, raw.token_to_id(".")]
        pair = auto("one two", "three")
        if arch == "xlm-roberta":  # RoBERTa: <s> A </s></s> B </s>, no segment ids
            assert pair["input_ids"] == [0, *one_two, 2, 2, *three, 2] and "token_type_ids" not in pair
        else:  # ALBERT trained on pairs (SOP): <s> A </s> B </s>, segment B has type 1
            assert pair["input_ids"] == [0, *one_two, 2, *three, 2]
            assert pair["token_type_ids"] == [0] * (len(one_two) + 2) + [1] * (len(three) + 1)
    with pytest.raises(ValueError, match="pieces"):
        export_hf(Encoder(ModelConfig(), vocab + 3), ModelConfig(), str(path), str(tmp_path / "bad"))
