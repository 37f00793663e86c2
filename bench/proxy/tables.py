"""The markdown tables of results.md, one function per section."""

from __future__ import annotations

from typing import Any

from bench.proxy.mdfmt import fmt, pair, signed, table

Row = dict[str, Any]


def header(run: Row) -> list[str]:
    sizes = run["sizes"]
    load = run["loadavg_start"], run["loadavg_end"]
    return [
        f"Run {run['started']} on {run['cpus']} CPUs, {run['took_seconds']:.0f} s;"
        f" load average (1/5/15 min) {_load(load[0])} at start, {_load(load[1])} at end;"
        f" Python {run['python']} ({run.get('python_executable', '?')}).",
        f"{run['machine_note']}",
        "",
        f"Sizes: {sizes['records']:,} records of {sizes['record_bytes']:,} B"
        f" (best of {sizes['rounds']} rounds);"
        f" {sizes['requests']:,} small requests per api after {sizes['warmup']:,} warm-up;"
        f" {sizes['busy_connections']:,} busy connections for {sizes['busy_seconds']:g} s;"
        f" {sizes['idle_connections']:,} idle connections;"
        f" {sizes['partitions']:,} partitions, {sizes['metadata_requests']:,} Metadata requests.",
        "CPU and memory are the front process's (with its child processes); `direct` has none."
        " MB = 10^6 bytes, GB = 10^9 bytes of record values.",
        "",
    ]


def _load(values: list[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def goals(rows: list[Row]) -> list[str]:
    lines = [
        [r["arm"], r["goal"], r["target"], _value(r), _mark(r) + " " + r["verdict"], _relay(r)]
        for r in rows
    ]
    return table(["arm", "goal", "target", "measured", "verdict", "haproxy, same run"], lines)


def _relay(row: Row) -> str:
    """The plain TCP relay's figure for the goal, and whether it meets it itself."""
    if row.get("relay_value") is None:
        return "–"
    shown = _value({"value": row["relay_value"], "unit": row["unit"]})
    return f"{shown} {'✅' if row['relay_met'] else '❌ (the relay misses it too)'}"


def _value(row: Row) -> str:
    value = row["value"]
    if value is None:
        return row.get("note", "–")
    return f"{fmt(value, 2)}x" if row["unit"] == "x" else f"{fmt(value, 1)} {row['unit']}"


def _mark(row: Row) -> str:
    return {True: "✅", False: "❌"}.get(row["met"], "–")


def throughput(summaries: list[Row], run: Row) -> list[str]:
    lines = [
        [
            s["arm"],
            fmt(s["produce_mb_s"]),
            _x(s["produce_vs_direct"]),
            fmt(s["consume_mb_s"]),
            _x(s["consume_vs_direct"]),
            fmt(s["produce_cpu_s_per_gb"], 2),
            fmt(s["consume_cpu_s_per_gb"], 2),
            fmt(s["cpu_s_per_gb"], 2),
        ]
        for s in summaries
    ]
    heads = ["arm", "produce MB/s", "× direct", "consume MB/s", "× direct"]
    heads += ["CPU s/GB produce", "CPU s/GB consume", "CPU s/GB both"]
    return table(heads, lines)


def _x(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"


PAIRED_NOTE = (
    "Added latency: each front's requests alternate, in blocks of 50, with the same requests"
    " sent straight to that arm's broker; *broker* is that paired baseline, so background"
    " load drifts out of the difference."
)


def small(summaries: list[Row], run: Row) -> list[str]:
    lines = [
        [
            s["arm"],
            pair(s["apiversions_p50_us"], s["apiversions_p99_us"]),
            pair(s["apiversions_baseline_p50_us"], s["apiversions_baseline_p99_us"]),
            f"{signed(s['apiversions_added_p50_us'])} / {signed(s['apiversions_added_p99_us'])}",
            pair(s["metadata_p50_us"], s["metadata_p99_us"]),
            pair(s["metadata_baseline_p50_us"], s["metadata_baseline_p99_us"]),
            f"{signed(s['metadata_added_p50_us'])} / {signed(s['metadata_added_p99_us'])}",
            fmt(s["cpu_us_per_small_request"]),
            fmt(s.get("system_cpu_us_per_small_request")),
        ]
        for s in summaries
    ]
    heads = ["arm", "ApiVersions p50 / p99 µs", "broker µs", "added µs"]
    heads += ["Metadata p50 / p99 µs", "broker µs", "added µs", "CPU µs / request"]
    heads += ["of which system µs"]
    return [PAIRED_NOTE, "", *table(heads, lines)]


def busy(summaries: list[Row], run: Row) -> list[str]:
    lines = [
        [
            s["arm"],
            fmt(s["busy_connections"]),
            fmt(s["busy_requests_per_s"], 0),
            _x(s["busy_vs_direct"]),
            pair(_ms(s["busy_p50_us"]), _ms(s["busy_p99_us"]), 1),
            fmt(s["busy_cpu_us_per_request"]),
        ]
        for s in summaries
    ]
    heads = ["arm", "connections", "requests/s", "× direct", "p50 / p99 ms", "CPU µs / request"]
    return table(heads, lines)


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1000


def metadata(summaries: list[Row]) -> list[str]:
    lines = [
        [
            s["arm"],
            fmt(s["metadata_all_partitions"]),
            fmt(s["metadata_all_response_bytes"]),
            pair(s["metadata_all_p50_us"], s["metadata_all_p99_us"]),
            pair(s["metadata_all_baseline_p50_us"], s["metadata_all_baseline_p99_us"]),
            f"{signed(s['metadata_all_added_p50_us'])} / {signed(s['metadata_all_added_p99_us'])}",
            fmt(s["metadata_all_cpu_us_per_request"]),
        ]
        for s in summaries
    ]
    heads = ["arm", "partitions", "response bytes", "p50 / p99 µs", "broker µs", "added µs"]
    return table(heads + ["CPU µs / request"], lines)


def memory(summaries: list[Row]) -> list[str]:
    lines = [
        [
            s["arm"],
            fmt(s["idle_connections"]),
            fmt(s["idle_rss_mb"]),
            fmt(s.get("idle_pss_mb")),
            fmt(s["idle_kb_per_connection"]),
            fmt(s["peak_rss_mb"]),
        ]
        for s in summaries
    ]
    heads = ["arm", "open connections", "RSS with them open MB", "PSS MB", "KB / connection"]
    return table(heads + ["peak RSS (VmHWM) MB"], lines)


def skipped(rows: list[Row]) -> list[str]:
    return table(["arm", "why"], [[r["arm"], r["skipped"].replace("|", "/")] for r in rows])
