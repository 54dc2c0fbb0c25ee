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

from pipelines.records import Duplicate, Reject
from schemas.errors import UserError
from schemas.manifest import SourceAccount

Outcome = tuple[str, str, str]  # (source, bucket, reason)


def reject_outcome(r: Reject) -> Outcome:
    return (r.source, r.bucket, r.reason)


def duplicate_outcome(d: Duplicate) -> Outcome:
    return (d.source, "duplicate", d.kind)


class CountInputs(beam.PTransform):
    """Per-file ``(source, records read)`` -> a singleton list of ``(source, total)``."""

    def expand(self, counts):
        return (
            counts
            | "SumPerSource" >> beam.CombinePerKey(sum)
            | "InputList" >> beam.combiners.ToList()
        )


def build_accounts(inputs: Iterable[tuple[str, int]], outcomes: Iterable[tuple[Outcome, int]]) -> dict[str, SourceAccount]:
    """Fold per-source input counts and counted outcomes into SourceAccounts."""
    accounts: dict[str, SourceAccount] = {}

    def acct(source: str) -> SourceAccount:
        return accounts.setdefault(source, SourceAccount())

    for source, n in inputs:
        acct(source).input += n
    for (source, bucket, reason), n in outcomes:
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
