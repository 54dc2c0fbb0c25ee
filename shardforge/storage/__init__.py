"""Object storage over fsspec, shared by the data job, the trainer and the commands; imports neither Beam nor torch.

- `urls`: joining, filesystems, relative references, redaction.
- `retry`: which errors are transient, and retrying them with backoff.
- `reads`: reads with a readahead cache, listings, globs, hashes.
- `writes`: atomic writes, conditional creates (a written object is never replaced), stale-temporary cleanup.
- `fingerprints`: a reader that checks the bytes it reads against an input's content fingerprint.
- `contract`: the contract's files read from a URL: config files, a corpus's manifests, its tokenizer
  (not exported here: it loads the contract's models).

Callers import the names from the package (`from shardforge.storage import read_bytes`). The floor of
the house with ``schemas``: it imports the contract and nothing else of ours.
"""

from shardforge.storage.fingerprints import InputChanged, check_listed, check_unreadable, open_checked  # noqa: F401
from shardforge.storage.reads import (  # noqa: F401
    AccessDenied,
    denied_message,
    exists,
    expand_glob,
    list_names,
    local_copy,
    open_read,
    raise_if_unreachable,
    read_bytes,
    read_text,
    sha256_bytes,
    sha256_url,
)
from shardforge.storage.retry import (  # noqa: F401
    READ_BLOCK_SIZE,
    RETRY_ATTEMPTS,
    RETRY_BASE_DELAY,
    RETRY_MAX_DELAY,
    IncompleteWriteError,
    access_denied,
    http_status,
    invalidate,
    is_transient,
    is_transient_or_lost,
    retry,
)
from shardforge.storage.urls import (  # noqa: F401
    absolute,
    full_url,
    get_fs,
    is_glob,
    is_local_fs,
    is_within,
    join,
    protocol_of,
    redact_url,
    redact_urls,
    relative_url,
    resolve_url,
    scheme_path,
)
from shardforge.storage.writes import (  # noqa: F401
    STALE_TMP_LOCAL_S,
    STALE_TMP_OBJECT_S,
    TMP_PREFIX,
    TMP_SUFFIX,
    ObjectConflict,
    TemporaryRemoved,
    check_writable,
    create_if_absent,
    info_mtime,
    is_tmp_name,
    makedirs,
    remove_object,
    remove_stale_tmps,
    remove_tree,
    tmp_is_stale,
    tmp_name,
    unless_swept,
    write_bytes_atomic,
    write_stream_atomic,
    write_text_atomic,
)

__all__ = ['AccessDenied', 'IncompleteWriteError', 'InputChanged', 'ObjectConflict', 'READ_BLOCK_SIZE', 'RETRY_ATTEMPTS', 'RETRY_BASE_DELAY', 'RETRY_MAX_DELAY', 'STALE_TMP_LOCAL_S', 'STALE_TMP_OBJECT_S', 'TMP_PREFIX', 'TMP_SUFFIX', 'TemporaryRemoved', 'absolute', 'access_denied', 'check_listed', 'check_unreadable', 'check_writable', 'create_if_absent', 'denied_message', 'exists', 'expand_glob', 'full_url', 'get_fs', 'http_status', 'info_mtime', 'invalidate', 'is_glob', 'is_local_fs', 'is_tmp_name', 'is_transient', 'is_transient_or_lost', 'is_within', 'join', 'list_names', 'local_copy', 'makedirs', 'open_checked', 'open_read', 'protocol_of', 'read_bytes', 'read_text', 'redact_url', 'redact_urls', 'relative_url', 'remove_object', 'remove_stale_tmps', 'remove_tree', 'resolve_url', 'retry', 'scheme_path', 'sha256_bytes', 'sha256_url', 'tmp_is_stale', 'tmp_name', 'unless_swept', 'write_bytes_atomic', 'write_stream_atomic', 'write_text_atomic']
