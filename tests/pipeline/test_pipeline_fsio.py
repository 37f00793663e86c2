"""report.html goes wherever the tables go: a local path is written directly, any other
(hdfs://, s3a:// ...) through Hadoop's FileSystem in the driver's JVM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from pipeline import fsio


def test_a_path_that_is_not_local_is_written_through_hadoop(
    spark: SparkSession, tmp_path: Path, monkeypatch: Any
) -> None:
    """Hadoop's local FileSystem stands in for a remote one: the local shortcut is off,
    so the file:// URI takes the hdfs:// path. Its parents are made, and a second
    write replaces the first."""
    monkeypatch.setattr(fsio, "is_local", lambda path: False)
    target = tmp_path / "reports" / "today" / "report.html"
    fsio.write_text(spark, target.as_uri(), "<p>first, longer</p>\n")
    fsio.write_text(spark, target.as_uri(), "<p>\u00e9</p>\n")
    assert target.read_text(encoding="utf-8") == "<p>\u00e9</p>\n"


def test_local_paths_and_file_uris_are_written_directly(spark: SparkSession,
                                                        tmp_path: Path) -> None:
    assert fsio.is_local(str(tmp_path)) and fsio.is_local(tmp_path.as_uri())
    assert not fsio.is_local("hdfs://namenode/reports") and not fsio.is_local("s3a://b/r")
    target = tmp_path / "a b" / "report.html"  # the URI's %20 is a space on disk
    fsio.write_text(spark, target.as_uri(), "x")
    assert target.read_text(encoding="utf-8") == "x"
