"""Special tokens written in text are text, for every tokenizer kind, through a real build and the export.

Real articles (tests/realtext.py) with the strings of special tokens planted in them (``</s>``, ``<s>``,
``<unk>``, ``<mask>``, ``<pad>``, WordPiece's ``[SEP]`` ``[MASK]`` ``[CLS]`` ``[PAD]`` ``[UNK]``, a byte
piece's name, fullwidth forms that normalize to them) are built into a corpus with each kind:
SentencePiece unigram and BPE, byte-level BPE, and a Hugging Face tokenizer.json given with
``--tokenizer`` (a BERT-style WordPiece, and an ALBERT-style Unigram whose pieces hold the special
tokens). In the shards special ids stand only where packing puts them; the report's ``<unk>`` count is
the count of the tokenizer's own unknown id; the exported tokenizer gives the shards' ids on every
document, planted strings included; and a ``<mask>`` placed in real sentences gives the ids the build's
encoding has around the masked word.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from realtext import news_documents, write_jsonl

from pipelines.clean.sentences import split_sentences
from schemas.config import BuildConfig, TokenizerConfig
from schemas.sample import decode_sample, iter_tar_samples
from schemas.tokenizer_files import load_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PLANTED = [
    "The old price <s>$40</s> was struck through on the page.",
    "Fill in the blank: the <mask> sat on the mat, or type <unk> and <pad> instead.",
    "BERT writes [CLS] first, [SEP] between, [MASK] for a hidden word, then [PAD] and [UNK].",
    "A byte piece is named <0x41> in a vocabulary, and the answer is at the <mask>.",
    "Fullwidth \uff1cmask\uff1e and \uff3bMASK\uff3d look the same once normalized.",
    "<mask> opens this sentence and </s> closes it</s>",
]
PLANTED_STRINGS = ["</s>", "<s>", "<unk>", "<mask>", "<pad>", "[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"]
KINDS = ["unigram", "bpe", "byte_bpe", "hf_wordpiece", "hf_unigram"]


def planted_documents(n: int = 48) -> list[str]:
    """The first n real articles; every fourth with one planted sentence in its middle (and one at its end)."""
    docs = news_documents(n)
    out = []
    for i, doc in enumerate(docs):
        if i % 4 == 0:
            sents = split_sentences(doc)
            mid = len(sents) // 2
            planted = PLANTED[(i // 4) % len(PLANTED)]
            doc = " ".join([*sents[:mid], planted, *sents[mid:], PLANTED[(i // 4 + 1) % len(PLANTED)]])
        out.append(doc)
    return out


def hf_tokenizer_json(kind: str) -> bytes:
    """An existing model's tokenizer.json, trained on other real articles: BERT's WordPiece
    ([PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4), or ALBERT's Unigram + Metaspace (its pieces hold the
    special tokens, with the best score there is)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    texts = [s for d in news_documents()[250:] for s in split_sentences(d)]
    if kind == "hf_wordpiece":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=1000, special_tokens=specials,
                                                                 show_progress=False))
        tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    else:
        specials = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
        tok.train_from_iterator(texts, trainers.UnigramTrainer(vocab_size=1000, special_tokens=specials,
                                                               unk_token="<unk>", show_progress=False))
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
            special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tok.to_str().encode()


def build_config(raw: str, tok: dict) -> BuildConfig:
    from pipelines.clean import rules as clean

    guards = set(getattr(clean, "GUARD_RULES", ()))
    return BuildConfig.model_validate({
        "sources": [{"name": "news", "input": raw}],
        "clean": {"disabled_rules": sorted(set(getattr(clean, "RULE_NAMES", ())) - guards),
                  "english_only": False, "min_words": 1},
        "tokenizer": tok, "packing": {"max_seq_len": 128, "valid_fraction": 0.1},
        "shards": {"target_samples": 200}})


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> str:
    return write_jsonl(str(tmp_path_factory.mktemp("planted") / "news.jsonl"), planted_documents())


