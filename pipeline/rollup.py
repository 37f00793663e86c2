"""The hourly rollup beside the ingested table: the report's fine aggregation
(fine.py) of each closed hour's lines, kept in a Delta table of its own under
TABLE/_rollup, so that `report --table` aggregates only the lines of the hours not
rolled up and merges the others' partial aggregates (fine.merge) instead of reading
their lines. The lines stay in the table: the rollup is derived from them and may be
made again at any time.

An hour (of a `kind`: lines or the quarantine) is closed once the table holds lines of
a later hour; the ingest rolls up closed hours at the end of a --once run and with
--compact. Each rolled hour records how many rows of the table it was made from
(`lines_at`); the report uses it only while the table still holds exactly that many
rows in that hour (a count that reads the partition columns only), so lines that reach
an hour after its rollup (a proxy whose file rotated late) are never missed: that hour
is aggregated from its lines until the next rollup makes it again. Compaction changes
files, not rows: a rolled hour stays valid through it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import fsio
from pipeline.fine import aggregate, fine_rows, keyed_parts, merge
from pipeline.read import PARSED_EXTRA, PARSED_FIELDS

ROLLUP = "_rollup"  # under TABLE: Delta's VACUUM leaves folders starting with "_"
HOUR = ("kind", "date", "hour")  # the table's partition columns (ingest.PARTITIONS)
Hour = tuple[str, str, int]


def path_of(table: str) -> str:
    return f"{table.rstrip('/')}/{ROLLUP}"


def _hour_key() -> Column:
    return F.concat_ws("/", *[F.col(c).cast("string") for c in HOUR])


def _key(hour: Hour) -> str:
    return "/".join(map(str, hour))


def table_version(spark: SparkSession, table: str) -> DataFrame:
    """The table's rows (partition columns too) at its current version, pinned: what is
    counted and what is aggregated are the same rows."""
    from delta.tables import DeltaTable

    last = DeltaTable.forPath(spark, table).history(1).select("version").first()
    if last is None:
        raise ValueError(f"{table}: a Delta table without a version")
    return spark.read.format("delta").option("versionAsOf", last[0]).load(table)


def hour_counts(rows: DataFrame) -> dict[Hour, int]:
    """Rows per hour of each kind (reads the partition columns only)."""
    return {(r["kind"], r["date"], int(r["hour"])): int(r["count"])
            for r in rows.groupBy(*HOUR).count().collect()}


def rolled_hours(spark: SparkSession, table: str) -> dict[Hour, int]:
    """The hours rolled up, with the rows each was made from."""
    path = path_of(table)
    # Not DeltaTable.isDeltaTable: for a folder inside the table with no log of its
    # own, Delta finds the table above and refuses `_rollup` as a partition path.
    fs, log = fsio.hadoop_file(spark, f"{path}/_delta_log")
    if not fs.exists(log):
        return {}
    rows = spark.read.format("delta").load(path).select(*HOUR, "lines_at").distinct()
    return {(r["kind"], r["date"], int(r["hour"])): int(r["lines_at"]) for r in rows.collect()}


def closed(counts: dict[Hour, int]) -> dict[Hour, int]:
    """The hours before the newest hour that holds lines (that one may still fill)."""
    newest = max(((d, h) for k, d, h in counts if k == "lines"), default=None)
    if newest is None:
        return {}
    return {hour: n for hour, n in counts.items() if (hour[1], hour[2]) < newest}


def update(spark: SparkSession, table: str) -> tuple[int, int]:
    """Rolls up the closed hours not rolled up yet, or holding other rows since; returns
    how many hours and rows it rolled up."""
    rows = table_version(spark, table)
    rolled = rolled_hours(spark, table)
    todo = {hour: n for hour, n in closed(hour_counts(rows)).items() if rolled.get(hour) != n}
    if not todo:
        return 0, 0
    keys = [_key(hour) for hour in sorted(todo)]
    lines_at = F.create_map(*[F.lit(v) for hour, n in sorted(todo.items())
                              for v in (_key(hour), n)])
    chosen = rows.where(_hour_key().isin(keys))
    fine = aggregate(keyed_parts(chosen, HOUR), HOUR).withColumn(
        "lines_at", F.element_at(lines_at, _hour_key()).cast("long"))
    writer = fine.coalesce(1).write.format("delta").partitionBy(*HOUR)
    if rolled:
        listed = ", ".join(f"'{k}'" for k in keys)
        writer = writer.mode("overwrite").option(
            "replaceWhere", f"concat_ws('/', kind, date, cast(hour as string)) in ({listed})")
    else:
        writer = writer.mode("overwrite")
    writer.save(path_of(table))
    return len(todo), sum(todo.values())


def fine_of_table(spark: SparkSession, table: str) -> tuple[DataFrame, int]:
    """The fine aggregation of the table's current rows (what fine.fine_rows makes of
    them all), from the rollup where it holds an hour as it is, from the lines
    elsewhere; and how many rows the rollup stood for."""
    rows = table_version(spark, table)
    rolled = rolled_hours(spark, table)
    if rolled:
        fresh = sorted(hour for hour, n in hour_counts(rows).items() if rolled.get(hour) == n)
    else:
        fresh = []
    lines = rows.select(*PARSED_FIELDS, *PARSED_EXTRA)
    if not fresh:
        return fine_rows(lines), 0
    keys = [_key(hour) for hour in fresh]
    rest = rows.where(~_hour_key().isin(keys)).select(*PARSED_FIELDS, *PARSED_EXTRA)
    of_lines = fine_rows(rest)
    partial = spark.read.format("delta").load(path_of(table)).where(
        _hour_key().isin(keys)).select(*of_lines.columns)
    return merge(of_lines.unionByName(partial)), sum(rolled[hour] for hour in fresh)
