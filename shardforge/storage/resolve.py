"""A store whose host name does not resolve, found in milliseconds instead of after the clients' retries.

gcsfs retries a request six times over ~31 s before it gives up on a name that does not resolve
(and asks for a bucket's type first, the same way): a build of ``gs://`` input on a machine
without network took 61 s to say "cannot reach storage.googleapis.com". A command's process
(``shardforge.console.run.run_cli`` sets ``SHARDFORGE_CHECK_HOSTS=1`` unless it is set: ``0`` turns
the check off) resolves each store's host once, the first time a URL on it is opened: a name that
does not resolve is raised at once as ``HostUnresolved``, which the command prints as its one line.
Only where it cannot mislead: not behind a proxy (the proxy resolves names, not this machine), and
only for the hosts a client is sure to connect to (the URL's own for http(s), gcsfs's endpoint, an
S3 endpoint set explicitly; AWS's regional names are left to the client). Workers of a distributed
job elsewhere never check (they do not inherit the variable): a name that fails to resolve there for
a moment is the client's to retry. A host that resolved once is not asked again.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from shardforge.storage.retry import OPERATION_ATTR

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
# getaddrinfo's answers that mean the name does not resolve here (not a malformed request).
_UNRESOLVED = {socket.EAI_NONAME, socket.EAI_AGAIN, getattr(socket, "EAI_FAIL", None),
               getattr(socket, "EAI_NODATA", None)} - {None}
S3_ENDPOINT_VARIABLES = ("FSSPEC_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")

CHECK_VARIABLE = "SHARDFORGE_CHECK_HOSTS"
_resolved: set[tuple[str, int]] = set()


class HostUnresolved(OSError):
    """A store's host name that does not resolve on this machine (``host``, ``port``, ``os_error``: the
    attributes the one-line error of an unreachable store reads, as on aiohttp's connector error)."""

    def __init__(self, host: str, port: int, error: socket.gaierror):
        super().__init__(error.errno, error.strerror)
        self.host, self.port, self.os_error = host, port, error


GCS_DEFAULT = "https://storage.googleapis.com"
GCS_ENDPOINT_VARIABLES = ("FSSPEC_GCS_ENDPOINT_URL", "FSSPEC_GS_ENDPOINT_URL")


def endpoint(url: str) -> tuple[str, int] | None:
    """(host, port) the store client of url connects to, read from the URL and the environment as the
    clients read them (before a client is made: gcsfs looks for credentials first, ~18 s offline); None
    where that is not certain (an S3 URL without an endpoint setting, a local path)."""
    protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
    if protocol in ("gs", "gcs"):
        emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
        location = (next((os.environ[v] for v in GCS_ENDPOINT_VARIABLES if os.environ.get(v)), None)
                    or (emulator if emulator not in ("", "default") else GCS_DEFAULT))
        if "://" not in location:
            location = f"http://{location}"
    elif protocol in ("s3", "s3a"):
        location = next((os.environ[v] for v in S3_ENDPOINT_VARIABLES if os.environ.get(v)), None)
    elif protocol in ("http", "https"):
        location = url
    else:
        return None
    if not location:
        return None
    parts = urlsplit(location)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname else None


def check_resolves(url: str, redact: Callable[[str], str]) -> None:
    """Raise HostUnresolved (its operation: opening ``redact(url)``) when ``SHARDFORGE_CHECK_HOSTS`` is on
    and url's store host does not resolve; each host that resolves is not asked again."""
    if os.environ.get(CHECK_VARIABLE, "0") in ("", "0") or any(os.environ.get(v) for v in PROXY_VARIABLES):
        return
    where = endpoint(url)
    if where is None or where in _resolved:
        return
    try:
        socket.getaddrinfo(where[0], where[1], type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        if e.errno not in _UNRESOLVED:
            return
        err = HostUnresolved(where[0], where[1], e)
        setattr(err, OPERATION_ATTR, f"open {redact(url)}")
        raise err from e
    _resolved.add(where)
