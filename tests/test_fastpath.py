"""Every fast path gives the plain path's losses and gradients (checked on CPU, so CI guards it).

- no mask (full-length batches) vs the masked path;
- unpadded (packed tokens, varlen attention through nested tensors) vs padded, on ragged batches, for
  every variant (RoBERTa, ALBERT sharing + factorized embedding + sentence heads, SpanBERT SBO) and
  both LM heads;
- torch.compile vs eager (dynamo + AOTAutograd on every variant and path; inductor's generated C++ on one);
- the fp16 loss scaler (exact unscaled step; an inf gradient skips the step and halves the scale);
- LAMB's multi-tensor form vs its per-tensor loop;
- the CUDA-only checks at the end (flash kernel eligibility, fused optimizers, bf16 / fp16 on the GPU)
  run where a GPU is present (``bash benchmarks/gpu.sh`` runs them).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from schemas import PAD_ID
from schemas.config import ModelConfig, OptimConfig
from trainer.attention import plan
from trainer.masking import IGNORE_INDEX
from trainer.model import Encoder, Unpadded, attention_inputs, unpad
from trainer.optim import Lamb, build_optimizer
from trainer.precision import Precision, compile_enabled, maybe_compile, resolve_dtype

V = 120
REPO = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs CUDA (run by benchmarks/gpu.sh)")

VARIANTS = {
    "roberta": {},
    "albert": {"embedding_size": 32, "share": "all", "sentence_head": "sop"},
    "spanbert": {"span_boundary": True},
    "albert_sbo_nsp": {"embedding_size": 16, "share": "attention", "sentence_head": "nsp", "span_boundary": True},
}
LENGTHS = (24, 17, 5, 21)  # ragged rows; the longest is the batch's L


def model(variant: str, seed: int = 0, device: str = "cpu", **kw) -> Encoder:
    torch.manual_seed(seed)
    return Encoder(ModelConfig(dropout=0.0, **{**VARIANTS[variant], **kw}), V).to(device)


def batch(lengths: tuple[int, ...] = LENGTHS, seed: int = 1, pair: bool = True) -> dict[str, torch.Tensor]:
    """Right-padded rows `<s> ... </s>` with ~20% labels, in-row span boundaries (as the masker keeps
    them), segment ids and sentence labels."""
    g = torch.Generator().manual_seed(seed)
    B, L = len(lengths), max(lengths)
    ids = torch.randint(5, V, (B, L), generator=g)
    mask = (torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]).long()
    ids[:, 0] = 0
    ids[mask == 0] = PAD_ID
    picked = (torch.rand(B, L, generator=g) < 0.2) & (mask == 1)
    picked[:, 0] = False
    picked[0, 5] = True
    labels = torch.where(picked, ids, torch.full_like(ids, IGNORE_INDEX))
    pos = torch.arange(L).expand(B, L)
    last = (torch.tensor(lengths) - 1)[:, None]
    left = (pos - 1 - torch.randint(0, 3, (B, L), generator=g)).clamp(min=0)
    right = torch.minimum(pos + 1 + torch.randint(0, 3, (B, L), generator=g), last)
    out = {"input_ids": ids, "attention_mask": mask, "labels": labels,
           "span_left": torch.where(picked, left, -1), "span_right": torch.where(picked, right, -1)}
    if pair:
        tt = (pos >= torch.tensor(lengths)[:, None] // 2).long() * mask
        out["token_type_ids"] = tt
        out["sentence_labels"] = torch.arange(B) % 2
    return out


def inputs_for(m: Encoder, b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch's keys the model's heads use (sentence inputs only with a sentence head)."""
    if m.sentence_head is None:
        return {k: v for k, v in b.items() if k not in ("token_type_ids", "sentence_labels")}
    return dict(b)


def loss_and_grads(m: torch.nn.Module, kw: dict) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    for p in m.parameters():
        p.grad = None
    out = m(**kw)
    out["loss"].backward()
    params = m._orig_mod.named_parameters() if hasattr(m, "_orig_mod") else m.named_parameters()
    return ({k: v.detach().float() for k, v in out.items()},
            {n: p.grad.clone() for n, p in params if p.grad is not None})


