"""moto's S3 server with S3's conditional writes made atomic.

Real S3 decides ``PutObject`` with ``If-None-Match: *`` (or ``If-Match``) and stores the object
in one step: of several writers racing for one name exactly one gets 200, the rest 412. That is
how a corpus manifest is committed (``storage.create_if_absent`` via s3fs ``pipe_file(mode="create")``).
moto 5.2's threaded server checks the condition and then stores the object as two steps, so two
racers can both pass the check and the later one overwrites the earlier (the earlier writer then
finds other bytes under the name). The tests run moto through this wrapper, which runs every
conditional request's check-and-store under one lock; its body is read before the lock is taken,
so a slow client never holds other writers up. moto also ignores ``If-None-Match: *`` on CopyObject
(how ``storage.write_stream_atomic(create=True)`` publishes a corpus object without replacing one):
the wrapper answers such a copy 412 when its destination exists, as S3 does. Everything else is moto
as it is.

    python tests/s3_emulator.py -H 127.0.0.1 -p N
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

_lock = threading.Lock()
CONDITIONS = ("HTTP_IF_NONE_MATCH", "HTTP_IF_MATCH")


def atomic_conditions(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """WSGI middleware: conditional writes (PUT / POST with If-None-Match or If-Match) one at a time."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") not in ("PUT", "POST") or not any(h in environ for h in CONDITIONS):
            return app(environ, start_response)
        length = environ.get("CONTENT_LENGTH")
        if length:  # (a chunked body is read by moto, inside the lock)
            environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(int(length)))
        with _lock:
            if _copy_onto_existing(app, environ):
                return _precondition_failed(start_response)
            return list(app(environ, start_response))  # the response is made (and the object stored) inside

    return wrapped


def _copy_onto_existing(app: Callable[..., Iterable[bytes]], environ: dict[str, Any]) -> bool:
    """A CopyObject with ``If-None-Match: *`` whose destination exists (moto 5.2 ignores the header on a
    copy; S3 answers 412): asked of moto itself, with a HEAD of the same path."""
    if environ.get("REQUEST_METHOD") != "PUT" or "HTTP_X_AMZ_COPY_SOURCE" not in environ \
            or environ.get("HTTP_IF_NONE_MATCH") != "*":
        return False
    probe = {k: v for k, v in environ.items() if not k.startswith("HTTP_X_AMZ_COPY") and k not in CONDITIONS}
    probe.update({"REQUEST_METHOD": "HEAD", "QUERY_STRING": "", "CONTENT_LENGTH": "0", "wsgi.input": io.BytesIO()})
    status: list[str] = []
    list(app(probe, lambda s, headers, exc_info=None: status.append(s)))
    return bool(status) and status[0].startswith("200")


def _precondition_failed(start_response: Callable[..., Any]) -> list[bytes]:
    body = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PreconditionFailed</Code><Message>At least one '
            b'of the pre-conditions you specified did not hold</Message><Condition>If-None-Match</Condition>'
            b'<RequestID>emulator</RequestID></Error>')
    start_response("412 Precondition Failed", [("Content-Type", "application/xml"),
                                               ("Content-Length", str(len(body)))])
    return [body]


def main(argv: list[str]) -> None:
    from moto import server

    original = server.DomainDispatcherApplication

    def dispatcher(*args: Any, **kwargs: Any) -> Callable[..., Iterable[bytes]]:
        return atomic_conditions(original(*args, **kwargs))

    server.DomainDispatcherApplication = dispatcher  # moto's main builds its app through this name
    server.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
