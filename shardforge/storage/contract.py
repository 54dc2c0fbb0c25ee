"""The contract's files read from storage: config files, a corpus's manifests and version chain, its tokenizer.

``schemas`` says what these files mean and parses their bytes; this module fetches them from any
fsspec URL, with one clear error for a file that is missing or cannot be read. Both halves and the
commands read a corpus through it, so a corpus that ``validate`` accepts can always be trained.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from schemas.config import MaskingConfig
from schemas.configfile import config_data_from_bytes, config_from_bytes
from schemas.errors import UserError
from schemas.manifest import (
    LATEST_NAME,
    MANIFEST_NAME,
    Manifest,
    check_tokenizer,
    check_tokenizer_model,
    corpus_root,
    latest_manifest_name,
    manifest_url,
    parse_manifest,
    repack_origin,
    valid_fraction_for,
    valid_fraction_for_empty,
)
from schemas.naming import manifest_version, version_manifest_name
from schemas.run_folder import CKPT_DIR, METRICS_FILE
from shardforge.storage.reads import exists, list_names, read_bytes, read_text
from shardforge.storage.retry import not_connected
from shardforge.storage.urls import get_fs, join, redact_url

M = TypeVar("M", bound=BaseModel)


def load_config(cls: type[M], url: str, other_names: dict[str, str] | None = None) -> M:
    """Read a YAML/JSON config from any fsspec URL into cls, with one clear error (other_names: a key's
    other names, which an unknown key is answered with: ``schemas.configfile``)."""
    return config_from_bytes(cls, config_bytes(url), url, other_names)


def load_config_data(cls: type[BaseModel], url: str) -> dict[str, Any]:
    """A config file's mapping, checked against cls as far as it goes: it may set only some sections and
    leave the rest (required keys included) to the command's flags (``schemas.configfile.check_partial_config``)."""
    return config_data_from_bytes(cls, config_bytes(url), url)


# A config read from a pipe (``--config <(...)``, /dev/stdin) can be read once: its bytes, kept for the
# process's later reads (the command line's checks, then the command).
_PIPED: dict[str, bytes] = {}


def config_bytes(url: str) -> bytes:
    """A config file's bytes: any fsspec URL, or a local pipe (read once, then remembered)."""
    if url in _PIPED:
        return _PIPED[url]
    local = url.removeprefix("file://") if "://" not in url or url.startswith("file://") else None
    if local is not None and os.path.exists(local) and not os.path.isfile(local) and not os.path.isdir(local):
        with open(local, "rb") as f:  # a pipe cannot seek, as fsspec's local reads do
            _PIPED[url] = f.read()
        return _PIPED[url]
    try:
        return read_bytes(url)
    except FileNotFoundError:
        raise UserError(f"config not found: {url}") from None





def load_manifest(url: str) -> tuple[Manifest, str]:
    """(manifest, corpus root URL) from a corpus root or manifest URL; one clear error, which tells a
    raw file, a folder that is not a corpus and a path that does not exist apart."""
    murl = manifest_url(url)
    try:
        text = read_text(murl)
    except (FileNotFoundError, NotADirectoryError):
        raise UserError(_no_manifest(url, murl)) from None
    except IsADirectoryError:
        raise UserError(f"{murl} is a directory, not a manifest") from None
    return parse_manifest(text, murl), corpus_root(murl)


HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
KIND_WORDS = {"corpus": "a corpus", "run": "a training run", "model": "a Hugging Face model"}


def _kind(has: Callable[[str], bool]) -> str | None:
    """A folder's kind from whether it holds each mark (``folder_kind`` and ``probed_kind`` differ in how
    they ask)."""
    if has(MANIFEST_NAME) or has(LATEST_NAME):
        return "corpus"
    if has(METRICS_FILE) or has(CKPT_DIR):
        return "run"
    if has("config.json") and any(has(name) for name in HF_WEIGHTS):
        return "model"
    return None


def folder_kind(url: str) -> str | None:
    """What a folder is, by the names directly in it: "corpus" (a manifest, or a served corpus's pointer),
    "run" (a training run: metrics.jsonl or checkpoints/), "model" (a Hugging Face model folder: config.json
    and weights, what export writes), or None (none of them, or nothing there)."""
    return _kind(set(list_names(url)).__contains__)


