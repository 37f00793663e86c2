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
        target = Path(_local(path))
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


def list_names(spark: SparkSession, directory: str) -> list[str]:
    """The names in `directory` (none if it does not exist)."""
    fs, path = hadoop_file(spark, directory)
    if not fs.exists(path):
        return []
    return sorted(str(status.getPath().getName()) for status in fs.listStatus(path))


def read_text(spark: SparkSession, path: str) -> str:
    if is_local(path):
        return Path(_local(path)).read_text(encoding="utf-8")
    fs, hadoop_path = hadoop_file(spark, path)
    stream = fs.open(hadoop_path)
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def delete(spark: SparkSession, path: str) -> None:
    """Remove a file or a directory tree, if there."""
    fs, hadoop_path = hadoop_file(spark, path)
    fs.delete(hadoop_path, True)


def move_files(spark: SparkSession, source: str, target: str, name: str) -> list[str]:
    """Move each data file under `source` (Spark's output of one write: part files,
    maybe under partition directories) to the same directory under `target`, named
    `name` (a later move of the same name replaces it), then remove `source`. Returns
    the targets."""
    fs, root = hadoop_file(spark, source)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    moved = []
    files = fs.listFiles(root, True)
    found = []
    while files.hasNext():
        found.append(files.next().getPath())
    prefix = str(root.toUri().getPath()).rstrip("/") + "/"
    for path in found:
        if not str(path.getName()).startswith("part-"):
            continue
        relative = str(path.toUri().getPath())[len(prefix):]
        directory = relative.rsplit("/", 1)[0] if "/" in relative else ""
        destination = jvm.org.apache.hadoop.fs.Path(
            f"{target.rstrip('/')}/{directory + '/' if directory else ''}{name}")
        fs.mkdirs(destination.getParent())
        fs.delete(destination, False)
        if not fs.rename(path, destination):
            raise OSError(f"cannot move {path} to {destination}")
        moved.append(str(destination))
    fs.delete(root, True)
    return moved


def _local(path: str) -> str:
    return unquote(urlparse(path).path) if path.startswith("file:") else path
