"""`shardforge validate URL`: check every shard of a corpus against its manifest.

    shardforge validate gs://bucket/corpus            # exit 0: all good; 1: problems (listed)
    shardforge validate out/corpus --jobs 8 --json    # parallel reads, machine-readable result

Each shard is streamed once: its bytes are hashed while the tar is parsed, so
the checks cost one read per shard. Checked per shard: present, size, sha256,
a well-formed tar whose members follow the sample spec (names, no pickles, no
unsafe paths), every sample decodes, input_ids dtype matches the manifest,
lengths <= max_seq_len, ids < vocab size, sample and token counts match the
manifest. Across the corpus: unique sample keys, split totals, no stray
objects under shard names the manifest does not list, and the tokenizer
opens exactly as the trainer opens it (sha256, parses, vocab size). A manifest
naming anything but plain relative paths inside the corpus is refused before
anything is opened (docs/storage.md, "Manifest paths").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import posixpath
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import IO, Any

import numpy as np

from schemas.errors import UserError
from schemas.manifest import Manifest, ShardInfo, SplitTotals
from schemas.naming import SHARD_NAME_RE  # tagged and untagged shard names
from schemas.sample import (
    LABEL,
    TOKEN_TYPE_IDS,
    ShardFormatError,
    decode_sample,
    iter_tar_samples,
)
from shardforge.console.args import ArgumentParser, at_least
from shardforge.console.words import counted
from shardforge.storage import READ_BLOCK_SIZE, get_fs, invalidate, is_tmp_name, join, open_read, retry
from shardforge.storage.contract import load_manifest, open_tokenizer, read_tokenizer_model

MAX_PROBLEMS_PER_SHARD = 20


@dataclass
class ShardReport:
    """What one shard's check found; problems empty means the shard is good."""

    name: str
    problems: list[str] = field(default_factory=list)
    samples: int = 0
    tokens: int = 0
    bytes: int = 0
    sha256: str = ""
    keys: list[str] = field(default_factory=list)

    def add(self, msg: str) -> None:
        if len(self.problems) < MAX_PROBLEMS_PER_SHARD:
            self.problems.append(msg)
        elif len(self.problems) == MAX_PROBLEMS_PER_SHARD:
            self.problems.append("... (further problems in this shard not listed)")


@dataclass
class ValidationReport:
    """The outcome of validating a corpus: errors fail it, warnings do not."""

    url: str
    shards: int = 0
    samples: int = 0
    tokens: int = 0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


class _HashingReader:
    """Reads through to a file while hashing and counting every byte."""

    def __init__(self, f: IO[bytes]):
        self._f = f
        self.sha = hashlib.sha256()
        self.bytes = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.sha.update(data)
        self.bytes += len(data)
        return data

    def drain(self) -> None:
        while self.read(READ_BLOCK_SIZE):
            pass


def _check_sample(rep: ShardReport, m: Manifest, vocab: int, key: str, members: dict[str, bytes]) -> int:
    """Check one sample against the spec and manifest; returns its token count."""
    unexpected = sorted(set(members) - set(m.members))
    missing = sorted(set(m.members) - set(members))
    if unexpected:
        rep.add(f"sample {key}: members {unexpected} are not in the manifest's members {m.members}")
    if missing:
        rep.add(f"sample {key}: missing members {missing}")
    try:
        s = decode_sample(key, members)
    except ShardFormatError as e:
        rep.add(str(e))
        return 0
    ids: np.ndarray = s["input_ids"]
    if str(ids.dtype) != m.ids_dtype:
        rep.add(f"sample {key}: input_ids dtype {ids.dtype}, manifest says {m.ids_dtype}")
    if len(ids) > m.max_seq_len:
        rep.add(f"sample {key}: {len(ids)} tokens > max_seq_len {m.max_seq_len}")
    if len(ids) == 0:
        rep.add(f"sample {key}: empty input_ids")
    elif int(ids.max()) >= vocab:
        rep.add(f"sample {key}: token id {int(ids.max())} >= vocab size {vocab}")
    if TOKEN_TYPE_IDS in members:
        tt = s.get("token_type_ids")
        if tt is None or tt.shape != ids.shape:
            rep.add(f"sample {key}: token_type_ids shape differs from input_ids")
    if LABEL in members and s.get("label") not in (0, 1):
        rep.add(f"sample {key}: label {s.get('label')!r} is not 0/1")
    return len(ids)


def check_shard(root: str, m: Manifest, info: ShardInfo) -> ShardReport:
    """Stream one shard once and check it against its manifest entry (transient errors retried)."""
    url = join(root, info.name)

    def _check() -> ShardReport:
        rep = ShardReport(info.name)
        try:
            f = open_read(url)
        except FileNotFoundError:
            rep.add("missing: the manifest lists it but there is no such object")
            return rep
        with f:
            r = _HashingReader(f)
            vocab = m.tokenizer.vocab_size
            try:
                for key, members in iter_tar_samples(r, info.name):  # type: ignore[arg-type]
                    rep.samples += 1
                    rep.keys.append(key)
                    rep.tokens += _check_sample(rep, m, vocab, key, members)
            except ShardFormatError as e:
                rep.add(f"unreadable: {e}")
            r.drain()  # hash the tar's trailing padding too
        rep.bytes, rep.sha256 = r.bytes, r.sha.hexdigest()
        if len(set(rep.keys)) != len(rep.keys):
            rep.add("duplicate sample keys inside the shard")
        if rep.bytes != info.bytes:
            rep.add(f"size {rep.bytes} bytes, manifest says {info.bytes}")
        if rep.sha256 != info.sha256:
            rep.add(f"sha256 {rep.sha256[:16]}… differs from the manifest's {info.sha256[:16]}…")
        if rep.samples != info.samples:
            rep.add(f"{rep.samples} samples, manifest says {info.samples}")
        if rep.tokens != info.tokens:
            rep.add(f"{rep.tokens} tokens, manifest says {info.tokens}")
        return rep

    return retry(_check, f"validate {url}")


