"""Per-arm figures derived from the workload rows: ratios to `direct`, CPU per unit, RSS."""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]
SMALL_APIS = ("ApiVersions", "Metadata")


def find(rows: list[Row], arm: str, workload: str, api: str | None = None) -> Row | None:
    for row in rows:
        if row.get("kind") != "workload" or row["arm"] != arm or row["workload"] != workload:
            continue
        if api is None or row.get("api") == api:
            return row
    return None


def ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
    return round(a / b, digits) if a is not None and b else None


def diff(a: float | None, b: float | None) -> float | None:
    return round(a - b, 1) if a is not None and b is not None else None


def get(row: Row | None, key: str) -> Any:
    return None if row is None else row.get(key)


def summarize(rows: list[Row], arm: str) -> Row:
    out: Row = {"kind": "summary", "arm": arm}
    out.update(_throughput(rows, arm))
    out.update(_small(rows, arm))
    out.update(_busy(rows, arm))
    out.update(_metadata(rows, arm))
    out.update(_memory(rows, arm))
    return out


def _throughput(rows: list[Row], arm: str) -> Row:
    out: Row = {}
    cpu, moved = 0.0, 0
    for name in ("produce", "consume"):
        row = find(rows, arm, name)
        mb_s = get(row, "mb_s")
        out[f"{name}_mb_s"] = mb_s
        out[f"{name}_vs_direct"] = ratio(mb_s, get(find(rows, "direct", name), "mb_s"))
        out[f"{name}_vs_tansu_proxy"] = ratio(mb_s, get(find(rows, "tansu-proxy", name), "mb_s"))
        out[f"{name}_cpu_s_per_gb"] = per_gb(get(row, "cpu_s"), get(row, "bytes"))
        if row is not None and row.get("cpu_s") is not None:
            cpu, moved = cpu + row["cpu_s"], moved + row["bytes"]
    out["cpu_s_per_gb"] = per_gb(cpu, moved) if moved else None
    return out


def per_gb(cpu: float | None, moved: int | None) -> float | None:
    return round(cpu / (moved / 1e9), 2) if cpu is not None and moved else None


def _small(rows: list[Row], arm: str) -> Row:
    out: Row = {}
    cpu, system, count = 0.0, 0.0, 0
    for api in SMALL_APIS:
        row = find(rows, arm, "small", api)
        out.update(latency_figures(api.lower(), row, find(rows, "direct", "small", api)))
        if row is not None and row.get("cpu_s") is not None:
            cpu, count = cpu + row["cpu_s"], count + row["count"]
            system += row.get("cpu_system_s") or 0.0
    out["cpu_us_per_small_request"] = round(cpu / count * 1e6, 1) if count else None
    # The kernel's part: system calls every front makes alike (reads, writes, epoll).
    out["system_cpu_us_per_small_request"] = round(system / count * 1e6, 1) if count else None
    return out


def latency_figures(prefix: str, row: Row | None, direct: Row | None) -> Row:
    """p50/p99 and what the front adds: against its own broker in the same moments when
    the row has a paired `baseline`, else against the `direct` arm."""
    reference = get(row, "baseline") or direct
    out: Row = {}
    for q in ("p50", "p99"):
        out[f"{prefix}_{q}_us"] = get(row, f"{q}_us")
        out[f"{prefix}_baseline_{q}_us"] = get(reference, f"{q}_us")
        out[f"{prefix}_added_{q}_us"] = diff(get(row, f"{q}_us"), get(reference, f"{q}_us"))
    return out


def _busy(rows: list[Row], arm: str) -> Row:
    row = find(rows, arm, "busy")
    rate = get(row, "requests_per_s")
    cpu, count = get(row, "cpu_s"), get(row, "count")
    return {
        "busy_connections": get(row, "connections"),
        "busy_requests_per_s": rate,
        "busy_vs_direct": ratio(rate, get(find(rows, "direct", "busy"), "requests_per_s")),
        "busy_p50_us": get(row, "p50_us"),
        "busy_p99_us": get(row, "p99_us"),
        "busy_cpu_us_per_request": round(cpu / count * 1e6, 1)
        if cpu is not None and count
        else None,
    }


def _metadata(rows: list[Row], arm: str) -> Row:
    row = find(rows, arm, "metadata-all")
    cpu, count = get(row, "cpu_s"), get(row, "count")
    out: Row = {
        "metadata_all_partitions": get(row, "partitions"),
        "metadata_all_response_bytes": get(row, "response_bytes"),
        "metadata_all_cpu_us_per_request": round(cpu / count * 1e6, 1)
        if cpu is not None and count
        else None,
    }
    out.update(latency_figures("metadata_all", row, find(rows, "direct", "metadata-all")))
    return out


def _memory(rows: list[Row], arm: str) -> Row:
    row = find(rows, arm, "idle")
    arm_row = next((r for r in rows if r.get("kind") == "arm" and r["arm"] == arm), None)
    return {
        "idle_connections": get(row, "connections"),
        "idle_rss_mb": get(row, "rss_open_mb"),
        "idle_pss_mb": get(row, "pss_open_mb"),
        "idle_kb_per_connection": get(row, "kb_per_connection"),
        "peak_rss_mb": get(arm_row, "peak_rss_mb"),
    }
