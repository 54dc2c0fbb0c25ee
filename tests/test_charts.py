"""pipelines.report.charts: the report's SVG charts are valid SVG, drawn to scale, escaped and deterministic."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest

from pipelines.report import charts

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(("lo", "hi", "integer"), [(0, 1, False), (0, 7, True), (0, 1234, False), (-0.6, 2.6, False),
                                                   (0.5, 0.53, False), (0, 3, True), (5, 5, False)])
def test_nice_ticks_cover_the_range_in_round_steps(lo, hi, integer):
    ticks = charts.nice_ticks(lo, hi, integer=integer)
    assert 2 <= len(ticks) <= 12
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:], strict=False)}
    assert len(steps) == 1
    (step,) = steps
    mantissa = step / 10 ** int(f"{step:e}".split("e")[1])
    assert round(mantissa, 6) in (1, 2, 5)
    assert ticks[0] >= lo - 1e-9 and ticks[0] - step < lo + 1e-9 and ticks[-1] <= max(hi, lo + 1) + 1e-9
    if integer:
        assert all(float(t).is_integer() for t in ticks)


def test_bars_are_drawn_to_scale_with_escaped_labels():
    labels = ["a <b> & \"c\"", "short", "third"]
    svg = charts.hbar_chart("T & <t>", labels, [10.0, 5.0, 2.5], ["#111", "#222", "#333"], ["10", "5", "2.5"], "x",
                            xmax=20)
    root = ElementTree.fromstring(svg)  # escaping kept it well-formed
    assert root.find(SVG + "title").text == "T & <t>"
    texts = [t.text for t in root.iter(SVG + "text")]
    assert labels[0] in texts and "T & <t>" in texts
    bars = [r for r in root.iter(SVG + "rect") if r.get("fill") in ("#111", "#222", "#333")]
    widths = {r.get("fill"): float(r.get("width")) for r in bars}
    assert widths["#111"] == pytest.approx(2 * widths["#222"], rel=0.01)
    assert widths["#222"] == pytest.approx(2 * widths["#333"], rel=0.01)
    # first label on top
    ys = {r.get("fill"): float(r.get("y")) for r in bars}
    assert ys["#111"] < ys["#222"] < ys["#333"]


def test_marks_stay_inside_the_frame_and_output_is_deterministic():
    panel = charts.Panel(xlim=(1.0, 100.0), ylim=(0, 10), logx=True,
                         marks=[charts.step_area([0.5, 1, 10, 100], [1, 10, 100, 1e6], [1, 5, 8, 3], "#00f", 0.5)])
    svg = charts.figure([panel], width=400, panel_height=200)
    assert svg == charts.figure([panel], width=400, panel_height=200)
    root = ElementTree.fromstring(svg)
    frame = next(r for r in root.iter(SVG + "rect") if r.get("fill") == "none")
    x0, w = float(frame.get("x")), float(frame.get("width"))
    (poly,) = root.iter(SVG + "polygon")
    xs = [float(p.split(",")[0]) for p in poly.get("points").split()]
    assert min(xs) >= x0 - 1e-6 and max(xs) <= x0 + w + 1e-6
    # decade ticks on a log axis
    assert {"1", "10", "100"} <= {t.text for t in root.iter(SVG + "text")}


def test_an_empty_chart_says_why():
    root = ElementTree.fromstring(charts.message_chart("Packed sequences", "no sequences"))
    assert [t.text for t in root.iter(SVG + "text")] == ["Packed sequences", "no sequences"]


def test_a_long_row_label_is_cut_and_kept_whole_in_its_tooltip():
    long = "filtered:" + "x" * 200
    svg = charts.hbar_chart("T", [long, "short"], [3.0, 1.0], ["#111", "#222"], ["3", "1"], "n")
    root = ElementTree.fromstring(svg)
    texts = [t.text for t in root.iter(SVG + "text")]
    assert "short" in texts and long not in texts
    cut = next(t for t in texts if t.startswith("filtered:"))
    assert len(cut) == charts.MAX_LABEL and cut.endswith("\u2026")
    assert [t.text for t in root.iter(SVG + "title")] == ["T", long]
    # the plot keeps most of the width
    frame = next(r for r in root.iter(SVG + "rect") if r.get("fill") == "none")
    assert float(frame.get("width")) > 400