def assert_same(a: tuple[dict, dict], b: tuple[dict, dict], atol: float = 1e-5, rtol: float = 1e-4) -> None:
    (out_a, g_a), (out_b, g_b) = a, b
    assert set(out_a) == set(out_b)
    for k in out_a:
        torch.testing.assert_close(out_b[k], out_a[k], atol=atol, rtol=rtol, msg=k)
    assert set(g_a) == set(g_b) and g_a
    for n in g_a:
        torch.testing.assert_close(g_b[n], g_a[n], atol=atol, rtol=rtol, msg=n)


# ------------------------------------------------------------------ layout


def test_unpad_layout_of_a_ragged_mask() -> None:
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    u = unpad(mask)
    assert u.indices.tolist() == [0, 1, 2, 4, 8, 9, 10, 11]
    assert u.offsets.tolist() == [0, 3, 4, 8] and u.max_seqlen == 4
    assert u.packed_index.tolist() == [0, 1, 2, -1, 3, -1, -1, -1, 4, 5, 6, 7]
    with pytest.raises(ValueError, match="no real tokens"):
        unpad(torch.tensor([[1, 1], [0, 0]]))


def test_attention_inputs_picks_the_path_from_the_host_mask() -> None:
    b = batch()
    kw = {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]}
    ragged = attention_inputs(kw, b["attention_mask"], torch.device("cpu"))
    assert isinstance(ragged["unpadded"], Unpadded) and ragged["attention_mask"] is kw["attention_mask"]
    kept = attention_inputs(kw, b["attention_mask"], torch.device("cpu"), unpadded=False)
    assert "unpadded" not in kept and kept["attention_mask"] is kw["attention_mask"]
    full = torch.ones(3, 8, dtype=torch.long)
    dense = attention_inputs({"attention_mask": full}, full, torch.device("cpu"))
    assert dense["attention_mask"] is None and "unpadded" not in dense
    assert kw["attention_mask"] is b["attention_mask"]  # the caller's dict is not changed


# ------------------------------------------------------------------ exact equivalence


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_no_mask_path_matches_masked_path_on_full_batches(variant: str) -> None:
    b = batch(lengths=(16, 16, 16))
    m = model(variant)
    kw = inputs_for(m, b)
    plain = loss_and_grads(m, kw)
    fast = loss_and_grads(m, attention_inputs(kw, b["attention_mask"], torch.device("cpu")))
    assert_same(plain, fast, atol=1e-6, rtol=1e-5)
    if m.sbo_head is not None:
        assert plain[0]["sbo_count"] > 0


@pytest.mark.parametrize("masked_only", [True, False])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_unpadded_path_matches_padded_path_on_ragged_batches(variant: str, masked_only: bool) -> None:
    b = batch()
    m = model(variant, masked_only_head=masked_only)
    kw = inputs_for(m, b)
    plain = loss_and_grads(m, kw)
    fast_kw = attention_inputs(kw, b["attention_mask"], torch.device("cpu"))
    assert "unpadded" in fast_kw
    fast = loss_and_grads(m, fast_kw)
    assert_same(plain, fast)
    # Each head really ran: its loss and count are in the output.
    if m.sentence_head is not None:
        assert plain[0]["sentence_count"] == len(LENGTHS)
    if m.sbo_head is not None:
        assert plain[0]["sbo_count"] > 0


