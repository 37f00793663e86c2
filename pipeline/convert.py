"""`kafkalens ingest --convert --table TABLE`: a table an older kafkalens ingested (Parquet
files and Spark's file-sink log, `_spark_metadata`) made a Delta table, in place.

Delta's CONVERT TO DELTA reads the sink's log as the list of the table's files (so a
killed batch's leftovers stay out, as they were), writes `_delta_log` over the same
files (no data is copied), and the ingest then goes on from its checkpoint, writing
Delta transactions. The one case to mend first: an ingest killed after the sink logged
a batch and before the checkpoint recorded it. The old sink would have skipped that
batch when it ran again, Delta's sink does not know it, so the batch's entry leaves the
sink's log before the conversion (its files then are not in the table, and the
restarted ingest writes the batch once). The sink's log is kept beside, renamed
`_spark_metadata.converted`, so that nothing reads the table as Parquet any more
(pipeline/README.md, "Ingest").
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

from pipeline import fsio
from pipeline.ingest import (
    OLD_SINK_LOG,
    PARTITIONS,
    TABLE_PROPERTIES,
    TableError,
    is_delta,
    table_schema,
)
from pipeline.session import session_conf

if TYPE_CHECKING:
    from pipeline.ingest import IngestOptions

CONVERTED = f"{OLD_SINK_LOG}.converted"
EXIT_USAGE = 2


def _batches(spark: SparkSession, directory: str) -> list[int]:
    """The batch numbers of a streaming log directory's entries (`N`, `N.compact`)."""
    stems = (name.removesuffix(".compact") for name in fsio.list_names(spark, directory))
    return sorted({int(stem) for stem in stems if stem.isdigit()})


def _partition_ddl(spark: SparkSession) -> str:
    types = {f.name: f.dataType.simpleString() for f in table_schema(spark).fields}
    return ", ".join(f"`{name}` {types[name].upper()}" for name in PARTITIONS)


def convert(spark: SparkSession, table: str, checkpoint: str) -> str:
    """Converts TABLE in place; what it did, in a line. TableError if it cannot."""
    root = table.rstrip("/")
    if is_delta(spark, root):
        return f"{table} is a Delta table already: nothing to convert"
    sink = f"{root}/{OLD_SINK_LOG}"
    logged = _batches(spark, sink)
    if not logged:
        raise TableError(f"{table} holds no table of `kafkalens ingest` (no {OLD_SINK_LOG} "
                         "with batches)")
    committed = _batches(spark, f"{checkpoint.rstrip('/')}/commits")
    last, done = logged[-1], committed[-1] if committed else -1
    mended = ""
    if last > done:
        # Logged by the sink, not recorded by the checkpoint: the restart runs it again.
        entry = f"{sink}/{last}"
        fs, path = fsio.hadoop_file(spark, entry)
        if not fs.exists(path) or last - 1 > done:
            raise TableError(f"{table}: the checkpoint {checkpoint} is {last - done} batches "
                             "behind the table; run the ingest that wrote it once more "
                             "(--once) before converting")
        fsio.delete(spark, entry)
        mended = (f"; batch {last} (written, not recorded by the checkpoint: a killed run) "
                  "left out, the next run writes it again")
    with session_conf(spark, {"spark.databricks.delta.convert.useMetadataLog": "true"}):
        spark.sql(f"CONVERT TO DELTA parquet.`{root}` PARTITIONED BY ({_partition_ddl(spark)})")
    properties = ", ".join(f"'{k}' = '{v}'" for k, v in TABLE_PROPERTIES.items())
    spark.sql(f"ALTER TABLE delta.`{root}` SET TBLPROPERTIES ({properties})")
    fs, path = fsio.hadoop_file(spark, sink)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    if not fs.rename(path, jvm.org.apache.hadoop.fs.Path(f"{root}/{CONVERTED}")):
        raise TableError(f"converted, but cannot rename {sink} to {CONVERTED}")
    files = spark.sql(f"DESCRIBE DETAIL delta.`{root}`").collect()[0]["numFiles"]
    return (f"{table} is a Delta table now ({files:,} files, none copied; the old sink's "
            f"log kept as {CONVERTED}){mended}")


def run_convert(spark: SparkSession, o: IngestOptions) -> int:
    try:
        said = convert(spark, o.table, o.checkpoint_dir)
    except TableError as e:
        print(f"kafkalens ingest: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"kafkalens ingest: {said}", file=sys.stderr, flush=True)
    return 0
