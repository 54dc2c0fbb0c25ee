"""The commit protocol of a corpus version (design: docs/architecture.md, "Commit protocol").

1. An attempt to write version N of a corpus gets a tag ``v{N}-{hash}``
   (``schemas.naming.attempt_tag``) computed from everything its output is a
   function of: the build config, the input files (URL, size, content
   fingerprint), the parent version's manifest (sha256) and N. Never from the
   output URL or the clock, so reruns and copies elsewhere stay byte-identical.
2. It writes every object a manifest will reference under names carrying its
   tag: shards ``{split}-{index:06d}-{tag}.tar``, everything else under
   ``versions/{tag}/``. Two attempts that can produce the same name produce the
   same bytes, and every object is published by a conditional create
   (``storage.write_stream_atomic(create=True)``), which never replaces one: so no
   attempt can damage another's (or a committed) object. The reader checks the
   bytes it reads against the fingerprints the tag was made from
   (``Attempt.fingerprints``, ``storage.open_checked``), so the same tag never
   stands for other bytes.
3. It commits by a conditional create of the manifest
   (``storage.create_if_absent``: O_EXCL-style link locally, GCS
   ``ifGenerationMatch=0``, S3 ``If-None-Match: *``). Of several attempts
   exactly one creates it. One whose manifest equals the committed bytes has
   in fact succeeded (an identical rerun). Any other loser deletes its own
   objects (only names with its own tag that the committed manifest does not
   reference) and fails with one line.
4. After a commit, the committer removes what provably can never be committed:
   objects tagged for a version <= the committed one by another attempt (those
   attempts can only lose), and stale hidden temporaries (``.NAME.<uuid>.tmp``)
   of this corpus (``storage.tmp_is_stale``: no live writer holds them).
   Objects of attempts for later versions are never touched: they may be live.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.intermediates import INDEX_META
from schemas.config import BuildConfig
from schemas.errors import UserError
from schemas.manifest import MANIFEST_NAME, Manifest, parse_manifest
from schemas.naming import (
    SHARD_NAME_RE,
    VERSION_MANIFEST_RE,
    VERSIONS_DIR,
    attempt_tag,
    path_tag,
    shard_tag,
    tag_version,
    work_dir,
)
from shardforge.console.words import counted
from shardforge.storage import (
    create_if_absent,
    exists,
    join,
    list_names,
    read_text,
    redact_url,
    remove_object,
    remove_stale_tmps,
    remove_tree,
)

log = logging.getLogger("shardforge.commit")

# Part of every tag's identity: bump when the bytes written for the same input and config change.
FORMAT = 1


def input_identity(files: Iterable[tuple[str, int, str]]) -> list[list[Any]]:
    """[(url, size, fingerprint)] -> the sorted, redacted form hashed into a tag."""
    return sorted([redact_url(url), size, fp] for url, size, fp in files)


def config_identity(config: dict[str, Any], root: str) -> dict[str, Any]:
    """The config as hashed into a tag: URLs inside the corpus (its own tokenizer, index) relative to it.

    So the tag does not depend on where the corpus is (a resumed build in another
    folder gives the same names); their contents enter the tag via the parent manifest.
    """
    from shardforge.storage import is_within, relative_url

    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items()}
    for sect, key in (("tokenizer", "model_url"), ("dedupe", "index")):
        value = out.get(sect, {}).get(key)
        if value and is_within(value, root):
            out[sect][key] = relative_url(root, value)
    return out


def tag_for(version: int, config: dict[str, Any], inputs: Sequence[Sequence[Any]],
            parent_manifest: str | None, extra: dict[str, Any] | None = None) -> str:
    """The attempt tag of version ``version`` of a corpus (see the module docstring).

    config: the build config as JSON data (``model_dump(mode="json")``);
    inputs: ``input_identity(...)``; parent_manifest: the parent version's
    manifest text (None for version 1); extra: anything else the output depends
    on (e.g. the sha256 of a tokenizer model given by URL).
    """
    parent = hashlib.sha256(parent_manifest.encode("utf-8")).hexdigest() if parent_manifest is not None else None
    return attempt_tag(version, {"format": FORMAT, "config": config, "inputs": [list(i) for i in inputs],
                                 "parent": parent, "extra": extra or {}})


def manifest_tag(m: Manifest) -> str | None:
    """The tag of the attempt that committed ``m`` (its folder, else its shards' names), or None (untagged)."""
    tags = [path_tag(rel) for rel in [*m.intermediates.values(), m.tokenizer.path]]
    tags += [shard_tag(s.name) for s in reversed(m.shards)]  # a version's own shards come last
    return next((t for t in tags if t is not None and tag_version(t) == m.version), None)


def committed_tags(root: str, names: Sequence[str] | None = None) -> dict[int, str]:
    """version -> the tag that committed it, over the corpus's manifests (versioned or plain)."""
    names = list_names(root) if names is None else names
    urls = [join(root, n) for n in names if VERSION_MANIFEST_RE.match(n)]
    if not urls and MANIFEST_NAME in names:
        urls = [join(root, MANIFEST_NAME)]
    out: dict[int, str] = {}
    for url in urls:
        try:
            m = parse_manifest(read_text(url), url)
        except (FileNotFoundError, UserError, ValueError):
            continue  # not ours to judge here: validate / recover say what is wrong with it
        tag = manifest_tag(m)
        if tag is not None:
            out[m.version] = tag
    return out


class LostCommit(UserError):
    """Another attempt committed this version first; this attempt's objects were removed."""


def _remove(root: str, rel: str, removed: list[str]) -> None:
    """Best-effort removal of one object or folder (cleanup must never fail a commit: the next one retries)."""
    try:
        if rel.endswith("/"):
            remove_tree(join(root, rel.rstrip("/")))
            removed.append(rel)
        elif remove_object(join(root, rel)):
            removed.append(rel)
    except Exception as e:  # noqa: BLE001 - e.g. a dead writer still creating files in the folder
        log.warning("cleanup %s: could not remove %s (%s: %s); the next commit retries",
                    redact_url(root), rel, type(e).__name__, e)


def remove_attempt(root: str, tag: str, committed: Manifest | None) -> list[str]:
    """Delete one attempt's objects (its shards and work folder) that ``committed`` does not reference."""
    listed = {s.name for s in committed.shards} if committed is not None else set()
    keep_dir = committed is not None and manifest_tag(committed) == tag
    removed: list[str] = []
    for name in list_names(root):
        if shard_tag(name) == tag and name not in listed:
            _remove(root, name, removed)
    if not keep_dir and tag in list_names(join(root, VERSIONS_DIR)):
        _remove(root, work_dir(tag) + "/", removed)
    return removed


def commit_manifest(root: str, name: str, text: str, tag: str) -> str:
    """Commit a version: conditionally create ``root/name``; "created" or "identical".

    A loser (the name holds another manifest) removes its own attempt and raises
    LostCommit with one line saying why.
    """
    outcome = create_if_absent(join(root, name), text.encode("utf-8"))
    if outcome != "taken":
        return outcome
    raise_if_lost(root, name, tag)
    # Not a LostCommit (which the commit step only logs): this attempt did not lose to another, it
    # made other bytes for a version its own tag committed. Nothing is replaced; the build fails.
    raise UserError(
        f"{redact_url(join(root, name))} holds another manifest of this attempt's tag {tag}: that version was "
        "committed from other bytes than this build made (an input changed since, while its listing did not); "
        "a committed version is never replaced: build into a new folder (or remove this one)")


def missing_objects(root: str, m: Manifest) -> list[str]:
    """What ``m`` names besides shards (the tokenizer, the dedupe index's parts) that is not under ``root``.

    Written inside the pipeline, where a write whose temporary another writer swept
    only warns (``storage.unless_swept``): the commit step checks them, as it checks
    for lost shards, so that no manifest is committed without its objects.
    """
    names = [m.tokenizer.path]
    index = m.intermediates.get("dedupe_index")
    if index is not None:
        meta = join(root, index, INDEX_META)
        try:
            parts = json.loads(read_text(meta)).get("parts", [])
        except FileNotFoundError:
            return [f"{index}/{INDEX_META}"]
        # This run's parts are bare names; earlier ones ("../...", or another index's URLs) are committed.
        names += [f"{index}/{p}" for p in parts if "/" not in p]
    return [n for n in names if not exists(join(root, n))]


def raise_if_lost(root: str, name: str, tag: str) -> None:
    """If ``root/name`` was committed by another attempt: remove this attempt's objects, raise LostCommit.

    Also called when an attempt fails before its commit (the winner's cleanup may
    have removed the loser's objects under it): the real reason is then the loss.
    """
    url = join(root, name)
    try:
        text = read_text(url)
    except FileNotFoundError:
        return
    try:
        winner: Manifest | None = parse_manifest(text, url)
    except (UserError, ValueError):
        winner = None
    if winner is not None and manifest_tag(winner) == tag:
        return
    removed = remove_attempt(root, tag, winner)
    raise LostCommit(
        f"{redact_url(url)} was committed by another writer (attempt {manifest_tag(winner) if winner else '?'}) "
        f"while this one ({tag}) was building; nothing of this attempt was committed and its "
        f"{counted(len(removed), 'object')} {'was' if len(removed) == 1 else 'were'} removed. Run one writer per corpus; a rerun builds on top of that version.")


def clean_after_commit(root: str, version: int, committed: Manifest) -> list[str]:
    """After committing ``version``: remove dead attempts' objects and stale temporaries; returns what went.

    Dead: tagged for a version <= ``version`` with a tag that did not commit it (it
    can only lose), or an untagged shard-named object the manifest does not list
    (no current writer makes untagged names). Attempts for later versions are live
    or will be redone with the same tag: never touched.
    """
    names = list_names(root)
    tags = committed_tags(root, names)
    tags[version] = manifest_tag(committed) or tags.get(version, "")
    listed = {s.name for s in committed.shards}

    def dead(tag: str | None) -> bool:
        return tag is not None and tag_version(tag) <= version and tags.get(tag_version(tag)) != tag

    removed: list[str] = []
    for name in names:
        m = SHARD_NAME_RE.match(name)
        if m and name not in listed and (m.group("tag") is None or dead(m.group("tag"))):
            _remove(root, name, removed)
    for sub in list_names(join(root, VERSIONS_DIR)):
        if dead(path_tag(f"{VERSIONS_DIR}/{sub}")):
            _remove(root, f"{VERSIONS_DIR}/{sub}/", removed)
    own = tags.get(version)
    for folder in ["", *([work_dir(own)] if own else []), "ingest"]:
        try:
            found = remove_stale_tmps(join(root, folder) if folder else root, recursive=bool(folder),
                                      also=lambda target: dead(shard_tag(target)))
        except Exception as e:  # noqa: BLE001 - best effort, as above
            log.warning("cleanup %s: could not sweep temporaries of %s (%s)", redact_url(root), folder or "/", e)
            continue
        removed += [posixpath.join(folder, r) if folder else r for r in found]
    for r in removed:
        log.info("cleanup %s: removed %s", redact_url(root), r)
    return removed


# ------------------------------------------------------------------ one-shot builds


@dataclass(frozen=True)
class Attempt:
    """A one-shot build's attempt: its tag, and per source the content fingerprint of every input
    file (URL -> fingerprint) the tag was made from, which the reader checks the bytes it reads
    against (``shardforge.storage.open_checked``)."""

    tag: str
    fingerprints: dict[str, dict[str, str]]


def one_shot_attempt(cfg: BuildConfig, files: dict[str, list[str]] | None = None) -> Attempt:
    """The attempt of a one-shot build (version 1): its tag from config + every input file's size and
    fingerprint, and those fingerprints.

    Costs one listing per source, plus a sha256 of each local input file (object
    stores report a checksum in the listing), and of a tokenizer / index given by URL and of
    each local evaluation file of ``decontaminate``.
    """
    from pipelines.sources.listing import check_one_source_each
    from pipelines.sources.rawfiles import fingerprint, list_raw_files
    from pipelines.tokenizer.model import load_model
    from shardforge.storage import join, redact_url, sha256_bytes, sha256_url

    def print_of(f) -> str:
        try:
            return fingerprint(f)
        except OSError:  # unreadable: the reader rejects it with a reason; its listing still identifies it
            return f"unreadable:{f.size}:{f.mtime}"

    inputs = []
    prints: dict[str, dict[str, str]] = {}
    listings = []
    for src in cfg.sources:
        urls = None if files is None else set(files.get(src.name, []))
        listings.append(list_raw_files(src.input, src.follow_links) if urls is None
                        else [f for u in sorted(urls) for f in list_raw_files(u)])
    # Before any file is read for its fingerprint (a local file's is the sha256 of its bytes).
    check_one_source_each((src.name, [f.url for f in listed]) for src, listed in zip(cfg.sources, listings, strict=True))
    for src, listed in zip(cfg.sources, listings, strict=True):
        found = prints.setdefault(src.name, {})
        for f in listed:
            found[f.url] = print_of(f)
        inputs += [(src.name, *i) for i in input_identity((f.url, f.size, found[f.url]) for f in listed)]
    extra: dict[str, Any] = {}
    if cfg.tokenizer.model_url:
        extra["tokenizer"] = sha256_bytes(load_model(cfg.tokenizer.model_url))  # one line if missing or invalid
    if cfg.dedupe.index:
        try:
            extra["index"] = sha256_url(join(cfg.dedupe.index, INDEX_META))[0]
        except FileNotFoundError:
            raise UserError(f"dedupe index not found: {redact_url(cfg.dedupe.index)} has no index.json") from None
    if cfg.decontaminate.paths:  # the evaluation files' contents decide what is removed
        from pipelines.dedupe.evalsets import eval_identity

        extra["decontaminate"] = eval_identity(cfg.decontaminate)
    return Attempt(tag_for(1, cfg.model_dump(mode="json"), inputs, None, extra), prints)


def check_folder(output: str, flag: str = "--output") -> None:
    """Refuse (one line) an output that is an existing local file (a corpus is a folder), a training run or
    a Hugging Face model folder (a corpus written among their files), or a local folder this process
    cannot write (read-only, not its own, a full disk).

    Checked before any work (the build otherwise ran its stages until a write under it failed).
    An object store has no such conflict: an object and a prefix of the same name coexist."""
    from shardforge.storage import check_writable, get_fs, protocol_of, redact_url
    from shardforge.storage.contract import KIND_WORDS, probed_kind

    fs, path = get_fs(output)
    if protocol_of(fs) == "file" and fs.isfile(path):
        raise UserError(f"{flag} {redact_url(output)} is a file, and a corpus is a folder: choose another {flag}")
    kind = probed_kind(output)
    if kind in ("run", "model"):
        raise UserError(f"{flag} {redact_url(output)} is {KIND_WORDS[kind]} folder, not a corpus: a corpus goes into "
                        f"a folder of its own; choose another {flag}")
    try:
        check_writable(output)
    except OSError as e:
        raise UserError(f"{flag} {redact_url(output)} cannot be written ({e.strerror}: {e.filename}): choose "
                        f"another {flag}, or make it writable") from None


def check_output(output: str, tag: str) -> None:
    """Refuse (one line) to build into a folder holding a committed corpus, unless it is this very build.

    A committed corpus is immutable: a build of other inputs or config must go
    elsewhere. The same build again (same tag) is an idempotent rerun: it rewrites
    the same bytes under the same names and finds the identical manifest.
    """
    from shardforge.storage import exists, join, read_text, redact_url

    check_folder(output)
    url = join(output, MANIFEST_NAME)
    if not exists(url):
        return
    try:
        committed = manifest_tag(parse_manifest(read_text(url), url))
    except (UserError, ValueError):
        committed = None
    if committed != tag:
        raise UserError(f"{redact_url(output)} already holds a committed corpus of other inputs or config "
                        f"({committed or 'untagged'}; this build is {tag}); a committed corpus is never "
                        "overwritten: choose another --output, or remove that folder first")
    # Said before the work, which on a crawl takes hours: the rerun is a check, and there is a cheaper one.
    print(f"{redact_url(output)} holds this very build already ({tag}): it runs again and checks that each "
          f"object it writes is the one there; `shardforge validate {redact_url(output)}` checks the shards "
          "against the manifest without rebuilding", file=sys.stderr)
