"""Wikitext -> the plain prose of an article, as BERT took Wikipedia: text passages only.

BERT's pretraining text (Devlin et al., 2019, section 3.1) kept Wikipedia's "text passages" and
ignored "lists, tables, and headers"; this module does that to one page's wikitext, in passes:

1. comments, and elements whose content is no prose (``<ref>``, ``<math>``, ``<gallery>``, …), go;
2. templates (``{{…}}``, nested, matched by a scanner) go, except a few that render inline text
   (``{{lang|fr|…}}``, ``{{nowrap|…}}``, ``{{convert|5|km}}``, ``{{ndash}}``, …);
3. tables (``{| … |}``, nested) go;
4. internal links become their label (``[[Paris|the capital]]`` -> "the capital", ``[[dog]]s`` ->
   "dogs"); links to files, media and categories (the dump's own namespace names, and the English
   ones), and interlanguage links, go; external links become their label;
5. the remaining tags are unwrapped, bold and italic quotes and magic words go, entities decode;
6. lines: headings, list items, indented lines, table and horizontal-rule lines end a paragraph and
   are dropped; the lines of a paragraph join into one line; the sections after "References",
   "External links", "See also", "Notes", "Further reading" (and their kin) go.

The result is one paragraph per line. Everything is linear in the page's length: templates and
links are matched by one scan each with a stack, never by repeated regular expressions.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Callable

# Elements dropped with their content: references, formulas, media, code and other non-prose.
_DROPPED = ("ref", "references", "math", "chem", "ce", "gallery", "timeline", "syntaxhighlight", "source",
            "score", "imagemap", "graph", "mapframe", "maplink", "templatedata", "hiero", "inputbox",
            "categorytree", "pre", "indicator", "section", "templatestyles")
_COMMENT = re.compile(r"<!--.*?(?:-->|$)", re.S)
_DROPPED_NAMES = "|".join(_DROPPED)
_DROPPED_OPEN = re.compile(rf"<({_DROPPED_NAMES})\b[^<>]*?(/?)>", re.I)
_DROPPED_CLOSE = re.compile(rf"</({_DROPPED_NAMES})\s*>", re.I)
_BR = re.compile(r"<br\s*/?>", re.I)
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*\b[^<>]{0,500}?/?>")
_BRACES = re.compile(r"\{\{|\}\}")
_BRACKETS = re.compile(r"\[\[|\]\]")
# A label stops at the next bracket or line end: an unclosed "[http://…" costs a scan to there, not to the end.
_EXTERNAL = re.compile(r"\[(?:(?:https?:|ftp:)?//|mailto:)[^\s\[\]<>]+(?:[ \t]+([^\[\]\n]*))?\]", re.I)
_QUOTES = re.compile(r"'{2,5}")
_MAGIC = re.compile(r"__[A-Z]{3,}__")
_SPACES = re.compile(r"[ \t\u00a0]+")
_LANGUAGE_PREFIX = re.compile(r"^[a-z]{2,3}(?:-[a-z]{2,8})*$")
_PARENTHETICAL = re.compile(r"\s*\([^()]*\)$")

# Namespaces whose links are no text: file (6), media (-2), category (14), in English, and the old
# "image" aliases other Wikipedias still write (a dump's <siteinfo> names only the canonical names).
LINK_DROP_NAMESPACES = frozenset({"file", "image", "media", "category", "bild", "imagen", "immagine", "afbeelding"})
# Sections whose content is apparatus, not the article's prose (level-2 headings, matched lower case;
# "Literature" or "Publications" under an article's Culture is prose, so only level 2 counts).
APPARATUS_SECTIONS = frozenset({
    "references", "notes", "footnotes", "citations", "sources", "bibliography", "external links",
    "see also", "further reading", "notes and references", "references and notes", "works cited",
    "selected bibliography",
    # the same sections in the largest other Wikipedias (German, French, Spanish, Italian, Dutch)
    "einzelnachweise", "weblinks", "literatur", "siehe auch", "anmerkungen", "quellen",
    "références", "liens externes", "voir aussi", "notes et références", "bibliographie",
    "referencias", "enlaces externos", "véase también", "bibliografía", "notas",
    "note", "bibliografia", "voci correlate", "collegamenti esterni", "altri progetti",
    "referenties", "externe links", "zie ook", "bronnen"})

# Templates that render text inline: name -> how (their first positional argument, or a fixed string).
_FIRST_ARGUMENT = frozenset({"nowrap", "nobr", "nobreak", "small", "smaller", "big", "larger", "em", "strong",
                             "sic", "not a typo", "var", "mvar", "abbr", "abbrlink", "visible anchor", "vanchor",
                             "transl", "transliteration", "nihongo", "linktext", "bigger", "resize",
                             "keep together", "smallcaps", "sc", "uc", "lc"})
_FIXED = {"ndash": "\u2013", "snd": " \u2013 ", "spnd": " \u2013 ", "mdash": "\u2014", "spaced ndash": " \u2013 ",
          "=": "=", "!": "|", "nbsp": " ", "-": "", "'": "'", "' \"": "'\"", "\" '": "\"'", "·": " · ",
          "dot": " · ", "middot": " · ", "bull": " • "}
_RANGE_WORDS = frozenset({"-", "–", "to", "and", "or", "by", "x", "×", "+/-", "±"})
_CASE_FUNCTIONS = {"formatnum": str, "lc": str.lower, "uc": str.upper, "lcfirst": lambda t: t[:1].lower() + t[1:],
                   "ucfirst": lambda t: t[:1].upper() + t[1:]}
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
# What a dropped template leaves: empty or punctuation-only parentheses, a space before punctuation.
_EMPTY_PARENS = re.compile(r"\s*\([\s,;:\u2013\u2014-]*\)")
_PAREN_LEAD = re.compile(r"\(\s*[,;:]\s*")
_SPACE_PUNCT = re.compile(r"\s+([,.;:](?:\s|$)|\))")
_COMMA_RUN = re.compile(r",(?:\s*,)+")


def drop_elements(text: str) -> str:
    """Every non-prose element (``_DROPPED``) gone with its content: ``<ref>…</ref>``, ``<ref … />``;
    an opening tag never closed goes alone. One scan: each opening finds its closing by bisection
    in the closings' positions (a regular expression per opening rescans the text for each)."""
    closings: dict[str, list[tuple[int, int]]] = {}
    for m in _DROPPED_CLOSE.finditer(text):
        closings.setdefault(m.group(1).lower(), []).append((m.start(), m.end()))
    out, pos = [], 0
    for m in _DROPPED_OPEN.finditer(text):
        if m.start() < pos:  # inside an element already dropped
            continue
        out.append(text[pos:m.start()])
        pos = m.end()
        if not m.group(2):
            ends = closings.get(m.group(1).lower(), [])
            i = bisect.bisect_left(ends, (m.end(), 0))
            if i < len(ends):
                pos = ends[i][1]
    out.append(text[pos:])
    return "".join(out)


