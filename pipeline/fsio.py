"""Paths local or through Hadoop's FileSystem (hdfs://, s3a:// ...), from the driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyspark.sql import SparkSession


def is_local(path: str) -> bool:
    return urlparse(path).scheme in ("", "file")


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write a text file at `path`: locally, or through Hadoop for hdfs://, s3a:// ..."""
    if is_local(path):
        target = Path(unquote(urlparse(path).path) if path.startswith("file:") else path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return
    fs, hadoop_path = hadoop_file(spark, path)
    stream = fs.create(hadoop_path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def hadoop_file(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """Hadoop's FileSystem for `path` (hdfs://, s3a:// ...) and its Path, in the driver's JVM."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hadoop_path
