"""PII in the kept documents: e-mail addresses, IP addresses and phone numbers replaced by placeholders.

What the clean step does to a document its rules kept (``pipelines.clean.rules.clean_batch``), as
datatrove's ``PIIFormatter`` and Dolma's PII step do: every match of an enabled kind is replaced by that
kind's placeholder (``PiiConfig``; Dolma's ``|||EMAIL_ADDRESS|||``, ``|||IP_ADDRESS|||``,
``|||PHONE_NUMBER|||`` by default). Each kind is found by its own pattern and checked before it is
replaced, so that prose with numbers, dates, versions and prices stays as written:

- **email**: a local part, ``@`` and a domain of dot-separated labels ending in a letters-only top-level
  domain (or an ``xn--`` one), any case. Looked for only where the text holds an ``@``, and only around
  each ``@`` (the local part at most 64 characters back, the domain at most 10 labels on), so the work
  stays linear whatever the text. Image names (``logo@2x.png``), package pins (``react@18.2.0``),
  decorators (``@app.route``) and SSH remotes (``git@github.com:org/repo``) are not addresses.
  Addresses spelled against harvesters with brackets (``jane (at) example (dot) com``,
  ``jane[at]example.com``) are addresses too.
- **ip**: IPv4 dotted quads whose four parts are 0-255 without leading zeros and not all single digits
  (``3.6.1.0`` is a version; ``8.8.8.8`` a resolver), not part of a longer dotted number
  (``1.2.3.4.5``) nor glued to a word (``v1.2.3.4``), not within three words after a word of versions
  (``version 10.0.0.1``, ``bumped to 12.20.104.1``) nor right after a numbering word (``section
  2.10.1.4``), nor after a version operator (``>=3.10.0.0``);
  IPv6 addresses with ``::`` or eight groups (where the text holds ``:hex:``). With ``ip_public_only``
  (the default, as datatrove) only globally routable addresses are replaced (IPv6: in 2000::/3): private,
  loopback, link-local and documentation ranges (``10.0.0.1``, ``127.0.0.1``, ``192.0.2.44``) name no one.
- **phone** (off by default): North American numbers with separators (``(415) 555-0132``,
  ``415-555-0132``, ``+1 415 555 0132``) and international numbers written with ``+`` and a country
  code (``+44 20 7946 0958``, ``+14155550132``), 8 to 15 digits, not inside a longer number, price or
  identifier. National formats of other countries (``020 7946 0958``) are not recognized.

``redact(text, rules)`` is a pure function of the text and the rules: the same text gives the same
output, counts and examples in any process (the document processes run it). Plain Python, no Beam.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from schemas.config import PiiConfig

KINDS = ("email", "ip", "phone")
CONTEXT_CHARS = 40  # an example shows this many characters either side of its placeholder

# ------------------------------------------------------------------ e-mail

# The local part's characters as addresses are written (RFC 5321 allows more: !#$&*/=?^`{|}~ occur
# in code around an "@" far more often than in addresses: ``@app.route``, x=@y.z).
_LOCAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789%'+_-.")
_LOCAL_MAX = 64
# Anchored at the start of a local part (found by walking back from an "@"): dot-atoms, "@", then 1-10
# labels and a top-level domain of letters (IDN labels may hold any letter; xn-- for punycode TLDs).
_EMAIL = re.compile(
    r"[\w%'+-]+(?:\.[\w%'+-]+)*"
    r"@((?:[^\W_](?:[\w-]{0,61}[^\W_])?\.){1,10}(?:[^\W\d_]{2,63}|xn--[a-z0-9-]{1,59}))(?![\w-]|\.[^\W_])",
    re.IGNORECASE)
# A first domain label like "2x" or "1.5x" (an image at a pixel density: logo@2x.png), or a domain
# whose last label is a file extension: file names, not addresses.
_DENSITY = re.compile(r"\d+(?:\.\d+)?x\.", re.IGNORECASE)
_FILE_TLDS = frozenset({"png", "jpg", "jpeg", "gif", "svg", "webp", "bmp", "ico", "tif", "tiff", "css", "js",
                        "html", "htm", "php", "aspx", "jsp", "json", "xml", "txt", "pdf", "woff", "woff2"})


# Addresses written against harvesters: "jane (at) example (dot) com", "jane[at]example.com". The
# brackets make it an address (a bare " at " is English); looked for only where "at" meets a closing bracket.
_SPELLED_AT = r"\s?[\[({]\s?at\s?[\])}]\s?"
_SPELLED_DOT = r"(?:\.|\s?[\[({]\s?dot\s?[\])}]\s?)"
_EMAIL_SPELLED = re.compile(
    r"(?<![\w.+-])[\w.+-]{1,64}" + _SPELLED_AT + r"(?:[^\W_][\w-]{0,62}" + _SPELLED_DOT + r"){1,10}"
    r"[^\W\d_]{2,63}(?![\w-])", re.IGNORECASE)


def _emails(text: str) -> Iterator[tuple[int, int]]:
    """Spans of the e-mail addresses in ``text``: each ``@`` with its local part and domain."""
    at = text.find("@")
    last_end = 0
    while at != -1:
        start = at
        while start > last_end and at - start < _LOCAL_MAX and (text[start - 1] in _LOCAL_CHARS
                                                                or text[start - 1].isalnum()):
            start -= 1
        while start < at and text[start] == ".":  # a local part does not start with a dot
            start += 1
        m = _EMAIL.match(text, start) if start < at else None
        if m is not None and m.start() == start and text.find("@", start) == at:
            domain, end = m.group(1), m.end()
            ssh = end + 1 < len(text) and text[end] == ":" and not text[end + 1].isspace()  # git@host:org/repo
            if (not ssh and any(c.isalnum() for c in text[start:at]) and not _DENSITY.match(domain)
                    and domain.rsplit(".", 1)[-1].lower() not in _FILE_TLDS):
                yield start, m.end()
                last_end = m.end()
                at = text.find("@", last_end)
                continue
        at = text.find("@", at + 1)


def _spelled_hint(text: str) -> bool:
    """Whether "at" meets a closing bracket somewhere (a one-character find is a memchr in C and a
    closing bracket is rare in prose: 2 GB/s here, four times a regex that looks for "at")."""
    for closer in ")]}":
        i = text.find(closer)
        while i != -1:
            j = i - 1 if i and text[i - 1] == " " else i
            if j >= 2 and text[j - 2:j] in ("at", "AT", "At"):
                return True
            i = text.find(closer, i + 1)
    return False


def _spelled_emails(text: str) -> Iterator[tuple[int, int]]:
    """Spans of addresses with the "@" (and dots) spelled out in brackets."""
    if _spelled_hint(text):
        for m in _EMAIL_SPELLED.finditer(text):
            yield m.span()


# ------------------------------------------------------------------ IP addresses

# The last three parts of a dotted quad: a literal "." first, so the engine skips to the dots in C
# (a pattern that starts with a digit class is ten times slower on prose); the first part is read
# back from the dot.
_QUAD_TAIL = re.compile(r"\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}")
# Words that make a dotted quad within the next three words a version ("Standards-Version updated to
# 3.9.8.0"), and words that make the quad right after them a version or a numbered part.
_VERSION_WORDS = frozenset({
    "version", "versions", "versioned", "ver", "release", "releases", "released", "firmware", "policy", "updated",
    "upgraded", "upgrade", "bump", "bumped", "revision", "rev", "kernel", "build"})
_NUMBERING_WORDS = frozenset({
    "v", "update", "patch", "driver", "section", "sections", "sec", "chapter", "figure", "fig", "table", "step",
    "rule", "article", "paragraph", "para", "clause", "item", "appendix", "part", "oid", "isbn", "doi", "no",
    "number", "§"})
_WORDS_BEFORE = re.compile(r"[^\W\d_]+|§")
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")  # the only IPv6 block assigned to the internet
_IPV6_HINT = re.compile(r":[0-9A-Fa-f]{1,4}:|::")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{1,4}|:)?(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])")


def _octets_ok(quad: str) -> bool:
    """Four parts of 0-255 without leading zeros, not all of one digit: ``2.4.1.0``, ``3.6.1.1`` are how
    versions are written (changelogs are full of them), and the public addresses written so
    (``8.8.8.8``, ``1.1.1.1``) are resolvers that name no one."""
    parts = quad.split(".")
    return (all(len(p) == 1 or (p[0] != "0" and int(p) <= 255) for p in parts)
            and any(len(p) > 1 for p in parts))


def _version_context(text: str, start: int) -> bool:
    """The dotted quad at ``start`` follows a version operator (``>=``, ``==``, ``~``, ``^``), a word of
    versions within three words (``Standards-Version updated to``) or a numbering word right before it
    (``section``)."""
    stripped = text[max(0, start - 48):start].rstrip()
    if stripped.endswith(("=", "<", ">", "~", "^", "@")):
        return True
    words = [w.lower() for w in _WORDS_BEFORE.findall(stripped)[-3:]]
    return bool(words) and (words[-1] in _NUMBERING_WORDS or any(w in _VERSION_WORDS for w in words))


def _ipv4(text: str, public_only: bool) -> Iterator[tuple[int, int]]:
    n = len(text)
    for m in _QUAD_TAIL.finditer(text):
        s, e = m.span()
        first = s
        while first > 0 and s - first < 3 and "0" <= text[first - 1] <= "9":
            first -= 1
        if first == s:
            continue
        s = first
        if s and (text[s - 1].isalnum() or text[s - 1] in "._-"):
            continue  # glued to a word or a longer dotted number
        if e < n and (text[e].isalnum() or text[e] == "_" or (text[e] in ".-" and e + 1 < n and text[e + 1].isdigit())):
            continue
        quad = text[s:e]
        if not _octets_ok(quad) or _version_context(text, s):
            continue
        if public_only and not ipaddress.IPv4Address(quad).is_global:
            continue
        yield s, e


def _ipv6(text: str, public_only: bool) -> Iterator[tuple[int, int]]:
    if _IPV6_HINT.search(text) is None:
        return
    for m in _IPV6.finditer(text):
        cand = m.group()
        groups = cand.split(":")
        if "::" not in cand and len(groups) != 8:
            continue
        if sum(len(g) >= 2 for g in groups) < 2:  # "a::b", "1:2::3": not how addresses are written
            continue
        try:
            addr = ipaddress.IPv6Address(cand)
        except ValueError:
            continue
        if public_only and not (addr.is_global and addr in _GLOBAL_UNICAST):
            continue
        yield m.span()


# ------------------------------------------------------------------ phone numbers

# International numbers: "+", a country code, groups of digits (8-15 digits in all, checked after).
_PHONE_INTL = re.compile(
    r"\+[1-9][0-9]{0,2}[ .-]?(?:\(0\)[ .-]?)?(?:\([0-9]{1,4}\)[ .-]?|[0-9]{1,4}[ .-])(?:[0-9]{1,4}[ .-]){0,4}[0-9]{2,4}"
    r"|\+[1-9][0-9]{7,14}")
# North American numbers with separators, found by their exchange and line ("-555-0132", " 555 0132",
# ".555.0132": three literal-first patterns, each scanned in C), then the area code read back.
_NANP_TAILS = tuple(re.compile(re.escape(sep) + r"[2-9][0-9]{2}[ .-][0-9]{4}") for sep in "-. )")
_AREA = re.compile(r"(?:(?<![0-9])1[ .-])?(?:\([2-9][0-9]{2}\)|[2-9][0-9]{2})\Z")
_PHONE_BEFORE_NOT = frozenset("$€£¥+-./,:#_~^=<>")


def _phone_bounds_ok(text: str, s: int, e: int) -> bool:
    """Not inside a longer number, a price, an identifier or a path."""
    if s and (text[s - 1].isalnum() or text[s - 1] in _PHONE_BEFORE_NOT):
        return False
    n = len(text)
    return not (e < n and (text[e].isalnum() or text[e] in "_+~"
                           or (text[e] in ".,-/:" and e + 1 < n and text[e + 1].isdigit())))


def _phones(text: str) -> Iterator[tuple[int, int]]:
    if "+" in text:
        for m in _PHONE_INTL.finditer(text):
            s, e = m.span()
            if _phone_bounds_ok(text, s, e) and 8 <= sum(c.isdigit() for c in m.group()) <= 15:
                yield s, e
    for tail in _NANP_TAILS:
        for m in tail.finditer(text):
            s, e = m.span()
            end = s
            if text[s] == ")":
                end = s + 1  # "(415)555-0132"
            elif text[s] == " " and s and text[s - 1] == ")":
                pass  # "(415) 555-0132": the area code ends at the ")"
            elif text[s] == " " and (not s or not text[s - 1].isdigit()):
                continue
            elif text[s] != " " and text[e - 5] != text[s]:
                continue  # "415-555.0132": mixed separators
            area = _AREA.search(text, max(0, end - 8), end)
            if area is not None and _phone_bounds_ok(text, area.start(), e):
                yield area.start(), e


# ------------------------------------------------------------------ the rules and the replacement


@dataclass(frozen=True)
class PiiRules:
    """What ``redact`` replaces, and with what (``rules_of`` a ``PiiConfig``)."""

    email: bool = True
    ip: bool = True
    phone: bool = False
    ip_public_only: bool = True
    placeholders: tuple[tuple[str, str], ...] = ()

    @property
    def any(self) -> bool:
        return self.email or self.ip or self.phone


def rules_of(cfg: PiiConfig) -> PiiRules:
    """The rules of a config (cached per setting: the clean step asks once a document)."""
    return _rules(cfg.email, cfg.ip, cfg.phone, cfg.ip_public_only,
                  (("email", cfg.email_placeholder), ("ip", cfg.ip_placeholder), ("phone", cfg.phone_placeholder)))


@lru_cache(maxsize=16)
def _rules(email: bool, ip: bool, phone: bool, public_only: bool,
           placeholders: tuple[tuple[str, str], ...]) -> PiiRules:
    return PiiRules(email, ip, phone, public_only, placeholders)


@dataclass(frozen=True)
class PiiFound:
    """What ``redact`` replaced in one text: per kind, the count and one example (the text around the
    first one, after replacement: the example shows the placeholder, never the value)."""

    counts: tuple[tuple[str, int], ...]
    examples: tuple[tuple[str, str], ...]


def find_spans(text: str, rules: PiiRules) -> list[tuple[int, int, str]]:
    """``(start, end, kind)`` of every match to replace, in text order, none overlapping (where two
    overlap, the earlier one wins; at the same start e-mail before IP before phone)."""
    found: list[tuple[int, int, str]] = []
    if rules.email:
        if "@" in text:
            found += [(s, e, "email") for s, e in _emails(text)]
        found += [(s, e, "email") for s, e in _spelled_emails(text)]
    if rules.ip:
        found += [(s, e, "ip") for s, e in _ipv4(text, rules.ip_public_only)]
        if ":" in text:
            found += [(s, e, "ip") for s, e in _ipv6(text, rules.ip_public_only)]
    if rules.phone:
        found += [(s, e, "phone") for s, e in _phones(text)]
    if len(found) < 2:
        return found
    order = {k: i for i, k in enumerate(KINDS)}
    found.sort(key=lambda f: (f[0], order[f[2]]))
    out: list[tuple[int, int, str]] = []
    for f in found:
        if not out or f[0] >= out[-1][1]:
            out.append(f)
    return out


def redact(text: str, rules: PiiRules) -> tuple[str, PiiFound | None]:
    """``text`` with every enabled kind replaced by its placeholder, and what was replaced (None: nothing)."""
    if not rules.any:
        return text, None
    spans = find_spans(text, rules)
    if not spans:
        return text, None
    holders = dict(rules.placeholders)
    parts: list[str] = []
    counts: dict[str, int] = {}
    firsts: dict[str, int] = {}  # kind -> where its first placeholder starts in the new text
    pos = out_len = 0
    for s, e, kind in spans:
        parts.append(text[pos:s])
        out_len += s - pos
        firsts.setdefault(kind, out_len)
        holder = holders[kind]
        parts.append(holder)
        out_len += len(holder)
        counts[kind] = counts.get(kind, 0) + 1
        pos = e
    parts.append(text[pos:])
    new = "".join(parts)
    examples = tuple((k, _context(new, at, len(holders[k]))) for k, at in sorted(firsts.items()))
    return new, PiiFound(tuple(sorted(counts.items())), examples)


def _context(text: str, at: int, length: int) -> str:
    """The placeholder at ``at`` with up to CONTEXT_CHARS characters either side, on one line."""
    lo, hi = max(0, at - CONTEXT_CHARS), min(len(text), at + length + CONTEXT_CHARS)
    return ("…" if lo else "") + " ".join(text[lo:hi].split()) + ("…" if hi < len(text) else "")


EXAMPLES_PER_KIND = 3


def tally(found: Iterable[tuple[str, str, PiiFound]], k: int = EXAMPLES_PER_KIND) -> dict[str, Any]:
    """``(doc_id, source, PiiFound)`` of documents -> ``{"counts": {source: {kind: [replaced, documents]}},
    "examples": {kind: [[doc_id, source, context], ...]}}``, the ``k`` examples of smallest doc_id per
    kind (the same on any runner): what the report's PII section sums (``pipelines.report.summaries``)."""
    counts: dict[str, dict[str, list[int]]] = {}
    examples: dict[str, list[list[str]]] = {}
    for doc_id, source, f in found:
        per = counts.setdefault(source, {})
        for kind, n in f.counts:
            c = per.setdefault(kind, [0, 0])
            c[0] += n
            c[1] += 1
        for kind, context in f.examples:
            examples.setdefault(kind, []).append([doc_id, source, context])
    return {"counts": counts, "examples": {kind: sorted(v)[:k] for kind, v in examples.items()}}
