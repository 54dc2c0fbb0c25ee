"""Retrying transient object-store errors with capped, jittered backoff."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import re
import socket
import time
from collections.abc import Callable
from typing import TypeVar

import fsspec

from schemas.errors import causes

log = logging.getLogger(__name__)
T = TypeVar("T")

READ_BLOCK_SIZE = 8 * 1024 * 1024
RETRY_ATTEMPTS = int(os.environ.get("SHARDFORGE_RETRY_ATTEMPTS", "6"))
RETRY_BASE_DELAY = float(os.environ.get("SHARDFORGE_RETRY_BASE_DELAY", "0.2"))
RETRY_MAX_DELAY = float(os.environ.get("SHARDFORGE_RETRY_MAX_DELAY", "30"))
OPERATION_ATTR = "shardforge_operation"  # set by ``retry`` on an error it gives up on: "read gs://b/o"
EXHAUSTED_ATTR = "shardforge_retries_exhausted"  # set by ``retry`` on a transient error it ran out of tries on

# ---------------------------------------------------------------- retries

# Exception class names (anywhere in the MRO) that mean "the connection or the
# server hiccupped": aiohttp (gcsfs), requests (gcsfs auth / 502 ProxyError),
# botocore (s3fs), http.client and urllib3. Matched by name so that this module
# needs none of those libraries installed.
_TRANSIENT_NAMES = frozenset({
    # aiohttp
    "ClientConnectionError", "ClientConnectorError", "ServerDisconnectedError", "ClientOSError",
    "ClientPayloadError", "ServerTimeoutError", "ConnectionTimeoutError", "SocketTimeoutError",
    # requests / urllib3 / http.client
    "ProxyError", "ChunkedEncodingError", "ConnectTimeout", "ReadTimeout", "Timeout",
    "ProtocolError", "RemoteDisconnected", "IncompleteRead", "ReadTimeoutError", "NewConnectionError",
    # botocore
    "EndpointConnectionError", "ConnectionClosedError", "ConnectTimeoutError", "HTTPClientError",
    "ResponseStreamingError",
    # fsspec
    "FSTimeoutError",
    # aiohttp body framing
    "TransferEncodingError", "ContentLengthError",
})
# S3 / GCS error codes (botocore ClientError.response["Error"]["Code"]) worth retrying.
_TRANSIENT_CODES = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout",
                              "RequestTimeTooSkewed", "Throttling", "ThrottlingException", "503", "500"})
# errno values of connection-level failures, and the ones s3fs maps 5xx / SlowDown to.
_TRANSIENT_ERRNOS = frozenset(getattr(errno, n) for n in (
    "ETIMEDOUT", "ECONNRESET", "ECONNABORTED", "ECONNREFUSED", "EPIPE", "EAGAIN", "EBUSY", "EREMOTEIO",
    "ENETUNREACH", "EHOSTUNREACH") if hasattr(errno, n))
# Only used for errors that carry nothing structured (e.g. a bare RuntimeError
# with the server's reply as text). Word boundaries keep "train-000503.tar" out.
_TRANSIENT_TEXT = re.compile(r"\b(500|502|503|504)\b|Internal Server Error|Service Unavailable|SlowDown|"
                             r"reset by peer|timed out|Connection aborted")


class IncompleteWriteError(OSError):
    """An object that landed with the wrong size: retried like any transient error."""


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an object-store error carries (gcsfs .code, aiohttp .status, botocore .response)."""
    for attr in ("code", "status", "status_code"):
        v = getattr(exc, attr, None)
        if isinstance(v, int) and 100 <= v < 600:
            return v
    resp = getattr(exc, "response", None)
    if isinstance(resp, dict):
        v = resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(v, int):
            return v
    return None


def _is_transient_one(exc: BaseException) -> bool | None:
    """True / False when exc alone decides; None to look at its cause."""
    if isinstance(exc, (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
                        NotADirectoryError)):
        return False
    if isinstance(exc, (TimeoutError, ConnectionError, IncompleteWriteError)):
        return True
    status = http_status(exc)
    if status is not None:
        # 501 Not Implemented is permanent (the emulator answers it for moveTo).
        return (status >= 500 and status != 501) or status in (408, 429)
    resp = getattr(exc, "response", None)
    if isinstance(resp, dict) and resp.get("Error", {}).get("Code") in _TRANSIENT_CODES:
        return True
    if any(t.__name__ in _TRANSIENT_NAMES for t in type(exc).__mro__):
        return True
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return True
    if not isinstance(exc, (ValueError, TypeError, KeyError)) and _TRANSIENT_TEXT.search(str(exc)):
        return True
    return None


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: 5xx / 408 / 429, timeouts, dropped connections.

    Looks through the chain of causes too: s3fs re-raises botocore errors as
    plain OSError with the original as ``__cause__``.
    """
    for e in causes(exc):
        verdict = _is_transient_one(e)
        if verdict is not None:
            return verdict
    return False


# Exception class names (anywhere in the MRO) that mean "no connection could be made": aiohttp's
# connector errors (gcsfs, and s3fs through aiobotocore; DNS, refused, unreachable, TLS),
# botocore's wrapper of them, urllib3's (google.auth over requests).
_NOT_CONNECTED_NAMES = frozenset({"ClientConnectorError", "EndpointConnectionError", "NewConnectionError"})
# The same failures as text: aiohttp's "Cannot connect to host H:P ssl:... [reason]", botocore's
# 'Could not connect to the endpoint URL: "URL"'.
_CONNECT_TEXT = re.compile(r"Cannot connect to host (\S+?)(?: ssl:\S+)? \[(.+?)\]|"
                           r'Could not connect to the endpoint URL: "?([^"\s]+)')


def not_connected(exc: BaseException) -> bool:
    """True when the store could not be connected to at all: its host name did not resolve, or
    the connection was refused or unroutable (not a connection dropped or timed out mid-request).

    Still transient (``is_transient``: infrastructure, never bad data), but the clients retry
    these themselves before raising (gcsfs six times over ~31 s, botocore and s3fs several over
    ~10 s), so ``retry`` does not call again: its six attempts on top made an offline
    ``shardforge validate gs://...`` wait 3 min 46 s for the same error.
    """
    for e in causes(exc):
        if isinstance(e, socket.gaierror) or any(t.__name__ in _NOT_CONNECTED_NAMES for t in type(e).__mro__):
            return True
    return False


def _reason(e: OSError) -> str:
    """An OS error in words: the C library's for a positive errno ("Connection refused", where
    asyncio says "Connect call failed (...)"), else the error's own ("Name or service not known")."""
    if isinstance(e.errno, int) and e.errno > 0:
        return os.strerror(e.errno)
    return e.strerror or str(e)


