"""Which inputs a source names: its glob expanded, each match judged before anything opens it.

A match that cannot be read as a file is not dropped and does not crash the build: it becomes
an ``Input`` with a skip reason, and the reader turns it into one counted Reject
(``not_a_file`` for a directory, ``invalid_file_name`` for a name that is not valid UTF-8: such a
name cannot travel through the pipeline, the manifest or the reject log).

Hidden names (a leading '.') that a glob or folder matches are never read: writers' temporaries
(write-then-rename uploads, our own atomic writes) must not be read half written. Each is one
``hidden_file`` reject, in every kind of build. A pattern whose own last part starts with '.'
and is the file's name or a glob (``raw/.late.jsonl``, ``raw/.*.jsonl``) asks for hidden names,
and they are read.

Links stay inside: on a local disk, a match whose real path (links resolved) lies outside the
folder the pattern names (``listing_root``: a glob's fixed part, a folder, a file itself) is
``not_a_file`` too, unless the source sets ``follow_links``. A dangling link stays a file the
reader cannot open (``unreadable``).
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections import Counter
from collections.abc import Iterable, Sequence

from fsspec import AbstractFileSystem

from pipelines.sources.compression import split_compression
from pipelines.sources.naming import fixed_folder
from pipelines.sources.parsing import R_HIDDEN_FILE, R_INVALID_FILE_NAME, R_NOT_A_FILE, R_UNREADABLE
from schemas.errors import UserError
from shardforge.console.words import counted
from shardforge.storage import (
    full_url,
    get_fs,
    invalidate,
    is_glob,
    is_local_fs,
    raise_if_unreachable,
    redact_url,
    retry,
)

Input = tuple[str, "str | None"]  # (URL, or the escaped name when it is invalid; skip reason or None)


def printable_name(url: str) -> str:
    """A file name as valid UTF-8: undecodable bytes (kept by Python as surrogates) as \\xNN."""
    return url.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_valid_name(url: str) -> bool:
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def hidden(url: str, pattern: str | None) -> bool:
    """Whether a match of ``pattern`` is a hidden name it did not ask for (see the module's docstring)."""
    name = posixpath.basename(url.rstrip("/"))
    if not name.startswith("."):
        return False
    last = "" if pattern is None else posixpath.basename(pattern.rstrip("/"))
    asked = pattern is None or (last.startswith(".") and (last == name or is_glob(last)))
    return not asked


def check_raw_input(name: str, pattern: str, flag: str = "--input") -> None:
    """UserError when a source's input (a folder, or a glob's fixed folder) is a shardforge corpus, a training
    run or a Hugging Face model folder: built or trained files, not raw text (each would be rejected)."""
    from shardforge.storage.contract import KIND_WORDS, probed_kind

    folder = fixed_folder(pattern)
    kind = probed_kind(folder)
    if kind == "corpus":
        raise UserError(f"source {name}: {flag} {redact_url(pattern)} is a shardforge corpus, built already: train "
                        f"on it (--data {redact_url(folder)}), or `shardforge repack` it for another packing rule")
    if kind in ("run", "model"):
        raise UserError(f"source {name}: {flag} {redact_url(pattern)} is {KIND_WORDS[kind]} folder, not raw text: give "
                        "the files of your text (JSONL, JSON, Parquet, text, their tars)")


def extension(name: str) -> str:
    """A file name's kind as a glob would name it: its last suffix, with the compression's the readers know
    after it (``.jsonl.gz``); "" for none."""
    stem, _ = split_compression(name)
    return posixpath.splitext(stem)[1] + name[len(stem):]


def no_match(name: str, pattern: str) -> UserError:
    """The one line for a source whose input matches nothing: with what the folder it names holds (its
    files by extension, its folders) and a glob that matches them, so a wrong extension or a missing ``**``
    is seen at once; without that where the folder cannot be listed."""
    line = f"source {name}: no files match {redact_url(pattern)!r}"
    glob = is_glob(pattern)
    folder = fixed_folder(pattern) if glob else pattern
    if folder.split("://", 1)[0] in ("http", "https"):  # a web server's pages are no listing
        return UserError(line)
    try:
        fs, path = get_fs(folder)
        if not fs.exists(path):
            return UserError(f"{line}: {'its folder ' + redact_url(folder) if glob else 'it'} does not exist")
        listed = fs.ls(path, detail=True) if fs.isdir(path) else []
    except (OSError, UserError, ValueError):
        return UserError(line)
    files = [posixpath.basename(e["name"].rstrip("/")) for e in listed if e.get("type") != "directory"]
    folders = len(listed) - len(files)
    kinds = Counter(extension(f) for f in files if not f.startswith("."))
    held = [counted(n, f"{kind} file") if kind else f"{counted(n, 'file')} without an extension"
            for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))[:4]]  # the most first
    held += [f"{counted(folders, 'folder')}"] if folders else []
    if not held:
        return UserError(f"{line}: its folder {redact_url(folder)} "
                         f"{'is empty' if not files else 'holds only hidden files'}")
    hint = ""
    if len(kinds) == 1 and next(iter(kinds)):
        hint = f"; '{redact_url(folder.rstrip('/'))}/*{next(iter(kinds))}' matches them"
    elif folders and "**" not in pattern:
        hint = f"; ** reaches the folders below it: '{redact_url(folder.rstrip('/'))}/**/{pattern.rsplit('/', 1)[-1]}'"
    return UserError(f"{line}: its folder {redact_url(folder)} holds {', '.join(held)}{hint}")


