"""The build report: where every record went, why, and how document lengths changed.

Written at the corpus root right after the manifest commits:

* ``report.json``: per-source accounting (input / kept / filtered / duplicate / rejected, with
  reasons), reason totals, and document-length histograms before and after cleaning;
* ``report.html``: the same as tables plus two plots, self-contained (PNGs embedded as base64);
* ``report-reasons.png``, ``report-lengths.png``: the plots as files.

Length histograms are computed inside the pipeline by a CombineFn over fixed log-scale bins of
word counts (combinable, tiny accumulators): no stage ever collects documents.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from pipelines.records import Document
from schemas.storage import join, write_bytes_atomic, write_text_atomic

REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
REASONS_PNG = "report-reasons.png"
LENGTHS_PNG = "report-lengths.png"
ALL = "(all)"

# Bin 0 holds empty documents; bin k >= 1 holds [10**((k-1)/BINS_PER_DECADE), 10**(k/BINS_PER_DECADE)) words.
BINS_PER_DECADE = 4
DECADES = 7  # up to 10 million words; longer documents land in the last bin
NUM_BINS = 1 + BINS_PER_DECADE * DECADES


def bin_edges() -> list[float]:
    """Lower edges of the bins (words): 0, then 1, 10**0.25, ... (the last bin is open-ended)."""
    return [0.0] + [10 ** ((k - 1) / BINS_PER_DECADE) for k in range(1, NUM_BINS)]


def length_bin(words: int) -> int:
    """The histogram bin of a document with `words` words."""
    if words <= 0:
        return 0
    k = int(math.floor(math.log10(words) * BINS_PER_DECADE + 1e-9)) + 1
    return min(k, NUM_BINS - 1)


def count_words(text: str) -> int:
    return len(text.split())


class LengthHistogram(beam.CombineFn):
    """Documents -> {source: counts per length bin}, plus an ALL entry; accumulators merge by addition."""

    def create_accumulator(self) -> dict[str, list[int]]:
        return {}

    def add_input(self, acc: dict[str, list[int]], doc: Document) -> dict[str, list[int]]:
        b = length_bin(count_words(doc.text))
        for key in (doc.source, ALL):
            counts = acc.get(key)
            if counts is None:
                counts = acc[key] = [0] * NUM_BINS
            counts[b] += 1
        return acc

    def merge_accumulators(self, accs: Iterable[dict[str, list[int]]]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for acc in accs:
            for key, counts in acc.items():
                mine = out.get(key)
                if mine is None:
                    out[key] = list(counts)
                else:
                    for i, c in enumerate(counts):
                        mine[i] += c
        return out

    def extract_output(self, acc: dict[str, list[int]]) -> dict[str, list[int]]:
        return dict(sorted(acc.items()))


# ------------------------------------------------------------------ report content

def build_report(manifest: dict[str, Any], before: dict[str, list[int]], after: dict[str, list[int]]) -> dict[str, Any]:
    """The report as plain JSON-able data (deterministic: sorted keys, no wall-clock fields)."""
    sources: dict[str, Any] = {}
    reasons: dict[str, int] = {}
    for name, a in sorted(manifest.get("accounting", {}).items()):
        row = {
            "input": a.get("input", 0),
            "kept": a.get("kept", 0),
            "filtered": sum(a.get("filtered", {}).values()),
            "duplicate": sum(a.get("duplicate", {}).values()),
            "rejected": sum(a.get("rejected", {}).values()),
            "reasons": {f"{bucket}:{r}": n for bucket in ("filtered", "duplicate", "rejected")
                        for r, n in sorted(a.get(bucket, {}).items())},
        }
        row["balanced"] = row["input"] == row["kept"] + row["filtered"] + row["duplicate"] + row["rejected"]
        sources[name] = row
        for k, n in row["reasons"].items():
            reasons[k] = reasons.get(k, 0) + n
    totals = {k: sum(s[k] for s in sources.values()) for k in ("input", "kept", "filtered", "duplicate", "rejected")}
    return {
        "kind": "shardforge-build-report",
        "sources": sources,
        "totals": totals,
        "reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        "lengths": {"unit": "words", "bin_lower_edges": bin_edges(), "before_clean": before, "after_clean": after},
        "shards": len(manifest.get("shards", [])),
        "totals_by_split": manifest.get("totals", {}),
        "counters": manifest.get("counters", {}),
    }


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    # No Software/date metadata: the same report gives the same bytes.
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


BUCKET_COLORS = {"filtered": "#e69f00", "duplicate": "#56b4e9", "rejected": "#d55e00"}


def plot_reasons(report: dict[str, Any]) -> bytes:
    """Horizontal bars: records per bucket:reason, all sources together, largest on top."""
    from matplotlib.ticker import MaxNLocator

    items = list(report["reasons"].items())
    fig = _figure(8, max(2.0, 0.35 * len(items) + 1.2))
    ax = fig.add_subplot(1, 1, 1)
    if not items:
        ax.text(0.5, 0.5, "every record was kept", ha="center", va="center")
        ax.set_axis_off()
        return _png(fig)
    labels = [k for k, _ in items][::-1]
    values = [v for _, v in items][::-1]
    colors = [BUCKET_COLORS.get(k.split(":", 1)[0], "gray") for k in labels]
    bars = ax.barh(range(len(labels)), values, color=colors)
    ax.set_yticks(range(len(labels)), labels=labels, fontsize=9)
    for bar, v in zip(bars, values, strict=True):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {v}", va="center", fontsize=8)
    ax.set_xlabel("records")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"Records not kept, by reason ({report['totals']['input']} in, {report['totals']['kept']} kept)")
    ax.margins(x=0.12)
    fig.tight_layout()
    return _png(fig)


def plot_lengths(report: dict[str, Any]) -> bytes:
    """Length histograms (log-scale word bins) before and after cleaning, per source and overall."""
    lengths = report["lengths"]
    before, after = lengths["before_clean"], lengths["after_clean"]
    keys = [ALL] + sorted(k for k in set(before) | set(after) if k != ALL)
    cols = min(2, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig = _figure(5.5 * cols, 3.2 * rows)
    edges = bin_edges()
    # Draw each bin [lo, hi) on a log axis; the empty-document bin is drawn at 0.5 words.
    lows = [0.5] + edges[1:]
    highs = [1.0] + [10 ** (k / BINS_PER_DECADE) for k in range(1, NUM_BINS)]
    # Show the populated range (one empty bin either side), not all seven decades.
    used = [b for d in (before, after) for counts in d.values() for b, c in enumerate(counts) if c]
    x_range = (lows[max(0, min(used) - 1)], highs[min(NUM_BINS - 1, max(used) + 1)]) if used else (0.5, 10.0)
    for i, key in enumerate(keys):
        ax = fig.add_subplot(rows, cols, i + 1)
        for name, data, color in (("before cleaning", before, "#999999"), ("after cleaning + dedupe", after, "#0072b2")):
            counts = data.get(key, [0] * NUM_BINS)
            xs, ys = [], []
            for lo, hi, c in zip(lows, highs, counts, strict=True):
                xs += [lo, hi]
                ys += [c, c]
            ax.fill_between(xs, ys, step=None, alpha=0.35 if name.startswith("before") else 0.6, color=color,
                            label=f"{name} ({sum(counts)})")
        ax.set_xscale("log")
        ax.set_xlim(*x_range)
        ax.set_xlabel("words per document")
        ax.set_ylabel("documents")
        ax.set_title("all sources" if key == ALL else key)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def render_html(report: dict[str, Any], reasons_png: bytes, lengths_png: bytes) -> str:
    """One self-contained HTML page (inline CSS, PNGs as data URIs)."""
    def img(data: bytes, alt: str) -> str:
        return f'<img alt="{alt}" src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">'

    def cell(v: Any) -> str:
        return f"<td>{html.escape(str(v))}</td>"

    rows = []
    for name, s in report["sources"].items():
        reasons = ", ".join(f"{k} {v}" for k, v in s["reasons"].items()) or "-"
        rows.append("<tr>" + cell(name) + "".join(cell(s[k]) for k in ("input", "kept", "filtered", "duplicate",
                                                                     "rejected"))
                    + cell("yes" if s["balanced"] else "NO") + cell(reasons) + "</tr>")
    t = report["totals"]
    rows.append("<tr class=total>" + cell("total") + "".join(cell(t[k]) for k in ("input", "kept", "filtered",
                                                                                  "duplicate", "rejected"))
                + cell("") + cell("") + "</tr>")
    splits = "".join(f"<li>{html.escape(k)}: {v.get('documents', 0)} documents, {v.get('samples', 0)} samples, "
                     f"{v.get('tokens', 0)} tokens in {v.get('shards', 0)} shards</li>"
                     for k, v in sorted(report["totals_by_split"].items()))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>shardforge build report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
td:first-child, td:last-child {{ text-align: left; }}
tr.total td {{ font-weight: bold; }}
img {{ max-width: 100%; display: block; margin: 1em 0; }}
</style></head><body>
<h1>shardforge build report</h1>
<p>Every input record ends in exactly one bucket: input = kept + filtered + duplicate + rejected.
Data: <a href="{REPORT_JSON}">{REPORT_JSON}</a>; reject log with reasons and snippets: <code>rejects/part-*.jsonl</code>.</p>
<h2>Records per source</h2>
<table><tr><th>source</th><th>input</th><th>kept</th><th>filtered</th><th>duplicate</th><th>rejected</th>
<th>balanced</th><th>reasons</th></tr>
{chr(10).join(rows)}
</table>
<ul>{splits}</ul>
<h2>Why records were not kept</h2>
{img(reasons_png, "records per filter / reject reason")}
<h2>Document lengths before and after cleaning</h2>
<p>Log-scale bins of {BINS_PER_DECADE} per decade of words; "after" counts the documents that reach the shards.</p>
{img(lengths_png, "document length histograms")}
</body></html>
"""


