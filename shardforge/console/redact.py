"""Credentials never printed: every message, traceback, log line and printed line of a CLI goes through
`redact_text` (``run_cli`` installs the log filter and the ``RedactingStream`` on stdout and stderr).

A URL that carries credentials (``s3://KEY:SECRET@bucket``, ``?token=…``,
``?X-Goog-Signature=…``, ``sig=…``) is printed the way manifests record it
(`storage.redact_url`: userinfo and credential parameters dropped), and the
credentials seen on this process's command line are masked wherever they appear.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import re
import sys
import traceback
from collections.abc import Iterator
from typing import Any, TextIO

from schemas.errors import UserError

# A URL inside free text: scheme://, then anything up to white space or a quote/bracket.
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`\]\[)(]+")


# Parameter names that carry credentials (the rule of storage.redact_url).
_SECRET_PARAM = re.compile(r"token|secret|key|sig|password|credential", re.IGNORECASE)
# Credentials seen on this process's command line: libraries quote them outside any URL
# (botocore: 'Invalid bucket name "KEY:SECRET@bucket"'), so they are masked wherever they appear.
_secrets: set[str] = set()
MASK = "***"


def names_a_secret(name: str) -> bool:
    """Whether a parameter or key of this name carries a credential (``hf_token``, ``aws_secret_access_key``)."""
    return _SECRET_PARAM.search(name) is not None


def register_secrets(args: list[str]) -> None:
    """Remember the credentials inside URL arguments (userinfo, credential query values) to mask them."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    for arg in args:
        for m in _URL_IN_TEXT.finditer(arg):
            try:
                parts = urlsplit(m.group(0))
            except ValueError:
                continue
            if "@" in parts.netloc:
                userinfo = parts.netloc.rsplit("@", 1)[0]
                _secrets.update(s for part in userinfo.split(":", 1) for s in (part, unquote(part)))
                # ... and as HTTP Basic auth sends them (an Authorization header quoted in an error)
                _secrets.add(base64.b64encode(unquote(userinfo).encode()).decode("ascii"))
            _secrets.update(v for k, v in parse_qsl(parts.query, keep_blank_values=True) if names_a_secret(k))
    _secrets.discard("")


# Object stores whose filesystems take no credentials from the URL: s3fs / gcsfs read
# 's3://KEY:SECRET@bucket' as a bucket named 'KEY:SECRET@bucket' (and botocore quotes it back).
_NO_URL_CREDENTIALS = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss")


def refuse_url_credentials(args: list[str]) -> None:
    """UserError for an object-store URL argument carrying user:password@ (never accepted; never echoed)."""
    for arg in args:
        for m in _URL_IN_TEXT.finditer(arg):
            scheme, _, rest = m.group(0).partition("://")
            if scheme.lower() in _NO_URL_CREDENTIALS and "@" in rest.split("/", 1)[0]:
                raise UserError(
                    f"{redact_text(m.group(0))}: credentials inside a {scheme}:// URL are not supported (the "
                    f"part before @ would be taken as the bucket name); give them through the environment "
                    "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE; GOOGLE_APPLICATION_CREDENTIALS)")


def config_texts(args: list[str]) -> list[str]:
    """The text of each config file the arguments name (``--config FILE``, ``--config=FILE``), for its URLs'
    credentials to be refused and masked as the command line's are; one that cannot be read is left to the
    command, which says why."""
    urls = [a.split("=", 1)[1] for a in args if a.startswith("--config=")]
    urls += [b for a, b in zip(args, args[1:], strict=False) if a == "--config"]
    texts = []
    for url in urls:
        try:
            from shardforge.storage.contract import config_bytes  # lazy: fsspec only when a config is named

            texts.append(config_bytes(url)[: 1 << 20].decode("utf-8", errors="replace"))
        except Exception:  # noqa: BLE001 - unreadable here is the command's to report, in its words
            continue
    return texts


def redact_text(text: str) -> str:
    """text with every URL in it redacted (credentials dropped) and every known credential masked."""
    if "://" in text:
        # fsspec (~0.2 s) loads only when a URL needs redacting
        from shardforge.storage.urls import redact_url_lenient

        def one(m: re.Match[str]) -> str:
            url = m.group(0)
            tail = url[len(url.rstrip(".,;:!?")):]  # sentence punctuation after a URL stays outside it
            return redact_url_lenient(url[:len(url) - len(tail)]) + tail

        text = _URL_IN_TEXT.sub(one, text)
    for secret in sorted(_secrets, key=len, reverse=True):
        if len(secret) >= 3:  # masking 1-2 characters everywhere would garble the message, not protect it
            text = text.replace(secret, MASK)
    return text


class RedactFilter(logging.Filter):
    """A logging filter that redacts credentials in a record's message, arguments and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: leave it to the handler's error path
            return True
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_text("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
        return True


_REDACT = RedactFilter()


def install_log_redaction() -> None:
    """Redact every log record of this process, whatever logger or handler it goes through.

    A filter on one logger misses records propagated from its children, and a
    filter on a handler misses handlers added later (``basicConfig`` in a CLI,
    Beam's own): so the filter runs in the record factory, once per record.
    """
    factory = logging.getLogRecordFactory()
    if getattr(factory, "redacting", False):
        return

    def make(*args, **kwargs) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        _REDACT.filter(record)
        return record

    make.redacting = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make)


class RedactingStream:
    """A text stream (stdout, stderr) that writes everything through ``redact_text``: what a command
    prints (a summary, a path in a result, a library's warning) carries no credential, whoever prints it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact_text(text) if isinstance(text, str) else text)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def redacted_output() -> Iterator[None]:
    """sys.stdout and sys.stderr through ``RedactingStream`` while the block runs (a command's body)."""
    old = sys.stdout, sys.stderr
    sys.stdout = RedactingStream(old[0])  # type: ignore[assignment]
    sys.stderr = RedactingStream(old[1])  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = old
