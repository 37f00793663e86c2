"""Input expansion, the pass over the lines, and Spark's parse of the doubtful ones.

Every non-blank line counts once, good or bad. The Python workers parse the lines
(fastparse) where the outcome is certain and fold them into partial aggregates
(partials.py); a line they cannot be sure of is parsed with from_json and the
explicit schema (parse_lines), so a malformed or truncated line is kept and flagged
(``bad``) instead of failing the job or vanishing.

Paths go through Hadoop's FileSystem (globs, directories, hdfs:// or s3a://), and
Spark lists the files. Local files (plain paths, file://) are read by the workers
themselves (splits.py: no JVM per line); others, and codecs other than gzip, by
Spark's text source, the workers getting the lines over Arrow (text_partials).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from urllib.parse import unquote, urlparse

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.fsio import is_local
from pipeline.merge import SAMPLE_CHARS
from pipeline.partials import SPARK_SCHEMA, Partials, fold_rows, fold_splits, fold_text
from pipeline.schema import CORRUPT, JSON_OPTIONS, KNOWN_EVENTS, report_schema
from pipeline.splits import SPARK_CODECS, plan_splits


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


def _text(spark: SparkSession, paths: list[str]) -> DataFrame:
    reader = spark.read.option("recursiveFileLookup", "true")
    # A truncated .gz (a crash mid-compression) keeps the lines before the damage
    # instead of failing the job.
    return reader.option("ignoreCorruptFiles", "true").text(paths)


def read_lines(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Raw lines (`value`) with the file each came from (`file`), read by Spark."""
    if not paths:
        return spark.createDataFrame([], "value string, file string")
    return _text(spark, paths).select("value", F.col("_metadata.file_path").alias("file"))


def input_files(spark: SparkSession, paths: list[str]) -> list[str]:
    """The files Spark's text source would read (globs and directories expanded, hidden
    files skipped, as Spark lists them), named as its `_metadata.file_path` names them
    (bad lines are kept with that name)."""
    return [file_path(uri) for uri in _text(spark, paths).inputFiles()] if paths else []


def file_path(uri: str) -> str:
    """A listed file's URI as `_metadata.file_path` has it: file:/x, not file:///x
    (an empty authority is dropped; escapes stay)."""
    scheme = urlparse(uri).scheme
    empty_authority = f"{scheme}:///"
    return f"{scheme}:/{uri[len(empty_authority):]}" if uri.startswith(empty_authority) else uri


def local_path(uri: str) -> str | None:
    """Where a listed file is on this machine, or None if it is not local, or of a
    codec only Hadoop reads."""
    parsed = urlparse(uri)
    if not is_local(uri) or uri.endswith(SPARK_CODECS):
        return None
    return unquote(parsed.path)


def local_partials(spark: SparkSession, files: list[tuple[str, str]]) -> Iterator[pa.Table]:
    """Partials of local (uri, path) files, read, parsed and folded by the workers: one
    task per split, no rows through the JVM."""
    splits = plan_splits([(uri, path, os.path.getsize(path)) for uri, path in files])
    if not splits:
        return
    tasks = spark.sparkContext.parallelize(splits, len(splits)).mapPartitions(fold_splits)
    for stream in tasks.collect():
        yield pa.ipc.open_stream(stream).read_all()


def line_partials(spark: SparkSession, paths: list[str]) -> Iterator[pa.Table]:
    """The partials of every line of the inputs, local files read by the Python
    workers, the others by Spark."""
    listed = input_files(spark, paths)
    local = [(uri, path) for uri in listed if (path := local_path(uri)) is not None]
    yield from local_partials(spark, local)
    if others := sorted(set(listed) - {uri for uri, _ in local}):
        yield text_partials(read_lines(spark, [literal_path(uri) for uri in others])).toArrow()


def literal_path(uri: str) -> str:
    """A listed file as a path Spark's reader takes back: escapes decoded (a path
    string is not a URI) and glob characters escaped (it would expand them)."""
    return re.sub(r"([\\{}\[\]*?])", r"\\\1", unquote(uri))


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


def fallback_partials(spark: SparkSession, raw: list[tuple[str, bytes]]) -> pa.Table:
    """The lines the workers left undecided (`raw`: file, line), parsed by Spark and
    folded in the driver: few lines, one small job."""
    partials = Partials()
    if raw:
        lines = spark.createDataFrame(raw, "file string, line binary").select(
            F.col("line").cast("string").alias("value"), "file")
        parsed = parse_lines(lines)
        rows = parsed.select(
            *[F.unix_micros(c).alias(c) if c == "ts" else c
              for c in parsed.columns if c != "line"],
            F.col("line").cast("binary").alias("line"),
        )
        fold_rows(partials, rows.toArrow())
    return pa.Table.from_batches([partials.batch()])