def check_some_readable(name: str, pattern: str, inputs: Sequence[Input], follow_links: bool = False) -> None:
    """UserError when a source's pattern matched files but every match is skipped, so the source would read
    nothing: one line that says what the matches are and what reads them. Bad files among good ones are
    counted rejects; a source none of whose files can be read is a mistake in the command (the common one: a
    Hugging Face hub cache, whose snapshot files are links into its ``blobs/`` folder)."""
    if not inputs or any(skip is None for _, skip in inputs):
        return
    root = listing_root(pattern, follow_links)
    # A skipped match is a link out, a folder (or device), a hidden name, or a file that cannot be named or opened.
    kinds = ["link" if skip == R_NOT_A_FILE and leaves(u, root) else skip for u, skip in inputs]
    n = Counter(kinds)
    folder = redact_url(fixed_folder(pattern))
    parts = []
    if n["link"]:
        link = next(u for (u, _), kind in zip(inputs, kinds, strict=True) if kind == "link")
        parts.append(f"{counted(n['link'], 'link')} out of the folder it names ({link} leads to "
                     f"{os.path.realpath(link)}): --follow_links reads links wherever they lead (follow_links: "
                     "true in the source's config; a Hugging Face hub cache's snapshot files are such links, into "
                     "its blobs/ folder)")
    if n[R_NOT_A_FILE]:
        parts.append(f"{counted(n[R_NOT_A_FILE], 'folder')} (or devices): the folder itself reads every "
                     f"file under it ({folder}), or a glob that matches files ({posixpath.join(folder, '**', '*.jsonl')})")
    if n[R_HIDDEN_FILE]:
        parts.append(f"{counted(n[R_HIDDEN_FILE], 'hidden name')} (a leading '.': writers' temporaries, never "
                     "read through a glob or folder): a pattern whose last part starts with '.' reads them "
                     f"({posixpath.join(folder, '.*.jsonl')})")
    rest = len(kinds) - n["link"] - n[R_NOT_A_FILE] - n[R_HIDDEN_FILE]
    if rest:
        parts.append(f"{counted(rest, 'file')} whose name is not valid UTF-8 or that cannot be opened")
    what = redact_url(pattern)
    head = f"the one match of {what} cannot" if len(inputs) == 1 else f"none of the {len(inputs):,} matches of {what} can"
    raise UserError(f"source {name}: {head} be read: " + "; ".join(parts))


def check_one_source_each(listed: Iterable[tuple[str, Iterable[str]]]) -> None:
    """UserError when the inputs of two sources match one file (``raw/*.jsonl`` and ``recent=raw/2024-*``):
    read twice, its records would count twice in the input and the kept ones' copies end as duplicates."""
    owner: dict[str, str] = {}
    for name, urls in listed:
        for url in urls:
            if url in owner:
                raise UserError(f"{redact_url(url)} matches the inputs of sources {owner[url]} and {name}: each file "
                                "must belong to one source (make the --input patterns disjoint)")
            owner[url] = name


def judge(url: str, kind: str | None = None, root: str | None = None, pattern: str | None = None) -> Input:
    """One match -> (URL, None) to read, or (printable name, reason) to count as skipped.

    root: the real path of the listed folder (``listing_root``); a local match that resolves outside
    it is skipped as ``not_a_file``. None: links are followed wherever they lead. pattern: the glob
    or folder that matched it (hidden names; None: a name is judged as if it was asked for).
    """
    if not is_valid_name(url):
        return printable_name(url), R_INVALID_FILE_NAME
    if hidden(url, pattern):
        return url, R_HIDDEN_FILE
    if kind == "directory" or leaves(url, root):
        return url, R_NOT_A_FILE
    return url, None


def listing_root(pattern: str, follow_links: bool = False) -> str | None:
    """The real path of the local folder a pattern lists: a glob's fixed part (up to the folder of its
    first wildcard), a folder, or a file itself. None on object stores (no links) or with
    ``follow_links``: nothing is refused for where it leads."""
    scheme = pattern.split("://", 1)[0] if "://" in pattern else "file"
    if follow_links or scheme not in ("file", "local"):  # decided from the URL: no object-store client made
        return None
    return os.path.realpath(fixed_folder(get_fs(pattern)[1]))