def write_report(manifest: dict[str, Any], before: dict[str, list[int]], after: dict[str, list[int]],
                 output: str) -> str:
    """Write report.json, the PNGs and report.html under `output`; returns the HTML's URL."""
    report = build_report(manifest, before, after)
    reasons_png, lengths_png = plot_reasons(report), plot_lengths(report)
    write_text_atomic(join(output, REPORT_JSON), json.dumps(report, sort_keys=True, indent=1) + "\n")
    write_bytes_atomic(join(output, REASONS_PNG), reasons_png)
    write_bytes_atomic(join(output, LENGTHS_PNG), lengths_png)
    url = join(output, REPORT_HTML)
    write_text_atomic(url, render_html(report, reasons_png, lengths_png))
    return url


class WriteReport(beam.PTransform):
    """Committed manifest dict (singleton PCollection) -> report files; emits the report.html URL.

    before / after: Document PCollections (pre-clean and kept); only their length histograms,
    combined in the pipeline, reach the writer.
    """

    def __init__(self, output: str, before, after):
        super().__init__()
        self.output, self.before, self.after = output, before, after

    def expand(self, manifest):
        hist_before = self.before | "LengthsBefore" >> beam.CombineGlobally(LengthHistogram())
        hist_after = self.after | "LengthsAfter" >> beam.CombineGlobally(LengthHistogram())
        output = self.output
        return manifest | "WriteReport" >> beam.Map(
            lambda m, b, a: write_report(m, b, a, output),
            beam.pvalue.AsSingleton(hist_before), beam.pvalue.AsSingleton(hist_after))
