"""The self-contained report.html: the summary in plain words, a contents list, the
charts (inline SVG, charts.py) and a section per table, each titled and explained
(sections.py), an empty one collapsed to what it means.

Client ids, software names and topics are chosen by clients, so every value is
escaped: the report must not run a client's script in the reader's browser. Nothing
is fetched from elsewhere (no CDN): the page is one file that opens anywhere.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from html import escape
from typing import Any

from pipeline.progress import human_bytes, plural
from pipeline.sections import Chart, Col, Section

Row = dict[str, Any]

# Laptop width: the page never scrolls sideways, a wide table scrolls in its own box,
# long cells (maps, samples) wrap, and charts shrink to fit.
STYLE = """
:root{--ink:#1f2328;--muted:#656d76;--line:#d0d7de;--soft:#f6f8fa;--warn:#9a6700;
--warnbg:#fff8c5;--ok:#1a7f37;--okbg:#dafbe1;--link:#0969da}
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:var(--ink);
line-height:1.45;background:#fff}
main,header,footer{padding:0 1.5rem;max-width:100%}
header{padding-top:1.2rem;border-bottom:1px solid var(--line);padding-bottom:.8rem}
h1{font-size:1.6rem;margin:0 0 .3rem}
h2{font-size:1.25rem;margin:2rem 0 .3rem;padding-top:.4rem;border-top:1px solid var(--line)}
h3{font-size:1.05rem;margin:1.2rem 0 .2rem}
p,li,dd{max-width:62rem}
a{color:var(--link)}
.lede{font-size:1.05rem;margin:0;color:var(--muted)}
.attention{background:var(--warnbg);border:1px solid #d4a72c;border-radius:6px;
padding:.5rem 1rem;margin:1rem 0;max-width:64rem}
.attention h3{margin:.2rem 0;color:var(--warn)}
.clear{background:var(--okbg);border:1px solid #4ac26b;border-radius:6px;padding:.6rem 1rem;
max-width:64rem}
.traffic li{margin:.15rem 0}
nav ol{margin:.2rem 0;padding-left:1.4rem}
nav li{margin:.1rem 0}
.count{color:var(--muted);font-size:.9em}
.none{color:var(--muted);font-size:.9em;font-style:italic}
figure{margin:1rem 0 1.6rem}
figcaption p{margin:.1rem 0 .4rem;color:var(--muted)}
.chart-svg{display:block;height:auto}
section.empty h2,div.empty h3{display:inline;font-size:1.05rem;border:0;margin:0;padding:0}
section.empty,div.empty{margin:1rem 0;padding:.4rem 0;border-top:1px solid var(--line)}
section.empty p,div.empty p{display:inline;margin:0 0 0 .6rem;color:var(--muted)}
.what{margin:.2rem 0}
.note{color:var(--muted);font-size:.88rem;margin:.2rem 0}
details{margin:.2rem 0 .4rem;font-size:.9rem}
summary{cursor:pointer;color:var(--link)}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.1rem 1rem;margin:.4rem 0}
dt{font-weight:600}dd{margin:0}
code{font-size:.9em;background:var(--soft);padding:0 .25em;border-radius:3px}
.scroll{overflow-x:auto;max-width:100%;margin:.4rem 0 1rem;border:1px solid var(--line);
border-radius:6px}
table{border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}
td,th{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top;
white-space:nowrap}
tbody tr:nth-child(even){background:#fbfcfd}
td.long{white-space:normal;min-width:22em;max-width:40em;overflow-wrap:anywhere}
th{background:var(--soft);cursor:pointer;position:sticky;top:0}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
.num{text-align:right}
footer{color:var(--muted);font-size:.85rem;margin:2rem 0 1.5rem;border-top:1px solid var(--line);
padding-top:.6rem}
"""
LONG_CELL = 48  # characters
# Click a header to sort by it (numbers by value, again to reverse): self-contained.
SORT_JS = """
document.querySelectorAll("table.sortable th").forEach(function(th){
 th.addEventListener("click",function(){
  var table=th.closest("table"),i=th.cellIndex,body=table.tBodies[0];
  var up=th.getAttribute("aria-sort")!=="ascending";
  table.querySelectorAll("th").forEach(function(h){h.removeAttribute("aria-sort")});
  th.setAttribute("aria-sort",up?"ascending":"descending");
  var key=function(tr){var td=tr.cells[i];var v=td.getAttribute("data-v");
   return v===null?td.textContent:parseFloat(v)};
  var rows=Array.prototype.slice.call(body.rows);
  rows.sort(function(a,b){var x=key(a),y=key(b);
   var c=(typeof x==="number"&&typeof y==="number")?x-y:String(x).localeCompare(String(y));
   return up?c:-c});
  rows.forEach(function(r){body.appendChild(r)});
 });
});
"""


@dataclass(frozen=True)
class Table:
    """A table as the page shows it: its section, its first rows and how many it has."""

    name: str  # the Parquet table's directory
    section: Section
    rows: list[Row]
    total: int


@dataclass(frozen=True)
class Page:
    headline: str
    traffic: list[str]
    attention: list[tuple[str, str]]
    all_clear: str
    charts: list[tuple[Chart, str | None]]  # each chart's SVG, None: nothing to draw
    tables: list[Table]
    footer: str


def cell(value: Any, kind: str = "") -> str:
    """A value as the page shows it (`kind`: sections.Col.kind)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if kind == "bytes" and isinstance(value, int | float):
        return human_bytes(value)
    if kind == "rate" and isinstance(value, int | float):
        return f"{value:.2%}"
    if isinstance(value, float):
        if kind == "ms":
            return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"
        return f"{value:,.3f}" if abs(value) < 1 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dt.datetime):  # aware, from utc.collect: shown in UTC
        utc = value.astimezone(dt.UTC) if value.tzinfo else value
        return utc.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: (-(kv[1] or 0), str(kv[0])))
        return ", ".join(f"{k}: {cell(v)}" for k, v in items)
    if isinstance(value, list):
        return ", ".join(cell(v) for v in value)
    return str(value)


