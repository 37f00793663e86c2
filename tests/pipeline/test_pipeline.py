"""`kafkalens report`: the Spark batch job, checked against a plain-Python reference.

Synthetic logs (support.synth) are written as the proxy would: rotated gzip files,
the active plain file, a second directory reached by a glob whose last line is cut
short, an empty file, malformed lines and events the report must ignore. Every table
is then compared with what a straightforward Python computation over the same
events says it must contain.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from support.report_oracle import expected_only, failed, micros, micros_of, resolved, waits
from support.synth import BAD_SAMPLES, Synth, to_line, write_rotated

from pipeline import html
from pipeline.cli import report_main
from pipeline.read import BadReason
from pipeline.readiness_data import removed_versions
from pipeline.report import run_report
from pipeline.summary import ReportResult

REQUEST_EVENTS = ("request", "request_no_response")


# --- the input ---------------------------------------------------------------------


class Logs:
    """The events written, where they went, and what the reference makes of them."""

    def __init__(self, root: Path) -> None:
        synth = Synth(seed=11, bad_every=397, other_every=503)
        self.main = list(synth.events(5000))
        self.extra = list(synth.events(1000))
        write_rotated(root / "logs", map(to_line, self.main), 1500, gz=True)
        (root / "logs" / "requests.log.9").write_text("")  # an empty rotated file
        write_rotated(root / "extra", map(to_line, self.extra), 10_000, name="other.log",
                      truncate_last=True)
        assert isinstance(self.extra[-1], dict)
        # The cut line is bad; every other dict is a good line.
        self.events = [e for e in self.main + self.extra[:-1] if isinstance(e, dict)]
        self.requests = [e for e in self.events if e["event"] in REQUEST_EVENTS]
        self.files = sorted((root / "logs").iterdir()) + [root / "extra" / "other.log"]


@pytest.fixture(scope="module")
def built(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Logs, ReportResult, Path]:
    root = tmp_path_factory.mktemp("report")
    logs = Logs(root)
    inputs = [str(root / "logs"), str(root / "extra" / "*.log")]
    result = run_report(spark, inputs, str(root / "out"))
    return logs, result, root / "out"


def table(spark: SparkSession, out: Path, name: str) -> list[dict[str, Any]]:
    df = spark.read.parquet(str(out / name))
    micros_cols = [F.unix_micros(c).alias(c) for c, t in df.dtypes if t == "timestamp"]
    other = [c for c, t in df.dtypes if t != "timestamp"]
    return [r.asDict(recursive=True) for r in df.select(*other, *micros_cols).collect()]


# --- the tables --------------------------------------------------------------------


def test_counts_lines(built: tuple) -> None:
    logs, result, _ = built
    bad = sum(isinstance(e, str) for e in logs.main + logs.extra) + 1
    c = result.counts
    assert c.lines == len(logs.main) + len(logs.extra)
    assert c.bad == bad
    assert c.requests == len(logs.requests)
    assert c.connection_events == sum(e["event"].startswith("connection_") for e in logs.events)
    assert c.other_events == sum(e["event"] == "kip1313_violation" for e in logs.events) > 0
    assert len(result.inputs) == 2
    first, last = min(micros(e["ts"]) for e in logs.events), max(micros(e["ts"]) for e in logs.events)
    assert (micros_of(c.first_ts), micros_of(c.last_ts)) == (first, last)


def test_client_inventory(spark: SparkSession, built: tuple) -> None:
    logs, _, out = built
    expected: dict[str, dict[str, Any]] = {}
    for r in resolved(logs.requests):
        row = expected.setdefault(r["key"], {"requests": 0, "by_api": Counter(), "conns": set(),
                                             "principals": set(), "ts": [], "errors": 0,
                                             "expected": 0})
        row["requests"] += 1
        row["by_api"][r["api"]] += 1
        row["conns"].add(r["conn"])
        row["principals"] |= {r["principal"]} - {None}
        row["ts"].append(micros(r["ts"]))
        row["errors"] += failed(r)
        row["expected"] += expected_only(r)
        row["ident"] = (r["client_id"], r["client_software_name"], r["client_software_version"])
    rows = {r["client_key"]: r for r in table(spark, out, "client_inventory")}
    assert rows.keys() == expected.keys()
    # 3 + 2 + 4 + 2 instances with KIP-714 ids, the rest keyed by client id, host, software.
    assert sum(r["client_instance_id"] is not None for r in rows.values()) == 3 + 4 + 2
    for key, want in expected.items():
        got = rows[key]
        assert got["requests"] == want["requests"]
        assert got["requests_by_api"] == dict(want["by_api"])
        assert got["connections"] == len(want["conns"])
        assert got["principals"] == sorted(want["principals"])
        assert (got["first_seen"], got["last_seen"]) == (min(want["ts"]), max(want["ts"]))
        assert (got["errors"], got["expected_errors"]) == (want["errors"], want["expected"])
        assert (got["client_id"], got["client_software_name"],
                got["client_software_version"]) == want["ident"]
    # Requests before GetTelemetrySubscriptions and SASL belong to the same client.
    orders = [r for r in rows.values() if r["client_id"] == "orders-service"]
    assert len(orders) == 3 and all(r["principals"] == ["User:orders"] for r in orders)
    legacy = rows["kafka-python-2.0.2|10.0.1.1||"]
    assert legacy["client_instance_id"] is None and legacy["client_software_name"] is None


def test_api_usage(spark: SparkSession, built: tuple) -> None:
    logs, _, out = built
    want: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, set(), []])
    for r in resolved(logs.requests):
        k = (r["api"], r["api_version"], r["client_software_name"], r["client_software_version"])
        want[k][0] += 1
        want[k][1] += failed(r)
        want[k][2] += expected_only(r)
        want[k][3].add(r["key"])
        want[k][4].append(micros(r["ts"]))
    got = {(r["api"], r["api_version"], r["client_software_name"], r["client_software_version"]):
           [r["requests"], r["errors"], r["expected_errors"], r["clients"], r["first_seen"],
            r["last_seen"]] for r in table(spark, out, "api_usage")}
    assert got == {k: [n, e, x, len(c), min(ts), max(ts)] for k, (n, e, x, c, ts) in want.items()}
    assert got[("Produce", 2, None, None)][3] == 2  # both kafka-python instances


def test_kafka4_readiness(spark: SparkSession, built: tuple) -> None:
    logs, _, out = built
    removed = {(key, version): minimum for key, _, version, minimum in removed_versions()}
    want: Counter = Counter()
    for r in resolved(logs.requests):
        if (r["api_key"], r["api_version"]) in removed:
            want[(r["key"], r["api"], r["api_version"])] += 1
    rows = table(spark, out, "kafka4_readiness")
    got = {(r["client_key"], r["api"], r["api_version"]): r["requests"] for r in rows}
    assert got == dict(want)
    assert all(r["kafka4_min_version"] == removed[(r["api_key"], r["api_version"])]
               for r in rows)
    offenders = {(r["client_id"], r["api"], r["api_version"]) for r in rows}
    assert {("kafka-python-2.0.2", "Produce", 2), ("legacy-reader", "Fetch", 3),
            ("ops-admin", "DescribeConfigs", 0)} <= offenders
    # KIP-896 named these too, but Kafka took them back before 4.0.0 (Metadata) and in
    # 4.0.1 (JoinGroup v0-1): the brokers answer them, so they are no reason to wait
    assert not {("kafka-python-2.0.2", "Metadata", 1),
                ("legacy-reader", "JoinGroup", 1)} & offenders
    assert not {r["client_id"] for r in rows} & {"orders-service", "billing", "audit"}


def _within_rank(values: list[float], q: int, got: float | None) -> None:
    """The report's percentile is a latency of the 1 %-wide bin holding the rank."""
    values = sorted(values)
    exact = values[max(1, math.ceil(len(values) * q / 100)) - 1]
    assert got is not None and exact / 1.0101 <= got <= exact * 1.0101, (q, got, exact)
    assert got in values  # a latency that occurred


