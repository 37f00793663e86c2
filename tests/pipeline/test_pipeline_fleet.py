"""`kafkalens report` over a fleet's logs: three sidecars, each writing the lines of its
own broker's connections (a Fetch names only the partitions that broker leads, a group
only where that broker coordinates it) and a telemetry log beside its request log.
Each fleet table (pipeline/fleet.py) is compared with the same numbers computed in
plain Python from the events (tests/support/fleet_oracle.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from support import fleet_oracle as oracle
from support.synth import Synth, to_line, write_rotated
from support.synth_fleet import PARTITIONS

from pipeline.report import run_report
from pipeline.summary import ReportResult

BROKERS = 3
REQUEST_EVENTS = ("request", "request_no_response")
# Lines of the two new kinds with a field of another type than the log's: read as lines
# without that field (as the ingest reads them, pipeline/evolve.py), not bad lines.
WRONG_TYPES = (
    {"ts": "2025-03-01T12:00:01Z", "event": "client_metric", "client_instance_id": "x",
     "metric": "m", "type": "gauge", "value": "high"},
    {"ts": "2025-03-01T12:00:02Z", "event": "request", "api_key": 1, "api": "Fetch",
     "conn": "zz", "positions": [{"topic": "t", "partition": "zero", "lag": 1}]},
)


class Fleet:
    def __init__(self, root: Path) -> None:
        # ~2 hours of traffic: 2-minute buckets, each folding several minutes' rows.
        synth = Synth(seed=17, rate=0.5, bad_every=397, follower_every=37, telemetry_every=11,
                      brokers=BROKERS)
        events = list(synth.events(4000))
        self.dirs = [root / f"broker-{b}" for b in range(BROKERS)]
        for b, directory in enumerate(self.dirs):
            mine = [e for e in events if synth.sidecar(e) == b]
            requests = [e for e in mine if not _is_metric(e)]
            write_rotated(directory, map(to_line, requests), 700, gz=True)
            write_rotated(directory, map(to_line, filter(_is_metric, mine)), 200,
                          name="telemetry.log")
        with (self.dirs[0] / "telemetry.log").open("a") as f:
            f.write("".join(json.dumps(e) + "\n" for e in WRONG_TYPES))
        good = [e for e in events if isinstance(e, dict)]
        self.requests = [e for e in good if e["event"] in REQUEST_EVENTS]
        self.metrics = [e for e in good if _is_metric(e)]
        self.sidecars = {b: [e for e in good if synth.sidecar(e) == b] for b in range(BROKERS)}


def _is_metric(e: Any) -> bool:
    return isinstance(e, dict) and e["event"] == "client_metric"


JOBS: dict[str, int] = {}  # Spark jobs a report ran, by how its tables were computed


def last_job(spark: SparkSession) -> int:
    """The jobs Spark has run in this session, of any job group (the newest job of no
    group is not the newest job: a watch's streaming jobs, in earlier tests, have one)."""
    return int(spark.sparkContext._jsc.sc().dagScheduler().numTotalJobs())


@pytest.fixture(scope="module")
def built(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Fleet, ReportResult, Path]:
    root = tmp_path_factory.mktemp("fleet")
    fleet = Fleet(root)
    before = last_job(spark)
    result = run_report(spark, [str(d) for d in fleet.dirs], str(root / "out"))
    JOBS["gathered"] = last_job(spark) - before
    return fleet, result, root / "out"


def table(spark: SparkSession, out: Path, name: str) -> list[dict[str, Any]]:
    """A written table's rows, timestamps as epoch microseconds (as the oracle's)."""
    df = spark.read.parquet(str(out / name))
    micros = [F.unix_micros(c).alias(c) for c, t in df.dtypes if t == "timestamp"]
    other = [c for c, t in df.dtypes if t != "timestamp"]
    return [r.asDict(recursive=True) for r in df.select(*other, *micros).collect()]


def keyed(spark: SparkSession, out: Path, name: str, key: Callable[[dict], tuple]
          ) -> dict[tuple, dict[str, Any]]:
    rows = table(spark, out, name)
    got = {key(r): r for r in rows}
    assert len(got) == len(rows), f"{name}: duplicate keys"
    return got


def same(got: dict[str, Any], want: dict[str, Any], fields: tuple[str, ...], key: Any) -> None:
    for field in fields:
        assert got[field] == want[field], (key, field, got[field], want[field])


def test_the_input_is_a_fleet(built: tuple) -> None:
    """Every sidecar sees part of the partitions; groups are known only at their
    coordinator's sidecar; followers fetch; the positions' arrays are what the fleet
    tables join."""
    fleet, result, _ = built
    for events in fleet.sidecars.values():
        fetches = [e for e in events if e.get("positions")]
        assert fetches and len({(p["topic"], p["partition"]) for e in fetches
                                for p in e["positions"]}) < sum(PARTITIONS.values())
    fetches = [e for e in fleet.requests if e.get("api") == "Fetch" and e.get("positions")]
    assert any("consumer_group" in e for e in fetches)
    assert any("consumer_group" not in e and "replica_id" not in e for e in fetches)
    assert any("replica_id" in e for e in fetches)
    assert result.counts.bad >= 1  # Synth's bad lines


def test_consumer_lag(spark: SparkSession, built: tuple) -> None:
    fleet, result, out = built
    want = oracle.consumer_lag(fleet.requests, result.bucket_seconds)
    got = keyed(spark, out, "consumer_lag", lambda r: (
        r["bucket"], r["group_id"], r["group_known"], r["topic"], r["partition"]))
    assert got.keys() == want.keys()
    for key, row in want.items():
        same(got[key], row, ("latest_lag", "max_lag", "position", "high_watermark", "fetches",
                             "last_seen"), key)
        assert got[key]["consumers"] == sorted(row["consumers"])
    assert len({k[0] for k in want}) >= 5  # lag over time: several buckets,
    assert result.bucket_seconds > 60  # each folding several minutes' rows
    known = {e["consumer_group"] for e in fleet.requests
             if e.get("positions") and e.get("consumer_group")}
    assert {k[1] for k in want if k[2]} == known and "billing" in known
    # A group's partitions are joined from the sidecars that lead them.
    billing = {(k[3], k[4]) for k in want if k[1] == "billing"}
    assert len(billing) > 1


def test_consumer_lag_is_high_watermark_minus_position(spark: SparkSession, built: tuple
                                                       ) -> None:
    """For read_uncommitted consumers, as the contract defines lag."""
    fleet, _, out = built
    rows = table(spark, out, "consumer_lag")
    uncommitted = {e["client_instance_id"] or e["client_id"] for e in fleet.requests
                   if e.get("isolation_level") == 0}
    checked = [r for r in rows if set(r["consumers"]) <= uncommitted]
    assert checked
    assert all(r["latest_lag"] == r["high_watermark"] - r["position"] for r in checked)


def test_consumer_topic_lag(spark: SparkSession, built: tuple) -> None:
    fleet, result, out = built
    want = oracle.consumer_topic_lag(oracle.consumer_lag(fleet.requests, result.bucket_seconds))
    got = keyed(spark, out, "consumer_topic_lag",
                lambda r: (r["bucket"], r["group_id"], r["group_known"], r["topic"]))
    assert got.keys() == want.keys()
    for key, row in want.items():
        same(got[key], row, ("total_lag", "max_partition_lag", "partitions", "last_seen"), key)


def test_replication_lag_is_apart_from_consumers(spark: SparkSession, built: tuple) -> None:
    fleet, result, out = built
    want = oracle.replication_lag(fleet.requests, result.bucket_seconds)
    got = keyed(spark, out, "replication_lag",
                lambda r: (r["bucket"], r["replica_id"], r["topic"], r["partition"]))
    assert want and got.keys() == want.keys()
    for key, row in want.items():
        same(got[key], row, ("latest_lag", "max_lag", "position", "high_watermark", "fetches",
                             "last_seen"), key)
    consumers = {c for r in table(spark, out, "consumer_lag") for c in r["consumers"]}
    assert not {c for c in consumers if c.startswith("broker-")}


def test_committed_lag(spark: SparkSession, built: tuple) -> None:
    fleet, _, out = built
    want = oracle.committed_lag(fleet.requests)
    got = keyed(spark, out, "committed_lag",
                lambda r: (r["group_id"], r["topic"], r["partition"]))
    assert want and got.keys() == want.keys()
    for key, row in want.items():
        same(got[key], row, ("committed_offset", "high_watermark", "lag", "max_lag", "commits",
                             "first_seen", "last_seen", "fleet_high_watermark", "fleet_lag"),
             key)
    # A sidecar that never saw the partition's high watermark logs no lag; the fleet does.
    assert any(r["lag"] is None and r["fleet_lag"] is not None for r in got.values())


def test_topic_access(spark: SparkSession, built: tuple) -> None:
    fleet, _, out = built
    want = oracle.topic_access(fleet.requests)
    got = keyed(spark, out, "topic_access", lambda r: (
        r["topic"], r["direction"], r["principal"], r["client_software_name"],
        r["client_software_version"]))
    assert got.keys() == want.keys()
    for key, row in want.items():
        g = got[key]
        assert g["clients"] == len(row["keys"]), key
        assert g["client_keys"] == sorted(row["keys"])[:20]
        assert g["client_ids"] == sorted(row["client_ids"])
        same(g, row, ("requests", "records", "bytes", "batches"), key)
        assert (g["first_seen"], g["last_seen"]) == (min(row["ts"]), max(row["ts"]))
    assert {k[1] for k in want} == {"produce", "fetch", "replicate"}
    orders = got[("orders", "produce", "User:orders", "apache-kafka-java", "3.7.0")]
    assert orders["clients"] == 3  # the three instances, by their KIP-714 ids


RETYPED_METRIC = WRONG_TYPES[0]["metric"]  # its series: test_wrong_types_are_retyped_lines


def test_client_telemetry(spark: SparkSession, built: tuple) -> None:
    fleet, _, out = built
    want = oracle.client_telemetry(fleet.metrics)
    got = keyed(spark, out, "client_telemetry", lambda r: (
        r["client_software_name"], r["client_software_version"], r["metric"], r["metric_type"]))
    got = {key: row for key, row in got.items() if key[2] != RETYPED_METRIC}
    assert want and got.keys() == want.keys()
    for key, row in want.items():
        same(got[key], row, ("instances", "series", "min_value", "max_value", "points",
                             "last_seen"), key)
        assert got[key]["median_value"] == pytest.approx(row["median_value"])
    assert {k[3] for k in want} == {"gauge", "sum", "histogram"}


def test_client_telemetry_top(spark: SparkSession, built: tuple) -> None:
    fleet, _, out = built
    want = oracle.client_telemetry_top(fleet.metrics)
    got = keyed(spark, out, "client_telemetry_top", lambda r: (r["metric"], r["rank"]))
    got = {key: row for key, row in got.items() if key[0] != RETYPED_METRIC}
    assert got.keys() == want.keys()
    for key, (instance, attrs, value) in want.items():
        assert (got[key]["instance"], got[key]["attributes"], got[key]["latest_value"]) == (
            instance, attrs, value), key


def test_wrong_types_are_retyped_lines(spark: SparkSession, built: tuple) -> None:
    """Each line with a field of another type is read as a line without that field
    (the metric's point without its value, the Fetch without its positions), counted
    per field in the summary and per file in input_files; none is a bad line."""
    fleet, result, out = built
    assert not [r for r in table(spark, out, "bad_lines")
                if r["reason"] == "field of the wrong type"]
    assert result.counts.retyped == len(WRONG_TYPES)
    assert result.counts.retyped_fields == (("positions", 1), ("value", 1))
    files = {r["file"]: r for r in table(spark, out, "input_files")}
    assert {f: r["retyped_lines"] for f, r in files.items() if r["retyped_lines"]} == {
        f: len(WRONG_TYPES) for f in files if f.endswith("broker-0/telemetry.log")}
    metric = WRONG_TYPES[0]
    series = [r for r in table(spark, out, "client_telemetry")
              if r["metric"] == metric["metric"]]
    assert [(r["metric_type"], r["points"], r["max_value"]) for r in series] == [
        (metric["type"], 1, None)]
    fetch = WRONG_TYPES[1]
    assert not [r for r in table(spark, out, "consumer_lag") if r["topic"] == "t"]
    by_api = {r["api"]: r for r in table(spark, out, "latency_by_api")}
    fetches = sum(1 for e in fleet.requests if e.get("api") == fetch["api"])
    assert by_api[fetch["api"]]["requests"] == fetches + 1
    from pipeline.summary import summary_lines

    said = "\n".join(summary_lines(result))
    assert ("2 lines held a field of another type than the request log's, read as lines "
            "without that field: positions (1 line) and value (1 line).") in said, said


def test_html_shows_the_fleet_tables(built: tuple) -> None:
    from pipeline.sections import SECTIONS

    _, _, out = built
    page = (out / "report.html").read_text()
    for name in ("consumer_lag", "consumer_topic_lag", "committed_lag", "replication_lag",
                 "topic_access", "client_telemetry", "client_telemetry_top"):
        assert f"<h2>{SECTIONS[name].title}</h2>" in page, name
    assert "org.apache.kafka.producer.record.queue.time.avg" in page


def _rounded(value: Any) -> Any:
    """A row's value with floats to 9 digits (sums of doubles in another order)."""
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, dict):
        return sorted((k, _rounded(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def test_tables_computed_by_shuffles_are_the_same(spark: SparkSession, built: tuple,
                                                  tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A small fine aggregation is read in one partition: every table one job of one
    task, no shuffle. A larger one is spread over partitions (report.ROWS_PER_PARTITION)
    by shuffles, by the same code, with the same rows; a job per table either way."""
    from pipeline import report
    from pipeline.tables import TABLE_ORDER

    fleet, result, out = built
    monkeypatch.setattr(report, "ROWS_PER_PARTITION", 1)
    assert report.table_partitions(spark, 10) == spark.sparkContext.defaultParallelism > 1
    before = last_job(spark)
    spread = run_report(spark, [str(d) for d in fleet.dirs], str(tmp_path / "out"))
    JOBS["spread"] = last_job(spark) - before
    # The scan, a job per table, the three chart series' queries (and a few of Spark's own).
    assert JOBS["gathered"] <= len(TABLE_ORDER) + 7, JOBS
    assert JOBS["spread"] <= len(TABLE_ORDER) + 7, JOBS
    assert spread.table_rows == result.table_rows and spread.series == result.series
    for name in TABLE_ORDER:
        rows = [sorted(map(repr, map(_rounded, table(spark, path, name)))) for path in
                (out, tmp_path / "out")]
        assert rows[0] == rows[1], name
