"""Writing the report's files (tables, report.html) wherever the tables go."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

# What a directory of Parquet from Spark holds; readers of the tables see the same.
PART_FILE = "part-00000.snappy.parquet"
SUCCESS = "_SUCCESS"


def is_local(path: str) -> bool:
    return urlparse(path).scheme in ("", "file")


def _local(path: str) -> Path:
    return Path(unquote(urlparse(path).path) if path.startswith("file:") else path)


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write a text file at `path`: locally, or through Hadoop for hdfs://, s3a:// ..."""
    if is_local(path):
        target = _local(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    stream = hadoop_path.getFileSystem(conf).create(hadoop_path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def write_parquet(spark: SparkSession, table: pa.Table, path: str) -> None:
    """Replace the directory `path` with one Parquet file of `table`.

    Locally pyarrow writes it (no Spark job: the tables are small); elsewhere
    (hdfs://, s3a:// ...) pyarrow has no filesystem to write with, so Spark does."""
    if not is_local(path):
        spark_write_parquet(spark, table, path)
        return
    target = _local(path)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    pq.write_table(table, target / PART_FILE, compression="snappy")
    (target / SUCCESS).touch()


def spark_write_parquet(spark: SparkSession, table: pa.Table, path: str) -> None:
    """Spark's writer, for the filesystems only Hadoop reaches."""
    frame = spark.createDataFrame(table)
    frame.coalesce(1).write.mode("overwrite").parquet(path)
