"""Mixing several corpora with weights: deterministic, exactly resumable, realized share logged.

RoBERTa trained on BookCorpus+Wikipedia, CC-News, OpenWebText and Stories at
fixed proportions; fairseq upsamples small sources, MosaicML streaming takes a
``proportion`` or a ``repeat`` per stream. Here each source is a corpus (one
manifest) read by its own ``ShardLoader``, and a schedule picks which source
gives the next micro-batch:

* **Weights are token shares.** ``weight`` is the share of training tokens a
  source should supply (normalized over the sources); ``repeat`` is fairseq's
  upsampling factor, turned into a share by the source's train tokens from its
  manifest (share ∝ repeat × tokens). Both may be mixed in one run.
* **The schedule is smooth weighted round-robin over micro-batches** (nginx's
  upstream balancing): each source earns its batch weight in credit every pick
  and the richest source is picked and pays one. After n picks every source has
  been picked within one batch of n × its weight, with no randomness. A
  source's batch weight is its token share divided by the tokens its batches
  hold on average (from its loader's plan: a corpus whose partitions hold fewer
  samples than a batch gives short batches), so token shares, not batch
  counts, come out right.
* **Every rank follows the same schedule** (it depends only on the pick count),
  so the per-source loaders of all ranks stay in step and their states merge
  for an elastic resume exactly as a single ``ShardLoader``'s do.
* **The state is plain JSON** (credits, per-source token counts, every
  loader's state): a checkpoint resumes on exactly the batches it would have
  seen.

Every source must share the tokenizer (sha256), the packing rule, the sequence
length and the sample members: a batch from any source must mean the same to
the model.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from schemas.config import MixSource
from schemas.errors import UserError
from schemas.manifest import Manifest

log = logging.getLogger(__name__)

MIX_STATE_VERSION = 1


# ------------------------------------------------------------------ plan

@dataclass(frozen=True)
class MixPlan:
    """Who mixes with what weight: names, token shares and per-pick batch weights."""

    names: tuple[str, ...]
    urls: tuple[str, ...]
    token_shares: tuple[float, ...]  # the target share of training tokens, sums to 1
    batch_weights: tuple[float, ...]  # the share of micro-batches that gives those token shares, sums to 1


def source_names(entries: Sequence[MixSource]) -> list[str]:
    """A name per source: its ``name``, else the corpus folder's last path part (made unique)."""
    names: list[str] = []
    for i, e in enumerate(entries):
        base = e.name or e.data.rstrip("/").removesuffix(".json").rstrip("/").rsplit("/", 1)[-1] or f"source{i}"
        if base.startswith("manifest"):
            base = e.data.rstrip("/").rsplit("/", 2)[-2] if e.data.count("/") >= 2 else f"source{i}"
        name, k = base, 2
        while name in names:
            name, k = f"{base}_{k}", k + 1
        names.append(name)
    return names


def check_compatible(manifests: Sequence[Manifest], names: Sequence[str]) -> None:
    """Refuse a mix whose corpora a model cannot read alike (one clear line naming the field)."""
    first = manifests[0]
    for m, name in zip(manifests[1:], names[1:], strict=True):
        for what, a, b in (("tokenizer (sha256)", first.tokenizer.sha256, m.tokenizer.sha256),
                           ("packing rule", first.packing_rule, m.packing_rule),
                           ("max_seq_len", first.max_seq_len, m.max_seq_len),
                           ("sample members", sorted(first.members), sorted(m.members))):
            if a != b:
                raise UserError(f"cannot mix {names[0]!r} and {name!r}: the {what} differs ({a} vs {b}); "
                                "build every source with the same tokenizer (a build's --tokenizer may name the "
                                "first corpus: it reuses that corpus's) and packing (--rule, --max_seq_len)")


def plan_mix(entries: Sequence[MixSource], manifests: Sequence[Manifest], batch_tokens: Sequence[float | None], *,
             split: str = "train") -> MixPlan:
    """Token shares from weights and repeat factors; batch weights that realize them, from the real tokens
    each source's batches hold on average (``Plan.batch_tokens`` of its loader; None: an empty split)."""
    if not entries:
        raise UserError("a mix needs at least one source")
    names = source_names(entries)
    check_compatible(manifests, names)
    raw = []
    for e, m in zip(entries, manifests, strict=True):
        tokens = m.totals["train"].tokens if "train" in m.totals else 0
        raw.append(e.weight if e.weight is not None else (e.repeat or 0.0) * tokens)
    has_w = [e.weight is not None for e in entries]
    if any(has_w) and not all(has_w):
        # Mixed forms: a repeat factor gives tokens, a weight a share: put both in tokens.
        total_tokens = sum(m.totals["train"].tokens for m in manifests if "train" in m.totals)
        raw = [r * total_tokens if w else r for r, w in zip(raw, has_w, strict=True)]
    total = sum(raw)
    if not total > 0:
        raise UserError("mix weights must give a positive total (a repeat factor of an empty corpus is 0)")
    shares = [r / total for r in raw]
    held: list[float] = []
    for name, t in zip(names, batch_tokens, strict=True):
        if not t:
            raise UserError(f"mixed corpus {name!r} has no {split!r} samples")
        held.append(float(t))
    bw = [s / t for s, t in zip(shares, held, strict=True)]
    bsum = sum(bw)
    return MixPlan(tuple(names), tuple(e.data for e in entries), tuple(shares), tuple(b / bsum for b in bw))