@pytest.mark.parametrize("variant", ["roberta", "albert_sbo_nsp"])
def test_unpadded_logits_match_padded_logits_at_real_positions(variant: str) -> None:
    b = batch()
    m = model(variant).eval()
    kw = {k: v for k, v in inputs_for(m, b).items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        plain = m(**kw)
        fast = m(**kw, unpadded=unpad(b["attention_mask"]))
    real = b["attention_mask"].bool()
    torch.testing.assert_close(fast["logits"][real], plain["logits"][real], atol=1e-5, rtol=1e-5)
    assert fast["logits"].shape == plain["logits"].shape
    if m.sentence_head is not None:
        torch.testing.assert_close(fast["sentence_logits"], plain["sentence_logits"], atol=1e-5, rtol=1e-5)


def test_padding_changes_nothing_on_the_unpadded_path() -> None:
    """The same rows with extra padding columns: identical packed computation, identical loss."""
    b = batch(pair=False)
    extra = {k: F.pad(v, (0, 6), value=(PAD_ID if k == "input_ids" else -1 if k.startswith("span") else
                                        IGNORE_INDEX if k == "labels" else 0)) for k, v in b.items()}
    m = model("spanbert")
    a = m(**b, unpadded=unpad(b["attention_mask"]))
    c = m(**extra, unpadded=unpad(extra["attention_mask"]))
    for k in ("loss", "mlm_loss", "sbo_loss"):
        torch.testing.assert_close(c[k], a[k], atol=1e-6, rtol=1e-6)


def test_unpadded_path_with_dropout_trains_and_matches_in_eval_mode() -> None:
    b = batch()
    torch.manual_seed(0)
    m = Encoder(ModelConfig(dropout=0.2, **VARIANTS["albert_sbo_nsp"]), V)
    fast_kw = attention_inputs(b, b["attention_mask"], torch.device("cpu"))
    out = m(**fast_kw)
    out["loss"].backward()
    assert torch.isfinite(out["loss"]) and all(torch.isfinite(p.grad).all() for p in m.parameters()
                                                if p.grad is not None)
    m.eval()
    with torch.no_grad():
        torch.testing.assert_close(m(**fast_kw)["loss"], m(**b)["loss"], atol=1e-5, rtol=1e-5)


def test_unpadded_path_under_bf16_autocast_is_close() -> None:
    b = batch(pair=False)
    m = model("roberta")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = m(**inputs_for(m, b))["loss"]
        fast = m(**inputs_for(m, b), unpadded=unpad(b["attention_mask"]))["loss"]
    torch.testing.assert_close(fast.float(), plain.float(), atol=0.05, rtol=0.01)


# ------------------------------------------------------------------ torch.compile


def compiled_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@pytest.mark.slow  # 10-15 s per variant on 2 shared cores
@pytest.mark.parametrize("variant", ["albert", "albert_sbo_nsp"])  # between them: every option
def test_compile_matches_eager_on_every_path(variant: str) -> None:
    """dynamo + AOTAutograd (the graphs inductor would lower) on the masked, no-mask and unpadded paths."""
    torch._dynamo.reset()
    eager = model(variant)
    compiled = maybe_compile(model(variant), True, torch.device("cpu"), backend="aot_eager")
    assert compiled is not eager and hasattr(compiled, "_orig_mod")
    ragged, full = batch(), batch(lengths=(12, 12, 12))
    for b, how in ((ragged, "masked"), (ragged, "unpadded"), (full, "no mask")):
        kw = inputs_for(eager, b)
        if how != "masked":
            kw = attention_inputs(kw, b["attention_mask"], torch.device("cpu"))
            assert ("unpadded" in kw) == (how == "unpadded")
        assert_same(loss_and_grads(eager, kw), loss_and_grads(compiled, kw), atol=2e-5, rtol=1e-4)
    assert compiled_graphs() >= 3  # really compiled, not silently eager


@pytest.mark.slow  # ~30 s on 2 busy cores: inductor compiles the forward and backward kernels with gcc
def test_inductor_compile_matches_eager_on_the_unpadded_path() -> None:
    """inductor's generated C++ (needs a C compiler; this machine has gcc) on the most involved variant,
    its unpadded batch given as the trainer gives it to a compiled model (trainer.batch.forward): the
    kernel a compiled model gets (``plan``) and the bound on predictions, so one graph, no break.

    Its kernels and wrapper are one C++ file a graph (inductor's ``cpp_wrapper``): the same lowering and
    kernels as the Python wrapper's one file a kernel, in a third less compile time (gcc parses the
    headers twice, not once a kernel); the graphs dynamo captures are the same either way."""
    import torch._inductor.config as inductor_config
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    eager = model("albert_sbo_nsp")
    compiled = maybe_compile(model("albert_sbo_nsp"), True, torch.device("cpu"))
    b = batch()
    kw = attention_inputs(inputs_for(eager, b), b["attention_mask"], torch.device("cpu"))
    kw, choice = plan(kw, eager.dims.heads, eager.dims.head_dim, 0.0, torch.device("cpu"), torch.float32,
                      compiled=True)
    assert choice.backend == "dense", choice
    bound = {**kw, "predictions": 64}  # >= the batch's labels, as Masker.prediction_bound rounds
    with inductor_config.patch(cpp_wrapper=True):
        assert_same(loss_and_grads(eager, kw), loss_and_grads(compiled, bound), atol=2e-5, rtol=1e-4)
    assert compiled_graphs() == 1 and not counters["graph_break"], dict(counters["graph_break"])


def test_compile_setting() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert compile_enabled("auto", cuda) and not compile_enabled("auto", cpu)
    assert compile_enabled(True, cpu) and not compile_enabled(False, cuda)
    m = model("roberta")
    assert maybe_compile(m, "auto", cpu) is m and maybe_compile(m, False, cpu) is m


# ------------------------------------------------------------------ precision and the fp16 scaler


def test_precision_resolution() -> None:
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) is None and resolve_dtype("fp32", cpu) is None
    assert resolve_dtype("bf16", cpu) is torch.bfloat16 and resolve_dtype("fp16", cpu) is torch.float16
    assert Precision("auto", cpu).name == "fp32" and not Precision("bf16", cpu).scaler.is_enabled()
    assert Precision("fp16", cpu).scaler.is_enabled()
    if CUDA:
        want = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        assert resolve_dtype("auto", torch.device("cuda")) is want