def test_latency_by_api(spark: SparkSession, built: tuple) -> None:
    logs, _, out = built
    service: dict[str, list[float]] = defaultdict(list)
    waiting: dict[str, list[float]] = defaultdict(list)
    counts: Counter = Counter()
    errors: Counter = Counter()
    expected: Counter = Counter()
    for e in logs.requests:
        counts[e["api"]] += 1
        errors[e["api"]] += failed(e)
        expected[e["api"]] += expected_only(e)
        if e["latency_ms"] is not None:
            (waiting if waits(e) else service)[e["api"]].append(e["latency_ms"])
    rows = {r["api"]: r for r in table(spark, out, "latency_by_api")}
    assert rows.keys() == counts.keys()
    for api, row in rows.items():
        assert (row["requests"], row["errors"], row["expected_errors"]) == (
            counts[api], errors[api], expected[api])
        assert row["error_rate"] == pytest.approx(errors[api] / counts[api])
        assert row["waiting_requests"] == sum(
            waits(e) for e in logs.requests if e["api"] == api)
        if service[api]:
            for q in (50, 95, 99):
                _within_rank(service[api], q, row[f"p{q}_ms"])
            assert row["max_ms"] == max(service[api])
            assert row["avg_ms"] == pytest.approx(sum(service[api]) / len(service[api]))
        else:
            assert row["p50_ms"] is row["max_ms"] is row["avg_ms"] is None, api
        if waiting[api]:
            for q in (50, 99):
                _within_rank(waiting[api], q, row[f"waiting_p{q}_ms"])
            assert row["waiting_max_ms"] == max(waiting[api])
        else:
            assert row["waiting_p50_ms"] is row["waiting_max_ms"] is None, api
    # Long polls are apart: Fetch's service latency is the audit group's max_wait_ms=0
    # fetches, milliseconds, while its waiting latency is the 300 ms polls.
    fetch = rows["Fetch"]
    assert fetch["p99_ms"] < 100 < fetch["waiting_p50_ms"]
    assert rows["JoinGroup"]["waiting_requests"] == rows["JoinGroup"]["requests"]
    assert rows["JoinGroup"]["p50_ms"] is None


