"""Small SVG charts for the build report and the stage timings: bars, histograms, step areas.

Every build writes six plots. Drawn with matplotlib they cost ~3 s per build (0.5 s to import
it, ~2.5 s to lay out and rasterize six figures), a fixed cost larger than all of a tiny
build's data work. The report's charts are simple (bars with labels,
histograms, a log-scale step area), so they are written here as SVG text: milliseconds, no
plotting library in the data job, deterministic bytes (numbers are formatted at a fixed
precision), scalable in the browser and searchable (labels stay text).

A chart is a list of panels laid out in a grid; a panel maps data to its plot area and draws
its frame, ticks, labels and title. Text widths are estimated from the character count
(``CHAR_EM`` of the font size a character), which is enough to size margins for labels.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

FONT = 12  # px, axis labels and titles
SMALL = 10  # px, tick labels and value annotations
CHAR_EM = 0.6  # average advance of a sans-serif character, in font sizes
AXIS = "#444"
GRID = "#e5e5e5"


def esc(text: str) -> str:
    """Text for an SVG text node or attribute."""
    return html.escape(str(text), quote=True)


def num(v: float) -> str:
    """A coordinate with 2 decimals at most, trailing zeros dropped (same value, same bytes)."""
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


MAX_LABEL = 40  # characters of a row label shown; longer ones are cut, whole in their tooltip


def short_label(label: str) -> str:
    """A row label cut to ``MAX_LABEL`` characters (with an ellipsis) so that it cannot squeeze the plot."""
    return label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "\u2026"


def text_width(text: str, size: float = SMALL) -> float:
    """Estimated width of `text` in px at font `size`."""
    return len(str(text)) * size * CHAR_EM


def text(x: float, y: float, s: str, *, size: float = SMALL, anchor: str = "start", weight: str = "",
         baseline: str = "", rotate: bool = False) -> str:
    """One <text> element; `baseline` "middle" centres it vertically on y."""
    attrs = [f'x="{num(x)}"', f'y="{num(y)}"', f'font-size="{num(size)}"']
    if anchor != "start":
        attrs.append(f'text-anchor="{anchor}"')
    if weight:
        attrs.append(f'font-weight="{weight}"')
    if baseline:
        attrs.append(f'dominant-baseline="{baseline}"')
    if rotate:
        attrs.append(f'transform="rotate(-90 {num(x)} {num(y)})"')
    return f"<text {' '.join(attrs)}>{esc(s)}</text>"


def rect(x: float, y: float, w: float, h: float, fill: str, opacity: float = 1.0) -> str:
    """One filled rectangle (negative sizes are clamped to zero)."""
    op = f' fill-opacity="{num(opacity)}"' if opacity != 1.0 else ""
    return f'<rect x="{num(x)}" y="{num(y)}" width="{num(max(0.0, w))}" height="{num(max(0.0, h))}" fill="{fill}"{op}/>'


def nice_ticks(lo: float, hi: float, n: int = 5, integer: bool = False) -> list[float]:
    """Round tick values (1-2-5 steps) covering [lo, hi], about `n` of them."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    if integer:
        step = max(1.0, math.ceil(step))
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    v = first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    return ticks


def tick_label(v: float) -> str:
    """A tick's label: integers without a decimal point, others with up to 2 decimals."""
    if float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:.2f}".rstrip("0")