def leaves(path: str, root: str | None) -> bool:
    """Whether a local path resolves (links followed) to somewhere outside ``root``; a dangling or
    looping link does not resolve, and is left to the reader (``unreadable``)."""
    if root is None:
        return False
    try:
        real = os.path.realpath(path, strict=True)
    except (OSError, ValueError):
        return False
    return real != root and not real.startswith(root.rstrip(os.sep) + os.sep)


def skip_detail(url: str, reason: str) -> str:
    """What a skipped match is, for its reject's snippet: a link out of the listed folder says where it leads."""
    if reason == R_NOT_A_FILE and _is_local(url):
        try:
            real = os.path.realpath(url, strict=True)
        except (OSError, ValueError):
            return url
        if real != os.path.abspath(url) and not os.path.isdir(real):
            return f"a link out of the listed folder (follow_links reads it) to {real}"
    return url


def list_inputs(pattern: str, follow_links: bool = False) -> list[Input]:
    """Every match of a glob (or the files under a folder URL, or the URL itself), sorted, judged;
    a local link out of the listed folder is skipped unless ``follow_links``."""
    root = listing_root(pattern, follow_links)
    fs, path = get_fs(pattern)
    invalidate(fs)
    if is_glob(path):
        found = retry(lambda: fs.glob(path, detail=True), f"glob {pattern}")
    elif not retry(lambda: fs.exists(path), f"exists {pattern}"):
        raise_if_unreachable(fs, path, pattern)
        found = {}
    elif retry(lambda: fs.isdir(path), f"isdir {pattern}"):
        found = retry(lambda: fs.find(path, detail=True), f"find {pattern}")
    else:
        found = {path: {"type": "file"}}
    return sorted((judge(full_url(fs, p), info.get("type"), root, pattern) for p, info in found.items()),
                  key=lambda e: e[0])


def _unescape(name: str) -> str:
    """Inverse of printable_name: \\xNN back to the surrogate Python uses for that byte."""
    return re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(0xDC00 + int(m[1], 16)), name)


def judge_urls(urls: Iterable[str], pattern: str | None = None, follow_links: bool = False) -> list[Input]:
    """Explicitly given URLs (one ingest batch), judged by name: a printable name that
    ``judge_listing`` made for an undecodable local file name is recognised again. pattern: the
    source's glob, whose folder a local link must not leave (unless ``follow_links``)."""
    root = None if pattern is None else listing_root(pattern, follow_links)
    out = []
    for u in urls:
        entry = judge(u, None, root, pattern)
        if entry[1] is None and "\\x" in u and _is_local(u) and not os.path.lexists(u) \
                and os.path.lexists(_unescape(u)):
            entry = (u, R_INVALID_FILE_NAME)
        out.append(entry)
    return out


def _is_local(url: str) -> bool:
    """Whether url names a path on this machine's disk (as fsspec opens it)."""
    return is_local_fs(get_fs(url)[0])


def judge_listing(fs: AbstractFileSystem, path: str, info: dict, root: str | None = None,
                  pattern: str | None = None) -> tuple[str, int, str | None]:
    """One entry of a detailed listing -> (URL or printable name, size, skip reason or None).

    For listings that must name every match (the ingest ledger): a link to a regular file is a
    file of its target's size; a directory, FIFO, device, dangling link, link out of ``root``
    (``listing_root``), undecodable or hidden name is kept with its reason (size 0), so the reader
    counts it as one rejected input.
    """
    url = full_url(fs, path)
    url, skip = judge(url, info.get("type"), root, pattern)
    size = int(info.get("size") or 0)
    if skip is None and info.get("type", "file") != "file":
        problem = local_file_problem(url) if _is_local(url) else (R_NOT_A_FILE, str(info.get("type")))
        if problem is None:
            size = os.stat(path).st_size
        else:
            skip = problem[0]
    return url, (0 if skip else size), skip


def local_file_problem(url: str) -> tuple[str, str] | None:
    """For a local path: (reason, detail) when it is not a readable regular file, else None.

    Checked before opening: opening a FIFO would block the worker forever, a directory raises.
    Remote stores hold only objects (their 'directories' are caught by list_inputs).
    """
    fs, path = get_fs(url)
    if not is_local_fs(fs):
        return None
    try:
        mode = os.stat(path).st_mode  # follows links: a dangling or looping link fails here
    except OSError as e:
        return R_UNREADABLE, f"{type(e).__name__}: {e.strerror}"
    if stat.S_ISREG(mode):
        return None
    kind = "directory" if stat.S_ISDIR(mode) else "fifo" if stat.S_ISFIFO(mode) else \
        "socket" if stat.S_ISSOCK(mode) else "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file"
    return R_NOT_A_FILE, kind