def test_a_percentile_reads_its_histogram_once(spark: SparkSession) -> None:
    """traffic.quantile walks the bins once: its rank is a column of the row, not an
    expression over the bins inside the walk's lambda, where Spark evaluates it again
    for every bin (a histogram's square per percentile: 4,000 histograms of 300 bins
    took 33-53 s for six percentiles that way and 1.1-1.4 s once the rank moved out)."""
    from pipeline.traffic import quantile

    rows = spark.createDataFrame(
        [([(0, 3, 1.0), (5, 1, 1.05), (9, 6, 1.09)],)],
        "bins array<struct<lat_bin:int,c:bigint,v:double>>")
    total = F.aggregate("bins", F.lit(0).cast("bigint"), lambda acc, b: acc + b["c"])
    column = quantile(F.col("bins"), F.col("total"), 0.5)
    text = str(column)
    assert text.count("aggregate(") == 1, text
    got = rows.select(total.alias("total"), "bins").select(column.alias("p50")).first()
    assert got is not None and got["p50"] == 1.09  # rank 5 of 10: the third bin's


def test_by_design_errors_are_not_failures(spark: SparkSession, built: tuple) -> None:
    """MEMBER_ID_REQUIRED on a first JoinGroup, REBALANCE_IN_PROGRESS on Heartbeat:
    counted as expected_errors, out of errors and error_rate."""
    logs, _, out = built
    rows = {r["api"]: r for r in table(spark, out, "latency_by_api")}
    joins = [e for e in logs.requests if e["api"] == "JoinGroup"]
    first = sum(e["errors"] == ["MEMBER_ID_REQUIRED"] for e in joins)
    assert first > 0 and rows["JoinGroup"]["expected_errors"] == first
    assert rows["JoinGroup"]["errors"] == sum(failed(e) for e in joins)
    beats = [e for e in logs.requests if e["api"] == "Heartbeat"]
    rebalancing = sum(e["errors"] == ["REBALANCE_IN_PROGRESS"] for e in beats)
    assert rebalancing > 0 and rows["Heartbeat"]["expected_errors"] == rebalancing
    # The same error on an api where it is no protocol step is a failure.
    assert not failed({"api": "Heartbeat", "errors": ["REBALANCE_IN_PROGRESS"]})
    assert failed({"api": "Produce", "errors": ["REBALANCE_IN_PROGRESS"]})
    groups = {r["group_id"]: r for r in table(spark, out, "consumer_groups")}
    billing = [e for e in logs.requests if e.get("group_id") == "billing"]
    assert groups["billing"]["expected_errors"] == sum(map(expected_only, billing)) > 0
    assert groups["billing"]["errors"] == sum(map(failed, billing))