@pytest.fixture(scope="module", params=KINDS)
def corpus(request, raw, tmp_path_factory):
    """(kind, corpus folder, manifest, tokenizer bytes, the export's tokenizer folder) of a real build."""
    from pipelines.jobs.build import run_build
    from trainer.hf_tokenizer import tokenizer_files

    kind, tmp = request.param, tmp_path_factory.mktemp(request.param)
    if kind.startswith("hf_"):
        path = tmp / "tokenizer.json"
        path.write_bytes(hf_tokenizer_json(kind))
        tok = {"model_url": str(path)}
    else:
        tok = {"model_type": kind, "vocab_size": 1000}
    out = str(tmp / "corpus")
    m = run_build(build_config(raw, tok), out)
    data = open(os.path.join(out, m.tokenizer.path), "rb").read()
    hf_dir = tmp / "hf"
    hf_dir.mkdir()
    for name, content in tokenizer_files(data, "xlm-roberta", 128).files.items():
        (hf_dir / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return kind, out, m, data, str(hf_dir)


def samples(out: str, m) -> list[tuple[np.ndarray, list[str]]]:
    """Every packed sample's (input_ids, doc_ids), shard by shard."""
    got = []
    for s in m.shards:
        with open(os.path.join(out, s.name), "rb") as f:
            for key, mem in iter_tar_samples(f):
                sample = decode_sample(key, mem)
                got.append((sample["input_ids"].astype(np.int64), sample["meta"]["doc_ids"]))
    return got


def clean_texts(out: str, m) -> dict[str, str]:
    import pyarrow.parquet as pq

    t = pq.read_table(os.path.join(out, m.intermediates["clean"])).to_pydict()
    return dict(zip(t["doc_id"], t["text"], strict=True))


@pytest.mark.slow
def test_special_ids_only_where_packing_puts_them(corpus):
    kind, out, m, data, _ = corpus
    ids = m.tokenizer.special_ids
    texts = clean_texts(out, m)
    planted = "\n".join(t for t in texts.values() if "<mask>" in t)
    assert all(s in planted for s in PLANTED_STRINGS) and "<0x41>" in planted  # cleaning kept them: no vacuous pass
    bos, eos, placed_never = ids["<s>"], ids["</s>"], {ids["<mask>"], ids["<pad>"]}
    for seq, doc_ids in samples(out, m):
        assert seq[0] == bos and seq[-1] == eos
        inner = seq[1:-1]
        assert int((inner == eos).sum()) == len(doc_ids) - 1  # FULL-SENTENCES: one </s> between documents
        assert int((inner == bos).sum()) == 0 and not placed_never & set(inner.tolist())
    # The tokenizer's own encoding of the planted sentences holds no special id but an honest <unk>.
    tok = load_tokenizer(data)
    for sentence in PLANTED:
        got = set(tok.encode([sentence])[0])
        assert not got & {ids[r] for r in ("<s>", "</s>", "<pad>", "<mask>")}, (kind, sentence)
        if kind in ("unigram", "bpe", "byte_bpe"):  # byte fallback / byte-level: nothing is unknown, all decodes
            assert ids["<unk>"] not in got
            assert "<mask>" in tok.decode(tok.encode([sentence])[0]) or "<mask>" not in sentence


@pytest.mark.slow
def test_the_reports_unk_count_is_the_tokenizers_own(corpus):
    kind, out, m, _, _ = corpus
    report = json.load(open(os.path.join(out, "report.json")))["tokenizer"]
    unk = m.tokenizer.special_ids["<unk>"]
    in_shards = sum(int((seq == unk).sum()) for seq, _ in samples(out, m))
    assert report["unk_tokens"] == in_shards
    if kind in ("unigram", "bpe", "byte_bpe"):
        assert in_shards == 0  # "<unk>" written in a document is text, never the unknown token
    if kind == "hf_wordpiece":
        assert in_shards > 0  # BERT's [UNK] (id 1, not shardforge's 3) for characters it lacks: counted


@pytest.mark.slow
def test_the_export_gives_the_shards_ids_on_every_document(corpus):
    """transformers' AutoTokenizer on the export folder, sentence by sentence, gives each kept article's ids
    (the planted strings included); each document's piece of a packed sample is a run of them, and together
    the pieces hold every one of them once."""
    from transformers import AutoTokenizer

    kind, out, m, _, hf_dir = corpus
    hf = AutoTokenizer.from_pretrained(hf_dir, split_special_tokens=True)  # documents as the build encoded them
    assert not AutoTokenizer.from_pretrained(hf_dir).split_special_tokens  # the default places <mask> (fill-mask)
    expected = {}
    for doc_id, text in clean_texts(out, m).items():
        enc = hf(split_sentences(text), add_special_tokens=False)["input_ids"]
        expected[doc_id] = [i for s in enc for i in s]
    as_text = {k: "," + ",".join(map(str, v)) + "," for k, v in expected.items()}
    eos, covered = m.tokenizer.special_ids["</s>"], 0
    for seq, doc_ids in samples(out, m):
        inner = seq[1:-1]
        pieces = np.split(inner, np.flatnonzero(inner == eos))
        pieces = [pieces[0]] + [p[1:] for p in pieces[1:]]
        for piece, doc_id in zip(pieces, doc_ids, strict=True):
            assert "," + ",".join(map(str, piece.tolist())) + "," in as_text[doc_id], (kind, doc_id)
            covered += len(piece)
    assert covered == sum(len(v) for v in expected.values())
    # And the special tokens a caller places still work as transformers users expect.
    placed = hf(f"Paris is the {hf.mask_token} of France.", split_special_tokens=False)["input_ids"]
    assert placed.count(hf.mask_token_id) == 1 and placed[0] == hf.cls_token_id and placed[-1] == hf.sep_token_id


def word_runs(kind: str, tok, starts: list[bool],  # noqa: ANN001
              sentence: str) -> tuple[list[int], list[tuple[int, int, int, int]]]:
    """(the build's ids of the sentence (``tok``: the corpus's loaded tokenizer, ``starts`` its
    ``word_starts()``), its whole words as (first token, end token, first char, end char)): runs of letter
    tokens that start at a word start and end where a word does."""
    ids = tok.encode([sentence])[0]
    if kind in ("unigram", "bpe"):
        proto = tok.sp.encode(sentence, out_type="proto").pieces
        assert [p.id for p in proto] == ids
        spans, surfaces = [(p.begin, p.end) for p in proto], [p.surface for p in proto]
    else:
        shift = 1 if kind.startswith("hf_") else 0  # hf_json sentences are encoded after a space
        enc = tok.tok.encode(" " * shift + sentence, add_special_tokens=False)
        assert enc.ids == ids
        spans = [(max(a - shift, 0), b - shift) for a, b in enc.offsets]
        surfaces = [sentence[a:b] for a, b in spans]
    runs = []
    for a in range(len(ids)):
        if not (starts[ids[a]] and surfaces[a].strip().isalpha()):
            continue
        b = a + 1
        while b < len(ids) and not starts[ids[b]] and surfaces[b].isalpha() and spans[b][0] == spans[b - 1][1]:
            b += 1
        begin = spans[a][1] - len(surfaces[a].strip())
        end = spans[b - 1][1]
        if sentence[begin:end].isalpha() and not sentence[end:end + 1].isalpha():
            runs.append((a, b, begin, end))
    return ids, runs


@pytest.mark.slow
def test_a_placed_mask_gives_the_ids_around_the_masked_word(corpus):
    """Real sentences, one word each replaced by the mask token placed in the text: the exported tokenizer
    gives the build's ids of the sentence with that word's tokens replaced by the one mask id, the input
    masked-LM training saw. (SentencePiece before: a lone ▁ after the mask, "at the <mask>." as
    ▁at ▁the <mask> ▁ .) An existing model's Metaspace tokenizer (hf_unigram) keeps its own rule, a ▁
    before whatever follows a placed token: checked where a space follows the word."""
    from transformers import AutoTokenizer

    kind, out, m, data, hf_dir = corpus
    hf = AutoTokenizer.from_pretrained(hf_dir)
    mask_text, mask_id = (m.tokenizer.special_tokens or {}).get("<mask>", "<mask>"), m.tokenizer.special_ids["<mask>"]
    sentences = [s for d in news_documents()[100:160] for s in split_sentences(d)]
    checked = ties = 0
    tok = load_tokenizer(data)
    # This tokenizer's own table: one cached by id() could be an earlier, freed tokenizer's whose id() this
    # one reused (a clean-clone CI run's byte-level BPE check failed so, on another kind's word starts).
    starts = tok.word_starts()
    for n, sentence in enumerate(sentences):
        ids, runs = word_runs(kind, tok, starts, sentence)
        if not runs:
            continue
        if hf(sentence, add_special_tokens=False)["input_ids"] != ids:
            # A unigram's exact tie between two segmentations of a word ("4,000": 0+00 or 00+0), which
            # sentencepiece's float32 sums and tokenizers' float64 ones may break apart: not about the mask.
            ties += 1
            continue
        a, b, begin, end = runs[n % len(runs)]
        if kind == "hf_unigram" and sentence[end:end + 1] not in ("", " "):
            continue
        masked = sentence[:begin] + mask_text + sentence[end:]
        want = ids[:a] + [mask_id] + ids[b:]
        got = hf(masked, add_special_tokens=False, split_special_tokens=False)["input_ids"]
        assert got == want, (kind, masked, hf.convert_ids_to_tokens(got), hf.convert_ids_to_tokens(want))
        checked += 1
    assert checked > 300 and ties <= checked // 100 and (ties == 0 or kind == "unigram")
    at_the = hf(f"at the {mask_text}.", add_special_tokens=False, split_special_tokens=False)["input_ids"]
    assert at_the[-2:] == [mask_id, hf.convert_tokens_to_ids(".")] or kind == "hf_unigram"


def test_sentencepiece_cuts_a_special_string_after_its_first_character():
    """The one rule of every kind, on a small trained model: a planted "<mask>" is "<" and then "mask>" as
    text, whether sentencepiece would match it (<mask> is a user-defined piece) or not (</s>, <0x41>);
    text without such strings keeps the library's ids."""
    import sentencepiece as spm

    from pipelines.tokenizer.train import train_sentencepiece

    sents = [s for d in news_documents(80) for s in split_sentences(d)]
    model = train_sentencepiece(sents, TokenizerConfig(model_type="unigram", vocab_size=1000))
    sp, tok = spm.SentencePieceProcessor(model_proto=model), load_tokenizer(model)
    assert sp.encode("the <mask> sat")[2] == 4  # the library alone: a literal <mask> is the mask id
    for text in PLANTED:
        ids = tok.encode([text])[0]
        assert not set(ids) & {0, 1, 2, 4} and tok.decode(ids) == sp.decode(sp.encode(text)), text
    cut, left = tok.encode(["at the <mask>."])[0], sp.encode("at the <")
    assert cut[:len(left)] == left and sp.decode(cut) == "at the <mask>."  # "▁at▁the▁<" | "mask>."
    held_out = [s for d in news_documents()[100:200] for s in split_sentences(d)]
    assert tok.encode(held_out) == sp.encode(held_out)
