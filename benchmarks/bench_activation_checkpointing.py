"""Benchmark: activation checkpointing (``--activation_checkpointing``) against transformers' own
(``RobertaForMaskedLM.gradient_checkpointing_enable()``, what run_mlm's ``--gradient_checkpointing`` turns on).

For each model, with it off and on, on the same batch: the bytes of the activations autograd keeps for
the backward pass during one forward (saved tensors, each storage counted once, the parameters left
out), and the CPU time of one training step (forward + backward + AdamW), interleaved rounds, median.
What a GPU saves in peak memory and pays in step time is for benchmarks/gpu.sh; on CPU the kept
activations are the memory that checkpointing trades for recomputation.
Writes benchmarks/results/activation_checkpointing.md.
Run: ``python benchmarks/bench_activation_checkpointing.py [--size small] [--batch 8] [--length 128]``.
"""

from __future__ import annotations

import os
import statistics
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.bench_model import hf_roberta, make_batch, step_fn  # noqa: E402
from benchmarks.common import bench_parser, command_line, interleaved, machine, write_results  # noqa: E402
from schemas.config import ModelConfig  # noqa: E402
from trainer.model import Encoder  # noqa: E402

MIB = 1 << 20


def kept_activations(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> int:
    """Bytes autograd keeps for the backward pass during one forward, parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(**batch)
    return sum(seen.values())


def main() -> None:
    ap = bench_parser(__doc__, "activation_checkpointing")
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ours = {on: Encoder(ModelConfig(size=args.size, dropout=args.dropout), args.vocab) for on in (False, True)}
    ours[True].load_state_dict(ours[False].state_dict())
    ours[True].checkpoint_layers = True
    hf = {on: hf_roberta(ours[False].dims, args.dropout) for on in (False, True)}
    hf[True].load_state_dict(hf[False].state_dict())
    hf[True].gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    batch = make_batch(args.batch, args.length, args.vocab, "cpu")
    models: dict[str, tuple[torch.nn.Module, bool]] = {
        "HF RobertaForMaskedLM": (hf[False], True), "HF RobertaForMaskedLM, gradient checkpointing": (hf[True], True),
        "ours": (ours[False], False), "ours, activation checkpointing": (ours[True], False)}
    kept = {name: kept_activations(m, batch) for name, (m, _) in models.items()}
    fns: dict[str, Callable[[], None]] = {name: step_fn(m, batch, hf=is_hf) for name, (m, is_hf) in models.items()}
    times = interleaved(fns, args.rounds, warmup=1)
    cpu = {name: statistics.median(t.cpu for t in ts) for name, ts in times.items()}
    d = ours[False].dims
    lines = ["# Activation checkpointing", "", f"Machine: {machine('transformers', torch_details=True, load=True)}.", "",
             f"Command: `{command_line()}`", "",
             f"size {args.size} (H {d.hidden}, {d.layers} layers, {d.heads} heads, FFN {d.intermediate}), vocabulary "
             f"{args.vocab}, batch {args.batch} x {args.length}, dropout {args.dropout}, fp32, "
             f"{torch.get_num_threads()} thread(s); {args.rounds} interleaved rounds, median CPU time of a step.", "",
             "| model | kept activations (MiB) | kept, on / off | step CPU s | step, on / off |", "|---|---|---|---|---|"]
    for name in models:
        base = "HF RobertaForMaskedLM" if name.startswith("HF") else "ours"
        lines.append(f"| {name} | {kept[name] / MIB:.1f} | {kept[name] / kept[base]:.3f} | {cpu[name]:.3f} | "
                     f"{cpu[name] / cpu[base]:.3f} |")
    print("\n".join(lines[6:]))
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