def test_latency_over_time(spark: SparkSession, built: tuple) -> None:
    logs, result, out = built
    step = result.bucket_seconds
    want: dict[tuple, list] = defaultdict(lambda: [0, 0, []])
    for e in logs.requests:
        t = micros(e["ts"]) // 1_000_000
        k = ((t - t % step) * 1_000_000, e["api"])
        want[k][0] += 1
        want[k][1] += failed(e)
        if e["latency_ms"] is not None and not waits(e):
            want[k][2].append(e["latency_ms"])
    rows = {(r["bucket"], r["api"]): r for r in table(spark, out, "latency_over_time")}
    assert rows.keys() == want.keys()
    for k, (n, errs, service) in want.items():
        assert (rows[k]["requests"], rows[k]["errors"]) == (n, errs), k
        if service:
            _within_rank(service, 95, rows[k]["p95_ms"])


def test_top_topics(spark: SparkSession, built: tuple) -> None:
    logs, _, out = built
    want: dict[str, Counter] = defaultdict(Counter)
    for e in logs.requests:
        verb = {0: "produced", 1: "fetched"}.get(e["api_key"])
        for topic, c in (e.get("record_stats") or {}).get("per_topic", {}).items():
            for field in ("bytes", "records", "batches"):
                want[topic][f"{verb}_{field}"] += c[field]
    order = sorted(want, key=lambda t: (-(want[t]["produced_bytes"] + want[t]["fetched_bytes"]), t))
    rows = sorted(table(spark, out, "top_topics"), key=lambda r: r["rank"])
    assert [r["topic"] for r in rows] == order
    assert [r["rank"] for r in rows] == list(range(1, len(order) + 1))
    for r in rows:
        for field, value in want[r["topic"]].items():
            assert r[field] == value, (r["topic"], field)
    metrics = next(r for r in rows if r["topic"] == "metrics")  # acks=0 still counts
    assert metrics["produced_records"] > 0 and metrics["fetched_bytes"] == 0


def test_consumer_groups(spark: SparkSession, built: tuple) -> None:
    logs, _, out = built
    rows = {r["group_id"]: r for r in table(spark, out, "consumer_groups")}
    assert set(rows) == {"billing", "legacy", "audit"}
    got = {g: (r["protocol_type"], r["assignor"], r["member_count"], r["distinct_member_ids"])
           for g, r in rows.items()}
    assert got == {"billing": ("consumer", "cooperative-sticky", 4, 4),
                   "legacy": ("consumer", "range", 2, 2),
                   "audit": (None, None, 2, 2)}  # KIP-848: no JoinGroup, member ids count
    requests = Counter(e.get("group_id") for e in logs.requests)
    assert {g: r["requests"] for g, r in rows.items()} == {g: requests[g] for g in rows}
    assert rows["legacy"]["client_software"] == ["sarama/1.27.0"]


