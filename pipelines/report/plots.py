"""The report's charts as SVG text (drawn with the primitives of ``pipelines.report.charts``): records per
reason, document lengths before and after cleaning, dedupe clusters and similarity, token share per
source and packed sequence lengths. Each takes the report record (``pipelines.report.record``).
"""

from __future__ import annotations

import math
from typing import Any

from pipelines.report import charts
from pipelines.report.summaries import ALL, BINS_PER_DECADE, NUM_BINS, SIMILARITY_BINS, bin_edges
from shardforge.console.words import counted

BUCKET_COLORS = {"filtered": "#e69f00", "duplicate": "#56b4e9", "rejected": "#d55e00"}


def plot_reasons(report: dict[str, Any]) -> str:
    """Horizontal bars: records per bucket:reason, all sources together, largest on top."""
    title = f"Records not kept, by reason ({report['totals']['input']} in, {report['totals']['kept']} kept)"
    items = list(report["reasons"].items())
    if not items:
        return charts.message_chart(title, "every record was kept")
    labels = [k for k, _ in items]
    values = [v for _, v in items]
    colors = [BUCKET_COLORS.get(k.split(":", 1)[0], "gray") for k in labels]
    return charts.hbar_chart(title, labels, values, colors, [str(v) for v in values], "records", integer_x=True)


# At most this many bars in a length histogram: the stored bins (BINS_PER_DECADE a decade) are merged
# into wider ones over the range the documents fill, so a corpus of similar lengths (Brown's texts,
# ~2,000 words each) gets as many bars as one spread over decades.
MAX_LENGTH_BARS = 40


def length_display_bins(series: list[list[int]]) -> list[tuple[float, float, list[int]]]:
    """The bins a length chart draws, chosen from the data: (low, high, which stored bins) for each, over
    the stored bins the series fill, ``MAX_LENGTH_BARS`` at most, each holding at least one whole word
    count (the stored bins below ~40 words are narrower than one word)."""
    used = [b for counts in series for b, c in enumerate(counts) if c]
    if not used:
        return []
    first, last = min(used), max(used)
    groups: list[list[int]] = [[0]] if first == 0 else []
    start = max(first, 1)
    width = max(1, math.ceil((last - start + 1) / MAX_LENGTH_BARS))
    groups += [list(range(k, min(k + width, last + 1))) for k in range(start, last + 1, width)]
    edges = bin_edges()
    out: list[tuple[float, float, list[int]]] = []
    pending: list[int] = []
    for g in groups:
        pending += g
        lo = 0.5 if pending[0] == 0 else edges[pending[0]]
        hi = 1.0 if pending[-1] == 0 else 10 ** (pending[-1] / BINS_PER_DECADE)
        if pending[0] == 0 or math.ceil(hi) > math.ceil(lo) or g is groups[-1]:  # holds a whole word count
            out.append((lo, hi, pending))
            pending = []
    return out


def plot_lengths(report: dict[str, Any]) -> str:
    """Length histograms (log-scale word bins chosen from the data) before and after cleaning, per source
    and overall."""
    lengths = report["lengths"]
    before, after = lengths["before_clean"], lengths["after_clean"]
    keys = [ALL] + sorted(k for k in set(before) | set(after) if k != ALL)
    bins = length_display_bins([counts for d in (before, after) for counts in d.values()])
    lows, highs = [lo for lo, _, _ in bins], [hi for _, hi, _ in bins]
    # The filled range and a margin of one bar's width (on the log axis) either side.
    x_range = (lows[0] * lows[0] / highs[0], highs[-1] * highs[-1] / lows[-1]) if bins else (0.5, 10.0)
    panels = []
    for key in keys:
        series = [("before cleaning", before.get(key, [0] * NUM_BINS), "#999999", 0.35),
                  ("after cleaning + dedupe", after.get(key, [0] * NUM_BINS), "#0072b2", 0.6)]
        drawn = [[sum(counts[b] for b in which) for _, _, which in bins] for _, counts, _, _ in series]
        top = max((c for counts in drawn for c in counts), default=0) or 1
        panels.append(charts.Panel(
            title="all sources" if key == ALL else key, xlabel="words per document", ylabel="documents",
            xlim=x_range, ylim=(0, top * 1.15), logx=True, integer_y=True,
            marks=[charts.step_area(lows, highs, counts, color, op)
                   for counts, (_, _, color, op) in zip(drawn, series, strict=True) if bins],
            legend=[(f"{name} ({sum(counts)})", color, op) for name, counts, color, op in series]))
    cols = min(2, len(keys))
    return charts.figure(panels, width=550 * cols, panel_height=300, cols=cols,
                         title="document lengths before and after cleaning")