@dataclass
class Panel:
    """One plot area: data ranges, what is drawn in it, and its labels."""

    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    xlim: tuple[float, float] = (0.0, 1.0)
    ylim: tuple[float, float] = (0.0, 1.0)
    logx: bool = False
    integer_x: bool = False
    integer_y: bool = False
    ylabels: Sequence[str] | None = None  # categorical y: one label per row, bottom row first
    empty: str = ""  # no data: this text in the middle, no axes
    marks: list[Callable[[Callable[[float], float], Callable[[float], float]], str]] = field(default_factory=list)
    legend: list[tuple[str, str, float]] = field(default_factory=list)  # (label, color, opacity)

    def left_margin(self) -> float:
        if self.empty:
            return 10.0
        if self.ylabels is not None:
            widest = max((text_width(short_label(s)) for s in self.ylabels), default=0.0)
        else:
            widest = max((text_width(tick_label(t)) for t in self._yticks()), default=0.0)
        return widest + 14 + (FONT + 6 if self.ylabel else 0)

    def _yticks(self) -> list[float]:
        return nice_ticks(*self.ylim, n=5, integer=self.integer_y)

    def _xticks(self) -> list[float]:
        if self.logx:
            lo, hi = (math.floor(math.log10(v)) for v in self.xlim)
            return [10.0 ** k for k in range(lo, hi + 2) if self.xlim[0] <= 10.0 ** k <= self.xlim[1]]
        return nice_ticks(*self.xlim, n=6, integer=self.integer_x)

    def draw(self, x0: float, y0: float, w: float, h: float) -> str:
        """This panel in the box (x0, y0, w, h) of the figure."""
        out = []
        if self.title:
            out.append(text(x0 + w / 2, y0 + FONT + 2, self.title, size=FONT, anchor="middle", weight="bold"))
        if self.empty:
            out.append(text(x0 + w / 2, y0 + h / 2, self.empty, size=FONT, anchor="middle", baseline="middle"))
            return "".join(out)
        left = self.left_margin()
        xticks = self._xticks()
        # The last tick label is centred on the right edge: leave room for its half.
        right = max(12.0, text_width(tick_label(xticks[-1])) / 2 + 6) if xticks else 12.0
        top, bottom = FONT + 12, SMALL + 12 + (FONT + 6 if self.xlabel else 0)
        px, py, pw, ph = x0 + left, y0 + top, max(10.0, w - left - right), max(10.0, h - top - bottom)
        (xa, xb), (ya, yb) = self.xlim, self.ylim
        if self.logx:
            la, lb = math.log10(xa), math.log10(xb)

            def sx(v: float) -> float:  # clamped to the plot area: marks never spill out of the frame
                return px + min(1.0, max(0.0, (math.log10(max(v, 1e-12)) - la) / (lb - la or 1))) * pw
        else:
            def sx(v: float) -> float:
                return px + min(1.0, max(0.0, (v - xa) / ((xb - xa) or 1))) * pw

        def sy(v: float) -> float:
            return py + ph - (v - ya) / ((yb - ya) or 1) * ph

        if self.ylabels is None:
            for t in self._yticks():
                if ya <= t <= yb:
                    out.append(f'<line x1="{num(px)}" x2="{num(px + pw)}" y1="{num(sy(t))}" y2="{num(sy(t))}" '
                               f'stroke="{GRID}"/>')
                    out.append(text(px - 4, sy(t), tick_label(t), anchor="end", baseline="middle"))
        else:
            for i, label in enumerate(self.ylabels):
                shown = text(px - 4, sy(i), short_label(label), anchor="end", baseline="middle")
                if len(label) <= MAX_LABEL:
                    out.append(shown)
                else:  # cut: the whole label as the row's tooltip
                    out.append(f"<g><title>{esc(label)}</title>{shown}</g>")
        out.append("<g>" + "".join(m(sx, sy) for m in self.marks) + "</g>")
        out.append(f'<rect x="{num(px)}" y="{num(py)}" width="{num(pw)}" height="{num(ph)}" fill="none" '
                   f'stroke="{AXIS}"/>')
        for t in xticks:
            out.append(f'<line x1="{num(sx(t))}" x2="{num(sx(t))}" y1="{num(py + ph)}" y2="{num(py + ph + 4)}" '
                       f'stroke="{AXIS}"/>')
            out.append(text(sx(t), py + ph + 6 + SMALL, tick_label(t), anchor="middle"))
        if self.xlabel:
            out.append(text(px + pw / 2, py + ph + SMALL + 10 + FONT, self.xlabel, size=FONT, anchor="middle"))
        if self.ylabel:
            out.append(text(x0 + FONT, py + ph / 2, self.ylabel, size=FONT, anchor="middle", rotate=True))
        lx = px + pw - 8 - max((text_width(label) for label, _, _ in self.legend), default=0.0) - 16
        for i, (label, color, opacity) in enumerate(self.legend):
            ly = py + 8 + i * (SMALL + 6)
            out.append(rect(lx, ly - 5, 10, 10, color, opacity))
            out.append(text(lx + 14, ly, label, baseline="middle"))
        return "".join(out)