def _step(prec: Precision, m: Encoder, kw: dict, clip: float | None) -> tuple[bool, torch.Tensor]:
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    prec.backward(m(**kw)["loss"])
    stepped = prec.step(opt, m.parameters(), clip)
    return stepped, torch.cat([p.detach().reshape(-1) for p in m.parameters()])


@pytest.mark.parametrize("clip", [None, 0.05])
def test_fp16_scaler_step_equals_the_plain_step(clip: float | None) -> None:
    """The scaled loss (x 2^16, a power of two) unscales exactly: same clipped update as fp32."""
    b = batch(pair=False)
    kw = inputs_for(model("roberta"), b)
    plain, scaled = Precision("fp32", torch.device("cpu")), Precision("fp16", torch.device("cpu"))
    ok_a, after_a = _step(plain, model("roberta"), kw, clip)
    ok_b, after_b = _step(scaled, model("roberta"), kw, clip)
    assert ok_a and ok_b and scaled.skipped_steps == 0
    torch.testing.assert_close(after_b, after_a, atol=1e-7, rtol=0)
    assert scaled.scaler.get_scale() == 2.0**16


def test_fp16_scaler_skips_the_step_on_inf_and_halves_the_scale(tmp_path) -> None:
    b = batch(pair=False)
    m = model("roberta")
    kw = inputs_for(m, b)
    prec = Precision("fp16", torch.device("cpu"), growth_interval=2)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    before = [p.detach().clone() for p in m.parameters()]
    prec.backward(m(**kw)["loss"])
    m.lm_head.bias.grad[3] = float("inf")  # an fp16 overflow in one gradient
    assert prec.step(opt, m.parameters(), 1.0) is False
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), before, strict=True))  # nothing moved
    assert prec.scaler.get_scale() == 2.0**15 and prec.skipped_steps == 1
    # Finite gradients step again; growth_interval good steps double the scale back.
    for _ in range(2):
        opt.zero_grad()
        prec.backward(m(**kw)["loss"])
        assert prec.step(opt, m.parameters(), 1.0) is True
    assert prec.scaler.get_scale() == 2.0**16
    assert not all(torch.equal(p, q) for p, q in zip(m.parameters(), before, strict=True))
    # The scale survives a checkpoint (weights_only load, as the trainer does).
    torch.save({"scaler": prec.state_dict()}, tmp_path / "s.pt")
    other = Precision("fp16", torch.device("cpu"))
    other.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True)["scaler"])
    assert other.scaler.get_scale() == prec.scaler.get_scale()
    Precision("bf16", torch.device("cpu")).load_state_dict(prec.state_dict())  # ignored without a scaler