def unreachable_endpoint(exc: BaseException) -> str | None:
    """``"host:port (reason)"`` when exc (or a cause) says the store could not be connected to, else None.

    Read from aiohttp's connector error (its host, port and OS error), else from the messages
    (botocore names the endpoint URL; a runner that re-raised the error kept only its text)."""
    chain = list(causes(exc))
    for e in chain:  # aiohttp's connector error carries them
        host, os_error = getattr(e, "host", None), getattr(e, "os_error", None)
        if isinstance(host, str) and isinstance(os_error, OSError):
            port = getattr(e, "port", None)
            return f"{host}{f':{port}' if port else ''} ({_reason(os_error)})"
    for e in chain:
        m = _CONNECT_TEXT.search(str(e))
        if m:
            return f"{m.group(1)} ({m.group(2)})" if m.group(1) else m.group(3)
    if not_connected(exc):
        os_error = next((e for e in chain if isinstance(e, OSError) and (e.strerror or e.errno)), None)
        return f"the object store ({_reason(os_error)})" if os_error is not None else "the object store"
    return None


# What a store or web server answers to missing or refused credentials; the name for the one line.
DENIED = {401: "Unauthorized", 403: "Forbidden"}
# Beam keeps a step's error as text: aiohttp's "401, message='Unauthorized', url='…'".
_DENIED_TEXT = re.compile(r"\b(401|403), message='(?:Unauthorized|Forbidden)', url='([^']*)'")


def access_denied(exc: BaseException) -> tuple[int, str] | None:
    """(401 or 403, the URL asked for, '' if unknown) when exc (or a cause) is a store's or web
    server's refusal of the credentials: aiohttp's ClientResponseError (fsspec HTTP, gcsfs), gcsfs's
    HttpError, botocore's ClientError (s3fs); else None."""
    chain = list(causes(exc))
    for e in chain:
        status = http_status(e)
        if status in DENIED:
            info = getattr(e, "request_info", None)
            return status, str(getattr(info, "real_url", "") or "")
    for e in chain:
        m = _DENIED_TEXT.search(str(e))
        if m:
            return int(m.group(1)), m.group(2)
    return None


def is_transient_or_lost(exc: BaseException) -> bool:
    """is_transient, or a FileNotFoundError (a retried request whose first attempt already landed)."""
    return is_transient(exc) or isinstance(exc, FileNotFoundError)


def retry(fn: Callable[[], T], what: str, attempts: int | None = None, on_retry: Callable[[], None] | None = None) -> T:
    """Call fn(), retrying transient errors with jittered exponential backoff.

    gcsfs and s3fs already retry single HTTP requests; this outer loop retries
    whole operations (an upload + move, a full read) after their retries gave
    up, and covers errors they do not retry (a stream cut mid-body, a 502).

    Nested calls do not multiply: an error that an inner ``retry`` (a stat
    inside a write) already ran out of tries on is given up on at once by the
    outer ones, so a store that keeps failing costs one operation's tries, not
    the product of every level's.
    """
    attempts = attempts or RETRY_ATTEMPTS
    for i in range(attempts):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - classified below
            last = i == attempts - 1
            if last or not is_transient(e) or not_connected(e) or retried_out(e):
                if not hasattr(e, OPERATION_ATTR):
                    # What was being done, for the one-line error of an unreachable store. An
                    # attribute, not a note: Beam words a wrapped error by its last line.
                    with contextlib.suppress(AttributeError):
                        setattr(e, OPERATION_ATTR, what)
                if last:
                    with contextlib.suppress(AttributeError):
                        setattr(e, EXHAUSTED_ATTR, True)
                raise
            delay = min(RETRY_MAX_DELAY, RETRY_BASE_DELAY * (2**i)) * (0.5 + random.random())
            log.warning("transient error on %s (%s: %s); retry %d/%d in %.2fs",
                        what, type(e).__name__, e, i + 1, attempts - 1, delay)
            if on_retry is not None:
                on_retry()
            time.sleep(delay)
    raise AssertionError("unreachable")


def retried_out(exc: BaseException) -> bool:
    """Did a ``retry`` already run out of tries on this error, or on one it was raised ``from``?

    Only explicit causes count: an error raised while handling another is a new failure."""
    e: BaseException | None = exc
    for _ in range(16):
        if e is None:
            return False
        if getattr(e, EXHAUSTED_ATTR, False):
            return True
        e = e.__cause__
    return False


def invalidate(fs: fsspec.AbstractFileSystem, path: str | None = None) -> None:
    try:
        fs.invalidate_cache(path)
    except Exception:  # noqa: BLE001 - best effort; some filesystems lack it
        pass