def figure(panels: Sequence[Panel], *, width: float, panel_height: float, cols: int = 1, title: str = "") -> str:
    """Panels in a grid of `cols` columns, as one standalone SVG document."""
    cols = max(1, min(cols, len(panels)))
    rows = math.ceil(len(panels) / cols)
    pw = width / cols
    height = rows * panel_height + 8
    body = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(width)}" height="{num(height)}" '
            f'viewBox="0 0 {num(width)} {num(height)}" font-family="sans-serif" fill="#222" role="img">']
    if title:
        body.append(f"<title>{esc(title)}</title>")
    body.append(f'<rect width="{num(width)}" height="{num(height)}" fill="#fff"/>')
    for i, p in enumerate(panels):
        body.append(p.draw((i % cols) * pw, 4 + (i // cols) * panel_height, pw, panel_height))
    body.append("</svg>")
    return "".join(body) + "\n"


# ---------------------------------------------------------------- marks (drawn through a panel's scales)

def hbars(values: Sequence[float], colors: Sequence[str], notes: Sequence[str] = ()) -> Callable:
    """Horizontal bars, one per row (row i centred at y=i), each with an optional note at its end."""
    def draw(sx, sy) -> str:
        parts = []
        band = abs(sy(0) - sy(1))  # one row's height
        for i, (v, c) in enumerate(zip(values, colors, strict=True)):
            y, hb = sy(i), band * 0.8
            parts.append(rect(sx(0), y - hb / 2, sx(v) - sx(0), hb, c))
            if i < len(notes):
                parts.append(text(sx(v) + 3, y, notes[i], baseline="middle"))
        return "".join(parts)
    return draw


def vbars(lefts: Sequence[float], heights: Sequence[float], width: float, color: str) -> Callable:
    """Vertical bars from y=0, each covering [left, left + width) on x."""
    def draw(sx, sy) -> str:
        return "".join(rect(sx(x), sy(h), sx(x + width) - sx(x), sy(0) - sy(h), color)
                       for x, h in zip(lefts, heights, strict=True) if h)
    return draw


def step_area(lows: Sequence[float], highs: Sequence[float], counts: Sequence[float], color: str,
              opacity: float) -> Callable:
    """A filled histogram outline: each bin [low, high) at its count, down to y=0 at both ends."""
    def draw(sx, sy) -> str:
        pts = [(sx(lows[0]), sy(0))]
        for lo, hi, c in zip(lows, highs, counts, strict=True):
            pts += [(sx(lo), sy(c)), (sx(hi), sy(c))]
        pts.append((sx(highs[-1]), sy(0)))
        coords = " ".join(f"{num(x)},{num(y)}" for x, y in pts)
        return f'<polygon points="{coords}" fill="{color}" fill-opacity="{num(opacity)}" stroke="{color}"/>'
    return draw


def hbar_chart(title: str, labels: Sequence[str], values: Sequence[float], colors: Sequence[str],
               notes: Sequence[str], xlabel: str, *, xmax: float | None = None, integer_x: bool = False,
               width: float = 800) -> str:
    """One horizontal bar chart, rows top to bottom in the given order, notes after each bar."""
    labels, values, colors, notes = labels[::-1], values[::-1], colors[::-1], notes[::-1]
    top = max(values, default=0.0) or 1.0
    # Room on the right for the longest note, in data units.
    longest = max((text_width(n) for n in notes), default=0.0)
    hi = xmax if xmax is not None else top * (1 + min(1.0, (longest + 10) / (width * 0.6)))
    panel = Panel(title=title, xlabel=xlabel, xlim=(0.0, hi), ylim=(-0.6, len(labels) - 0.4), ylabels=labels,
                  integer_x=integer_x, marks=[hbars(values, colors, notes)])
    return figure([panel], width=width, panel_height=max(120.0, 24 * len(labels) + 70), title=title)


def message_chart(title: str, message: str, width: float = 800) -> str:
    """A chart with nothing to draw: its title and why."""
    return figure([Panel(title=title, empty=message)], width=width, panel_height=120, title=title)