def _check_totals(m: Manifest, rep: ValidationReport) -> None:
    sums: dict[str, SplitTotals] = {}
    for s in m.shards:
        t = sums.setdefault(s.split, SplitTotals())
        t.shards += 1
        t.samples += s.samples
        t.tokens += s.tokens
        t.bytes += s.bytes
    for split in sorted(set(sums) | set(m.totals)):
        got, want = sums.get(split, SplitTotals()), m.totals.get(split, SplitTotals())
        for k in ("shards", "samples", "tokens", "bytes"):
            if getattr(got, k) != getattr(want, k):
                rep.errors.append(f"manifest totals[{split}].{k} = {getattr(want, k)}, "
                                  f"but its shards add up to {getattr(got, k)}")


def _check_strays(root: str, m: Manifest, rep: ValidationReport) -> None:
    """Objects at the corpus root that look like shards but are not listed (or are leftover temporaries)."""
    fs, path = get_fs(root)
    invalidate(fs, path)
    try:
        names = [posixpath.basename(p) for p in retry(lambda: fs.ls(path, detail=False), f"list {root}")]
    except FileNotFoundError:
        return
    listed = {s.name for s in m.shards}
    for n in sorted(names):
        if SHARD_NAME_RE.match(n) and n not in listed:
            rep.warnings.append(f"{n}: a shard-named object the manifest does not list (left by another build?)")
        elif is_tmp_name(n):
            rep.warnings.append(f"{n}: a leftover temporary from an interrupted write (safe to delete)")


def _check_tokenizer(root: str, m: Manifest, rep: ValidationReport) -> None:
    """Open the tokenizer exactly as the trainer will (shardforge.storage.contract.open_tokenizer)."""
    try:
        open_tokenizer(m, root)
    except ImportError as e:
        rep.warnings.append(f"the tokenizer's library is not installed ({e}): its bytes are checked, not parsed")
        try:
            read_tokenizer_model(m, root)
        except UserError as e2:
            rep.errors.append(f"tokenizer: {e2}")
    except UserError as e:
        rep.errors.append(f"tokenizer: {e}")


def validate_corpus(url: str, jobs: int = 4, progress: bool = False) -> ValidationReport:
    """Validate every shard of the corpus at url (root or manifest URL) against its manifest."""
    m, root = load_manifest(url)  # the path rule is checked here, before anything it names is opened
    rep = ValidationReport(url=url, shards=len(m.shards))
    _check_tokenizer(root, m, rep)
    _check_totals(m, rep)
    _check_strays(root, m, rep)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(m.shards), unit="shard", desc="validate", file=sys.stderr)
    seen_keys: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        # map keeps manifest order, so the problem list is deterministic.
        for info, sr in zip(m.shards, pool.map(lambda s: check_shard(root, m, s), m.shards), strict=True):
            rep.samples += sr.samples
            rep.tokens += sr.tokens
            rep.bytes += sr.bytes
            rep.errors.extend(f"{info.name}: {p}" for p in sr.problems)
            clashes: dict[str, list[str]] = {}
            for k in sr.keys:
                other = seen_keys.setdefault(k, info.name)
                if other != info.name:
                    clashes.setdefault(other, []).append(k)
            for other, keys in clashes.items():
                rep.errors.append(f"{info.name}: {len(keys)} sample keys also in {other} (e.g. {keys[0]})")
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return rep


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="shardforge validate", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_last_positional("url", "--data", "--corpus", help="Corpus root or manifest URL (local folder, gs://, s3://, memory://).")
    p.add_argument("--jobs", type=at_least(1), default=4, help="Shards read in parallel (default 4).")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.add_argument("--no-progress", action="store_true", help="No progress bar (default: shown on a terminal).")
    args = p.parse_args(argv)
    progress = not args.no_progress and not args.json and sys.stderr.isatty()
    rep = validate_corpus(args.url, jobs=args.jobs, progress=progress)
    if args.json:
        print(json.dumps(rep.as_dict(), indent=1))
        return 0 if rep.ok else 1
    for w in rep.warnings:
        print(f"warning: {w}")
    if rep.ok:
        print(f"OK: {counted(rep.shards, 'shard')}, {counted(rep.samples, 'sample')}, {rep.tokens:,} tokens, "
              f"{rep.bytes:,} bytes match the manifest")
        return 0
    print(f"FAILED: {counted(len(rep.errors), 'problem')} in {rep.url}:")
    for e in rep.errors:
        print(f"  - {e}")
    return 1