def split_arguments(inner: str) -> list[str]:
    """A template's inner text split at the pipes outside links (``[[a|b]]`` stays whole)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(inner):
        two = inner[i:i + 2]
        if two == "[[":
            depth, i = depth + 1, i + 2
            continue
        if two == "]]" and depth:
            depth, i = depth - 1, i + 2
            continue
        if inner[i] == "|" and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
        i += 1
    parts.append(inner[start:])
    return parts


def render_template(inner: str) -> str:
    """The inline text of one template (its nested templates already rendered), usually none."""
    parts = split_arguments(inner)
    name = " ".join(parts[0].replace("_", " ").split()).lower()
    if name.startswith(("template:", "subst:", "safesubst:")):
        name = name.split(":", 1)[1].strip()
    function, colon, argument = parts[0].partition(":")
    if colon and function.strip().lower() in _CASE_FUNCTIONS:  # {{formatnum:3003}}, {{lc:Text}}
        return _CASE_FUNCTIONS[function.strip().lower()](argument.strip())
    positional = [p.strip() for p in parts[1:] if "=" not in p.split("[[", 1)[0]]
    if name in _FIXED:
        return _FIXED[name]
    if name == "lang" and len(positional) >= 2:
        return positional[1]
    if name.startswith("lang-") or name in _FIRST_ARGUMENT:
        return positional[0] if positional else ""
    if name == "as of" and positional:  # {{as of|2014|5|lc=y}}: "as of May 2014"
        month = positional[1] if len(positional) > 1 and positional[1].isdigit() else ""
        when = (f"{_MONTHS[int(month) - 1]} " if month and 1 <= int(month) <= 12 else "") + positional[0]
        lower = any(p.replace(" ", "") in ("lc=y", "lc=yes") for p in parts[1:])
        return ("as of " if lower else "As of ") + when
    if name in ("convert", "cvt") and positional:
        if len(positional) >= 4 and positional[1] in _RANGE_WORDS:
            return f"{positional[0]} {positional[1]} {positional[2]} {positional[3]}"
        return f"{positional[0]} {positional[1]}" if len(positional) >= 2 else positional[0]
    return ""


def render_nested(text: str, marks: re.Pattern[str], opening: str, render: Callable[[str], str]) -> str:
    """Every span between an ``opening`` mark and its closing one (``marks`` finds both) replaced by
    ``render`` of its inner text, inner spans first (one scan with a stack); a closing mark without
    its opening is dropped, an opening never closed is dropped and its content kept."""
    stack: list[list[str]] = [[]]
    pos = 0
    for m in marks.finditer(text):
        stack[-1].append(text[pos:m.start()])
        pos = m.end()
        if m.group() == opening:
            stack.append([])
        elif len(stack) > 1:
            inner = "".join(stack.pop())
            stack[-1].append(render(inner))
    stack[-1].append(text[pos:])
    return "".join(piece for frame in stack for piece in frame)  # frames never closed keep their text


def drop_templates(text: str) -> str:
    """Every ``{{…}}`` rendered by ``render_template`` (inner ones first)."""
    return render_nested(text, _BRACES, "{{", render_template)


def drop_tables(text: str) -> str:
    """Lines inside ``{| … |}`` (nested tables too) dropped."""
    out, depth = [], 0
    for line in text.split("\n"):
        s = line.lstrip()
        if s.startswith("{|"):
            depth += 1
            continue
        if depth:
            if s.startswith("|}"):
                depth -= 1
            continue
        out.append(line)
    return "\n".join(out)


def render_link(inner: str, drop_namespaces: frozenset[str]) -> str:
    """The text of one internal link: its label, or its target; none for files, categories and
    interlanguage links."""
    target, sep, label = inner.partition("|")
    target = target.strip()
    shown = target[1:] if target.startswith(":") else target  # [[:Category:X]] links to the page
    if ":" in target:
        prefix = target.lstrip(":").split(":", 1)[0].strip().lower()
        if not target.startswith(":") and (prefix in drop_namespaces or _LANGUAGE_PREFIX.match(prefix) and not sep):
            return ""
    if sep:
        label = label.strip()
        if "|" in label:  # extra pipes: the last part is the label (as MediaWiki renders)
            label = label.rsplit("|", 1)[1].strip()
        return label if label else _PARENTHETICAL.sub("", shown.split(":", 1)[-1])
    return shown.split("#", 1)[0] if not shown.startswith("#") else shown[1:]


def drop_links(text: str, drop_namespaces: frozenset[str]) -> str:
    """Every ``[[…]]`` rendered by ``render_link`` (inner ones first: links in a file's caption)."""
    return render_nested(text, _BRACKETS, "[[", lambda inner: render_link(inner, drop_namespaces))


def _heading(line: str) -> tuple[int, str] | None:
    """(level, title) of a ``== Title ==`` line, else None."""
    if len(line) < 3 or not (line.startswith("=") and line.endswith("=")):
        return None
    level = min(len(line) - len(line.lstrip("=")), len(line) - len(line.rstrip("=")))
    title = line[level:len(line) - level].strip()
    return (level, title) if title else None


def paragraphs(text: str) -> list[str]:
    """The prose paragraphs: headings, lists, indents, table rows and rules end a paragraph and go;
    the sections after an apparatus heading go until the next heading of its level or above."""
    out: list[str] = []
    current: list[str] = []
    skip_level = 0  # > 0: inside an apparatus section of that heading level

    def flush() -> None:
        if current:
            para = _SPACES.sub(" ", " ".join(current))
            para = _SPACE_PUNCT.sub(r"\1", _PAREN_LEAD.sub("(", _EMPTY_PARENS.sub("", para)))
            para = _COMMA_RUN.sub(",", para).strip()
            if para:
                out.append(para)
            current.clear()

    for raw in text.split("\n"):
        line = raw.strip()
        heading = _heading(line)
        if heading is not None:
            flush()
            level, title = heading
            if skip_level and level <= skip_level:
                skip_level = 0
            if not skip_level and level <= 2 and title.lower().strip(" :") in APPARATUS_SECTIONS:
                skip_level = level
            continue
        if skip_level:
            continue
        if not line or line[0] in "*#:;|!" or line.startswith(("{|", "|}", "----")):
            flush()
            continue
        current.append(line)
    flush()
    return out


def plain_text(wikitext: str, drop_namespaces: frozenset[str] = LINK_DROP_NAMESPACES) -> str:
    """The article's prose, one paragraph per line (module docstring)."""
    text = _COMMENT.sub("", wikitext)
    text = drop_elements(text)
    text = drop_templates(text)
    text = drop_tables(text)
    text = drop_links(text, drop_namespaces)
    text = _EXTERNAL.sub(lambda m: m.group(1) or "", text)
    text = _BR.sub(" ", text)
    text = _TAG.sub("", text)
    text = _QUOTES.sub("", text)
    text = _MAGIC.sub("", text)
    text = html.unescape(text)
    return "\n".join(paragraphs(text))