def _td(value: Any, kind: str) -> str:
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    text = cell(value, kind)
    if numeric and value == value:  # not NaN: sorted by its value, not its text
        return f'<td class=num data-v="{value!r}">{escape(text)}</td>'
    if isinstance(value, dt.datetime):
        return f'<td data-v="{value.timestamp()!r}">{escape(text)}</td>'
    # Short values stay on one line (the box scrolls); long ones (maps, samples) wrap.
    long = " class=long" if len(text) > LONG_CELL else ""
    return f"<td{long}>{escape(text)}</td>"


def _columns(section: Section, rows: list[Row]) -> list[tuple[str, Col]]:
    """The columns shown: the catalogue's, in its order, those with a value in some row
    shown (a column the catalogue lacks is shown under its own name, not hidden)."""
    present = [name for name in (rows[0] if rows else section.columns)
               if any(row.get(name) not in (None, [], {}) for row in rows)]
    known = [(name, col) for name, col in section.columns.items()
             if name in present and not col.hidden]
    unknown = [(name, Col(name, "")) for name in present if name not in section.columns]
    return known + unknown


def table_html(t: Table) -> str:
    s = t.section
    if not t.rows:
        return (f'<section id="{s.anchor}" class="empty"><h2>{escape(s.title)}</h2>'
                f"<p>{escape(s.empty)}</p></section>")
    columns = _columns(s, t.rows)
    shown = (("the one row" if t.total == 1 else f"all {t.total:,} rows")
             if t.total <= len(t.rows)
             else f"the first {len(t.rows):,} of {t.total:,} rows")
    blank = [col.label for name, col in s.columns.items()
             if not col.hidden and name not in dict(columns)]
    if blank:
        shown += f" (empty here, so not shown: {', '.join(blank)})"
    order = f", {escape(s.order)}" if s.order else ""
    note = (f'<p class="note">{shown}{order}; click a column to sort. Every row is in the '
            f"Parquet table <code>{escape(t.name)}/</code> beside this page.</p>")
    meanings = "".join(f"<dt>{escape(col.label)}</dt><dd>{escape(col.meaning)} "
                       f"<code>{escape(name)}</code></dd>" for name, col in columns)
    header = "".join(f'<th scope="col" title="{escape(col.meaning)}">{escape(col.label)}</th>'
                     for name, col in columns)
    body = "".join("<tr>" + "".join(_td(row.get(name), col.kind) for name, col in columns)
                   + "</tr>" for row in t.rows)
    return (f'<section id="{s.anchor}" class="table"><h2>{escape(s.title)}</h2>'
            f'<p class="what">{escape(s.what)}</p>'
            f"<details><summary>What the columns mean</summary><dl>{meanings}</dl></details>"
            f'{note}<div class="scroll"><table class="sortable"><thead><tr>{header}</tr>'
            f"</thead><tbody>{body}</tbody></table></div></section>")


def chart_html(chart: Chart, svg: str | None) -> str:
    if svg is None:
        return (f'<div id="{chart.anchor}" class="empty"><h3>{escape(chart.title)}</h3>'
                f"<p>{escape(chart.empty)}</p></div>")
    return (f'<figure id="{chart.anchor}" class="chart"><figcaption><h3>'
            f"{escape(chart.title)}</h3><p>{escape(chart.what)}</p></figcaption>{svg}</figure>")


def _contents(page: Page) -> str:
    def entry(anchor: str, title: str, extra: str) -> str:
        return f'<li><a href="#{anchor}">{escape(title)}</a> {extra}</li>'

    charts = "".join(entry(c.anchor, c.title, "" if svg else '<span class="none">nothing '
                           "to draw</span>") for c, svg in page.charts)
    tables = "".join(entry(t.section.anchor, t.section.title,
                           f'<span class="count">{plural(t.total, "row")}</span>' if t.total
                           else '<span class="none">none</span>') for t in page.tables)
    return (f'<nav id="contents"><h2>Contents</h2><ol><li><a href="#summary">Summary</a>'
            f'</li><li><a href="#charts">Charts</a><ol>{charts}</ol></li><li>Tables<ol>'
            f"{tables}</ol></li></ol></nav>")


def _summary(page: Page) -> str:
    if page.attention:
        items = "".join(f'<li>{escape(text)} <a href="#{anchor}">details</a></li>'
                        for text, anchor in page.attention)
        verdict = f'<div class="attention"><h3>Needs attention</h3><ul>{items}</ul></div>'
    else:
        verdict = f'<p class="clear">{escape(page.all_clear)}</p>'
    traffic = "".join(f"<li>{escape(sentence)}</li>" for sentence in page.traffic)
    return (f'<section id="summary"><h2>Summary</h2>{verdict}<ul class="traffic">{traffic}'
            "</ul></section>")


def render(page: Page) -> str:
    parts = ["<!doctype html><html lang=en><head><meta charset=utf-8>",
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>Kafka traffic report</title><style>{STYLE}</style></head><body>",
             f'<header><h1>Kafka traffic report</h1><p class="lede">{escape(page.headline)}'
             "</p></header><main>",
             _summary(page), _contents(page),
             '<section id="charts"><h2>Charts</h2>',
             *(chart_html(chart, svg) for chart, svg in page.charts), "</section>",
             *(table_html(t) for t in page.tables),
             f"</main><footer>{escape(page.footer)}</footer>",
             f"<script>{SORT_JS}</script></body></html>"]
    return "\n".join(parts)
