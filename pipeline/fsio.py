"""Paths local or through Hadoop's FileSystem (hdfs://, s3a:// ...), from the driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyspark.sql import SparkSession

from pipeline.paths import PathError


def is_local(path: str) -> bool:
    return urlparse(path).scheme in ("", "file")


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write a text file at `path`: locally, or through Hadoop for hdfs://, s3a:// ..."""
    write_bytes(spark, path, text.encode("utf-8"))


def write_bytes(spark: SparkSession, path: str, data: bytes) -> None:
    """Write a file at `path` (replaced if there): locally, or through Hadoop for
    hdfs://, s3a:// ..."""
    if is_local(path):
        target = Path(_local(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return
    fs, hadoop_path = hadoop_file(spark, path)
    stream = fs.create(hadoop_path, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()


def check_writable(spark: SparkSession, path: str, what: str = "--out") -> None:
    """An output directory that is not local (hdfs://, s3a:// ...: local ones are
    checked before Spark starts, paths.check_output) can be made and written into,
    learnt by making and removing a probe directory in it; PathError (one line) if
    not."""
    if is_local(path):
        return
    try:
        fs, hadoop_path = hadoop_file(spark, path)
        if fs.exists(hadoop_path) and not fs.getFileStatus(hadoop_path).isDirectory():
            raise PathError(f"{what} {path} is a file, not a directory")
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        probe = jvm.org.apache.hadoop.fs.Path(
            hadoop_path, f"_kafkalens_probe_{jvm.java.util.UUID.randomUUID()}")
        if not fs.mkdirs(probe):
            raise PathError(f"cannot write {what} {path}")
        fs.delete(probe, True)
    except PathError:
        raise
    except Exception as e:  # noqa: BLE001 - a Java error: its first line says why
        raise PathError(f"cannot write {what} {path}: {first_line(e)}") from e


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    # A Py4J error's text is the Java stack; its cause is on the first "Exception:" line.
    for line in text.splitlines():
        if "Exception:" in line:
            return line.split("Exception:", 1)[1].strip() or line.strip()
    return text.splitlines()[0] if text else type(error).__name__


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


def delta_version(spark: SparkSession, table: str) -> int:
    """A Delta table's newest version: its log's newest commit file (-1: none), read from
    the log's listing (no Spark job)."""
    names = list_names(spark, f"{table.rstrip('/')}/_delta_log")
    versions = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
    return max(versions, default=-1)


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
