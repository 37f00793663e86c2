"""The self-contained report.html: summary, charts (inline PNG) and the tables.

Client ids, software names and topics are chosen by clients, so every value is
escaped: the report must not run a client's script in the reader's browser.
"""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any

Row = dict[str, Any]

# Laptop width: the page never scrolls sideways, a wide table scrolls in its own box,
# long cells (maps, samples) wrap, and charts shrink to fit.
STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:100%}
.scroll{overflow-x:auto;max-width:100%;margin:.5em 0 2em}
table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;
white-space:nowrap}
td.long{white-space:normal;min-width:22em;max-width:40em;overflow-wrap:anywhere}
th{background:#f0f0f0;cursor:pointer;white-space:nowrap;position:sticky;top:0}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
.num{text-align:right;white-space:nowrap}.note{color:#666;font-size:13px}
img{max-width:100%;height:auto}
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


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
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


def table_html(name: str, rows: list[Row], total: int) -> str:
    head = f"<h2>{escape(name)}</h2>"
    if not rows:
        return head + '<p class="note">no rows</p>'
    shown = "" if total <= len(rows) else f" (first {len(rows):,} of {total:,})"
    columns = list(rows[0])
    header = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(_td(row[c]) for c in columns) + "</tr>" for row in rows
    )
    note = f'<p class="note">{total:,} rows{shown}; click a column to sort</p>'
    return (f'{head}{note}<div class="scroll"><table class="sortable"><thead><tr>{header}'
            f"</tr></thead><tbody>{body}</tbody></table></div>")


def _td(value: Any) -> str:
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if numeric and value == value:  # not NaN: sorted by its value, not its text
        return f'<td class=num data-v="{value!r}">{escape(cell(value))}</td>'
    text = cell(value)
    # Short values stay on one line (the box scrolls); long ones (maps, samples) wrap.
    kind = " class=num" if numeric else " class=long" if len(text) > LONG_CELL else ""
    return f"<td{kind}>{escape(text)}</td>"


def chart_html(title: str, png: str | None) -> str:
    if png is None:
        return f'<p class="note">{escape(title)}: no data</p>'
    return f'<img alt="{escape(title)}" src="data:image/png;base64,{png}">'


def render(summary: list[str], charts: list[tuple[str, str | None]],
           tables: list[tuple[str, list[Row], int]]) -> str:
    parts = ["<!doctype html><html><head><meta charset=utf-8>",
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>kafkalens report</title><style>{STYLE}</style></head><body>",
             "<h1>kafkalens report</h1><ul>",
             *(f"<li>{escape(line)}</li>" for line in summary), "</ul>",
             *(chart_html(t, png) for t, png in charts),
             *(table_html(name, rows, total) for name, rows, total in tables),
             f"<script>{SORT_JS}</script></body></html>"]
    return "\n".join(parts)
