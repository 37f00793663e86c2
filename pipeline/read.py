"""The logs in: inputs checked, every non-blank line parsed once by Spark, good or bad.

A malformed or truncated line becomes a row flagged with why it is bad, never a failure
and never a row the driver collects (pipeline/README.md, "Reading", "Bad lines").
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pipeline.fsio import hadoop_file
from pipeline.schema import CORRUPT, JSON_OPTIONS, KNOWN_EVENTS, LINE_SCHEMA

SAMPLE_CHARS = 200


class InputError(Exception):
    """The inputs match nothing, or Spark cannot read them: the report must not pass
    for an empty one (exit 0 would read as "all clear" to a cron job)."""


def expand_inputs(spark: SparkSession, inputs: Iterable[str]) -> list[str]:
    """The inputs, each checked to match something through Hadoop's FileSystem (what
    the job's file listing uses). Raises InputError naming those that match nothing."""
    found: list[str] = []
    missing: list[str] = []
    for raw in inputs:
        try:
            fs, path = hadoop_file(spark, raw)
            matches = fs.globStatus(path)
        except Exception as e:  # noqa: BLE001 - a bad scheme or host: say which input
            raise InputError(f"cannot list {raw}: {first_line(e)}") from e
        (found if matches else missing).append(raw)
    if missing:
        raise InputError("no file matches " + ", ".join(missing))
    return found


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    # A Py4J error's text is the Java stack; its cause is on the first "Exception:" line.
    for line in text.splitlines():
        if "Exception:" in line:
            return line.split("Exception:", 1)[1].strip() or line.strip()
    return text.splitlines()[0] if text else type(error).__name__


def read_logs(spark: SparkSession, paths: list[str], schema: StructType | None = None) -> DataFrame:
    """Every non-blank line parsed by Spark's JSON source with the report's schema,
    and the file it came from (`file`); a line Spark cannot parse keeps its text in
    `_corrupt_record` (the JSON source: half the CPU of text + from_json, README).
    `schema` is the report's unless given (bench.scan_cost measures others)."""
    reader = spark.read.schema(schema or LINE_SCHEMA).options(**JSON_OPTIONS)
    reader = reader.option("recursiveFileLookup", "true")
    # A truncated .gz (a crash mid-compression) keeps the lines before the damage
    # instead of failing the job (Spark logs the file it gave up on).
    reader = reader.option("ignoreCorruptFiles", "true")
    return reader.json(paths).select("*", F.col("_metadata.file_path").alias("file"))


def bad_reason(j: Column) -> Column:
    """Why a parsed line is bad, or null when it is good (or of an event we ignore)."""
    corrupt = j[CORRUPT].isNotNull()
    return (
        F.when(corrupt & j["event"].isNull(), F.lit("invalid JSON"))
        .when(j["ts"].isNull() | j["event"].isNull(), F.lit("missing or invalid ts/event"))
        .when(corrupt & j["event"].isin(*KNOWN_EVENTS), F.lit("field of the wrong type"))
    )


def parse_lines(logs: DataFrame) -> DataFrame:
    """The report's fields of each line (read_logs), plus `bad_reason`, and `line`
    (its first characters: the text Spark could not parse, else the fields it read)
    and `file` kept only on bad lines (most rows are good: null costs nothing)."""
    reason = bad_reason(F.struct(*LINE_SCHEMA.fieldNames()))
    read = [name for name in LINE_SCHEMA.fieldNames() if name not in (CORRUPT, "record_stats")]
    text = F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*read)))
    return logs.select(
        *read,
        F.col("record_stats")["per_topic"].alias("per_topic"),
        reason.alias("bad_reason"),
        F.when(reason.isNotNull(), F.substring(text, 1, SAMPLE_CHARS)).alias("line"),
        F.when(reason.isNotNull(), F.col("file")).alias("file"),
    )
