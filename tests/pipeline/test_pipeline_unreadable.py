"""No input lost unsaid: a file `kafkalens report` cannot read to its end (a plain file
named .gz, a truncated gzip, a file that cannot be opened, a read that fails part way
with a FileSystem's I/O error) stops the report with one line naming every such file
and why, before any table is written; with --skip-unreadable the report goes on
without them and names them in the summary, `input_files` and `bad_lines`, the other
files' lines all counted. Spark's `ignoreCorruptFiles` would have dropped the rest of
each file without a word (the reference: the files' own lines, counted in Python)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from support.bad_inputs import BadFiles, make_bad_files

from pipeline import report
from pipeline.cli import report_main
from pipeline.read import UnreadableFiles
from pipeline.report import run_report
from pipeline.summary import summary_lines


@pytest.fixture(scope="module")
def bad(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> BadFiles:
    return make_bad_files(spark, tmp_path_factory.mktemp("unreadable") / "logs")


@pytest.fixture
def vanishing(bad: BadFiles, monkeypatch: pytest.MonkeyPatch) -> Iterator[BadFiles]:
    """`bad.vanishes` is there when the report lists the files, gone when Spark reads."""
    bad.restore_vanishing()
    real = report.read_logs

    def listed_then_gone(spark: SparkSession, paths: list[str], **kw: Any) -> Any:
        lines = real(spark, paths, **kw)  # the file index is built here, on the driver
        (bad.logs / bad.vanishes).unlink(missing_ok=True)
        return lines

    monkeypatch.setattr(report, "read_logs", listed_then_gone)
    yield bad


def check_reasons(named: dict[str, str], bad: BadFiles) -> None:
    by_name = {path.rsplit("/", 1)[1]: why for path, why in named.items()}
    assert set(by_name) == set(bad.bad), named
    assert by_name[bad.misnamed] == "not gzip data, though its name says .gz"
    assert by_name[bad.truncated] == "truncated: Unexpected end of input stream"
    assert by_name[bad.fails_mid_read].startswith("read error: ChecksumException: Checksum error")
    assert by_name[bad.vanishes].startswith("cannot be opened: ")
    assert all(path.startswith(f"file:{bad.logs}/") for path in named)


def test_by_default_every_unreadable_file_is_named_and_nothing_written(
        spark: SparkSession, vanishing: BadFiles, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UnreadableFiles) as raised:
        run_report(spark, [str(vanishing.logs)], str(tmp_path / "out"))
    check_reasons(raised.value.files, vanishing)
    assert not (tmp_path / "out").exists()
    vanishing.restore_vanishing()
    assert report_main([str(vanishing.logs), "--out", str(tmp_path / "out")]) == 1
    *phases, said = capsys.readouterr().err.splitlines()  # what it did, then why it stopped
    assert phases[0].startswith("kafkalens report: reading ") and phases[-1].endswith(
        "cannot be read to its end; looking for every such file")
    assert said.startswith("kafkalens report: 4 input files cannot be read: file:/")
    assert all(name in said for name in vanishing.bad)
    assert said.endswith("; nothing written (--skip-unreadable reports without them)")
    assert not (tmp_path / "out").exists()


def test_skipped_files_are_named_in_the_tables_and_the_summary(
        spark: SparkSession, vanishing: BadFiles, tmp_path: Path) -> None:
    bad = vanishing
    out = tmp_path / "out"
    result = run_report(spark, [str(bad.logs)], str(out), skip_unreadable=True)
    check_reasons(result.left_out, bad)
    assert result.counts.lines == sum(bad.good.values())  # every line of the others
    assert result.files == len(bad.good) + len(bad.bad)
    files = {r["file"].rsplit("/", 1)[1]: r for r in
             (row.asDict() for row in spark.read.parquet(str(out / "input_files")).collect())}
    assert {name: r["lines"] for name, r in files.items() if r["status"] == "read"} == bad.good
    left = {name: r["reason"] for name, r in files.items() if r["status"] == "left out"}
    assert set(left) == set(bad.bad) and all(r["lines"] is None for r in files.values()
                                             if r["status"] == "left out")
    rows = [r.asDict() for r in spark.read.parquet(str(out / "bad_lines")).collect()]
    assert {r["file"].rsplit("/", 1)[1]: r["reason"] for r in rows} == {
        name: f"file left out: {why}" for name, why in left.items()}
    [line] = [x for x in summary_lines(result) if "LEFT OUT" in x]
    assert line.startswith("- 4 input files LEFT OUT (their lines are not counted): ")
    assert all(name in line for name in bad.bad)
    assert "LEFT OUT" in (out / "report.html").read_text()
