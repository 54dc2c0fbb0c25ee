"""Normalization of a document's text and the handling of bytes the reader could not decode.

``normalize_text``: NFC, control and format characters stripped, runs of spaces collapsed, lines
trimmed, at most one blank line between paragraphs (the rules downstream rely on it: lines and
paragraphs are plain splits). Undecodable bytes arrive as lone surrogates (``has_invalid_utf8``):
the clean step rejects the document, or repairs them to U+FFFD (``repair_utf8``). ``safe``: a
reject's snippet as valid Unicode. Plain Python, no Beam (``pipelines.clean.rules`` runs it).
"""

from __future__ import annotations

import re
import unicodedata

from pipelines.records import snippet

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200d\u2060\ufeff]")
# A run of spaces that normalization changes: two or more, or any that is not a plain " " (a
# lone plain space stays, so the common case is no replacement at all).
_SPACE = "\t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"  # collapsed to " ", with " " itself
_SPACES = re.compile(f" [ {_SPACE}]+|[{_SPACE}][ {_SPACE}]*")
# More than one blank line: collapsed to one (here, and where the line rules removed lines).
BLANK_LINES = re.compile(r"\n{3,}")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# ASCII characters that are not printable, but for the newline (normalize_text).
_ASCII_CONTROLS = bytes([*range(0x0a), *range(0x0b, 0x20), 0x7f])


def normalize_text(text: str) -> str:
    """NFC, control characters stripped, runs of spaces collapsed, lines trimmed."""
    text = unicodedata.normalize("NFC", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    # Every character the two substitutions remove or collapse (controls, format characters,
    # spaces other than " ") is non-printable: where every line is printable and no "  " occurs
    # (most text, in any script) neither changes anything, so C scans replace two regex passes;
    # and then a line's only whitespace is single spaces, so a line needs trimming only where a
    # space touches a newline.
    if "  " in text or not _printable_lines(text):
        text = _SPACES.sub(" ", _CONTROL.sub("", text))
        trim = True
    else:
        trim = " \n" in text or "\n " in text
    if trim and "\n" in text:
        text = "\n".join(map(str.strip, text.split("\n")))
    if "\n\n\n" in text:
        text = BLANK_LINES.sub("\n\n", text)
    return text.strip()


def _printable_lines(text: str) -> bool:
    """Whether every line of the text is printable (str.isprintable; the newlines aside).

    ASCII: deleting the control bytes from the encoded text (C, a table lookup per byte) is the
    faster test."""
    if text.isascii():
        return len(text.encode("ascii").translate(None, _ASCII_CONTROLS)) == len(text)
    return all(map(str.isprintable, text.split("\n")))


def has_invalid_utf8(text: str) -> bool:
    """True if the text holds lone surrogates: undecodable bytes kept by the reader."""
    if text.isascii():
        return False
    try:  # strict UTF-8 refuses exactly the surrogates, and encodes in C faster than a regex scans
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def repair_utf8(text: str) -> str:
    """Replace lone surrogates (invalid bytes) with U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def safe(text: str) -> str:
    """A snippet that is valid Unicode (rejects are written as UTF-8 JSON)."""
    return repair_utf8(snippet(text))
