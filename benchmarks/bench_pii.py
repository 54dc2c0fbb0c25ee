"""Benchmark: the PII stage (``pipelines.clean.pii``) against datatrove's ``PIIFormatter``.

Both replace e-mail and IP addresses (datatrove: IPv4, public only by default, as ours); ours also
phone numbers when asked. On the same texts, in one process each (datatrove runs in its own
virtual environment, ``--datatrove-python``, so our pinned packages stay as they are):

1. **Planted cases** (``tests/pii_corpus.py``): PII of every kind planted in real news articles, and
   numbers, dates, versions, prices, identifiers and private addresses that are not PII. A case is
   right when the output is the article with exactly the value replaced (PII of a kind the tool
   replaces) or unchanged (everything else): recall per kind, and hazards left alone.
2. **Real PII**: the author and maintainer addresses of the installed packages' metadata
   (``*.dist-info/METADATA``, ``Author-email`` / ``Maintainer-email`` headers, parsed with
   ``email.utils``) and, where the machine has them, the maintainers' addresses on Debian
   changelog trailer lines (``/usr/share/doc/*/changelog.Debian.gz``): recall of those addresses.
3. **Precision on real prose**: every replacement either tool makes in prose that holds no PII
   (gensim's Lee news and Wikipedia, the Python documentation's topics), in botocore's AWS
   reference (example addresses and private / documentation IP ranges) and in the metadata and
   changelog texts outside their headers: counted per kind beside what those texts hold (numbers,
   years, prices, decimals, ranges, dotted numbers), with the first few shown (people's addresses
   with the local part cut); ``--list FILE`` writes every one, unmasked, to be judged.
4. **Speed**: MB of UTF-8 text per CPU-second in one process, best of ``--rounds`` alternated rounds,
   on the prose with the AWS reference, and on the metadata with the changelogs (dense in addresses,
   numbers and versions).

``--build MB`` also measures the build's CPU per input MB with the stage on (the defaults) and off
(``--pii none``, the build before the stage) on MB of real prose (``tests/prose.py``) with one
e-mail and one public IP planted in every tenth document, alternated ``--build-rounds`` times.

Run: ``python benchmarks/bench_pii.py --datatrove-python /tmp/dtvenv/bin/python [--build 20]``
(set the venv up with ``python -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install datatrove``).
"""

from __future__ import annotations

import email.utils
import glob
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from benchmarks.common import bench_parser, command_line, machine, run_in_venv, write_results  # noqa: E402
from pipelines.clean.pii import find_spans, redact, rules_of  # noqa: E402
from schemas.config import PiiConfig  # noqa: E402
from tests.pii_corpus import cases  # noqa: E402
from tests.realtext import aws_documents, news_documents, wiki_documents  # noqa: E402

PLACEHOLDERS = {"email": "<EMAIL>", "ip": "<IP>", "phone": "<PHONE>"}
DATATROVE_KINDS = ("email", "ip")

# Run by the datatrove interpreter: format every text, best of N rounds of CPU time, outputs of the last.
DATATROVE_RUNNER = r"""
import json, sys, time
from datatrove.pipeline.formatters import PIIFormatter
texts = json.load(open(sys.argv[1]))
f = PIIFormatter(email_replacement="<EMAIL>", ip_replacement="<IP>")
best = None
for _ in range(int(sys.argv[3])):
    t = time.process_time()
    out = [f.format(x) for x in texts]
    dt = time.process_time() - t
    best = dt if best is None else min(best, dt)
json.dump({"cpu": best, "out": out}, open(sys.argv[2], "w"))
"""


def ours(rules):
    return lambda text: redact(text, rules)[0]


def metadata_texts() -> list[str]:
    site = [p for p in sys.path if p.endswith("site-packages")]
    files = sorted({f for s in site for f in glob.glob(os.path.join(s, "*.dist-info", "METADATA"))})
    return [open(f, encoding="utf-8", errors="replace").read() for f in files]