# ------------------------------------------------------------------ schedule

class WeightedSchedule:
    """Smooth weighted round-robin: deterministic picks whose counts track the weights within one.

    Every pick adds each live source's weight to its credit, picks the largest
    credit (the lowest index on a tie) and takes one from it. Credits sum to 0,
    so after n picks source i was picked within one of n × w_i.
    """

    def __init__(self, weights: Sequence[float]):
        if not weights or any(not (w >= 0 and math.isfinite(w)) for w in weights) or sum(weights) <= 0:
            raise UserError(f"mix weights must be finite, >= 0 and not all 0, got {list(weights)}")
        total = float(sum(weights))
        self.weights = [w / total for w in weights]
        self.credits = [0.0] * len(weights)
        self.picks = [0] * len(weights)
        self.dead: set[int] = set()

    def next(self) -> int:
        live = [i for i in range(len(self.weights)) if i not in self.dead and self.weights[i] > 0]
        if not live:
            raise StopIteration
        norm = sum(self.weights[i] for i in live)
        for i in live:
            self.credits[i] += self.weights[i] / norm
        j = max(live, key=lambda i: (self.credits[i], -i))
        self.credits[j] -= 1.0
        self.picks[j] += 1
        return j

    def retire(self, i: int) -> None:
        """Source i has run out (a finite evaluation pass): the others share its picks."""
        self.dead.add(i)

    def state_dict(self) -> dict[str, Any]:
        return {"weights": list(self.weights), "credits": list(self.credits), "picks": list(self.picks),
                "dead": sorted(self.dead)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Where the schedule stood, with the weights it drew by: a resumed run draws on as the run would
        have (its own plan's weights may differ a little: a world of another size cuts a small corpus's
        shards into other pieces, whose batches hold other token counts)."""
        if len(state["weights"]) != len(self.weights):
            raise UserError(f"the checkpoint mixes {len(state['weights'])} sources, this run {len(self.weights)}; "
                            "resume with the same --mix")
        self.weights = [float(w) for w in state["weights"]]
        self.credits = [float(c) for c in state["credits"]]
        self.picks = [int(p) for p in state["picks"]]
        self.dead = {int(i) for i in state["dead"]}


# ------------------------------------------------------------------ loader

def batch_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Real tokens of a batch's rows that count (not the rows repeated to keep ranks in step)."""
    mask = batch["attention_mask"]
    keep = ~batch["is_pad"] if "is_pad" in batch else torch.ones(mask.shape[0], dtype=torch.bool)
    return int(mask[keep].sum())


class MixedLoader:
    """Batches from several ``ShardLoader``s by a deterministic weighted schedule.

    Quacks like a ``ShardLoader`` where the trainer needs it: iteration (from
    the current state), ``state_dict`` / ``load_state_dict``, and
    ``gather_state`` for a checkpoint under torch.distributed. ``last_source``
    names the source of the batch just yielded; ``realized_shares`` gives the
    token share each source supplied so far (this rank's rows).
    """

    def __init__(self, loaders: Sequence[Any], plan: MixPlan):
        if len(loaders) != len(plan.names):
            raise ValueError("one loader per mixed source")
        self.loaders = list(loaders)
        self.plan = plan
        self.names = list(plan.names)
        self.schedule = WeightedSchedule(plan.batch_weights)
        self.tokens = [0] * len(loaders)
        self.last_source: str | None = None

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        its: dict[int, Iterator[dict[str, torch.Tensor]]] = {}
        try:
            while True:
                try:
                    j = self.schedule.next()
                except StopIteration:
                    return
                if j not in its:
                    its[j] = iter(self.loaders[j])
                try:
                    batch = next(its[j])
                except StopIteration:
                    # A finite pass (evaluation) ran out of this source: undo the pick, go on without it.
                    self.schedule.picks[j] -= 1
                    self.schedule.credits[j] += 1.0
                    self.schedule.retire(j)
                    continue
                self.tokens[j] += batch_tokens(batch)
                self.last_source = self.names[j]
                yield batch
        finally:
            for it in its.values():
                close = getattr(it, "close", None)
                if close is not None:
                    close()

    def realized_shares(self) -> dict[str, float]:
        total = sum(self.tokens)
        return {n: (t / total if total else 0.0) for n, t in zip(self.names, self.tokens, strict=True)}

    def target_shares(self) -> dict[str, float]:
        return dict(zip(self.names, self.plan.token_shares, strict=True))

    def _state(self, loader_states: list[dict[str, Any]], tokens: list[int]) -> dict[str, Any]:
        return {"kind": "mix", "version": MIX_STATE_VERSION, "names": list(self.names),
                "token_shares": list(self.plan.token_shares),
                "schedule": self.schedule.state_dict(), "tokens": tokens, "loaders": loader_states}

    def state_dict(self) -> dict[str, Any]:
        """This rank's position in every source and in the schedule (plain JSON values)."""
        return self._state([ld.state_dict() for ld in self.loaders], list(self.tokens))

    def gather_state(self, gather: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        """The merged state of all ranks (a collective: every rank calls it, in the same order)."""
        tokens = list(self.tokens)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" \
                else torch.device("cpu")
            t = torch.tensor(tokens, dtype=torch.int64, device=device)
            dist.all_reduce(t)
            tokens = [int(x) for x in t.cpu().tolist()]
        return self._state([gather(ld) for ld in self.loaders], tokens)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "mix":
            raise UserError("the checkpoint was trained on one corpus, not a mix: resume with its --data")
        if state.get("version") != MIX_STATE_VERSION:
            raise UserError(f"mix state version {state.get('version')} is not {MIX_STATE_VERSION}")
        if list(state["names"]) != self.names:
            raise UserError(f"the checkpoint mixes {state['names']}, this run {self.names}; resume with the same --mix")
        shares = state.get("token_shares")
        if shares is None:
            log.warning("the checkpoint's mix state predates its token shares: it resumes with the batch weights "
                        "it drew by, and its --mix weights are not checked against this run's")
        elif any(not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
                 for a, b in zip(shares, self.plan.token_shares, strict=True)):
            ours, theirs = shares_text(self.names, self.plan.token_shares), shares_text(self.names, shares)
            raise UserError(f"the checkpoint mixes {theirs} of the tokens, this run {ours}; resume with the same "
                            "--mix")
        self.schedule.load_state_dict(state["schedule"])
        if any(not math.isclose(a, b, rel_tol=1e-9) for a, b in zip(self.schedule.weights, self.plan.batch_weights,
                                                                   strict=True)):
            log.info("mix: the schedule draws on by its checkpoint's batch weights, %s (this run derives %s: its "
                     "corpora's batches hold other token counts here, e.g. cut for another number of readers)",
                     shares_text(self.names, self.schedule.weights), shares_text(self.names, self.plan.batch_weights))
        for ld, s in zip(self.loaders, state["loaders"], strict=True):
            ld.load_state_dict(s)
        self.tokens = [int(t) for t in state["tokens"]]


def gather_loader_state(loader: Any) -> dict[str, Any]:
    """The merged state of all ranks of a ShardLoader or a MixedLoader (a collective)."""
    from trainer.loader import gather_state_dict

    if isinstance(loader, MixedLoader):
        return loader.gather_state(gather_state_dict)
    return gather_state_dict(loader)


def shares_text(names: Sequence[str], shares: Sequence[float]) -> str:
    """"news 41.8%, books 58.2%": each source's share (of the tokens, or of the micro-batches)."""
    return ", ".join(f"{n} {w:.1%}" for n, w in zip(names, shares, strict=True))


def describe(plan: MixPlan) -> str:
    """One line per source for the run's log: target token share and batch share."""
    return "; ".join(f"{n}: {s:.1%} of tokens ({b:.1%} of batches)"
                     for n, s, b in zip(plan.names, plan.token_shares, plan.batch_weights, strict=True))


def mixed_loader(entries: Sequence[MixSource], split: str, make: Callable[[str], Any]) -> MixedLoader | None:
    """A MixedLoader over `entries`, each source's loader built by `make(url)` (a ShardLoader).

    For the valid split, a source without valid samples sits out (evaluation mixes the others;
    None when no source has any); for the train split it is an error.
    """
    from shardforge.storage.contract import load_manifest

    manifests = [load_manifest(e.data)[0] for e in entries]
    if split != "train":
        have = [i for i, m in enumerate(manifests) if m.totals.get(split) and m.totals[split].samples]
        for i in sorted(set(range(len(entries))) - set(have)):
            log.warning("mix: %s has no %r samples; evaluation mixes the other sources", entries[i].data, split)
        if not have:
            return None
        entries, manifests = [entries[i] for i in have], [manifests[i] for i in have]
    check_compatible(manifests, source_names(entries))  # before any loader is built
    loaders = [make(e.data) for e in entries]
    return MixedLoader(loaders, plan_mix(entries, manifests, [ld.plan.batch_tokens() for ld in loaders], split=split))


def parse_mix_arg(item: str) -> dict[str, Any]:
    """`--mix URL=0.7` (a token share) or `--mix URL=x2` (repeat twice): one MixSource as a dict."""
    url, sep, w = item.rpartition("=")
    if not sep or not url:
        raise UserError(f"--mix expects URL=WEIGHT or URL=xREPEAT, got {item!r}")
    try:
        if w[:1] in ("x", "X"):
            return {"data": url, "repeat": float(w[1:])}
        return {"data": url, "weight": float(w)}
    except ValueError:
        raise UserError(f"--mix {item!r}: {w!r} is neither a weight (0.7) nor a repeat factor (x2)") from None


def mix_record(loader: Any) -> dict[str, float]:
    """The realized token share per source, as flat metric keys (empty for a single corpus)."""
    if not isinstance(loader, MixedLoader):
        return {}
    return {f"share/{n}": v for n, v in loader.realized_shares().items()}
