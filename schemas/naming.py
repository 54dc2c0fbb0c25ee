"""Names of what a build attempt writes into a corpus (commit protocol: docs/architecture.md).

Every object a manifest references (shards, tokenizer, intermediates) is named
after the attempt that wrote it: a tag ``v{N}-{16 hex}`` where N is the corpus
version the attempt would commit and the hex digits are a hash of everything
its output is a function of (config, input files with size and content
fingerprint, parent manifest, N). So two attempts that can produce the same
name produce the same bytes, and an attempt of other inputs or config can never
write over a committed version's objects.

    train-000000-v1-0123456789abcdef.tar      a shard ({split}-{index:06d}-{tag}.tar)
    versions/v1-0123456789abcdef/…            the attempt's other objects (tokenizer, rejects, index, …)

A versioned corpus (``pipelines.jobs.serve``, batched builds) also holds one
manifest per committed version, and its samples' keys carry the version:

    manifest-v3.json                          version 3's manifest (`version_manifest_name`)
    v000003-train-00000-00000000              a sample key of version 3 (`version_key_prefix` + the key)

Shared by the writers (pipelines), the readers of the version chain
(`shardforge.storage.contract.committed_versions`, repack, status) and the readers that
look for strays (validate).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

VERSIONS_DIR = "versions"
BATCH_MANIFEST_NAME = "batch-manifest.json"  # an ingest batch's own manifest, in its attempt's folder
INGEST_DIR = "ingest"  # a versioned corpus's ledger, serve state and batch plan
PLAN_NAME = f"{INGEST_DIR}/batches.json"  # a --batch_mb build's plan: which file in which batch
TAG_PATTERN = r"v(?P<version>\d+)-[0-9a-f]{16}"
TAG_RE = re.compile(rf"^{TAG_PATTERN}$")
# Untagged names (`train-000000.tar`) are corpora written before attempt tags existed.
SHARD_NAME_RE = re.compile(rf"^(?P<split>train|valid)-(?P<index>\d{{6,}})(?:-(?P<tag>{TAG_PATTERN}))?\.tar$")
VERSION_MANIFEST_RE = re.compile(r"^manifest-v(?P<version>\d+)\.json$")
WORK_DIR_RE = re.compile(rf"^{VERSIONS_DIR}/(?P<tag>{TAG_PATTERN})(?:/|$)")


def attempt_tag(version: int, identity: Any) -> str:
    """``v{version}-{hash}``: the hash is sha256 of the canonical JSON of ``identity`` (first 64 bits)."""
    blob = json.dumps({"version": version, "identity": identity}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, default=str)
    return f"v{version}-{hashlib.sha256(blob.encode('utf-8')).hexdigest()[:16]}"


def tag_version(tag: str) -> int:
    """The corpus version an attempt tag is for."""
    m = TAG_RE.match(tag)
    if not m:
        raise ValueError(f"not an attempt tag: {tag!r}")
    return int(m.group("version"))


def shard_name(split: str, index: int, tag: str = "") -> str:
    """``{split}-{index:06d}-{tag}.tar`` (``{split}-{index:06d}.tar`` without a tag)."""
    return f"{split}-{index:06d}-{tag}.tar" if tag else f"{split}-{index:06d}.tar"


def shard_tag(name: str) -> str | None:
    """The attempt tag of a shard name, or None (untagged or not a shard name)."""
    m = SHARD_NAME_RE.match(name)
    return m.group("tag") if m else None


def work_dir(tag: str) -> str:
    """The folder (relative to the corpus root) holding an attempt's objects other than shards."""
    return f"{VERSIONS_DIR}/{tag}"


def path_tag(relpath: str) -> str | None:
    """The attempt tag of a path under ``versions/{tag}/``, or None."""
    m = WORK_DIR_RE.match(relpath)
    return m.group("tag") if m else None


def version_manifest_name(version: int) -> str:
    """``manifest-v{N}.json``: the name a versioned corpus commits version N under."""
    return f"manifest-v{version}.json"


def manifest_version(name: str) -> int | None:
    """N of a ``manifest-v{N}.json`` name, or None for any other name."""
    m = VERSION_MANIFEST_RE.match(name)
    return int(m.group("version")) if m else None


def version_key_prefix(version: int) -> str:
    """The prefix of every sample key of version N (``v{N:06d}-``): keys stay unique across appended versions."""
    return f"v{version:06d}-"