def debian_changelogs(limit: int = 400) -> list[str]:
    out = []
    for f in sorted(glob.glob("/usr/share/doc/*/changelog.Debian.gz"))[:limit]:
        try:
            out.append(gzip.open(f, "rt", encoding="utf-8", errors="replace").read()[:200_000])
        except OSError:
            continue
    return out


def header_addresses(text: str) -> list[tuple[int, int]]:
    """Spans of the addresses in a METADATA text's Author-email / Maintainer-email headers, and in a
    Debian changelog's trailer lines (`` -- Name <address>  date``): the ground truth of real PII."""
    spans = []
    for m in re.finditer(r"^(?:Author-email|Maintainer-email|Author-Email|Maintainer-Email): (.*)$", text, re.M):
        for _, addr in email.utils.getaddresses([m.group(1)]):
            if "@" in addr:
                i = text.find(addr, m.start(1), m.end(1))
                if i != -1:
                    spans.append((i, i + len(addr)))
    for m in re.finditer(r"^ -- [^<\n]*<([^>\n]+@[^>\n]+)>", text, re.M):
        spans.append(m.span(1))
    return spans


def judge_cases(fn, kinds: tuple[str, ...]) -> dict[str, Any]:
    """Per kind: planted found exactly / planted; hazards unchanged / hazards; the wrong outputs."""
    found: dict[str, list[int]] = {}
    hazards_ok, hazards, wrong = 0, 0, []
    placeholders = {k: PLACEHOLDERS[k] for k in kinds}
    for c in cases():
        out = fn(c.text)
        ok = out == c.expected(placeholders)
        if c.pii and c.kind in kinds:
            f = found.setdefault(c.kind, [0, 0])
            f[0] += ok
            f[1] += 1
        elif not c.pii:
            hazards += 1
            hazards_ok += ok
        if not ok and (c.pii and c.kind in kinds or not c.pii):
            wrong.append(f"{c.kind} `{c.value}`")
    return {"found": found, "hazards_ok": hazards_ok, "hazards": hazards, "wrong": wrong}


