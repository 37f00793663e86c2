"""A report table small enough, collected once and written as Parquet by the driver,
as Spark's own writer would have written it; a larger one left to Spark's writer.

Why: writing a table through Spark's writer is a job, a commit protocol and a plan of
its own, a fixed cost per table whatever its rows (the 16 tables' writes alone
2.6-5.5 s for 577 rows, `bench.pipeline.write_floor`; the same rows written from the
driver 0.09-0.33 s). Spark's own streaming metadata is written that way: small, by
the driver. The table is still computed by Spark (one job, which also hands
report.html its first rows); only the bytes of a result the driver holds anyway are
written from there. Past `DRIVER_ROWS` rows the table is written by Spark's writer,
from the executors, as any large result.

The file is the one Spark's writer makes of the same rows, read the same by Spark,
pyarrow and DuckDB: Spark's nullability, timestamps as
`spark.sql.parquet.outputTimestampType` says, decimals as integers up to 18 digits,
lists and maps in Parquet's standard three-level layout, Spark's schema in the file's
metadata (Spark reads its types from it), the session's compression, and the
directory's layout (`part-00000-<uuid>-c000.<codec>.parquet` and `_SUCCESS`). A
session whose Parquet settings this does not mirror (the legacy format, a codec
pyarrow lacks) gets Spark's writer for every table.
tests/pipeline/test_pipeline_small_tables.py holds both ways to the same files.
"""

from __future__ import annotations

import datetime as dt
import io
import uuid
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType, TimestampType

from pipeline.fsio import delete, write_bytes

if TYPE_CHECKING:
    import pyarrow as pa

# The configuration key (a Spark setting: `--conf`, spark-defaults.conf) and its
# default: the most rows a table may have to be written by the driver.
DRIVER_ROWS_KEY = "spark.kafkalens.report.driverRows"
DRIVER_ROWS = 100_000

# spark.sql.parquet.compression.codec -> pyarrow's name and Spark's file suffix (its
# Parquet codec's extension), for the codecs both write into Parquet alike.
_CODECS = {"none": ("none", ""), "uncompressed": ("none", ""),
           "snappy": ("snappy", ".snappy"), "gzip": ("gzip", ".gz"),
           "zstd": ("zstd", ".zstd")}
_TIMESTAMPS: dict[str, dict[str, Any]] = {
    "TIMESTAMP_MICROS": {"coerce_timestamps": "us"},
    "TIMESTAMP_MILLIS": {"coerce_timestamps": "ms", "allow_truncated_timestamps": True},
    "INT96": {"use_deprecated_int96_timestamps": True},
}
SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"
SPARK_VERSION_KEY = b"org.apache.spark.version"


class SettingError(ValueError):
    """DRIVER_ROWS_KEY set to a value that is not a number of rows."""


def driver_rows(spark: SparkSession) -> int:
    """DRIVER_ROWS_KEY's value (DRIVER_ROWS unless set); 0 (every table to Spark's
    writer) when the session's Parquet settings are not ones the driver writes as
    Spark does, or the driver lacks pyarrow. SettingError for a value that is not a
    whole number, 0 or more (the report asks before it reads anything)."""
    value = spark.conf.get(DRIVER_ROWS_KEY, None)
    try:
        bound = DRIVER_ROWS if value is None else int(value)
    except ValueError:
        bound = -1
    if bound < 0:
        raise SettingError(f"{DRIVER_ROWS_KEY} is {value!r}: give the most rows a table may "
                           "have to be written by the driver, 0 or more (0: every table by "
                           "Spark's writer)")
    try:
        import pyarrow.parquet  # noqa: F401 - a driver without it: Spark's writer
    except ImportError:
        return 0
    return bound if _writer_options(spark) is not None else 0


def _writer_options(spark: SparkSession) -> dict[str, Any] | None:
    conf = spark.conf
    if (conf.get("spark.sql.parquet.writeLegacyFormat", "false") or "").lower() == "true":
        return None
    codec = (conf.get("spark.sql.parquet.compression.codec", "snappy") or "").lower()
    stamps = (conf.get("spark.sql.parquet.outputTimestampType", "INT96") or "").upper()
    if codec not in _CODECS or stamps not in _TIMESTAMPS:
        return None
    name, suffix = _CODECS[codec]
    return {"compression": name, **_TIMESTAMPS[stamps], "_suffix": suffix}


def collect_bounded(ordered: DataFrame, bound: int) -> pa.Table:
    """At most bound+1 rows of `ordered` (one partition, sorted), as Arrow, by one job:
    the JVM converts them (timestamps as UTC instants, whatever the driver's zone)."""
    return ordered.limit(bound + 1).toArrow()


