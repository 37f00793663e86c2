"""The pipeline's commands check their paths before Spark starts (one line, exit 2), and
`report` says what it is doing as it goes (pipeline/paths.py, pipeline/progress.py).

Local inputs are matched as Hadoop matches them: checked against Hadoop's own
`globStatus`, the truth of what the job lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from support.synth import Synth, to_line

from pipeline import paths, progress
from pipeline.cli import ingest_main, report_main, watch_main


def _log(path: Path, n: int = 300) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(to_line(e) for e in Synth(seed=4).events(n)) + "\n")
    return path


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting Spark now fails the test: the checks must come first."""
    import pipeline.session

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("Spark started before the paths were checked")

    monkeypatch.setattr(pipeline.session, "build_session", refuse)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1, captured.err
    return captured.err.strip()


def test_report_refuses_paths_it_cannot_use_before_spark_starts(
        tmp_path: Path, no_spark: None, capsys: pytest.CaptureFixture[str]) -> None:
    log = _log(tmp_path / "logs" / "requests.log")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    cases = {
        # inputs that match nothing, however named
        (str(tmp_path / "nothing.log"), "--out", str(tmp_path / "out")):
            f"no file matches {tmp_path}/nothing.log",
        (str(log), str(tmp_path / "logs" / "*.gz"), "--out", str(tmp_path / "out")):
            f"no file matches {tmp_path}/logs/*.gz",
        (f"file://{tmp_path}/none{{a,b}}", "--out", str(tmp_path / "out")):
            f"no file matches file://{tmp_path}/none{{a,b}}",
        ("--table", str(tmp_path / "no-table"), "--out", str(tmp_path / "out")):
            f"the table {tmp_path}/no-table does not exist",
        # outputs that cannot be written
        (str(log), "--out", str(a_file)): f"--out {a_file} is a file, not a directory",
        (str(log), "--out", str(a_file / "out")):
            f"--out {a_file}/out lies under the file {a_file}, not a directory",
        (str(log), "--out", "/proc/kafkalens-report/out"):
            "cannot write --out /proc/kafkalens-report/out (in /proc, where it would be made)",
        (str(tmp_path / "logs"), "--out", str(tmp_path / "logs" / "report")):
            f"--out {tmp_path}/logs/report is inside the input {tmp_path}/logs",
    }
    for args, said in cases.items():
        assert report_main(list(args)) == 2, args
        line = _one_line(capsys)
        assert line.startswith(f"kafkalens report: {said}"), (line, said)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "logs"]  # nothing made
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["requests.log"]


