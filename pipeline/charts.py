"""The report's charts: matplotlib (Agg, no display) drawn as SVG inlined in report.html.

SVG rather than PNG: sharp at any zoom, its text is text (found, copied, read by a
screen reader), and a test in a browser can check that each chart drew its data: every
data mark (a line, a bar) is an element whose id starts with `data-`. Axes read as
people write numbers: 0.1, 1, 10, 100 ms on a log scale (not 10⁻¹ or 6×10⁰), 1.5k or
2M requests, 12 MB, times in UTC. Each chart's ids are salted with its name so that
several charts in one page never share one; no date is written, so the same data make
the same page.
"""

from __future__ import annotations

import io
import math
import re
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers or in spark-submit drivers
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from pipeline.progress import human_bytes  # noqa: E402
from pipeline.sections import OTHER_APIS, software_label  # noqa: E402

Row = dict[str, Any]
LINES = 6  # series drawn in a chart over time; the rest summed or left out
BARS = 15
WIDTH = 9.0  # inches; the page scales the SVG to its width
OTHER = OTHER_APIS

matplotlib.rcParams.update({
    "svg.fonttype": "none",  # text as text, drawn by the browser
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.titlesize": 11,
})


def human_count(value: float, _: Any = None) -> str:
    """0, 950, 1.5k, 12k, 3.4M: an axis' count."""
    for limit, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            scaled = value / limit
            return f"{scaled:.0f}{unit}" if scaled >= 10 else f"{scaled:.1f}{unit}".replace(
                ".0" + unit, unit)
    if value == int(value):
        return f"{int(value)}"
    return f"{value:.2g}"


def plain_number(value: float, _: Any = None) -> str:
    """A log axis' tick as written: 0.01, 0.5, 2, 100, 1,000."""
    if value <= 0:
        return ""
    if value >= 1:
        return f"{value:,.0f}"
    digits = max(0, -math.floor(math.log10(value)))
    return f"{value:.{digits}f}"


def _bytes(value: float, _: Any = None) -> str:
    return human_bytes(value) if value > 0 else "0"


def _svg(fig: Any, name: str) -> str:
    """The figure as an inline <svg>: no XML prolog, no metadata, ids salted with `name`,
    scaled to the width it is given (never wider than drawn)."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": f"kafkalens-{name}"}):
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    head_end = text.index(">")
    head = text[:head_end]
    width = re.search(r'width="([\d.]+)pt"', head)
    head = re.sub(r'\s(width|height)="[\d.]+pt"', "", head)
    style = f' style="max-width:{width.group(1)}pt"' if width else ""
    return (f'{head} width="100%"{style} role="img" aria-label="{name}"'
            f' class="chart-svg" data-chart="{name}"' + text[head_end:])


def _mark(artists: Any, chart: str, index: int) -> None:
    """Ids the page's test finds: data-<chart>-<series>[-<bar>]."""
    if hasattr(artists, "patches"):
        for j, patch in enumerate(artists.patches):
            patch.set_gid(f"data-{chart}-{index}-{j}")
    else:
        artists.set_gid(f"data-{chart}-{index}")


def _time_axis(ax: Any) -> None:
    locator = mdates.AutoDateLocator(tz="UTC")
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz="UTC"))
    ax.set_xlabel("time (UTC)")


def _log_ms(axis: Any) -> None:
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(plain_number))
    axis.set_minor_formatter(ticker.NullFormatter())


def with_gaps(points: list[tuple[Any, float]], step_seconds: int) -> tuple[list, list]:
    """The points in time order, with a NaN inserted where buckets are missing: the line
    breaks there instead of joining distant points as if data were between them."""
    xs: list[Any] = []
    ys: list[float] = []
    for x, y in sorted(points):
        if xs and (x - xs[-1]).total_seconds() > step_seconds:
            xs.append(xs[-1] + (x - xs[-1]) / 2)
            ys.append(math.nan)
        xs.append(x)
        ys.append(y)
    return xs, ys


def _series_chart(name: str, series: dict[str, list[tuple[Any, float]]], order: list[str],
                  step_seconds: int, ylabel: str, log: bool = False,
                  fmt: Callable[[float, Any], str] = human_count,
                  integer: bool = False) -> str | None:
    """Lines over time, one per key of `series` in `order` (those with points); with
    `integer`, the values are counts (no 0.05 records on the axis)."""
    drawn = [key for key in order if series.get(key)]
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH, 3.4))
    for i, key in enumerate(drawn):
        xs, ys = with_gaps(series[key], step_seconds)
        style: dict[str, Any] = {"color": "0.55", "linestyle": "--"} if key == OTHER else {}
        (line,) = ax.plot(xs, ys, marker="." if len(xs) < 40 else None, label=key,
                          **style)
        _mark(line, name, i)
    if log:
        ax.set_yscale("log")
        _log_ms(ax.yaxis)
    else:
        ax.set_ylim(bottom=0)
        if integer:
            ax.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        if all(not y for key in drawn for _, y in series[key]):
            ax.set_ylim(0, 1)  # all zero: matplotlib would span 0-0.05
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(fmt))
    ax.set_ylabel(ylabel)
    _time_axis(ax)
    times = {x for key in drawn for x, _ in series[key]}
    if len(times) == 1:  # one bucket: matplotlib would span four years around it
        only = times.pop()
        ax.set_xlim(only - timedelta(seconds=step_seconds), only + timedelta(seconds=step_seconds))
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return _svg(fig, name)


