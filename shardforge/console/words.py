"""Counts in the commands' sentences: ``counted(1, "shard")`` is "1 shard", ``counted(2048, "shard")`` is
"2,048 shards" (thousands separated, as every command prints a count)."""

from __future__ import annotations

from typing import Any


def number(value: Any) -> str:
    """A count with thousands separators (a float rounded); anything else (None, a text) as it is."""
    return f"{round(value):,}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def counted(n: Any, noun: str, nouns: str | None = None) -> str:
    """n and its noun, singular for 1 (nouns: the plural where it is not noun + "s": "batches")."""
    return f"{number(n)} {noun if n == 1 else nouns or noun + 's'}"


def every(n: Any, noun: str = "step") -> str:
    """How often, in words: "every step" for 1, "every 2,000 steps" otherwise."""
    return f"every {noun}" if n == 1 else f"every {counted(n, noun)}"
