"""The report's pages as HTML: the page head and table shared with timings.html, and report.html itself
(tables, warnings, the charts inline as SVG each linking its file, the config and software).
"""

from __future__ import annotations

import html
import json
from typing import Any

from pipelines.report.record import (
    DEDUPE_SVG,
    LENGTHS_SVG,
    PACKING_SVG,
    REASONS_SVG,
    REPORT_JSON,
    TIMINGS_HTML,
    TIMINGS_JSON,
    TOKENS_SVG,
)
from pipelines.report.summaries import ALL, BINS_PER_DECADE, EXAMPLES_PER_REASON
from schemas.config import SAMPLE_BYTES_MIN, SAMPLE_BYTES_PER_PIECE, default_sample_bytes
from shardforge.console.words import counted

# C0 controls but tab, LF and CR, DEL and the C1 controls: HTML forbids them (a raw NUL is a parse
# error), and a snippet of a binary record holds any byte; each is written as its \xNN escape.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0))}


def escape(text: str) -> str:
    """``html.escape``, and control characters as visible ``\\xNN`` text (what HTML may hold)."""
    return html.escape(text).translate(_CONTROLS)


def page_head(title: str) -> str:
    """The opening of a report page (report.html, timings.html): one style for both, up to its <h1>."""
    t = escape(title)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{t}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