def test_watch_and_ingest_refuse_paths_they_cannot_use_before_spark_starts(
        tmp_path: Path, no_spark: None, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    _log(logs / "requests.log")
    a_file = logs / "requests.log"
    cases = [
        (watch_main, [str(tmp_path / "none"), "--once"],
         f"kafkalens watch: LOGDIR {tmp_path}/none does not exist"),
        (watch_main, [str(a_file)], f"kafkalens watch: LOGDIR {a_file} is a file"),
        (watch_main, ["--table", str(tmp_path / "none")],
         f"kafkalens watch: the table {tmp_path}/none does not exist"),
        (watch_main, [str(logs), "--out", str(a_file)],
         f"kafkalens watch: --out {a_file} is a file"),
        (watch_main, [str(logs), "--checkpoint", "/proc/x/checkpoint"],
         "kafkalens watch: cannot write --checkpoint /proc/x/checkpoint"),
        (ingest_main, [str(tmp_path / "none"), "--table", str(tmp_path / "t")],
         f"kafkalens ingest: LOGDIR {tmp_path}/none does not exist"),
        (ingest_main, [str(tmp_path / "no*"), "--table", str(tmp_path / "t"), "--no-spool"],
         f"kafkalens ingest: no file matches {tmp_path}/no*"),
        (ingest_main, [str(logs), "--table", "/proc/x/table"],
         "kafkalens ingest: cannot write --table /proc/x/table"),
        (ingest_main, [str(logs), "--table", str(tmp_path / "t"), "--spool", str(a_file)],
         f"kafkalens ingest: --spool {a_file} is a file"),
    ]
    for main, args, said in cases:
        assert main(args) == 2, args
        line = _one_line(capsys)
        assert line.startswith(said), (line, said)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


def test_an_output_on_an_unknown_file_system_is_refused_before_reading(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not a local path: checked through Hadoop once the session is up, before the scan."""
    log = _log(tmp_path / "requests.log")
    assert report_main([str(log), "--out", "nosuchfs://host/out"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["kafkalens report: cannot write --out nosuchfs://host/out: "
                   'No FileSystem for scheme "nosuchfs"'], err


def test_local_globs_match_what_hadoop_matches(spark: SparkSession, tmp_path: Path) -> None:
    """paths.glob_matches against Hadoop's FileSystem.globStatus on the same tree."""
    from pipeline.fsio import hadoop_file

    for name in ("a/requests.log", "a/requests.log.1.gz", "a/requests.log.12.gz",
                 "a/.hidden.log", "a/_SUCCESS", "b/requests.log.2", "b/other.log",
                 "c{x}/requests.log", "d/x*y.log", "b/sub/requests.log.3"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    patterns = ["*/requests.log.[0-9]*", "{a,b}/*.log", "a/requests.log.?.gz", "*/[^r]*",
                "*/[!r]*", "a/*", "[ab]/requests.log*", "c\\{x\\}/*", "d/x\\*y.log",
                "{a,b/sub}/requests.log*", "*/*/requests*", "a/requests.log.[a-z]*",
                "nothing/*", "a/.h*", "*"]
    for pattern in patterns:
        full = f"{tmp_path}/{pattern}"
        fs, path = hadoop_file(spark, full)
        statuses = fs.globStatus(path) or []
        hadoop = sorted(str(s.getPath().toUri().getPath()) for s in statuses)
        ours = sorted(str(p) for p in paths.glob_matches(full, limit=0))
        assert ours == hadoop, pattern


def test_report_says_its_phases_and_ends_saying_where_the_report_is(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "EVERY_SECONDS", 0.05)  # progress during each phase
    log = _log(tmp_path / "logs" / "requests.log", 2000)
    out = tmp_path / "out"
    assert report_main([str(tmp_path / "logs"), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    said = captured.err.splitlines()
    assert all(line.startswith("kafkalens report: ") for line in said), said
    phases = [line.removeprefix("kafkalens report: ") for line in said]
    size = progress.human_bytes(log.stat().st_size)
    assert phases[0] == f"reading 1 input file ({size}) and aggregating their lines"
    read = next(i for i, p in enumerate(phases) if p.startswith("2,000 lines read (0 bad) in "))
    assert phases[read].endswith(f"; writing 16 tables into {out}")
    assert any(p.startswith("reading and aggregating: ") for p in phases[1:read]), phases
    assert phases[-1].startswith("tables written in ") and phases[-1].endswith(
        " (16 small ones by the driver, 0 by Spark's writer); writing report.html")
    assert any(p.startswith("writing the tables: ") for p in phases[read + 1:-1]), phases
    last = captured.out.strip().splitlines()[-1]
    assert last == f"the report: {out}/report.html (and a Parquet table per section in {out})"
    assert (out / "report.html").exists()


def test_durations_and_sizes_read_as_people_write_them() -> None:
    assert [progress.duration(s) for s in (0.04, 9.94, 42.4, 185, 3725)] == [
        "0.0 s", "9.9 s", "42 s", "3 min 05 s", "1 h 02 min"]
    assert [progress.human_bytes(n) for n in (999, 1000, 1_234_567, 5e12)] == [
        "999 B", "1.0 KB", "1.2 MB", "5.0 TB"]


@pytest.mark.parametrize(("main", "args", "said"), [
    (report_main, ["x.log", "--outt", "o"],
     "kafkalens report: error: unrecognized arguments: --outt (did you mean --out?)"),
    (report_main, ["x.log", "--out", "o", "--skip-unreadabel"],
     "kafkalens report: error: unrecognized arguments: --skip-unreadabel "
     "(did you mean --skip-unreadable?)"),
    (report_main, ["x.log", "--out", "o", "--spark-log", "warnn"],
     "kafkalens report: error: argument --spark-log: invalid choice: 'warnn' (choose from "
     "'off', 'fatal', 'error', 'warn', 'info', 'debug') (did you mean warn?)"),
    (report_main, ["--out", "o"], "kafkalens report: error: give LOGS or --table TABLE "
                                  "(one of them)"),
    (watch_main, ["logs", "--watermak", "1 minute"],
     "kafkalens watch: error: unrecognized arguments: --watermak 1 minute "
     "(did you mean --watermark?)"),
    (ingest_main, ["logs", "--tabel", "t"],
     "kafkalens ingest: error: unrecognized arguments: --tabel (did you mean --table?)"),
    (ingest_main, ["logs"], "kafkalens ingest: error: the following arguments are "
                            "required: --table"),
])
def test_a_mistyped_flag_is_one_line_naming_the_nearest(
        main: Any, args: list[str], said: str, no_spark: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert _one_line(capsys) == said