def test_fp16_autocast_forward_on_cpu() -> None:
    b = batch(pair=False)
    m = model("spanbert")
    prec = Precision("fp16", torch.device("cpu"))
    with prec.autocast():
        out = m(**inputs_for(m, b), unpadded=unpad(b["attention_mask"]))
    assert torch.isfinite(out["loss"])
    prec.backward(out["loss"])
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


# ------------------------------------------------------------------ optimizers


def test_lamb_foreach_matches_the_per_tensor_loop() -> None:
    def params() -> list[torch.nn.Parameter]:
        torch.manual_seed(0)
        return [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.zeros(3)),
                torch.nn.Parameter(torch.randn(7))]

    a, b = params(), params()
    groups = lambda ps: [{"params": ps[:2], "weight_decay": 0.01}, {"params": ps[2:], "weight_decay": 0.0}]  # noqa: E731
    loop, multi = Lamb(groups(a), lr=1e-2, foreach=False), Lamb(groups(b), lr=1e-2, foreach=True)
    for s in range(6):
        g = torch.Generator().manual_seed(s)
        for pa, pb in zip(a, b, strict=True):
            grad = torch.randn(pa.shape, generator=g)
            pa.grad, pb.grad = grad.clone(), grad.clone()
        if s == 3:
            a[2].grad = b[2].grad = None  # a tensor without a gradient this step is left alone
        loop.step()
        multi.step()
    for pa, pb in zip(a, b, strict=True):
        torch.testing.assert_close(pb, pa, atol=1e-7, rtol=0)
    assert multi.state[b[2]]["step"] == 5 and multi.state[b[0]]["step"] == 6
    assert not torch.equal(b[1], torch.zeros(3))  # the zero-init bias moved (trust ratio 1)


def test_build_optimizer_multi_tensor_forms_follow_the_device() -> None:
    m = model("roberta")
    lamb = build_optimizer(m, OptimConfig(name="lamb"))
    assert all(g["foreach"] is False for g in lamb.param_groups)  # CPU: the loop
    adamw = build_optimizer(m, OptimConfig())
    assert not adamw.param_groups[0]["fused"]


# ------------------------------------------------------------------ CUDA only (benchmarks/gpu.sh)


@needs_cuda
def test_cuda_fused_adamw_and_foreach_lamb() -> None:
    m = model("roberta", device="cuda")
    assert build_optimizer(m, OptimConfig()).param_groups[0]["fused"] is True
    assert all(g["foreach"] for g in build_optimizer(m, OptimConfig(name="lamb")).param_groups)