td:first-child, td:last-child {{ text-align: left; }}
td.id, span.id {{ white-space: nowrap; text-align: left; }}
tr.total td {{ font-weight: bold; }}
ul.warn {{ color: #a00; }}
pre {{ background: #f6f6f6; padding: 1em; font-size: 85%; }}
figure {{ margin: 1em 0; }}
figure svg {{ max-width: 100%; height: auto; display: block; }}
</style></head><body>
<h1>{t}</h1>"""


class Html(str):
    """A table cell's text that is HTML already (``table`` does not escape it)."""


def doc_id_html(doc_id: str) -> str:
    """A document id kept on one line (a browser would break it at its hyphens)."""
    return f"<span class=id>{escape(doc_id)}</span>"


def table(header: list[str], rows: list[list[Any]], ids: tuple[int, ...] = ()) -> str:
    """An HTML table: one header row, then `rows` (each value escaped unless it is ``Html``; None is an
    empty cell). ids: the columns that hold document ids, each kept on one line."""
    def cell(i: int, v: Any) -> str:
        text = "" if v is None else v if isinstance(v, Html) else escape(str(v))
        return f"<td class=id>{text}</td>" if i in ids else f"<td>{text}</td>"

    return ("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>"
            + "".join("<tr>" + "".join(cell(i, v) for i, v in enumerate(r)) + "</tr>" for r in rows) + "</table>")


def _warnings(report: dict[str, Any]) -> str:
    """The warnings block (top of the page), or nothing."""
    if not report["warnings"]:
        return ""
    return ("<h2>Warnings</h2><ul class=warn>"
            + "".join(f"<li>{escape(w)}</li>" for w in report["warnings"]) + "</ul>")


def _sections(report: dict[str, Any], img) -> str:
    """The page's sections after the lengths: rules, examples, dedupe, tokens, packing, config, software."""
    parts = []
    sources = sorted(report["sources"])
    rc = report["rule_counts"]
    parts.append("<h2>Records removed per rule and source</h2>"
                 + (table(["rule"] + sources + ["all"], [[k] + [v.get(s, 0) for s in sources] + [v[ALL]]
                                                        for k, v in rc.items()]) if rc else "<p>none</p>"))
    ex_rows = []
    for key, exs in report["examples"].items():
        for e in exs:
            what = e.get("snippet")
            if what is None:
                what = Html(f"duplicate of {doc_id_html(e['dup_of'])}"
                            + (" of the dedupe index" if e.get("dup_of_index") else "")
                            + (f" (similarity {e['similarity']:.3f})" if "similarity" in e else ""))
            ex_rows.append([key, e["source"], e["doc_id"], what])
    parts.append(f"<h2>Examples per reason</h2><p>The {EXAMPLES_PER_REASON} smallest doc_ids per reason; "
                 "every record is in the reject log.</p>"
                 + (table(["reason", "source", "doc_id", "snippet / kept document"], ex_rows, ids=(2,))
                    if ex_rows else "<p>none</p>"))
    parts.append("<h2>Dedupe clusters and similarity</h2>" + img(DEDUPE_SVG, "dedupe cluster sizes and similarity"))
    parts.append(_pii_html(report["pii"]) + _decontamination_html(report.get("decontamination")))
    t = report["tokenizer"]
    parts.append("<h2>Tokenizer</h2>" + table(
        ["kind", "model type", "requested vocabulary", "actual vocabulary", "tokens", "<unk> tokens",
         "<unk> rate", "tokens per word"],
        [[t["kind"], t["model_type"], "reused model" if t["reused"] else t["requested_vocab_size"], t["vocab_size"],
          t["tokens"], t["unk_tokens"], f"{100 * t['unk_rate']:.4f}%", f"{t['tokens_per_word']:.3f}"]])
        + f"<p>{escape(t['unit'])}.</p>" + _training_html(t.get("training"), report["config"]))
    parts.append("<h2>Token share per source</h2>" + img(TOKENS_SVG, "token share per source"))
    pk = report["packing"]
    parts.append("<h2>Packed sequences</h2>" + table(
        ["split", "sequences", "ids", "fill rate"],
        [[k, v["sequences"], v["tokens"], f"{100 * v['fill_rate']:.2f}%"] for k, v in pk["splits"].items()])
        + img(PACKING_SVG, "packed sequence length histogram"))
    off = [r for r, on in report["rules_enabled"].items() if not on]
    parts.append("<h2>Effective config</h2><p>Rules switched off: "
                 + (escape(", ".join(off)) if off else "none") + "</p><pre>"
                 + escape(json.dumps(report["config"], sort_keys=True, indent=1)) + "</pre>")
    sw = report["software"]
    parts.append("<h2>Software</h2><p>Where the report was written; the same input and config on other versions "
                 "of these can give other bytes (another tokenizer model, say).</p>"
                 + table(list(sw), [list(sw.values())]))
    return "\n".join(parts)


def sample_bound_text(bounded_by: str, config: dict[str, Any]) -> str:
    """The training sample's bound that cut it, with its value and its config field."""
    tok = config.get("tokenizer", {})
    if bounded_by == "bytes":
        given = tok.get("sample_bytes")
        value = given if given is not None else default_sample_bytes(tok.get("vocab_size", 0))
        how = "" if given is not None else (f", unset: {SAMPLE_BYTES_PER_PIECE:,} bytes per vocabulary piece, "
                                            f"at least {SAMPLE_BYTES_MIN / 1e6:,.0f} MB")
        size = f"{value / 1e6:,.1f} MB" if value >= 100_000 else f"{value:,} bytes"
        return f"the bytes bound ({size}: tokenizer.sample_bytes{how})"
    field = {"sentences": "input_sentence_size", "documents": "sample_docs"}.get(bounded_by)
    if field is None or tok.get(field) is None:
        return f"the {bounded_by} bound"
    return f"the {bounded_by} bound ({tok[field]:,}: tokenizer.{field})"


def _pii_html(pii: dict[str, Any]) -> str:
    """PII replaced per source and kind (each kind on or off, its placeholder), and examples in context."""
    kinds = list(pii["kinds"])
    on = ", ".join(f"{k} ({'on: ' + v['placeholder'] if v['on'] else 'off'})" for k, v in pii["kinds"].items())
    rows = [[src] + [f"{c[k]['replaced']} in {c[k]['documents']}" if k in c else 0 for k in kinds]
            for src, c in pii["sources"].items()]
    ex = [[kind, e["source"], e["doc_id"], e["context"]] for kind, es in pii["examples"].items() for e in es]
    return (f"<h2>PII replaced</h2><p>{escape(on)}; IP addresses: "
            f"{'public only' if pii['ip_public_only'] else 'all'}. Matches in kept documents (in how many "
            "documents).</p>" + (table(["source"] + kinds, rows) if rows else "<p>none found</p>")
            + (table(["kind", "source", "doc_id", "example (after replacement)"], ex, ids=(2,)) if ex else ""))


def _decontamination_html(d: dict[str, Any] | None) -> str:
    """Per benchmark file: its texts and n-grams, the documents it matched; per source: removed, trimmed."""
    if not d:
        return ""
    rows = [[name, b["texts"], b["ngrams"], b["short_texts"], b["bad_records"], b["documents"], b["matched_ngrams"]]
            for name, b in d["benchmarks"].items()]
    src = [[name, s["removed"], s["trimmed"], s["words_cut"]] for name, s in d["sources"].items()]
    ex = [[e["doc_id"], e["source"], ", ".join(e["benchmarks"]), "removed" if e["removed"] else "trimmed",
           e["overlap"]] for e in d["examples"]]
    return (f"<h2>Decontamination</h2><p>{d['ngram']}-word n-grams shared with the evaluation sets; mode "
            f"{escape(d['mode'])}; removed documents are counted as {escape(d['reason'])}; "
            f"{counted(d['candidates'], 'document')} passed the filter to the exact join.</p>"
            + table(["benchmark file", "texts", "n-grams", "short texts", "bad records", "documents matched",
                     "n-grams matched"], rows)
            + (table(["source", "documents removed", "documents trimmed", "words cut"], src) if src else "")
            + (table(["doc_id", "source", "benchmarks", "verdict", "first overlap"], ex, ids=(0,)) if ex else ""))


def _training_html(training: dict[str, Any] | None, config: dict[str, Any]) -> str:
    """One line on the tokenizer's training sample and cost (nothing for a reused model)."""
    if not training:
        return ""
    cut = f", cut by {sample_bound_text(training['bounded_by'], config)}" if training.get("bounded_by") else ""
    return escape(f"Trained on {training['sentences']:,} sentences ({training['bytes'] / 1e6:,.1f} MB) "
                       f"from {training['documents']:,} documents{cut}.").join(
        ("<p>", "</p>"))


def _timings_link() -> str:
    """The "Stage timings" section: a link only. Timings differ run to run and this page must not
    (the same build gives the same bytes on every runner mode), so the driver writes them after the
    run next to this page (``pipelines.report.timings``)."""
    return ("<h2>Stage timings</h2><p>Where this build's time went, per stage (read, clean, dedupe, sentences, "
            "tokenizer training, encode, packing, shard writing, intermediates, report), is measured by the "
            f'run and kept out of this page: <a href="{TIMINGS_HTML}">{TIMINGS_HTML}</a> (table and plot), '
            f'<a href="{TIMINGS_JSON}">{TIMINGS_JSON}</a>. The build driver writes them when the run has finished; '
            "a pipeline started without it (a Dataflow template) has none.</p>")


def figure_html(name: str, alt: str, svg: str) -> str:
    """A chart inline in a page, linking its own file (`name`); `alt` names it for screen readers."""
    return f'<figure><a href="{name}" aria-label="{escape(alt)}">{svg.rstrip()}</a></figure>'


def render_html(report: dict[str, Any], svgs: dict[str, str]) -> str:
    """One self-contained HTML page (inline CSS, the charts inline as SVG, each linking its file)."""
    def img(name: str, alt: str) -> str:
        return figure_html(name, alt, svgs[name])

    def cell(v: Any) -> str:
        return f"<td>{escape(str(v))}</td>"

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
    splits = "".join(f"<li>{escape(k)}: {counted(v.get('documents', 0), 'document')}, "
                     f"{counted(v.get('samples', 0), 'sample')}, {counted(v.get('tokens', 0), 'token')} in "
                     f"{counted(v.get('shards', 0), 'shard')}</li>"
                     for k, v in sorted(report["totals_by_split"].items()))
    return f"""{page_head("shardforge build report")}
<p>Every input record ends in exactly one bucket: input = kept + filtered + duplicate + rejected.
Data: <a href="{REPORT_JSON}">{REPORT_JSON}</a>; reject log with reasons and snippets: <code>{escape(report["reject_log"] or "rejects")}/part-*.jsonl</code>.</p>
{_warnings(report)}
<h2>Records per source</h2>
<table><tr><th>source</th><th>input</th><th>kept</th><th>filtered</th><th>duplicate</th><th>rejected</th>
<th>balanced</th><th>reasons</th></tr>
{chr(10).join(rows)}
</table>
<ul>{splits}</ul>
<h2>Why records were not kept</h2>
{img(REASONS_SVG, "records per filter / reject reason")}
<h2>Document lengths before and after cleaning</h2>
<p>Words per document on a log scale, in bins chosen from the lengths the documents have (report.json
holds the counts in {BINS_PER_DECADE} bins per decade); "after" counts the documents that reach the shards.</p>
{img(LENGTHS_SVG, "document length histograms")}
{_sections(report, img)}
{_timings_link()}
</body></html>
"""
