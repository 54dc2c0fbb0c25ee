"""The report's charts as SVG text (drawn with the primitives of ``pipelines.report.charts``): records per
reason, document lengths before and after cleaning, dedupe clusters and similarity, token share per
source and packed sequence lengths. Each takes the report record (``pipelines.report.record``).
"""

from __future__ import annotations

from typing import Any

from pipelines.report import charts
from pipelines.report.summaries import ALL, BINS_PER_DECADE, NUM_BINS, SIMILARITY_BINS, bin_edges

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


def plot_lengths(report: dict[str, Any]) -> str:
    """Length histograms (log-scale word bins) before and after cleaning, per source and overall."""
    lengths = report["lengths"]
    before, after = lengths["before_clean"], lengths["after_clean"]
    keys = [ALL] + sorted(k for k in set(before) | set(after) if k != ALL)
    edges = bin_edges()
    # Draw each bin [lo, hi) on a log axis; the empty-document bin is drawn at 0.5 words.
    lows = [0.5] + edges[1:]
    highs = [1.0] + [10 ** (k / BINS_PER_DECADE) for k in range(1, NUM_BINS)]
    # Show the populated range (one empty bin either side), not all seven decades.
    used = [b for d in (before, after) for counts in d.values() for b, c in enumerate(counts) if c]
    x_range = (lows[max(0, min(used) - 1)], highs[min(NUM_BINS - 1, max(used) + 1)]) if used else (0.5, 10.0)
    panels = []
    for key in keys:
        series = [("before cleaning", before.get(key, [0] * NUM_BINS), "#999999", 0.35),
                  ("after cleaning + dedupe", after.get(key, [0] * NUM_BINS), "#0072b2", 0.6)]
        top = max((c for _, counts, _, _ in series for c in counts), default=0) or 1
        panels.append(charts.Panel(
            title="all sources" if key == ALL else key, xlabel="words per document", ylabel="documents",
            xlim=x_range, ylim=(0, top * 1.15), logx=True, integer_y=True,
            marks=[charts.step_area(lows, highs, counts, color, op) for _, counts, color, op in series],
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
            title=f"{split}: {sp['sequences']} sequences, fill {100 * sp['fill_rate']:.1f}%",
            xlabel=f"ids per sequence (max_seq_len {pk['max_seq_len']})", ylabel="sequences",
            xlim=(0, (edges[-1] + pk["bin_width"]) if edges else 1), ylim=(0, (max(sp["counts"], default=0) or 1) * 1.1),
            integer_x=True, integer_y=True, marks=[charts.vbars(edges, sp["counts"], pk["bin_width"], "#cc79a7")]))
    return charts.figure(panels, width=1100, panel_height=320, cols=len(panels),
                         title="packed sequence length histogram")