def truth_lines(texts: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
    """The header / trailer lines holding real addresses, each with the spans of its addresses."""
    out = []
    for text in texts:
        by_line: dict[int, list[tuple[int, int]]] = {}
        for s, e in header_addresses(text):
            by_line.setdefault(text.rfind("\n", 0, s) + 1, []).append((s, e))
        for start, spans in by_line.items():
            end = text.find("\n", start)
            end = len(text) if end == -1 else end
            out.append((text[start:end], [(s - start, e - start) for s, e in sorted(spans)]))
    return out


def judge_lines(lines: list[tuple[str, list[tuple[int, int]]]], outs: list[str]) -> dict[str, int]:
    """Addresses no longer in the output line (recall), and lines that came out exactly as expected
    (every address replaced by the placeholder, nothing else changed)."""
    gone = total = exact = 0
    for (line, spans), out in zip(lines, outs, strict=True):
        expected, pos = [], 0
        for s, e in spans:
            expected += [line[pos:s], PLACEHOLDERS["email"]]
            pos = e
        expected.append(line[pos:])
        exact += out == "".join(expected)
        for s, e in spans:
            total += 1
            gone += line[s:e] not in out
    return {"addresses": total, "replaced": gone, "lines": len(lines), "lines_exact": exact}


def replacements(texts: list[str], rules) -> list[str]:
    return [f"{kind}: `{t[s:e]}` in «{' '.join(t[max(0, s - 40):e + 40].split())}»"
            for t in texts for s, e, kind in find_spans(t, rules)]


def run_datatrove(python: str, texts: list[str], rounds: int) -> dict[str, Any]:
    return run_in_venv(python, DATATROVE_RUNNER, texts, str(rounds))


def speed(texts: list[str], rounds: int, dt_python: str | None) -> dict[str, float]:
    """MB per CPU-second: ours at the defaults and with every kind, datatrove; alternated rounds, best of each."""
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    fns = {"ours (email + ip, the defaults)": ours(rules_of(PiiConfig())),
           "ours (email + ip + phone)": ours(rules_of(PiiConfig(phone=True)))}
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.process_time()
            for x in texts:
                fn(x)
            best[name] = min(best.get(name, 1e9), time.process_time() - t)
        if dt_python:
            cpu = run_datatrove(dt_python, texts, 1)["cpu"]
            best["datatrove PIIFormatter"] = min(best.get("datatrove PIIFormatter", 1e9), cpu)
    return {k: mb / v for k, v in best.items()}


def build_cpu(mb: float, rounds: int) -> list[str]:
    """The build's CPU-s per input MB, PII stage on (defaults) and off (--pii none), alternated."""
    from tests.prose import write_prose_corpus

    lines = []
    with tempfile.TemporaryDirectory() as d:
        raw = Path(d, "raw.jsonl")
        docs, nbytes = write_prose_corpus(raw, megabytes=mb)
        rows = [json.loads(x) for x in raw.read_text().splitlines()]
        with open(raw, "w") as f:
            for i, r in enumerate(rows):
                if i % 10 == 0:
                    r["text"] += f" Write to reader{i}@example-news.com.au; the logs show 81.2.{i % 250}.160."
                f.write(json.dumps(r) + "\n")
        size = raw.stat().st_size / 1e6
        cpu: dict[str, list[float]] = {"on (email, ip)": [], "off (--pii none)": []}
        for r in range(rounds):
            for name, extra in (("on (email, ip)", []), ("off (--pii none)", ["--pii", "none"])):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run([sys.executable, "-m", "pipelines.build", "--input", f"prose={raw}", "--output",
                                str(Path(d, f"out-{r}-{len(extra)}")), *extra], check=True, capture_output=True)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / size)
        lines.append(f"Build of {size:.1f} MB of real prose (one e-mail and one public IP in every tenth document), "
                     f"`python -m pipelines.build`, CPU-s per input MB, {rounds} alternated rounds:")
        lines.append("")
        lines.append("| PII stage | every run | fastest | median |")
        lines.append("|---|---|---|---|")
        for name, v in cpu.items():
            lines.append(f"| {name} | {', '.join(f'{x:.3f}' for x in v)} | {min(v):.3f} | {sorted(v)[len(v) // 2]:.3f} |")
        on, off = min(cpu["on (email, ip)"]), min(cpu["off (--pii none)"])
        lines.append("")
        lines.append(f"On / off, fastest of each: **{on / off:.3f}x**; medians: "
                     f"{sorted(cpu['on (email, ip)'])[rounds // 2] / sorted(cpu['off (--pii none)'])[rounds // 2]:.3f}x.")
    return lines


def datatrove_replacements(texts: list[str], outs: list[str]) -> list[str]:
    return [f"{'email' if ph == '<EMAIL>' else 'ip'}: «{' '.join(o[max(0, m.start() - 40):m.end() + 40].split())}»"
            for t, o in zip(texts, outs, strict=True) if t != o
            for ph in ("<EMAIL>", "<IP>") for m in re.finditer(re.escape(ph), o)]