# One query for several results (a family's tables and chart points): each result a
# branch of a union, a row of branch i holding in column i an array of its one row
# (a struct) and in the others empty arrays. Not a null struct in the others: the
# Arrow columns of a null struct's non-null fields hold nulls, which toArrow's cast
# to Spark's schema refuses; the rows of an array are only the branch's own.
def _branch(i: int) -> str:
    return f"_kafkalens_{i}"


def union_of(branches: list[DataFrame], schemas: list[StructType]) -> DataFrame:
    """The rows of every branch (`schemas`: theirs) in one DataFrame (branch_rows
    splits them again): its partitions are the branches' in order, so a branch of one
    sorted partition keeps its order when collected (toArrow puts partitions in
    order)."""
    own = F.array(F.struct("*"))
    empty = [F.array().cast(ArrayType(schema, containsNull=False)).alias(_branch(j))
             for j, schema in enumerate(schemas)]  # each built once, used by every branch
    union: DataFrame | None = None
    for i, df in enumerate(branches):
        row = df.select(*empty[:i], own.alias(_branch(i)), *empty[i + 1:])
        union = row if union is None else union.union(row)
    assert union is not None, "no branches"
    return union


def branch_rows(rows: pa.Table, i: int, schema: StructType, large_types: bool) -> pa.Table:
    """Branch `i`'s rows of union_of(...) collected by toArrow, in their order: the
    Arrow table toArrow of the branch alone gives (`schema` its Spark schema;
    `large_types` spark.sql.execution.arrow.useLargeVarTypes), cast as toArrow casts
    it."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql.pandas.types import to_arrow_schema

    mine = pc.list_flatten(rows.column(_branch(i))).combine_chunks()
    arrow = to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True,
                            timezone="UTC", prefers_large_types=large_types)
    return pa.Table.from_struct_array(mine).cast(arrow)


def large_types(spark: SparkSession) -> bool:
    """Whether toArrow gives large strings and lists (branch_rows' `large_types`)."""
    value = spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
    return (value or "").lower() == "true"


def write_parquet(table: DataFrame, rows: pa.Table, directory: str) -> None:
    """Write `rows` (collected from `table`) as the Parquet table directory `directory`
    (replaced), one file and `_SUCCESS`, as `table.write.mode("overwrite").parquet`
    would."""
    import pyarrow.parquet as pq

    spark = table.sparkSession
    options = _writer_options(spark)
    assert options is not None, "driver_rows() said Spark's writer"
    suffix = options.pop("_suffix")
    metadata = {SPARK_SCHEMA_KEY: str(table._jdf.schema().json()).encode(),  # Spark's own
                # the values' calendar is Spark 3+'s (proleptic Gregorian): nothing to
                # rebase when Spark reads them back
                SPARK_VERSION_KEY: spark.version.encode()}
    sink = io.BytesIO()
    # toArrow's schema is Spark's, nullability included (Spark's writer keeps it);
    # without Arrow's own schema in the file, pyarrow reads back what the Parquet
    # types say, as it reads Spark's files.
    with pq.ParquetWriter(sink, rows.schema.remove_metadata(), store_schema=False,
                          store_decimal_as_integer=True, use_compliant_nested_type=True,
                          **options) as writer:
        writer.write_table(rows)
        writer.add_key_value_metadata(metadata)
    root = directory.rstrip("/")
    delete(spark, root)
    write_bytes(spark, f"{root}/part-00000-{uuid.uuid4()}-c000{suffix}.parquet",
                sink.getvalue())
    write_bytes(spark, f"{root}/_SUCCESS", b"")


def python_rows(rows: pa.Table, schema: StructType) -> list[dict[str, Any]]:
    """`rows` as report.html reads a table's rows (what `Row.asDict(recursive=True)`
    gives, every timestamp an aware UTC datetime): maps as dicts."""
    return [{f.name: _python(row[f.name], f.dataType) for f in schema.fields}
            for row in rows.to_pylist()]


def _python(value: Any, kind: DataType) -> Any:
    if value is None:
        return None
    if isinstance(kind, StructType):
        return {f.name: _python(value[f.name], f.dataType) for f in kind.fields}
    if isinstance(kind, ArrayType):
        return [_python(v, kind.elementType) for v in value]
    if isinstance(kind, MapType):
        return {_python(k, kind.keyType): _python(v, kind.valueType) for k, v in value}
    if isinstance(kind, TimestampType):
        return value.astimezone(dt.UTC)  # an instant: toArrow gives it in UTC
    return value