def plot_dedupe(report: dict[str, Any]) -> str:
    """Two bar charts: clusters per size (kept + removed), near duplicates per verified similarity."""
    d = report["dedupe"]
    sizes = d["cluster_sizes"]
    if sizes:
        xs = [int(k) for k in sizes]
        counts = list(sizes.values())
        left = charts.Panel(title=f"Duplicate clusters ({sum(counts)})", xlabel="documents per cluster (1 kept + removed)",
                            ylabel="clusters", xlim=(min(xs) - 1, max(xs) + 1), ylim=(0, max(counts) * 1.1),
                            integer_x=True, integer_y=True,
                            marks=[charts.vbars([x - 0.4 for x in xs], counts, 0.8, "#56b4e9")])
    else:
        left = charts.Panel(title="Duplicate clusters", empty="no duplicates removed")
    sim = d["similarity"]
    if sum(sim["counts"]):
        right = charts.Panel(title=f"Removed near duplicates ({sum(sim['counts'])})",
                             xlabel="verified similarity with the kept document", ylabel="near duplicates",
                             xlim=(0.0, 1.0), ylim=(0, max(sim["counts"]) * 1.1), integer_y=True,
                             marks=[charts.vbars(sim["bin_lower_edges"], sim["counts"], 1 / SIMILARITY_BINS,
                                                 "#0072b2")])
    else:
        right = charts.Panel(title="Removed near duplicates", empty="no near duplicates removed")
    return charts.figure([left, right], width=1100, panel_height=320, cols=2,
                         title="dedupe cluster sizes and similarity")


def plot_tokens(report: dict[str, Any]) -> str:
    """Horizontal bars: each source's share of the document tokens."""
    share = report["token_share"]
    if not share:
        return charts.message_chart("Token share per source", "no tokens")
    names = list(share)
    vals = [100 * share[n]["share"] for n in names]
    notes = [f"{100 * share[n]['share']:.1f}% ({share[n]['tokens']})" for n in names]
    return charts.hbar_chart("Token share per source", names, vals, ["#009e73"] * len(names), notes,
                             "% of document tokens", xmax=115)


def plot_packing(report: dict[str, Any]) -> str:
    """Packed sequence length histogram per split, with its fill rate."""
    pk = report["packing"]
    splits = [k for k in pk["splits"] if k != ALL]
    if not splits:
        return charts.message_chart("Packed sequences", "no sequences")
    panels = []
    for split in splits:
        sp = pk["splits"][split]
        edges = pk["bin_lower_edges"]
        panels.append(charts.Panel(
            title=f"{split}: {counted(sp['sequences'], 'sequence')}, fill {100 * sp['fill_rate']:.1f}%",
            xlabel=f"ids per sequence (max_seq_len {pk['max_seq_len']})", ylabel="sequences",
            xlim=(0, (edges[-1] + pk["bin_width"]) if edges else 1), ylim=(0, (max(sp["counts"], default=0) or 1) * 1.1),
            integer_x=True, integer_y=True, marks=[charts.vbars(edges, sp["counts"], pk["bin_width"], "#cc79a7")]))
    return charts.figure(panels, width=1100, panel_height=320, cols=len(panels),
                         title="packed sequence length histogram")