def _by_kind(items: list[str]) -> str:
    kinds = {}
    for x in items:
        kind = x.split(":", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "0"


# What a loose pattern would take for PII: counted in each text group, so "0 replacements" means something.
HAZARD_PATTERNS = {
    "numbers": r"\b\d[\d,.]*\b", "years": r"\b(?:1[5-9]|20)\d\d\b", "prices": r"[$£€]\s?\d",
    "decimals": r"\b\d+\.\d+\b", "ranges": r"\b\d+[-–]\d+\b",
    "dotted x.y.z": r"(?<![\d.])\d+\.\d+\.\d+(?![\d.])", "dotted w.x.y.z": r"(?<![\d.])\d+(?:\.\d+){3}(?![\d.])",
    "@": r"@"}
EXAMPLES = 5  # replacements shown per tool and text group (the rest with --list)
_ADDRESS = re.compile(r"([\w.%'+-]+)@([\w-]+(?:\.[\w-]+)+)")
_SHOWN_DOMAINS = ("example.", "anycompany.", "amazon.")  # documentation and service addresses, shown as written


def masked(text: str) -> str:
    """E-mail addresses of people in ``text`` with the local part cut to its first character (the results
    file is committed: it shows which address was taken, not whose); documentation addresses as written."""
    def one(m: re.Match) -> str:
        if any(d in m.group(2).lower() for d in _SHOWN_DOMAINS):
            return m.group()
        return f"{m.group(1)[0]}…@{m.group(2)}"
    return _ADDRESS.sub(one, text)


def text_profile(groups: dict[str, list[str]]) -> list[str]:
    """A table of what each text group holds: MB, and the numbers, dates, prices and dotted numbers in it."""
    out = ["| text | MB | " + " | ".join(HAZARD_PATTERNS) + " |", "|---|---|" + "---|" * len(HAZARD_PATTERNS)]
    for name, texts in groups.items():
        joined = "\n".join(texts)
        counts = [f"{len(re.findall(p, joined)):,}" for p in HAZARD_PATTERNS.values()]
        out.append(f"| {name} | {len(joined.encode()) / 1e6:.1f} | " + " | ".join(counts) + " |")
    return out


def evaluate(tools, dt: str | None, prose, aws, meta, deb) -> tuple[dict, dict, dict, list]:
    """The planted cases, the real header addresses and every replacement in real text, per tool."""
    truth = truth_lines(meta + deb)
    truth_set = {line for line, _ in truth}
    rest = ["\n".join(x for x in t.split("\n") if x not in truth_set) for t in meta + deb]
    groups = {"prose": prose, "aws": aws, REST: rest}
    judged: dict[str, dict[str, Any]] = {}
    real: dict[str, dict[str, int]] = {}
    found: dict[str, dict[str, list[str]]] = {}
    for name, (fn, kinds) in tools.items():
        judged[name] = judge_cases(fn, kinds)
        real[name] = judge_lines(truth, [fn(line) for line, _ in truth])
        rules = rules_of(PiiConfig(phone=kinds == ("email", "ip", "phone")))
        found[name] = {k: replacements(v, rules) for k, v in groups.items()}
    if dt:
        name = "datatrove 0.10 PIIFormatter"
        case_texts = [c.text for c in cases()]
        it = iter(run_datatrove(dt, case_texts + [line for line, _ in truth] + prose + aws + rest, 1)["out"])
        by_case = dict(zip(case_texts, [next(it) for _ in case_texts], strict=True))
        judged[name] = judge_cases(by_case.__getitem__, DATATROVE_KINDS)
        real[name] = judge_lines(truth, [next(it) for _ in truth])
        found[name] = {k: datatrove_replacements(v, [next(it) for _ in v]) for k, v in groups.items()}
    return judged, real, found, [truth, groups]


REST = "metadata and changelogs (outside the header lines)"


def write_tables(judged, real, found, truth, groups, n_meta: int, n_deb: int) -> list[str]:
    out = ["## Planted cases (tests/pii_corpus.py): exact replacements\n",
           "| tool | email | ip | phone | hazards unchanged | wrong outputs |", "|---|---|---|---|---|---|"]
    for name, j in judged.items():
        cols = [f"{j['found'][k][0]}/{j['found'][k][1]}" if k in j["found"] else "n/a" for k in ("email", "ip", "phone")]
        out.append(f"| {name} | {' | '.join(cols)} | {j['hazards_ok']}/{j['hazards']} | {'; '.join(j['wrong']) or '-'} |")
    out += ["", f"## Real addresses: {len(truth)} header lines of {n_meta} package METADATA files and "
            f"{n_deb} Debian changelogs\n", "| tool | addresses replaced | lines exactly right |", "|---|---|---|"]
    for name, r in real.items():
        out.append(f"| {name} | {r['replaced']}/{r['addresses']} ({100 * r['replaced'] / max(1, r['addresses']):.1f} %) "
                   f"| {r['lines_exact']}/{r['lines']} |")
    out += ["", "## What the real texts hold (regular-expression counts: what a loose pattern would take)\n"]
    out += text_profile(groups)
    out += ["", "## Replacements in real text\n",
            "| tool | " + " | ".join(f"{k} ({sum(len(t) for t in v) / 1e6:.1f} MB)" for k, v in groups.items()) + " |",
            "|---|---|---|---|"]
    for name, f in found.items():
        out.append(f"| {name} | " + " | ".join(_by_kind(f[k]) for k in groups) + " |")
    out += ["", f"Examples: the first {EXAMPLES} of each kind, tool and text (people's addresses with the local part cut "
            "to its first character; `--list FILE` writes every one as found, to be judged)."]
    for name, f in found.items():
        for k, items in f.items():
            if items:
                shown = [x for kind in sorted({x.split(":", 1)[0] for x in items})
                         for x in [y for y in items if y.split(":", 1)[0] == kind][:EXAMPLES]]
                out += ["", f"### {name}: {k} ({_by_kind(items)})", ""] + [f"- {masked(x)}" for x in shown]
    return out


def main() -> int:
    ap = bench_parser(__doc__, "pii")
    ap.add_argument("--datatrove-python", default=None, help="Python of a venv with datatrove (skipped without).")
    ap.add_argument("--rounds", type=int, default=5, help="Alternated speed rounds (best of each).")
    ap.add_argument("--build", type=float, default=0.0, help="MB of prose for the build's CPU per MB (0: skip).")
    ap.add_argument("--build-rounds", type=int, default=3)
    ap.add_argument("--list", default=None, metavar="FILE",
                    help="Write every replacement of every tool, unmasked, to FILE (keep it out of the repository).")
    args = ap.parse_args()
    dt = args.datatrove_python
    ph = {f"{k}_placeholder": v for k, v in PLACEHOLDERS.items()}
    tools = {"ours (defaults: email, ip)": (ours(rules_of(PiiConfig(**ph))), DATATROVE_KINDS),
             "ours (every kind)": (ours(rules_of(PiiConfig(phone=True, **ph))), ("email", "ip", "phone"))}
    import pydoc_data.topics

    prose = news_documents() + wiki_documents() + list(pydoc_data.topics.topics.values())
    aws, meta, deb = aws_documents(), metadata_texts(), debian_changelogs()
    judged, real, found, (truth, groups) = evaluate(tools, dt, prose, aws, meta, deb)
    out: list[str] = ["# PII stage vs datatrove's PIIFormatter\n", f"Command: `{command_line()}`  ",
                      f"Machine: {machine('datatrove')}\n"]
    out += write_tables(judged, real, found, truth, groups, len(meta), len(deb))
    if args.list:
        Path(args.list).write_text("\n".join(f"{name} | {k} | {x}" for name, f in found.items()
                                             for k, items in f.items() for x in items) + "\n", encoding="utf-8")
    speeds = {"prose and the AWS reference": prose + aws, "metadata and changelogs": meta + deb}
    rates = {g: speed(texts, args.rounds, dt) for g, texts in speeds.items()}
    sizes = {g: sum(len(t.encode()) for t in texts) / 1e6 for g, texts in speeds.items()}
    out += ["", f"## Speed: MB of UTF-8 text per CPU-second, one process, best of {args.rounds} alternated rounds\n",
            "| tool | " + " | ".join(f"{g} ({sizes[g]:.1f} MB)" for g in speeds) + " |", "|---|---|---|"]
    for tool in rates["prose and the AWS reference"]:
        out.append(f"| {tool} | " + " | ".join(f"{rates[g][tool]:.1f}" for g in speeds) + " |")
    if dt:
        ratios = [rates[g]["ours (email + ip, the defaults)"] / rates[g]["datatrove PIIFormatter"] for g in speeds]
        out.append("\nOurs at the defaults against datatrove: " + ", ".join(
            f"**{r:.2f}x** on {g}" for r, g in zip(ratios, speeds, strict=True)) + ".")
    if args.build:
        out += ["", "## The build's CPU per MB\n"] + build_cpu(args.build, args.build_rounds)
    out.append(f"\n{machine(load=True)}")
    print("\n".join(line for line in out if not line.startswith("- ")))
    write_results(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