@needs_cuda
@pytest.mark.parametrize("path", ["no mask", "unpadded"])
def test_cuda_fast_paths_run_on_the_flash_kernel(path: str) -> None:
    """With SDPA restricted to flash attention, the fast paths still run (a mask would rule flash out)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b = batch(lengths=(64, 64) if path == "no mask" else (64, 40, 17), pair=False)
    b = {k: v.cuda() for k, v in b.items()}
    torch.manual_seed(0)
    m = Encoder(ModelConfig(size="tiny", hidden=128, heads=2, dropout=0.1), V).cuda()
    kw = attention_inputs(b, b["attention_mask"].cpu(), torch.device("cuda"))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), torch.autocast("cuda", dtype=torch.bfloat16):
        out = m(**kw)
    out["loss"].backward()
    assert torch.isfinite(out["loss"])
    if path == "no mask":  # the masked path cannot use flash: the restriction is real
        with pytest.raises(RuntimeError), sdpa_kernel(SDPBackend.FLASH_ATTENTION), \
                torch.autocast("cuda", dtype=torch.bfloat16):
            m(**b)


@needs_cuda
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cuda_unpadded_matches_padded(variant: str) -> None:
    b = {k: v.cuda() for k, v in batch().items()}
    m = model(variant, device="cuda")
    kw = inputs_for(m, b)
    plain = loss_and_grads(m, kw)
    fast = loss_and_grads(m, attention_inputs(kw, b["attention_mask"].cpu(), torch.device("cuda")))
    assert_same(plain, fast, atol=1e-4, rtol=1e-3)


@needs_cuda
def test_cuda_compile_matches_eager() -> None:
    torch._dynamo.reset()
    b = {k: v.cuda() for k, v in batch().items()}
    eager = model("albert_sbo_nsp", device="cuda")
    compiled = maybe_compile(model("albert_sbo_nsp", device="cuda"), "auto", torch.device("cuda"))
    for kw in (inputs_for(eager, b), attention_inputs(inputs_for(eager, b), b["attention_mask"].cpu(),
                                                      torch.device("cuda"))):
        assert_same(loss_and_grads(eager, kw), loss_and_grads(compiled, kw), atol=1e-4, rtol=1e-3)


@needs_cuda
def test_cuda_fp16_training_steps() -> None:
    b = {k: v.cuda() for k, v in batch(pair=False).items()}
    m = model("spanbert", device="cuda")
    prec = Precision("fp16", torch.device("cuda"))
    opt = build_optimizer(m, OptimConfig())
    first = None
    for _ in range(20):
        opt.zero_grad()
        with prec.autocast():
            out = m(**attention_inputs(b, b["attention_mask"].cpu(), torch.device("cuda")))
        prec.backward(out["loss"])
        prec.step(opt, m.parameters(), 1.0)
        first = first if first is not None else out["loss"].item()
    assert out["loss"].item() < first


# ------------------------------------------------------------------ the GPU benchmark cannot rot


@pytest.mark.slow  # ~50 s of CPU (a Beam corpus build, two trainer runs, 18 tiny rows, one inductor compile)
def test_bench_gpu_dry_run_runs_every_part_on_cpu(tmp_path) -> None:
    """benchmarks/gpu.sh --dry-run: every part of the GPU run at tiny sizes on CPU, the results written."""
    out = tmp_path / "gpu.md"
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu.sh"), "--dry-run", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text()
    for part in ("FULL-SENTENCES", "DOC-SENTENCES", "masked-only", "full head", "| eager |", "| compile |",
                 "| compile+cudagraphs |", "| compile+compiled AdamW |", "| eager+cuDNN attention |",
                 "| compile+cuDNN attention |", "| compile by layers |", "| eager+no dropout |",
                 "| compile+no attention dropout |", "| eager+activation checkpointing |",
                 "Levers against the rows they change",
                 "| tiny | FULL-SENTENCES | masked-only | cudagraphs | compile |", "Masking", "Data wait", "peak memory",
                 "RobertaForMaskedLM", "dry run", "Micro-batch sweep", "Profile: tiny FULL-SENTENCES masked-only "
                 "eager", "Profile: tiny FULL-SENTENCES masked-only compile", "Attention kernels chosen"):
        assert part in text, part
    # Every configuration measured something (no row left empty), and both worker counts ran.
    steps = text.split("## Training step", 1)[1].split("\n## ", 1)[0]  # the step table's section
    rows = [line for line in steps.splitlines() if line.startswith("| tiny |")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in rows]
    assert len(rows) == 18 and all(c[4] != "—" and float(c[4]) > 0 for c in cells), rows
    # Every row but the cuDNN ones (whose note names the kernel: on a CPU torch picks) and the dropout levers
    # (whose note says which dropout is off) has an empty note.
    assert all(not c[-1] for c in cells if "cuDNN" not in c[3] and "dropout" not in c[3]), rows
    assert all(c[-1].startswith("attention: cudnn refused the shape") for c in cells if "cuDNN" in c[3]), rows
    levers = {c[3]: c[-1].split(" (")[0] for c in cells if "dropout" in c[3]}
    assert levers == {f"{how}+no {what}dropout": f"{what}dropout 0" for how in ("eager", "compile")
                      for what in ("", "attention ")}, levers
    assert "\n| 1 |" in text and "\n| 2 |" in text
    assert "Parts that failed" not in text and "Parts not run" not in text
    # Masking: both forms of every scheme, the same masks; the compiled token scheme in at most 10 kernels.
    masking = {(m[0], m[1]): int(m[2]) for m in re.findall(
        r"^\| (\w+) \| (reference|fused) \| [\d.]+ \| [\d.]+% \| [\d.]+% \| (\d+) \| .* \| yes \|$", text, re.M)}
    assert len(masking) == 8, masking
    assert masking[("span", "reference")] > masking[("token", "reference")] > 50
    assert 1 <= masking[("token", "fused")] <= 10
    sweep = re.findall(r"^\| (\d) \| (\d) \| [\d.]+ \|", text, re.M)
    assert sweep == [("1", "4"), ("2", "2"), ("4", "1")], sweep


def test_bench_gpu_on_a_machine_without_a_gpu_says_so() -> None:
    """A CPU test: its name stays out of the "cuda" selection gpu.sh runs as the CUDA-only tests."""
    if CUDA:
        pytest.skip("a GPU is present: the script measures instead")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_gpu.py")], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------ the trainer's hooks


def _train_cfg(data: str, out: str, **kw) -> object:
    from schemas.config import TrainConfig

    base = {"data": data, "output": out, "steps": 3, "tokens_per_batch": 600, "device": "cpu", "resume": False,
            "model": {"size": "tiny", "dropout": 0.0}, "log_every": 1, "shuffle_buffer": 16, "seed": 3}
    return TrainConfig.model_validate({**base, **kw})


@pytest.mark.slow
def test_trainer_unpadded_run_matches_padded_run_and_fp16_checkpoints_its_scale(small_corpus, tmp_path,
                                                                                monkeypatch) -> None:
    """Through trainer.train: ragged token-budget batches give the same losses unpadded as padded; an fp16
    run steps and saves its loss scale."""
    import trainer.batch as batch_module
    from trainer.checkpoint import load_latest_checkpoint
    from trainer.loader import ShardLoader
    from trainer.loggers import read_metrics
    from trainer.train import train

    root, _ = small_corpus
    loader = ShardLoader(root, "train", batch_size=None, tokens_per_batch=600, seed=3, shuffle_buffer=16)
    it = iter(loader)
    masks = [next(it)["attention_mask"] for _ in range(3)]
    it.close()
    assert any(not bool(m.all()) for m in masks)  # the batches really are ragged

    # Record which path the trainer's hook picked (the real function still does the work).
    paths: list[str] = []

    def spy(kw: dict, host_mask: torch.Tensor, device: torch.device, unpadded: bool = True, bucket: int = 0) -> dict:
        out = attention_inputs(kw, host_mask, device, unpadded, bucket=bucket)
        paths.append("unpadded" if "unpadded" in out else "no mask" if out["attention_mask"] is None else "masked")
        return out

    monkeypatch.setattr(batch_module, "attention_inputs", spy)
    fast, plain = str(tmp_path / "unpad"), str(tmp_path / "padded")
    train(_train_cfg(root, fast))
    assert "unpadded" in paths and "masked" not in paths
    paths.clear()
    train(_train_cfg(root, plain, unpad=False))
    assert "masked" in paths and "unpadded" not in paths
    a, b = read_metrics(fast), read_metrics(plain)
    assert len(a) == len(b) == 3
    for ra, rb in zip(a, b, strict=True):
        assert ra["loss"] == pytest.approx(rb["loss"], abs=1e-4) and ra["mlm_acc"] == rb["mlm_acc"]

    half = str(tmp_path / "fp16")
    res = train(_train_cfg(root, half, precision="fp16"))
    assert res["steps"] == 3 and all(r["loss"] == r["loss"] for r in read_metrics(half))
    _, state = load_latest_checkpoint(half)
    assert state["scaler"]["scale"] > 0
