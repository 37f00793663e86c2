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

The minute rows (the `l` and `p` parts: latency histograms and Fetch positions per
minute) are most of a rollup: per minute, api and latency bin, ~1,900 rows a minute
for the benchmark's logs (bench/PIPELINE.md). The report needs them only at its time
buckets' size, which grows with the span of the table's lines (tables.BUCKET_MINUTES:
each size divides the next) and never shrinks as lines are added: so each hour is
rolled up with its minute rows folded into slots of the bucket size the table's span
already calls for (`grain`, seconds; a lower bound of the span from the hours holding
lines), every later report's bucket a multiple of it. A report uses a rolled hour only
if its grain divides that report's bucket (a table whose lines were deleted, its span
shorter since, has that hour read from its lines): the same tables as from the lines.
An hour keeps the grain it was rolled up at (`rm -r TABLE/_rollup` remakes them all at
the current one).
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import fsio
from pipeline.fine import aggregate, fine_rows, keyed_parts, merge
from pipeline.read import parsed_columns
from pipeline.tables import span_bucket_seconds

ROLLUP = "_rollup"  # under TABLE: Delta's VACUUM leaves folders starting with "_"
HOUR = ("kind", "date", "hour")  # the table's partition columns (ingest.PARTITIONS)
Hour = tuple[str, str, int]
MINUTE = 60  # the grain of an hour a rollup of an older kafkalens made (no `grain`)
# The report's scan over the table: a file costs as much as 1 MB read (the session's
# 32 MB: pipeline.session.SPLIT_BYTES), so the few large files of the hours read from
# lines (a compacted hour is one) are split between the cores at their row groups
# (ingest.ROW_GROUP_BYTES), not read in one task each (bench/PIPELINE.md, "The report
# over the table, step by step").
READ_CONF = {"spark.sql.files.openCostInBytes": str(2**20)}


def path_of(table: str) -> str:
    return f"{table.rstrip('/')}/{ROLLUP}"


def _hour_key() -> Column:
    return F.concat_ws("/", *[F.col(c).cast("string") for c in HOUR])


def _key(hour: Hour) -> str:
    return "/".join(map(str, hour))


def table_version(spark: SparkSession, table: str) -> DataFrame:
    """The table's rows (partition columns too) at its current version, pinned: what is
    counted and what is aggregated are the same rows. The version is the newest commit
    file's in the log's listing (Delta's history() ran a job for it)."""
    last = fsio.delta_version(spark, table)
    if last < 0:
        raise ValueError(f"{table}: a Delta table without a version")
    return spark.read.format("delta").option("versionAsOf", last).load(table)


def hour_counts(rows: DataFrame) -> dict[Hour, int]:
    """Rows per hour of each kind (reads the partition columns only)."""
    return {(r["kind"], r["date"], int(r["hour"])): int(r["count"])
            for r in rows.groupBy(*HOUR).count().collect()}


def rolled_hours(spark: SparkSession, table: str) -> dict[Hour, int]:
    """The hours rolled up, with the rows each was made from."""
    return {hour: lines_at for hour, (lines_at, _) in _rolled(spark, table).items()}


def _rolled(spark: SparkSession, table: str) -> dict[Hour, tuple[int, int]]:
    """The hours rolled up, with the rows each was made from and its grain."""
    path = path_of(table)
    # Not DeltaTable.isDeltaTable: for a folder inside the table with no log of its
    # own, Delta finds the table above and refuses `_rollup` as a partition path.
    fs, log = fsio.hadoop_file(spark, f"{path}/_delta_log")
    if not fs.exists(log):
        return {}
    rollup = spark.read.format("delta").load(path)
    grain = F.col("grain") if "grain" in rollup.columns else F.lit(None)
    rows = rollup.select(*HOUR, "lines_at", grain.cast("long").alias("grain")).distinct()
    return {(r["kind"], r["date"], int(r["hour"])): (int(r["lines_at"]), int(r["grain"] or MINUTE))
            for r in rows.collect()}


def grain(counts: dict[Hour, int]) -> int:
    """The bucket size (seconds) of a report over a table whose hours hold `counts`, at
    the least: that of the span from the end of the oldest hour holding lines to the
    start of the newest (every line of an hour is inside it), which only grows as lines
    are added."""
    hours = [dt.datetime.fromisoformat(str(d)).replace(hour=h)
             for k, d, h in counts if k == "lines"]
    if not hours:
        return MINUTE
    span = (max(hours) - min(hours)).total_seconds() - 3600
    return span_bucket_seconds(max(0.0, span))


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
    rolled = _rolled(spark, table)
    counts = hour_counts(rows)
    todo = {hour: n for hour, n in closed(counts).items()
            if rolled.get(hour, (None,))[0] != n}
    if not todo:
        return 0, 0
    keys = [_key(hour) for hour in sorted(todo)]
    lines_at = F.create_map(*[F.lit(v) for hour, n in sorted(todo.items())
                              for v in (_key(hour), n)])
    chosen = rows.where(_hour_key().isin(keys))
    size = grain(counts)
    keyed = keyed_parts(chosen, HOUR)
    epoch = F.unix_seconds("minute")
    keyed = keyed.withColumn("minute", F.timestamp_seconds(epoch - epoch % size))
    fine = aggregate(keyed, HOUR).withColumn(
        "lines_at", F.element_at(lines_at, _hour_key()).cast("long")).withColumn(
        "grain", F.lit(size).cast("long"))
    # mergeSchema: a rollup an older kafkalens made has no `grain` column (its hours'
    # rows are at the minute, read as MINUTE).
    writer = fine.coalesce(1).write.format("delta").partitionBy(*HOUR).option(
        "mergeSchema", "true")
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
    rolled = _rolled(spark, table)
    if rolled:
        counts = hour_counts(rows)
        # A grain at most the report's bucket divides it (tables.BUCKET_MINUTES).
        size = grain(counts)
        fresh = sorted(hour for hour, n in counts.items()
                       if hour in rolled and rolled[hour][0] == n and rolled[hour][1] <= size)
    else:
        fresh = []
    lines = rows.select(*parsed_columns(rows))
    if not fresh:
        return fine_rows(lines), 0
    keys = [_key(hour) for hour in fresh]
    rest = rows.where(~_hour_key().isin(keys)).select(*parsed_columns(rows))
    of_lines = fine_rows(rest)
    partial = spark.read.format("delta").load(path_of(table)).where(
        _hour_key().isin(keys)).select(*of_lines.columns)
    return merge(of_lines.unionByName(partial)), sum(rolled[hour][0] for hour in fresh)