def probed_kind(url: str) -> str | None:
    """``folder_kind`` by asking for its marks by name (a few small requests) instead of listing the folder,
    for a check on the way to other work: a folder that may hold millions of files (a crawl's prefix).
    A probe that fails counts as not there, without retries: a store may refuse a name that does not exist
    (S3 answers 403 to a reader without ListBucket), and the work itself meets a real failure. A store that
    cannot be connected to at all is raised at once: each probe would wait out the client's retries again."""
    get_fs(url)  # a scheme with no filesystem installed (abfs:// without adlfs) is named by the URL asked for

    def has(name: str) -> bool:
        fs, path = get_fs(join(url, name))
        try:
            return bool(fs.exists(path))
        except Exception as e:  # noqa: BLE001 - see the docstring
            if not_connected(e):
                raise
            return False

    return _kind(has)


def kinds_under(url: str, limit: int = 50) -> str:
    """'; under it: A (a corpus), B (a training run)' for the corpora and runs directly under a folder
    (its first ``limit`` names without a dot looked at: one listing each), or '' where there are none."""
    found = []
    for name in [n for n in list_names(url) if "." not in n][:limit]:
        kind = folder_kind(join(url, name))
        if kind:
            found.append(f"{join(url, name)} ({KIND_WORDS[kind]})")
    return f"; under it: {', '.join(found)}" if found else ""


def enclosing_corpus_or_run(url: str, levels: int = 3) -> tuple[str, str] | None:
    """The nearest folder above url (up to ``levels`` up) that is a corpus or a training run, with its kind
    (a corpus's versions/ or shard intermediates, a run's checkpoints/), or None."""
    for _ in range(levels):
        if "/" not in url.rstrip("/"):
            return None
        url = url.rstrip("/").rsplit("/", 1)[0]
        if not url or url.endswith(":/") or url.endswith(":"):
            return None
        kind = probed_kind(url)  # asked by name: a folder above may hold a crawl's millions of files
        if kind in ("corpus", "run"):
            return url, kind
    return None


def _no_manifest(url: str, murl: str) -> str:
    """Why there is no manifest at murl, in the user's terms: url is a file (raw data, say), a folder
    without a manifest, or nothing at all."""
    root = corpus_root(murl)
    fs, path = get_fs(url)
    try:
        is_file = murl != url and fs.isfile(path)
    except OSError:  # the store's own error comes with the next read
        is_file = False
    if is_file and "/" in url.rstrip("/") and folder_kind(url.rsplit("/", 1)[0]) == "corpus":
        parent = url.rsplit("/", 1)[0]
        return f"{url} is a file of the corpus {parent}: give the corpus itself ({parent}) or its manifest.json"
    if is_file:
        return (f"{url} is a file, not a corpus (a corpus is the folder a build writes: shards and their "
                f"manifest.json): build one from it with `shardforge build --input {url} --output CORPUS`, "
                "then use CORPUS")
    if exists(root):
        kind = folder_kind(root)
        if kind == "run":
            return (f"no manifest at {murl}: {root} is a training run folder, not a corpus (a run's corpus is "
                    f"the --data it trained on; `shardforge status {root}` says where the run stands)")
        if kind == "model":
            return (f"no manifest at {murl}: {root} is a Hugging Face model folder, not a corpus "
                    f"(`shardforge evaluate {root} --data CORPUS` measures it on one)")
        inside = enclosing_corpus_or_run(root)
        if inside is not None and inside[1] == "corpus":
            return (f"no manifest at {murl}: {root} is a folder inside the corpus {inside[0]}: give the corpus "
                    f"itself ({inside[0]}) or its manifest.json")
        if inside is not None:
            return (f"no manifest at {murl}: {root} is a folder inside the training run {inside[0]}, not a "
                    f"corpus (a run's corpus is the --data it trained on; `shardforge status {inside[0]}` "
                    "says where the run stands)")
        under = kinds_under(root)
        if under:
            return f"no manifest at {murl}: {root} is a folder but not a corpus{under}"
        return (f"no manifest at {murl}: {root} is a folder but not a corpus. A build writes the manifest "
                "last, so an unfinished or failed build leaves none; a folder of raw files is built into a "
                f"corpus with `shardforge build --input '{root}/*' --output CORPUS`")
    return f"no manifest at {murl}: {root} does not exist (check the path)"


def latest_manifest_url(root: str) -> str:
    """The URL of a corpus's latest manifest: what ``latest`` names, else ``manifest.json``.

    A served corpus (pipelines.jobs.serve) commits immutable ``manifest-v{N}.json``
    versions, each listing all shards up to N (older shards first, unchanged);
    a follower re-reads this to find new versions.
    """
    root = root.rstrip("/")
    try:
        pointer = read_text(join(root, LATEST_NAME))
    except FileNotFoundError:
        return join(root, MANIFEST_NAME)
    return join(root, latest_manifest_name(pointer, join(root, LATEST_NAME)))


