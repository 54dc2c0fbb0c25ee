"""Running out of memory is one line that says what did not fit and what to give instead (trainer/memory.py).

The CLI test runs out of memory for real: the trainer in a process whose address space is capped
(RLIMIT_AS), so torch's CPU allocator fails as it does on a full host. Measured peaks of address space
(VmPeak) on the test corpus: the tiny model 1.1 GiB; with a 65,536-wide feed-forward layer 4.2 GiB in
micro-batches of 32 rows and 1.9 GiB in micro-batches of 4; the cap is 3 GiB. CUDA's allocator cannot fail on a machine without a GPU: the
lines for its error text (``torch.OutOfMemoryError``, as torch 2.13 words it) are checked directly.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from schemas.config import TrainConfig
from trainer.memory import asked_bytes, device_memory, is_out_of_memory, out_of_memory_line

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
CAP = 3 << 30
CUDA_TEXT = ("CUDA out of memory. Tried to allocate 3.07 GiB. GPU 0 has a total capacity of 22.05 GiB of which "
             "1.12 GiB is free. Including non-PyTorch memory, this process has 20.92 GiB memory in use. Of the "
             "allocated memory 19.80 GiB is allocated by PyTorch, and 0.71 GiB is reserved by PyTorch but "
             "unallocated. If reserved but unallocated memory is large try setting "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
A10G = ("cuda:0 (NVIDIA A10G, 22.1 GiB)", int(22.1 * 2**30))


def capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def train_capped(corpus: str, out: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer.train", "--data", corpus, "--output", str(out),
                           "--device", "cpu", "--set", "model.size=tiny", "--steps", "1", *flags],
                          preexec_fn=capped, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)


def last_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stderr.strip().splitlines()[-1]


@pytest.mark.slow  # three trainer processes (~20 s)
def test_a_step_or_a_model_that_does_not_fit_is_one_line_and_the_smaller_batch_runs(small_corpus,
                                                                                  tmp_path) -> None:
    corpus, manifest = small_corpus
    wide = ("--set", "model.intermediate=65536")
    line = last_line(train_capped(corpus, tmp_path / "a", "--batch_size", "32", *wide))
    assert re.fullmatch(
        r"error: out of memory on the CPU \(host memory\) at step 1 \(1 micro-batch of 32 sequences of up to "
        rf"{manifest.max_seq_len} tokens a step; torch tried to allocate [\d.]+ GiB\); weights, gradients and "
        r"optimizer state take ~0\.\d GiB, the rest is activations: give --batch_size 16 --gradient_accumulation 2 "
        r"\(the same global batch in twice the micro-batches\); or --activation_checkpointing \(the same "
        r"micro-batch, its activations recomputed: about a third more compute\)", line), line
    # Smaller micro-batches fit under the same cap.
    ok = train_capped(corpus, tmp_path / "b", "--batch_size", "4", "--gradient_accumulation", "2",
                      "--set", "eval_batches=1", *wide)
    assert ok.returncode == 0, ok.stderr[-3000:]
    # A model whose weights alone pass the cap: set-up, before any step.
    line = last_line(train_capped(corpus, tmp_path / "c", "--set", "model.hidden=8192", "--set", "model.heads=64",
                                  "--set", "model.intermediate=32768"))
    assert re.fullmatch(r"error: out of memory on the CPU \(host memory\) setting up the run, before step 1 \(torch "
                        r"tried to allocate [\d.]+ GiB\): the model and its checkpoint do not fit; a smaller model "
                        r"\(--model_size, --recipe\) or a device with more memory", line), line


def test_an_allocators_failure_is_found_through_the_errors_that_wrap_it() -> None:
    cuda = torch.OutOfMemoryError(CUDA_TEXT)
    try:
        torch.empty(1 << 62, dtype=torch.uint8)
    except RuntimeError as e:
        cpu = e
    assert is_out_of_memory(cuda) and is_out_of_memory(cpu)
    assert asked_bytes(cuda) == "3.07 GiB" and re.fullmatch(r"\d+\.\d\d GiB", asked_bytes(cpu) or ""), asked_bytes(cpu)
    try:  # a compiled step's error keeps what the allocator raised as its cause
        try:
            raise cuda
        except torch.OutOfMemoryError as inner:
            raise RuntimeError("backend compiler failed") from inner
    except RuntimeError as outer:
        assert is_out_of_memory(outer)
    assert not is_out_of_memory(RuntimeError("Expected all tensors to be on the same device"))
    assert device_memory(torch.device("cpu")) == ("the CPU (host memory)", None)


def cfg(**kw) -> TrainConfig:
    return TrainConfig.model_validate({"data": "c", **kw})


@pytest.mark.parametrize("config, accum, fix", [
    ({"batch_size": 128, "global_batch_sequences": 256}, 2,
     "give --batch_size 64 (gradient accumulation keeps the global batch of 256 sequences)"),
    ({"batch_size": 32, "global_batch_tokens": 131072}, 8,
     "give --batch_size 16 (gradient accumulation keeps the global batch of 131072 tokens)"),
    ({"batch_size": 32, "gradient_accumulation": 3, "global_batch_sequences": 256}, 3,
     "give --batch_size 16 --gradient_accumulation 6 (the same global batch in twice the micro-batches)"),
    ({"batch_size": 8, "tokens_per_batch": 16384}, 1,
     "give --tokens_per_batch 8192 --gradient_accumulation 2 (the same global batch in twice the micro-batches)"),
])
def test_the_line_halves_the_micro_batch_and_keeps_the_global_batch(config, accum, fix) -> None:
    line = out_of_memory_line(torch.OutOfMemoryError(CUDA_TEXT), cfg(**config), A10G, step=1, accum=accum,
                              max_len=512, params=125_000_000)
    rows = (f"{config['tokens_per_batch']} tokens" if "tokens_per_batch" in config
            else f"{config['batch_size']} sequences of up to 512 tokens")
    micro = "micro-batch" if accum == 1 else "micro-batches"
    assert line == (f"out of memory on cuda:0 (NVIDIA A10G, 22.1 GiB) at step 1 ({accum} {micro} of {rows} a step; "
                    "torch tried to allocate 3.07 GiB); weights, gradients and optimizer state take ~1.9 GiB, the "
                    f"rest is activations: {fix}; or --activation_checkpointing (the same micro-batch, its "
                    "activations recomputed: about a third more compute)"), line
    # Already recomputing: only the micro-batch is left to halve.
    line = out_of_memory_line(torch.OutOfMemoryError(CUDA_TEXT), cfg(**config, activation_checkpointing=True), A10G,
                              step=1, accum=accum, max_len=512, params=125_000_000)
    assert line.endswith(f"the rest is activations: {fix}"), line


def test_a_model_too_large_for_the_device_and_a_single_row_say_so() -> None:
    e = torch.OutOfMemoryError(CUDA_TEXT)
    line = out_of_memory_line(e, cfg(batch_size=16), A10G, step=1, max_len=512, params=1_300_000_000)
    assert line.endswith("a step; torch tried to allocate 3.07 GiB): the 1300M parameters' weights, gradients and "
                         "optimizer state alone take ~19.4 GiB of its 22.1 GiB; a smaller model (--model_size, "
                         "--recipe) or a device with more memory"), line
    line = out_of_memory_line(e, cfg(batch_size=1), A10G, step=7, max_len=512, params=355_000_000, evaluating=True)
    assert line.startswith("out of memory on cuda:0 (NVIDIA A10G, 22.1 GiB) in the evaluation after step 6 (1 "
                           "micro-batch of 1 sequence of up to 512 tokens a step"), line
    assert line.endswith(": even one row does not fit; a smaller model (--model_size, --recipe), shorter sequences "
                         "(shardforge repack --max_seq_len), --precision bf16 or a device with more memory"), line
    # In a training step, recomputing the activations is one more way out.
    line = out_of_memory_line(e, cfg(batch_size=1), A10G, step=7, max_len=512, params=355_000_000)
    assert line.endswith("--precision bf16, --activation_checkpointing or a device with more memory"), line