def _file_lines(path: Path) -> list[str]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def _is_bad(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return True
    return line in BAD_SAMPLES


def test_bad_lines(spark: SparkSession, built: tuple) -> None:
    logs, _, out = built
    want = {p.name: n for p in logs.files if (n := sum(map(_is_bad, _file_lines(p))))}
    rows = table(spark, out, "bad_lines")
    got: Counter = Counter()
    for r in rows:
        got[r["file"].rsplit("/", 1)[1]] += r["bad_lines"]
        assert 1 <= len(r["samples"]) <= 2
        # the text Spark could not parse, or the fields it read of valid JSON
        assert all(s in BAD_SAMPLES or s.startswith('{"ts":"') for s in r["samples"])
    assert dict(got) == want
    assert "other.log" in got  # the truncated last line
    reasons = {r["reason"] for r in rows}
    assert reasons <= {BadReason.INVALID_JSON, BadReason.INVALID_TS, BadReason.NOT_AN_OBJECT}
    assert BadReason.INVALID_TS in reasons  # {"ts": "yesterday", ...}
    assert BadReason.NOT_AN_OBJECT in reasons  # [1, 2, 3]


def test_input_files(spark: SparkSession, built: tuple) -> None:
    """Every file the listing found, with its lines and bad lines, the empty one too."""
    logs, result, out = built
    want = {p.name: (len(lines := _file_lines(p)), sum(map(_is_bad, lines)))
            for p in logs.files}
    rows = table(spark, out, "input_files")
    got = {r["file"].rsplit("/", 1)[1]: (r["lines"], r["bad_lines"]) for r in rows}
    assert got == want and want["requests.log.9"] == (0, 0)
    assert {(r["status"], r["reason"]) for r in rows} == {("read", None)}
    assert result.files == len(want) and not result.left_out


def test_html_report(built: tuple) -> None:
    from pipeline.sections import CHARTS, PAGE_ORDER, SECTIONS

    _, _, out = built
    page = (out / "report.html").read_text()
    assert page.count('<figure id="chart-') == len(CHARTS)
    for name in ("client_inventory", "kafka4_readiness", "top_topics", "consumer_groups"):
        assert f"<h2>{SECTIONS[name].title}</h2>" in page and f"<h2>{name}</h2>" not in page
    assert "kafka-python-2.0.2" in page and "cooperative-sticky" in page
    # Laptop width: every table scrolls in its own box and sorts by a click.
    assert page.count('<div class="scroll"><table class="sortable">') == len(TABLES_SHOWN)
    assert page.count('class="empty"') == len(PAGE_ORDER) - len(TABLES_SHOWN)
    assert "overflow-x:auto" in page and 'addEventListener("click"' in page
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", page)  # self-contained


def test_counts_and_shown_rows_are_the_written_tables(spark: SparkSession, built: tuple) -> None:
    """What report.html says of each table (its row count, its first rows in the
    table's order) is what was written, though the report never reads a table back."""
    from pipeline import utc
    from pipeline.report import HTML_ROWS
    from pipeline.tables import TABLE_ORDER, sort_columns

    _, result, out = built
    assert set(result.table_rows) == set(TABLE_ORDER)
    for name in TABLE_ORDER:
        written = spark.read.parquet(str(out / name))
        assert result.table_rows[name] == written.count(), name
        first = utc.collect(written.orderBy(*sort_columns(name)).limit(HTML_ROWS))
        assert result.shown[name] == first, name


def test_a_table_longer_than_shown_is_counted_whole(spark: SparkSession, tmp_path: Path) -> None:
    """More rows than the html shows: the count is all of them (counted as the write
    passes them), the rows shown the first HTML_ROWS in the table's order."""
    from pipeline.report import HTML_ROWS, write_table

    n = HTML_ROWS * 3 + 7
    ranks = spark.range(n).select((F.lit(n) - F.col("id")).alias("rank"),
                                  F.col("id").cast("string").alias("topic"))
    total, shown = write_table(ranks.repartition(5), str(tmp_path), "top_topics")
    assert total == n == spark.read.parquet(str(tmp_path / "top_topics")).count()
    assert [r["rank"] for r in shown] == list(range(1, HTML_ROWS + 1))


# The tables with rows (this input has no follower fetches and no telemetry lines:
# tests/pipeline/test_pipeline_fleet.py has them).
TABLES_SHOWN = ("client_inventory", "api_usage", "kafka4_readiness", "latency_by_api",
                "top_topics", "consumer_groups", "consumer_lag", "consumer_topic_lag",
                "committed_lag", "topic_access", "bad_lines", "input_files")


def test_chart_lines_break_where_buckets_are_missing() -> None:
    from pipeline.charts import with_gaps

    t0 = dt.datetime(2025, 3, 1, 12, 0)
    minute = dt.timedelta(minutes=1)
    xs, ys = with_gaps([(t0 + 5 * minute, 3.0), (t0, 1.0), (t0 + minute, 2.0)], 60)
    assert xs[:2] == [t0, t0 + minute] and ys[:2] == [1.0, 2.0]
    assert ys[2] != ys[2] and t0 + minute < xs[2] < t0 + 5 * minute  # NaN: the line breaks
    assert (xs[3], ys[3]) == (t0 + 5 * minute, 3.0)
    assert with_gaps([(t0, 1.0), (t0 + minute, 2.0)], 60) == ([t0, t0 + minute], [1.0, 2.0])


def test_a_chart_of_one_bucket_spans_minutes_and_counts_whole_records() -> None:
    """The demo's short log: one minute of lag, all caught up. matplotlib alone would
    span 2025-2029 around the one point and count 0.01 records behind."""
    from pipeline.charts import lag_chart

    t = dt.datetime(2026, 11, 29, 6, 59, tzinfo=dt.UTC)
    svg = lag_chart([{"bucket": t, "group_id": "demo", "group_known": True, "lag": 0}], 60)
    assert svg is not None

    def ticks(axis: str) -> list[str]:
        found = re.findall(rf'<g id="{axis}_\d+">.*?</text>', svg, re.S)
        return [re.sub("<[^>]+>", "", text).strip() for text in found]

    assert {"06:58", "06:59", "07:00"} <= set(ticks("xtick"))
    assert not any(re.fullmatch(r"20\d\d", label) for label in ticks("xtick"))
    assert ticks("ytick") == ["0", "1"]


def test_html_escapes_client_strings() -> None:
    from pipeline.sections import CHARTS, SECTIONS

    rows = [{"client_id": "<script>alert(1)</script>", "requests": 3}]
    table = html.Table("client_inventory", SECTIONS["client_inventory"], rows, 1)
    page = html.render(html.Page("a <b> summary", ["<i>topic</i>"], [("<u>x</u>", "clients")],
                                 "", [(CHARTS["requests"], None)], [table], "<footer>"))
    assert "<script>alert" not in page and page.count("<script>") == 1  # the sort's own
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "a &lt;b&gt; summary" in page
    for tag in ("i", "u", "footer"):
        assert f"&lt;{tag}&gt;" in page


def test_empty_input_gives_empty_report(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "requests.log").write_text("")
    result = run_report(spark, [str(tmp_path / "logs")], str(tmp_path / "out"))
    assert result.counts.lines == 0 and result.counts.bad == 0
    assert result.table_rows.pop("input_files") == 1  # the empty file, with its 0 lines
    assert set(result.table_rows.values()) == {0}
    assert spark.read.parquet(str(tmp_path / "out" / "client_inventory")).count() == 0
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<figure" not in page and "Nothing needs attention" in page


def test_cli_prints_summary(spark: SparkSession, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    lines = [to_line(e) for e in Synth(seed=3).events(300)]
    (tmp_path / "requests.log").write_text("\n".join(lines) + "\n")
    assert report_main([str(tmp_path / "requests.log"), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "300 lines read from 1 file" in printed and "Kafka 4.0" in printed
    assert SparkSession.getActiveSession() is spark  # a shared session is left running


def test_a_request_without_api_is_counted_not_fatal(spark: SparkSession, tmp_path: Path) -> None:
    events = [e for e in Synth(seed=5).events(200) if isinstance(e, dict)]
    requests = [e for e in events if e["event"] in REQUEST_EVENTS]
    nameless = requests[0]
    nameless.pop("api", None)
    nameless.pop("api_key", None)
    (tmp_path / "requests.log").write_text("\n".join(to_line(e) for e in events) + "\n")
    result = run_report(spark, [str(tmp_path / "requests.log")], str(tmp_path / "out"))
    assert result.counts.requests == len(requests)
    inventory = table(spark, tmp_path / "out", "client_inventory")
    by_api = [row["requests_by_api"] for row in inventory]
    assert sum(sum(m.values()) for m in by_api) == len(requests)
    assert sum(m.get("unknown", 0) for m in by_api) == 1
