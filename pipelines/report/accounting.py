"""Accounting: every input record ends in exactly one bucket, and the report proves it.

Stages emit *outcomes* ``(source, bucket, reason)`` as data (not only as Beam
metrics, which runners may report as attempted rather than committed), the
readers emit per file how many records they *read* (lines, array items, rows,
members, documents, plus one per unreadable part, counted before any parsing),
and the manifest step checks input == kept + filtered + duplicate + rejected
per source, failing the job with a clear message otherwise. Because the input
count does not come from the records that came out of the reader, a reader (or
any later stage) that loses a record it read unbalances the books.
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam

from pipelines.metrics import SumPerBundle
from pipelines.records import Duplicate, Reject, TokenizedDocument
from schemas.errors import UserError
from schemas.manifest import SourceAccount

Outcome = tuple[str, str, str]  # (source, bucket, reason)


def reject_outcome(r: Reject) -> Outcome:
    return (r.source, r.bucket, r.reason)


def duplicate_outcome(d: Duplicate) -> Outcome:
    return (d.source, "duplicate", d.kind)


def tokens_outcome(d: TokenizedDocument) -> Outcome:
    return (d.source, "kept", "") if d.num_tokens > 0 else (d.source, "filtered", "no_tokens")


INPUT = "input"  # the tally key's bucket for records read


class CountInputs(beam.PTransform):
    """Per-file ``(source, records read)`` -> a singleton list of ``(source, total)``."""

    def expand(self, counts):
        return (
            counts
            | "SumPerSource" >> beam.CombinePerKey(sum)
            | "InputList" >> beam.combiners.ToList()
        )


class _Tally(beam.CombineFn):
    """Sums ``((source, bucket, reason), n)`` pairs into one dict (pre-combined on every worker)."""

    def create_accumulator(self) -> dict[Outcome, int]:
        return {}

    def add_input(self, acc: dict[Outcome, int], element: tuple[Outcome, int]) -> dict[Outcome, int]:
        key, n = element
        acc[key] = acc.get(key, 0) + n
        return acc

    def merge_accumulators(self, accs: Iterable[dict[Outcome, int]]) -> dict[Outcome, int]:
        out: dict[Outcome, int] = {}
        for acc in accs:
            for k, n in acc.items():
                out[k] = out.get(k, 0) + n
        return out

    def extract_output(self, acc: dict[Outcome, int]) -> dict[str, SourceAccount]:
        inputs = [(k[0], n) for k, n in acc.items() if k[1] == INPUT]
        outcomes = [(k, n) for k, n in acc.items() if k[1] != INPUT]
        return build_accounts(inputs, outcomes)


class Account(beam.PTransform):
    """The books of a build: a singleton ``{source: SourceAccount}``.

    Applied to the readers' per-file ``(source, records read)``; ``rejects``,
    ``duplicates`` and ``tokenized`` (every tokenized document, empty ones
    included) are the outcomes. Each input is tallied per outcome and bundle where it is made
    (``pipelines.metrics.SumPerBundle``), so only a few sums per bundle cross the Flatten (Beam's local
    runner materializes a Flatten of several inputs: one tally per record would each go through a
    buffer), then one global combine of those sums.
    """

    def __init__(self, rejects, duplicates, tokenized):
        super().__init__()
        self.rejects, self.duplicates, self.tokenized = rejects, duplicates, tokenized

    def expand(self, read_counts):
        inputs = (
            (read_counts, "InputTally", lambda sc: ((sc[0], INPUT, ""), sc[1])),
            (self.rejects, "RejectOutcome", lambda r: (reject_outcome(r), 1)),
            (self.duplicates, "DuplicateOutcome", lambda d: (duplicate_outcome(d), 1)),
            (self.tokenized, "TokenOutcome", lambda d: (tokens_outcome(d), 1)),
        )
        tallies = tuple(pcoll | tally >> beam.ParDo(SumPerBundle(fn)) for pcoll, tally, fn in inputs)
        return tallies | "AllTallies" >> beam.Flatten() | "Books" >> beam.CombineGlobally(_Tally())


def build_accounts(inputs: Iterable[tuple[str, int]], outcomes: Iterable[tuple[Outcome, int]]) -> dict[str, SourceAccount]:
    """Fold per-source input counts and counted outcomes into SourceAccounts."""
    accounts: dict[str, SourceAccount] = {}

    def acct(source: str) -> SourceAccount:
        return accounts.setdefault(source, SourceAccount())

    for source, n in inputs:
        acct(source).input += n
    for (source, bucket, reason), n in sorted(outcomes):  # reasons in a fixed order, however they came
        a = acct(source)
        if bucket == "kept":
            a.kept += n
        elif bucket in ("filtered", "duplicate", "rejected"):
            d = getattr(a, bucket)
            d[reason] = d.get(reason, 0) + n
        else:
            raise ValueError(f"unknown bucket {bucket!r}")
    return dict(sorted(accounts.items()))


def check_balanced(accounts: dict[str, SourceAccount]) -> None:
    bad = [f"{s}: input {a.input} != accounted {a.total_out}" for s, a in accounts.items() if not a.balanced]
    if bad:
        raise UserError("accounting identity failed (records lost or double-counted): " + "; ".join(bad))
