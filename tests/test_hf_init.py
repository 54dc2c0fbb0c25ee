"""Continued pretraining from a Hugging Face model: --init, hf_json tokenizers, export.

Every model and tokenizer here is created by the test with transformers /
tokenizers (tiny, random weights made large enough that a wrong mapping, eps,
activation or position rule changes the loss) and saved the way the hub's
folders are; nothing is downloaded. Real text is the Lee news corpus
(tests/realtext.py).
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import torch
from forkserver import run_python
from realtext import news_documents, write_jsonl

from schemas.errors import UserError
from schemas.tokenizer_files import HF_JSON, HFJsonTokenizer, load_tokenizer, tokenizer_kind
from trainer.masking import IGNORE_INDEX

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 120


# ------------------------------------------------------------------ tiny models, saved as transformers does

def _perturb(model: torch.nn.Module, seed: int) -> None:
    """Weights far from init (std 0.3 noise on every tensor, LayerNorm too): near-uniform logits would hide
    a wrong mapping, eps or activation."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)


def save_hf(path: str, arch: str, vocab: int = VOCAB, pad: int | None = None, seed: int = 0,
            safe: bool = True, **extra) -> torch.nn.Module:
    """A tiny RobertaForMaskedLM / XLMRobertaForMaskedLM / BertForMaskedLM / AlbertForMaskedLM saved to path."""
    import transformers as T

    common = dict(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=40)
    if arch in ("roberta", "xlm-roberta"):
        # RoBERTa's real configs: one token type, eps 1e-5, positions for 512 + pad offset.
        common.update(pad_token_id=1 if pad is None else pad, type_vocab_size=1, layer_norm_eps=1e-5)
        cls, cfg_cls = ((T.RobertaForMaskedLM, T.RobertaConfig) if arch == "roberta"
                        else (T.XLMRobertaForMaskedLM, T.XLMRobertaConfig))
    elif arch == "bert":
        common.update(pad_token_id=0 if pad is None else pad)
        cls, cfg_cls = T.BertForMaskedLM, T.BertConfig
    else:
        common.update(pad_token_id=0 if pad is None else pad, embedding_size=16)
        cls, cfg_cls = T.AlbertForMaskedLM, T.AlbertConfig
    common.update(extra)
    torch.manual_seed(seed)
    model = cls(cfg_cls(**common))
    _perturb(model, seed)
    model.tie_weights()
    model.save_pretrained(path)
    if not safe:  # an older hub folder: pytorch_model.bin (transformers 5 only writes safetensors)
        os.remove(os.path.join(path, "model.safetensors"))
        torch.save(model.state_dict(), os.path.join(path, "pytorch_model.bin"))
    return model.eval()