def requests_chart(over_time: list[Row], apis: list[str], step_seconds: int) -> str | None:
    """Requests per second of `apis` (the busiest, in order) and of the other apis
    summed (`over_time` rows: bucket, api, requests; api OTHER for the rest)."""
    series: dict[str, list[tuple[Any, float]]] = defaultdict(list)
    for row in over_time:
        if row["api"] in apis or row["api"] == OTHER:
            series[row["api"]].append((row["bucket"], row["requests"] / step_seconds))
    return _series_chart("requests", series, [*apis, OTHER], step_seconds, "requests per second")


def errors_chart(over_time: list[Row], step_seconds: int) -> str | None:
    """Failed requests per bucket, for the LINES apis with the most failures."""
    totals: dict[str, int] = defaultdict(int)
    for row in over_time:
        if row["api"] != OTHER:
            totals[row["api"]] += row["errors"] or 0
    apis = [api for api, n in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])) if n][:LINES]
    series: dict[str, list[tuple[Any, float]]] = defaultdict(list)
    for row in over_time:
        if row["api"] in apis:
            series[row["api"]].append((row["bucket"], row["errors"] or 0))
    minutes = step_seconds // 60
    return _series_chart("errors", series, apis, step_seconds,
                         f"failed requests per {minutes} min" if minutes > 1
                         else "failed requests per minute")


def latency_chart(over_time: list[Row], apis: list[str], step_seconds: int) -> str | None:
    """p95 service latency over time for `apis` (log scale: a Produce and a Metadata
    lookup differ 100-fold)."""
    series: dict[str, list[tuple[Any, float]]] = defaultdict(list)
    for row in over_time:
        if row["api"] in apis and row["p95_ms"] is not None:
            series[row["api"]].append((row["bucket"], row["p95_ms"]))
    return _series_chart("latency", series, apis, step_seconds, "p95 service latency (ms)",
                         log=True)


def percentiles_chart(by_api: list[Row]) -> str | None:
    """p50, p95 and p99 service latency per api (latency_by_api's rows, busiest first),
    horizontal bars on a log scale."""
    rows = [r for r in by_api if r["p99_ms"] is not None][:BARS]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH, 0.42 * len(rows) + 1.2))
    height = 0.26
    labels = [r["api"] for r in rows]
    positions = list(range(len(rows)))
    for i, (column, label) in enumerate((("p50_ms", "p50"), ("p95_ms", "p95"),
                                         ("p99_ms", "p99"))):
        values = [r[column] or 0 for r in rows]
        bars = ax.barh([p + (i - 1) * height for p in positions], values, height=height,
                       label=label)
        _mark(bars, "percentiles", i)
    ax.set_yticks(positions, labels)
    ax.invert_yaxis()  # the busiest at the top
    ax.set_xscale("log")
    _log_ms(ax.xaxis)
    ax.set_xlabel("service latency (ms)")
    ax.grid(axis="y", visible=False)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return _svg(fig, "percentiles")


def topics_chart(topics: list[Row]) -> str | None:
    """Bytes produced, fetched and share-fetched per topic (top_topics' rows)."""
    rows = [t for t in topics if t["total_bytes"]][:BARS]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH, 0.38 * len(rows) + 1.2))
    labels = [t["topic"] for t in rows]
    left = [0.0] * len(rows)
    parts = [("produced_bytes", "produced"), ("fetched_bytes", "fetched"),
             ("share_fetched_bytes", "share-fetched")]
    for i, (column, label) in enumerate(parts):
        values = [float(t[column] or 0) for t in rows]
        if not any(values):
            continue
        bars = ax.barh(labels, values, left=left, label=label)
        _mark(bars, "topics", i)
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(_bytes))
    ax.set_xlabel("record bytes")
    ax.grid(axis="y", visible=False)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return _svg(fig, "topics")


def lag_chart(lag: list[Row], step_seconds: int) -> str | None:
    """Records behind per group over time (rows: bucket, group_id, group_known, lag),
    the groups in the order of their largest lag; a client fetching in no group is
    named as one."""
    series: dict[str, list[tuple[Any, float]]] = defaultdict(list)
    largest: dict[str, float] = defaultdict(float)
    for row in lag:
        if row["lag"] is not None:
            name = row["group_id"] if row["group_known"] else f"client {row['group_id']}"
            series[name].append((row["bucket"], row["lag"]))
            largest[name] = max(largest[name], row["lag"])
    order = sorted(series, key=lambda g: (-largest[g], g))[:LINES]
    return _series_chart("lag", series, order, step_seconds, "records behind", integer=True)


def software_chart(software: list[Row]) -> str | None:
    """Clients per client software and version (rows: name, version, clients)."""
    rows = software[:BARS]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH, 0.38 * len(rows) + 1.2))
    labels = [software_label(r["client_software_name"], r["client_software_version"])
              for r in rows]
    bars = ax.barh(labels, [r["clients"] for r in rows])
    _mark(bars, "software", 0)
    ax.bar_label(bars, labels=[f"{r['clients']:,}" for r in rows], padding=3, fontsize="small")
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(human_count))
    ax.set_xlabel("clients")
    ax.grid(axis="y", visible=False)
    return _svg(fig, "software")
