"""Input expansion and parsing: every non-blank line counts once, good or bad.

Lines are read as text and parsed in the Python workers (fastparse) where the outcome
is certain, else with from_json and the explicit schema (parse_lines), so a malformed
or truncated line is kept and flagged (``bad``) instead of failing the job or
vanishing. Paths go through Hadoop's FileSystem, so inputs may be local files,
hdfs:// or s3a:// alike; .gz files are decompressed by extension.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.partials import SPARK_SCHEMA, fold_parsed, fold_text
from pipeline.schema import CORRUPT, JSON_OPTIONS, KNOWN_EVENTS, report_schema

SAMPLE_CHARS = 200


def expand_inputs(spark: SparkSession, inputs: Iterable[str]) -> tuple[list[str], list[str]]:
    """Split inputs into those that match something and those that match nothing.

    Spark itself expands globs and (with recursiveFileLookup) directories, but fails
    the whole read on one path that does not exist; an input that matches nothing is
    reported and skipped instead.
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    found: list[str] = []
    missing: list[str] = []
    for raw in inputs:
        path = jvm.org.apache.hadoop.fs.Path(raw)
        matches = path.getFileSystem(hadoop_conf).globStatus(path)
        (found if matches else missing).append(raw)
    return found, missing


def read_lines(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Raw lines (`value`) with the file each came from (`file`)."""
    if not paths:
        return spark.createDataFrame([], "value string, file string")
    reader = spark.read.option("recursiveFileLookup", "true")
    # A truncated .gz (a crash mid-compression) keeps the lines before the damage
    # instead of failing the job.
    reader = reader.option("ignoreCorruptFiles", "true")
    return reader.text(paths).select("value", F.col("_metadata.file_path").alias("file"))


def bad_reason(j: Column) -> Column:
    """Why a parsed line is bad, or null when it is good (or of an event we ignore)."""
    corrupt = j[CORRUPT].isNotNull()
    return (
        F.when(corrupt & j["event"].isNull(), F.lit("invalid JSON"))
        .when(j["ts"].isNull() | j["event"].isNull(), F.lit("missing or invalid ts/event"))
        .when(corrupt & j["event"].isin(*KNOWN_EVENTS), F.lit("field of the wrong type"))
    )


def parse_lines(lines: DataFrame) -> DataFrame:
    """Parsed fields plus `bad_reason`, and `line`/`file` kept only on bad lines.

    `errors` becomes `error` (1 when the list is not empty) and `record_stats` its
    `per_topic` map: that is all the tables use of them, and narrow rows cache cheaply.
    """
    value = F.col("value")
    schema = report_schema()
    parsed = lines.where(F.trim(value) != "").select(
        F.from_json(value, schema, JSON_OPTIONS).alias("j"), value, F.col("file")
    )
    j = F.col("j")
    reason = bad_reason(j)
    skip = (CORRUPT, "errors", "record_stats")
    fields = [j[f.name].alias(f.name) for f in schema.fields if f.name not in skip]
    return parsed.select(
        *fields,
        F.when(F.size(j["errors"]) > 0, 1).otherwise(0).alias("error"),
        j["record_stats"]["per_topic"].alias("per_topic"),
        reason.alias("bad_reason"),
        # Kept only where needed: most rows are good and cached, so null costs nothing.
        F.when(reason.isNotNull(), F.substring(value, 1, SAMPLE_CHARS)).alias("line"),
        F.when(reason.isNotNull(), F.col("file")).alias("file"),
    )


def text_partials(lines: DataFrame) -> DataFrame:
    """The lines (`value`, `file`) folded per partition in Python: partials.py's rows,
    kind `r` holding the lines fastparse could not decide."""
    return lines.select("value", "file").mapInArrow(fold_text, SPARK_SCHEMA)


def fallback_partials(text: DataFrame) -> DataFrame:
    """The undecided lines of text_partials, parsed by Spark and folded like the rest."""
    undecided = text.where(F.col("kind") == "r").select(
        F.col("line").cast("string").alias("value"), "file"
    )
    parsed = parse_lines(undecided)
    rows = parsed.select(
        *[F.unix_micros(c).alias(c) if c == "ts" else c for c in parsed.columns if c != "line"],
        F.col("line").cast("binary").alias("line"),
    )
    return rows.mapInArrow(fold_parsed, SPARK_SCHEMA)


def line_partials(text: DataFrame) -> DataFrame:
    """All lines' partials: text_partials' own, and its undecided lines' once parsed.

    `text` (text_partials) is read twice, so the caller caches it."""
    return text.where(F.col("kind") != "r").unionByName(fallback_partials(text))