def batch(pad: int, two_types: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """A right-padded batch (what our loader gives) with segment ids and MLM labels."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (3, 14), generator=g)
    att = torch.ones_like(ids)
    ids[1, 9:], att[1, 9:] = pad, 0
    tt = torch.zeros_like(ids)
    if two_types:
        tt[:, 7:] = 1
        tt[1, 9:] = 0
    labels = torch.full_like(ids, IGNORE_INDEX)
    sel = (torch.rand(ids.shape, generator=g) < 0.3) & att.bool()
    sel[0, 2] = sel[1, 8] = True
    labels[sel] = ids[sel]
    return {"input_ids": ids, "attention_mask": att, "token_type_ids": tt, "labels": labels}


CASES = {
    "roberta": ("roberta", {}),
    "xlm-roberta": ("xlm-roberta", {}),
    "bert": ("bert", {}),
    "bert-bin": ("bert", {"safe": False}),  # pytorch_model.bin, read with weights_only=True
    "bert-gelu-new": ("bert", {"hidden_act": "gelu_new"}),
    "albert-shared": ("albert", {}),  # one layer group shared by all layers, E < H, gelu_new
    "albert-unshared": ("albert", {"num_hidden_groups": 2}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_loss_at_init_equals_transformers(tmp_path, case):
    from trainer.hf_init import build_encoder

    arch, kw = CASES[case]
    hf = save_hf(str(tmp_path), arch, **kw)
    if not kw.get("safe", True):
        assert os.path.exists(tmp_path / "pytorch_model.bin") and not os.path.exists(tmp_path / "model.safetensors")
    ours = build_encoder(str(tmp_path)).eval()
    b = batch(hf.config.pad_token_id, hf.config.type_vocab_size > 1)
    with torch.no_grad():
        want = hf(**b).loss.item()
        got = ours(b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"],
                   token_type_ids=b["token_type_ids"])["loss"].item()
        logits = ours(b["input_ids"], attention_mask=b["attention_mask"],
                      token_type_ids=b["token_type_ids"])["logits"]
        hf_logits = hf(**{k: v for k, v in b.items() if k != "labels"}).logits
    assert want > 1.0 and abs(got - want) < 1e-4, (case, got, want)
    real = b["attention_mask"].bool()
    assert torch.allclose(logits[real], hf_logits[real], atol=1e-4)


def test_the_checks_can_fail(tmp_path):
    """The parity above is sensitive: the same ALBERT weights with erf GELU (RoBERTa's), or with positions
    one row off (RoBERTa's offset rule applied to a model numbered from 0), give other logits.
    (LayerNorm eps 1e-5 vs 1e-12 moves them only ~1e-5 here: set exactly, but not what this test detects.)"""
    from schemas.config import ModelConfig
    from trainer.hf_init import (
        hf_architecture,
        init_model_config,
        load_hf_weights,
        read_hf_config,
        read_hf_weights,
    )
    from trainer.model import Encoder

    hf = save_hf(str(tmp_path), "albert")
    b = batch(0, True)
    inputs = {k: v for k, v in b.items() if k != "labels"}
    real = b["attention_mask"].bool()
    with torch.no_grad():
        want = hf(**inputs).logits[real]
    right = init_model_config(str(tmp_path))
    arch = hf_architecture(read_hf_config(str(tmp_path)))

    def error(cfg: ModelConfig, shift: int = 0) -> float:
        model = Encoder(cfg, VOCAB, pad_id=0).eval()
        load_hf_weights(model, read_hf_weights(str(tmp_path)), arch)
        with torch.no_grad():
            model.embed.position.weight.copy_(model.embed.position.weight.roll(shift, 0))
            return (model(**inputs)["logits"][real] - want).abs().max().item()

    assert error(right) < 1e-4
    erf = ModelConfig.model_validate({**right.model_dump(), "hidden_act": "gelu", "lm_head_act": "gelu"})
    assert error(erf) > 1e-3
    assert error(right, shift=1) > 1e-2


def _edit_config(path, **changes) -> None:
    cfg_path = os.path.join(path, "config.json")
    with open(cfg_path) as f:
        c = json.load(f)
    c.update(changes)
    with open(cfg_path, "w") as f:
        json.dump(c, f)


@pytest.mark.parametrize("arch, change, message", [
    ("bert", {"position_embedding_type": "relative_key"}, "only absolute positions"),
    ("bert", {"architectures": ["BertForPreTraining", "DistilBertForMaskedLM"]}, "is not supported; supported"),
    ("bert", {"hidden_act": "relu"}, "hidden_act='relu' is not supported"),
    ("bert", {"tie_word_embeddings": False}, "tie_word_embeddings is false"),
    ("albert", {"inner_group_num": 2}, "inner_group_num=2 is not supported"),
    ("albert", {"num_hidden_groups": 3, "num_hidden_layers": 6}, "num_hidden_groups=3"),
])
def test_what_cannot_be_computed_exactly_is_refused_in_one_line(tmp_path, arch, change, message):
    from trainer.hf_init import build_encoder

    save_hf(str(tmp_path), arch)
    _edit_config(str(tmp_path), **change)
    with pytest.raises(UserError, match=message):
        build_encoder(str(tmp_path))


def test_albert_without_factorization_needs_an_identity_mapping(tmp_path):
    from trainer.hf_init import build_encoder

    save_hf(str(tmp_path), "albert", embedding_size=32)  # E = H: random embedding_hidden_mapping_in
    with pytest.raises(UserError, match="must be the identity"):
        build_encoder(str(tmp_path))


def test_missing_and_extra_tensors_are_named(tmp_path):
    from safetensors.torch import load_file, save_file

    from trainer.hf_init import build_encoder

    save_hf(str(tmp_path), "roberta")
    path = str(tmp_path / "model.safetensors")
    t = load_file(path)
    save_file({**t, "roberta.encoder.layer.7.output.dense.weight": torch.zeros(2)}, path)
    with pytest.raises(UserError, match="have no place in the model, e.g. roberta.encoder.layer.7"):
        build_encoder(str(tmp_path))
    del t["roberta.encoder.layer.1.intermediate.dense.bias"]
    save_file(t, path)
    with pytest.raises(UserError, match="lack roberta.encoder.layer.1.intermediate.dense.bias"):
        build_encoder(str(tmp_path))


def test_init_fixes_the_shape_and_refuses_a_contradiction(tmp_path):
    from schemas.config import TrainConfig
    from trainer.hf_init import resolve_init

    save_hf(str(tmp_path), "bert")
    cfg = resolve_init(TrainConfig.model_validate({"data": "x", "init": str(tmp_path)}))
    m = cfg.model
    assert (m.hidden, m.layers, m.heads, m.intermediate, m.architecture) == (32, 2, 4, 64, "bert")
    assert (m.layer_norm_eps, m.type_vocab_size, m.max_positions) == (1e-12, 2, 40 + 0 + 1)
    assert resolve_init(cfg) == cfg  # idempotent (train() resolves on every start and resume)
    assert m.dropout == 0.1  # the model's hidden_dropout_prob; a run's own dropout wins:
    no_drop = TrainConfig.model_validate({"data": "x", "init": str(tmp_path), "model": {"dropout": 0.0}})
    assert resolve_init(no_drop).model.dropout == 0.0
    with pytest.raises(UserError, match=r"drop model.hidden=64 \(the model has 32\)"):
        resolve_init(TrainConfig.model_validate({"data": "x", "init": str(tmp_path), "model": {"hidden": 64}}))
    # A named size of another shape (--model_size large: hidden 1024, 16 heads) contradicts it too.
    with pytest.raises(UserError, match=r"drop model.size='large' \(hidden 1024, 16 heads; the model has hidden 32"):
        resolve_init(TrainConfig.model_validate({"data": "x", "init": str(tmp_path), "model": {"size": "large"}}))
    # A config file holds every field at its default (what `build_train_config` loads): not a contradiction.
    import argparse

    from trainer.train import build_train_config

    cfg_file = tmp_path / "train.json"
    cfg_file.write_text(TrainConfig.model_validate({"data": "x"}).model_dump_json())
    args = argparse.Namespace(config=str(cfg_file), data=None, output=None, steps=None, batch_size=None, seed=None,
                              num_workers=None, tokens_per_batch=None, device=None, follow=None, init=str(tmp_path))
    assert resolve_init(build_train_config(args, [])).model == m


def test_a_recipes_shape_against_init_names_the_recipe_and_the_items_that_agree(tmp_path):
    """A recipe's shape is a setting the user did not type: the line says it came from the recipe, and the
    --set items it names keep the recipe's other settings with the model's shape."""
    from trainer.hf_init import resolve_init
    from trainer.recipes import resolve_train_config

    tiny_wide = str(tmp_path / "tiny-wide")
    save_hf(tiny_wide, "roberta", hidden_size=64, num_attention_heads=2)  # a named size's width (tiny)
    flags = {"data": "x", "init": tiny_wide}
    with pytest.raises(UserError) as e:
        resolve_init(resolve_train_config("roberta-base", None, flags, []))
    line = str(e.value)
    assert "drop model.hidden=768 (the model has 64)" in line
    assert "from --recipe roberta-base: to keep its other settings, add --set model.hidden=64 " in line
    items = [i.strip() for i in line.rsplit(", add ", 1)[1].rstrip(")").split("--set ")[1:]]
    assert "model.size=tiny" in items
    cfg = resolve_init(resolve_train_config("roberta-base", None, flags, items))
    assert (cfg.model.hidden, cfg.model.heads, cfg.model.layers) == (64, 2, 2)
    assert cfg.optim == resolve_train_config("roberta-base", None, flags, []).optim  # the recipe's other settings
    # A width no named size has: no --set item fixes model.size, so the recipe has to go.
    odd = str(tmp_path / "odd")
    save_hf(odd, "roberta")  # hidden 32, 4 heads
    with pytest.raises(UserError, match=r"model.size from --recipe roberta-base, a size this model is not: leave out"):
        resolve_init(resolve_train_config("roberta-base", None, {"data": "x", "init": odd}, []))
    # The user's own contradiction is only named.
    with pytest.raises(UserError) as e:
        resolve_init(resolve_train_config(None, None, flags, ["model.hidden=128"]))
    assert str(e.value).endswith("drop model.hidden=128 (the model has 64)")


def test_init_keeps_the_models_own_attention_dropout(tmp_path):
    """A model trained with attention dropout off and hidden dropout on (MosaicBERT's choice) is continued so,
    and exported so; a run that sets its own dropout sets both."""
    from schemas.config import TrainConfig
    from trainer.export import hf_config
    from trainer.hf_init import resolve_init
    from trainer.model import resolve_dims

    save_hf(str(tmp_path), "bert", attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.1)
    m = resolve_init(TrainConfig.model_validate({"data": "x", "init": str(tmp_path)})).model
    assert (m.dropout, m.attention_dropout) == (0.1, 0.0)
    dims = resolve_dims(m, VOCAB, 0)
    assert (dims.dropout, dims.attention_dropout) == (0.1, 0.0)
    c = hf_config(dims, "bert")
    assert (c["hidden_dropout_prob"], c["attention_probs_dropout_prob"]) == (0.1, 0.0)
    own = resolve_init(TrainConfig.model_validate({"data": "x", "init": str(tmp_path), "model": {"dropout": 0.2}}))
    assert (own.model.dropout, own.model.attention_dropout) == (0.2, None)
    assert resolve_dims(own.model, VOCAB, 0).attention_dropout == 0.2
    save_hf(str(tmp_path / "hidden"), "bert", attention_probs_dropout_prob=0.1, hidden_dropout_prob=0.05)
    own = resolve_init(TrainConfig.model_validate({"data": "x", "init": str(tmp_path / "hidden"),
                                                   "model": {"attention_dropout": 0.2}}))
    assert (own.model.dropout, own.model.attention_dropout) == (0.05, 0.2)  # the model's, the run's
    save_hf(str(tmp_path / "same"), "bert")  # both 0.1: nothing of its own to keep
    assert resolve_init(TrainConfig.model_validate({"data": "x", "init": str(tmp_path / "same")})).model \
        .attention_dropout is None


# ------------------------------------------------------------------ tokenizers of existing models

def _texts(n: int = 60) -> list[str]:
    return [s for d in news_documents(limit=n) for s in d.split(". ")]


def wordpiece_json(texts: list[str]) -> bytes:
    """A BERT-style WordPiece tokenizer.json: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 (not our ids)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=400, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    return tok.to_str().encode()


def roberta_bpe_json(texts: list[str], vocab: int = 400) -> bytes:
    """A RoBERTa-style byte-level BPE tokenizer.json: <s>=0 <pad>=1 </s>=2 <unk>=3 and <mask> last, as in
    roberta-base (50264), no prefix space (as roberta-base's)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab - 1, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    return tok.to_str().encode()


def test_hf_json_kind_finds_each_models_special_ids():
    texts = _texts(30)
    wp, bpe = wordpiece_json(texts), roberta_bpe_json(texts)
    assert tokenizer_kind(wp) == tokenizer_kind(bpe) == HF_JSON
    w = load_tokenizer(wp)
    assert isinstance(w, HFJsonTokenizer)
    assert w.special_ids == {"<s>": 2, "</s>": 3, "<pad>": 0, "<unk>": 1, "<mask>": 4}
    assert w.special_tokens == {"<s>": "[CLS]", "</s>": "[SEP]", "<pad>": "[PAD]", "<unk>": "[UNK]",
                                "<mask>": "[MASK]"}
    b = load_tokenizer(bpe)
    assert b.special_ids == {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 399}
    # Encoded as in running text (after a space): a sentence's first word is its usual Ġ token.
    first = b.encode(["Council approved"])[0]
    assert b.pieces()[first[0]].startswith("\u0120")
    assert b.word_starts()[first[0]]


def albert_unigram_json(texts: list[str]) -> bytes:
    """An ALBERT-style SentencePiece-based tokenizer.json: Unigram + Metaspace, <pad>=0 <unk>=1 [CLS]=2 [SEP]=3
    [MASK]=4, a template post-processor (as transformers converts albert-base-v2's spm model)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    tok.train_from_iterator(texts, trainers.UnigramTrainer(
        vocab_size=300, special_tokens=["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], unk_token="<unk>",
        show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0",
                                                       pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tok.to_str().encode()


def test_sentencepiece_based_tokenizer_json_gives_albert_ids_and_metaspace_word_starts():
    tok = load_tokenizer(albert_unigram_json(_texts(30)))
    assert tok.kind == HF_JSON
    assert tok.special_ids == {"<s>": 2, "</s>": 3, "<pad>": 0, "<unk>": 1, "<mask>": 4}
    pieces, starts = tok.pieces(), tok.word_starts()
    ids = tok.encode(["The council approved the plan"])[0]
    assert [starts[i] for i in ids].count(True) == 5  # five words, each starting at one ▁ piece
    assert all(starts[i] == pieces[i].startswith("\u2581") for i in range(len(pieces)))


def test_hf_json_without_a_mask_token_is_one_clear_error():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(_texts(10), trainers.WordPieceTrainer(vocab_size=200, special_tokens=["[PAD]", "[UNK]"],
                                                                  show_progress=False))
    with pytest.raises(UserError, match=r"cannot find the token for <s>, </s>, <mask>"):
        load_tokenizer(tok.to_str().encode())


def test_packing_writes_the_tokenizers_own_ends():
    from pipelines.pack.rules import group_of, pack_group
    from pipelines.records import TokenizedDocument
    from schemas.config import PackingConfig

    docs = [TokenizedDocument(f"d{i}", "news", ((7, 8, 9), (10, 0, 11)), 6) for i in range(6)]
    for rule in ("full_sentences", "sop", "segment_pair_nsp"):
        cfg = PackingConfig(rule=rule, max_seq_len=16, groups=1)
        assert all(group_of(d.doc_id, 0, 1) == 0 for d in docs)
        seqs, _ = pack_group(docs, cfg, 0, 0, ends=(101, 102))
        assert seqs and all(s.input_ids[0] == 101 and s.input_ids[-1] == 102 for s in seqs), rule
        # Content id 0 stays (it is a token of this vocabulary); no 2 (our </s>) was inserted.
        assert all(2 not in s.input_ids for s in seqs) and any(0 in s.input_ids for s in seqs)


def test_wordpiece_whole_word_masking_masks_whole_words():
    """WordPiece marks continuations (##), not starts: the inverse rule gives the masker whole words."""
    from schemas.config import MaskingConfig
    from trainer.masking import Masker

    tok = load_tokenizer(wordpiece_json(_texts(60)))
    pieces = tok.pieces()
    starts = torch.tensor(tok.word_starts())
    assert not starts[[i for i, p in enumerate(pieces) if p.startswith("##")]].any()
    assert starts[tok.tok.token_to_id("the")]
    sp = tok.special_ids
    rows = [[sp["<s>"], *ids[:40], sp["</s>"]] for ids in tok.encode(_texts(20)[:64]) if len(ids) >= 8]
    width = max(map(len, rows))
    ids = torch.tensor([r + [sp["<pad>"]] * (width - len(r)) for r in rows])
    masker = Masker(MaskingConfig(scheme="whole_word", rate=0.3), len(pieces), sp.values(), mask_id=sp["<mask>"],
                    pad_id=sp["<pad>"], word_starts=starts)
    out = masker(ids, torch.arange(len(rows)), epoch=0, seed=3)
    predicted = out["labels"] != IGNORE_INDEX
    split_words = 0
    for r in range(len(rows)):
        row, pred = ids[r].tolist(), predicted[r].tolist()
        i = 1
        while i < len(row):
            j = i + 1
            while j < len(row) and pieces[row[j]].startswith("##"):
                j += 1
            if j - i > 1:
                split_words += 1
                assert len(set(pred[i:j])) == 1, [pieces[t] for t in row[i:j]]  # all pieces or none
            i = j
    assert split_words > 20 and predicted.any()


# ------------------------------------------------------------------ the real CLI, end to end

def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = run_python([*args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _shard_ids(corpus: str, m) -> list[np.ndarray]:
    from schemas.sample import decode_sample, iter_tar_samples

    out = []
    for s in m.shards:
        with open(os.path.join(corpus, s.name), "rb") as f:
            out += [decode_sample(k, mem)["input_ids"] for k, mem in iter_tar_samples(f)]
    return out


@pytest.mark.slow
def test_roberta_tokenizer_json_drives_a_build_training_from_init_and_export(tmp_path):
    """An HF byte-level BPE tokenizer.json (RoBERTa's layout: <mask> last) builds a corpus through
    `python -m pipelines.build`; `python -m trainer.train --init` continues a RobertaForMaskedLM with
    whole-word masking; `shardforge export` writes a RobertaForMaskedLM with the tokenizer and a model card."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from shardforge.storage.contract import load_manifest

    docs = news_documents(limit=60)
    raw = write_jsonl(str(tmp_path / "news.jsonl"), docs)
    tok_json = roberta_bpe_json(docs, vocab=500)
    init = tmp_path / "roberta"
    save_hf(str(init), "roberta", vocab=500, max_position_embeddings=66)
    (init / "tokenizer.json").write_bytes(tok_json)
    corpus, run, hf = str(tmp_path / "corpus"), str(tmp_path / "run"), str(tmp_path / "hf")
    _run("-m", "pipelines.build", "--input", raw, "--output", corpus, "--tokenizer", str(init),
         "--max_seq_len", "64", "--valid_fraction", "0.1", "--min_words", "1")
    m, _ = load_manifest(corpus)
    assert (m.tokenizer.kind, m.tokenizer.model_type, m.tokenizer.vocab_size) == (HF_JSON, "bpe", 500)
    assert m.tokenizer.special_ids == {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 499}
    assert m.tokenizer.special_tokens["<mask>"] == "<mask>"
    stored = open(os.path.join(corpus, m.tokenizer.path), "rb").read()
    assert stored == tok_json and m.tokenizer.path.endswith("tokenizer/tokenizer.json")
    seqs = _shard_ids(corpus, m)
    assert seqs and all(s[0] == 0 and s[-1] == 2 and 499 not in s for s in seqs)
    # The shards hold the tokenizer's own ids for the text (after a space, as in running text).
    from tokenizers import Tokenizer

    lib = Tokenizer.from_str(tok_json.decode())
    assert any(len(s) > 10 for s in seqs)
    first_sentence = docs[0].split(". ")[0]
    want = lib.encode(" " + first_sentence, add_special_tokens=False).ids[:8]
    assert any(list(s[1:9]) == want for s in seqs)

    _run("-m", "trainer.train", "--data", corpus, "--init", str(init), "--output", run, "--steps", "3",
         "--batch_size", "4", "--device", "cpu", "--set", "masking.scheme=whole_word", "--set", "eval_every=3",
         "--set", "eval_batches=2", "--set", "log_every=1")
    records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    assert [r["step"] for r in records] == [1, 2, 3] and "eval_loss" in records[-1]

    _run("-m", "shardforge.cli", "export", run, hf)
    cfg = json.load(open(os.path.join(hf, "config.json")))
    assert cfg["architectures"] == ["RobertaForMaskedLM"] and cfg["model_type"] == "roberta"
    model = AutoModelForMaskedLM.from_pretrained(hf).eval()
    assert type(model).__name__ == "RobertaForMaskedLM"
    tok = AutoTokenizer.from_pretrained(hf)
    assert tok.mask_token_id == 499 and tok.pad_token_id == 1 and tok.cls_token_id == 0
    enc = tok(["The council approved the <mask> plan."], return_tensors="pt", split_special_tokens=False)
    assert enc["input_ids"][0, 0] == 0 and 499 in enc["input_ids"][0].tolist()
    with torch.no_grad():
        assert torch.isfinite(model(**enc).logits).all()
    card = open(os.path.join(hf, "README.md")).read()
    tokens = sum(r["tokens_per_s"] * r["step_time"] for r in records)
    assert f"started from: {init.name}\n" in card and "- steps: 3" in card and "exported as: RobertaForMaskedLM" in card
    assert str(tmp_path) not in card  # local folders by their names: nothing of the training machine's layout
    assert f"tokens seen: {round(tokens):,}" in card and f"final eval loss: {records[-1]['eval_loss']:.4f}" in card
    assert m.tokenizer.sha256 in card and '"scheme": "whole_word"' in card


@pytest.mark.slow
def test_bert_wordpiece_corpus_continues_a_bert_and_exports_bert(tmp_path):
    """A BERT WordPiece tokenizer ([CLS]=2 [SEP]=3 [PAD]=0 [MASK]=4) through a real build (pair rule: SOP)
    and an --init BertForMaskedLM run with whole-word masking; the export is a BertForMaskedLM whose loss on a
    batch equals the trained checkpoint's."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from pipelines.jobs.build import run_build
    from schemas.config import BuildConfig, TrainConfig
    from trainer.export import export_checkpoint
    from trainer.hf_init import build_encoder
    from trainer.train import train

    docs = news_documents(limit=50)
    raw = write_jsonl(str(tmp_path / "news.jsonl"), docs)
    wp = wordpiece_json(docs)
    init = tmp_path / "bert"
    n = load_tokenizer(wp).vocab_size
    save_hf(str(init), "bert", vocab=n, max_position_embeddings=64)
    (init / "tokenizer.json").write_bytes(wp)
    corpus = str(tmp_path / "corpus")
    m = run_build(BuildConfig.model_validate({
        "sources": [{"name": "news", "input": raw}], "clean": {"min_words": 1, "english_only": False},
        "tokenizer": {"model_url": str(init / "tokenizer.json")},
        "packing": {"rule": "sop", "max_seq_len": 48, "valid_fraction": 0.1}}), corpus)
    assert m.tokenizer.special_ids["<s>"] == 2 and m.tokenizer.kind == HF_JSON
    seqs = _shard_ids(corpus, m)
    assert seqs and all(s[0] == 2 and s[-1] == 3 and list(s).count(3) == 2 for s in seqs)

    run = str(tmp_path / "run")
    res = train(TrainConfig.model_validate({
        "data": corpus, "output": run, "steps": 2, "batch_size": 4, "device": "cpu", "init": str(init),
        "model": {"sentence_head": "none"}, "masking": {"scheme": "whole_word"}, "log_every": 1}))
    assert res["steps"] == 2
    hf = str(tmp_path / "hf")
    export_checkpoint(run, hf)
    with pytest.raises(UserError, match=r"^tokenizer not found: .*nowhere\.model$"):  # was a FileNotFoundError trace
        export_checkpoint(run, str(tmp_path / "hf2"), tokenizer=str(tmp_path / "nowhere.model"))
    model = AutoModelForMaskedLM.from_pretrained(hf).eval()
    assert type(model).__name__ == "BertForMaskedLM"
    tok = AutoTokenizer.from_pretrained(hf)
    assert (tok.cls_token_id, tok.sep_token_id, tok.pad_token_id, tok.mask_token_id) == (2, 3, 0, 4)
    # The exported folder is itself an --init source: our model from it agrees with transformers' again.
    ours = build_encoder(hf).eval()
    b = batch(0, True)
    b["input_ids"] = b["input_ids"] % n
    b["labels"] = torch.where(b["labels"] >= 0, b["input_ids"], b["labels"])
    with torch.no_grad():
        want = model(**b).loss.item()
        got = ours(b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"],
                   token_type_ids=b["token_type_ids"])["loss"].item()
    assert abs(got - want) < 1e-4
    assert "# BertForMaskedLM continued with shardforge" in open(os.path.join(hf, "README.md")).read()


@pytest.mark.slow
def test_init_with_a_corpus_of_another_tokenizer_is_one_line(tmp_path):
    """--init on a corpus built with shardforge's own tokenizer (other vocabulary): exit 2, one line."""
    docs = news_documents(limit=20)
    raw = write_jsonl(str(tmp_path / "news.jsonl"), docs)
    from pipelines.jobs.build import run_build
    from schemas.config import BuildConfig

    corpus = str(tmp_path / "corpus")
    run_build(BuildConfig.model_validate({
        "sources": [{"name": "news", "input": raw}], "clean": {"min_words": 1, "english_only": False},
        "tokenizer": {"vocab_size": 500}, "packing": {"max_seq_len": 64}}), corpus)
    init = tmp_path / "bert"
    save_hf(str(init), "bert")
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = run_python(["-m", "trainer.train", "--data", corpus, "--init", str(init), "--steps", "1",
                    "--output", str(tmp_path / "run"), "--device", "cpu"], capture_output=True, text=True,
                   cwd=ROOT, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "the model has vocab_size 120, the corpus's tokenizer 500" in r.stderr.strip().splitlines()[-1]


def test_model_card_counts_each_step_once_and_says_what_was_not_recorded(tmp_path):
    """A resumed run repeats the steps after its last checkpoint in metrics.jsonl: the card counts the last
    record of each step, ignores a torn last line and steps after the checkpoint, and names what is missing."""
    from schemas.config import TrainConfig
    from trainer.model_card import model_card, read_metrics, run_folder_of

    run = tmp_path / "run"
    run.mkdir()
    recs = [{"step": 1, "tokens_per_s": 100.0, "step_time": 1.0}, {"step": 2, "tokens_per_s": 100.0, "step_time": 1.0},
            {"step": 3, "tokens_per_s": 100.0, "step_time": 1.0, "eval_loss": 5.0},
            {"step": 2, "tokens_per_s": 50.0, "step_time": 1.0}, {"step": 3, "tokens_per_s": 30.0, "step_time": 1.0,
                                                                  "eval_loss": 4.25, "eval_mlm_tokens": 1234.0},
            {"step": 4, "tokens_per_s": 1e9, "step_time": 1.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"step": 5, "tok')
    assert run_folder_of(str(run / "checkpoints" / "ckpt-00000003.pt")) == str(run)
    assert read_metrics(str(run), 3) == {"tokens_seen": 180, "eval_loss": 4.25, "eval_step": 3,
                                       "eval_tokens": 1234.0, "found": True}
    cfg = TrainConfig.model_validate({"data": "gs://user:secret@bucket/corpus", "init": "/models/bert"})
    card = model_card(cfg, {"step": 3}, str(run), "bert", None)
    assert "tokens seen: 180" in card and "final eval loss: 4.2500 (step 3, over 1,234 predicted tokens)" in card
    assert "secret" not in card and "# BertForMaskedLM continued with shardforge" in card
    empty = model_card(cfg, {"step": 3}, str(tmp_path / "nowhere"), "bert", None)
    assert "tokens seen: not recorded" in empty and "final eval loss: not recorded" in empty
    assert "metrics.jsonl was not found" in empty and read_metrics(str(tmp_path / "nowhere"), 3)["found"] is False