# ---------------------------------------------------------------- the version chain of a served corpus
# Version N is committed as manifest-v{N}.json (schemas.naming.version_manifest_name) and lists
# every shard of versions 1..N; `latest` names the newest one readers should follow.


def committed_versions(root: str) -> list[int]:
    """Version numbers with a committed ``manifest-v{N}.json`` under root, ascending (one listing)."""
    return sorted(n for n in map(manifest_version, list_names(root)) if n is not None)


def load_version(root: str, n: int) -> Manifest:
    """Version n's manifest (``manifest-v{n}.json``); UserError when it is not a valid manifest."""
    url = join(root, version_manifest_name(n))
    return parse_manifest(read_text(url), url)


def read_latest_pointer(root: str) -> int | None:
    """The version the ``latest`` pointer names, or None (no pointer, or it names no version manifest)."""
    try:
        return manifest_version(read_text(join(root, LATEST_NAME)).strip())
    except FileNotFoundError:
        return None


# ---------------------------------------------------------------- the corpus's tokenizer
# One way to open a corpus's tokenizer, shared by validate, inspect, export and the
# trainer: a corpus that validates can then always be trained.


def tokenizer_url(m: Manifest, root: str) -> str:
    """The URL of the corpus's tokenizer model: always under the corpus root (the path rule)."""
    return join(root, m.tokenizer.path)


def read_tokenizer_model(m: Manifest, root: str) -> bytes:
    """The corpus's tokenizer model bytes, checked against the manifest's sha256; one clear error."""
    url = tokenizer_url(m, root)
    try:
        data = read_bytes(url)
    except FileNotFoundError:
        raise UserError(f"tokenizer model {url} named by the manifest does not exist") from None
    except OSError as e:  # a directory, a permission problem
        raise UserError(f"tokenizer model {url} cannot be read: {type(e).__name__}: {e}") from None
    check_tokenizer_model(m, data, url)
    return data


def open_tokenizer(m: Manifest, root: str) -> Any:
    """The corpus's tokenizer (``schemas.tokenizer_files``: SentencePiece or byte-level BPE), as the trainer loads it.

    Checks the file's sha256, that it parses as the kind the manifest records,
    that its size is the manifest's vocab_size and that every special id is
    inside it; UserError otherwise. ImportError when the kind's library is missing.
    """
    from schemas.tokenizer_files import load_tokenizer

    data = read_tokenizer_model(m, root)
    try:
        tok = load_tokenizer(data)
    except UserError as e:
        raise UserError(f"tokenizer model {tokenizer_url(m, root)}: {e}") from None
    check_tokenizer(m, tok, tokenizer_url(m, root))
    return tok


def repack_hint(manifest: Manifest, root: str, flags: dict[str, str]) -> str:
    """How to get a corpus's documents packed with flags changed (``{"--rule": "sop"}``): a repack of the
    corpus, or of the corpus a repack came from (a repack keeps no tokenized documents of its own; the
    repack's rule and length are said again, as its origin's are the default), else a rebuild."""
    source = root if manifest.intermediates.get("tokenized") else repack_origin(manifest)
    if source is not None and source != root:
        flags = {"--rule": manifest.packing_rule, "--max_seq_len": str(manifest.max_seq_len), **flags}
    said = " ".join(f"{flag} {value}" for flag, value in flags.items())
    if source is None:
        return f"it keeps no tokenized documents to repack: build it again with {said}"
    return f"repack it: shardforge repack --tokenized {redact_url(source)} --output NEW {said}"


def more_valid_hint(manifest: Manifest, root: str, masked: int,
                    rate: float = MaskingConfig.model_fields["rate"].default) -> str:
    """How to get a valid split with about FEW_MASKED masked tokens where this one gives ``masked``: the
    repack (or build) with the valid fraction scaled up (``schemas.manifest.valid_fraction_for``); for an
    empty split, the fraction that many tokens at ``rate`` (the trainer's default masking rate unless
    given) take (``valid_fraction_for_empty``)."""
    valid = manifest.totals.get("valid")
    if valid is None or not valid.documents:
        want = valid_fraction_for_empty(sum(t.tokens for t in manifest.totals.values()),
                                        sum(t.documents for t in manifest.totals.values()), rate)
    else:
        want = valid_fraction_for(manifest, masked)
    if want is None:
        return "a larger --valid_fraction holds more"
    return repack_hint(manifest, root, {"--valid_fraction": f"{want:.2g}"})
