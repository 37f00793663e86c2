"""`kafkalens report`'s inputs and environment: what matches nothing fails loudly, an
empty input is a valid report, a missing `pipeline` extra is one line, the terminal
shows the command's own lines only, and no Python runs on the executors (so a stock
Spark cluster runs the job). Files that cannot be read: test_pipeline_unreadable.py."""

from __future__ import annotations

import ast
import gzip
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType
from support.paths import REPO as ROOT
from support.synth import Synth, to_line

from pipeline.cli import missing_extra, report_main
from pipeline.paths import PathError
from pipeline.report import run_report


def _log(path: Path, n: int = 200) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(to_line(e) for e in Synth(seed=9).events(n)) + "\n")
    return path


def test_an_input_matching_nothing_fails_with_one_line(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _log(tmp_path / "logs" / "requests.log")
    with pytest.raises(PathError, match=r"no file matches .*/nothing-\*\.log$"):
        run_report(spark, [str(good), str(tmp_path / "nothing-*.log")], str(tmp_path / "out"))
    code = report_main([str(tmp_path / "nothing-*.log"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("kafkalens report: no file matches") and "\n" not in err
    assert not (tmp_path / "out").exists()  # no empty report that reads as "all clear"


def test_an_input_of_an_unknown_filesystem_fails_with_one_line(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = report_main(["nosuchfs://host/logs", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    said = err.splitlines()
    assert code == 2 and said[-1].startswith("kafkalens report: cannot list nosuchfs://host/logs")
    assert not [line for line in said if not line.startswith("kafkalens report: ")]


def test_an_existing_empty_directory_is_a_valid_empty_report(
        spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    result = run_report(spark, [str(tmp_path / "logs")], str(tmp_path / "out"))
    assert result.counts.lines == 0 and set(result.table_rows.values()) == {0}
    assert spark.read.parquet(str(tmp_path / "out" / "latency_by_api")).count() == 0


@pytest.mark.spark
def test_the_terminal_shows_the_commands_own_lines_only(tmp_path: Path) -> None:
    """A user's terminal, the command line in a process of its own: a truncated .gz
    stops the report with one line naming it (no progress bar, no Spark log, not the
    JVM's incubator-module notice); with --skip-unreadable the summary names it, and
    --spark-log warn shows Spark's own warnings."""
    logs = tmp_path / "logs"
    _log(logs / "requests.log")
    whole = gzip.compress(_log(tmp_path / "whole.log", 3000).read_bytes())
    (logs / "requests.log.1.gz").write_bytes(whole[: len(whole) // 2])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env.update(PYTHONPATH=str(ROOT), KAFKALENS_SPARK_CDS="0")

    def report(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "report", str(logs), "--out", str(tmp_path / "out"),
             *extra], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
            check=False)

    stopped = report()
    assert stopped.returncode == 1 and stopped.stdout == "", stopped.stderr[-3000:]
    *phases, said = stopped.stderr.splitlines()  # what it did, then why it stopped
    assert phases and all(line.startswith("kafkalens report: ") for line in phases), phases
    assert said.startswith("kafkalens report: 1 input file cannot be read: file:/"), said
    assert "requests.log.1.gz (truncated: " in said and not (tmp_path / "out").exists()
    skipped = report("--skip-unreadable", "--spark-log", "warn")
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    assert skipped.stdout.startswith("kafkalens report\n")
    assert "1 input file LEFT OUT (their lines are not counted): file:/" in skipped.stdout
    assert " WARN " in skipped.stderr  # Spark's own log, asked for
    assert "incubator modules" not in stopped.stderr + skipped.stderr


@pytest.mark.parametrize("args", [["report", "x.log", "--out", "out"], ["watch", "logs"],
                                  ["ingest", "logs", "--table", "t"]])
def test_without_pyspark_the_cli_names_the_extra_in_one_line(
        tmp_path: Path, args: list[str]) -> None:
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "from proxy.cli import main\n"
            f"raise SystemExit(main({args!r}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=_env())
    assert done.returncode == 2, done.stderr
    # run from this checkout: the editable install's command, in this directory
    assert done.stderr.strip() == missing_extra() == (
        "kafkalens: the pipeline needs PySpark and matplotlib (and Java 17+): "
        f"pip install -e '.[pipeline]' in {ROOT}")


def test_an_installed_kafkalens_names_the_extra_to_install(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"  # pipeline/ without a pyproject.toml beside it
    (site / "pipeline").mkdir(parents=True)
    assert missing_extra(site).endswith(": pip install 'kafkalens[pipeline]'")


def test_the_file_spark_submit_runs_takes_a_command_or_says_which_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    from pipeline.cli import COMMANDS, main

    assert set(COMMANDS) == {"report", "watch", "ingest"}
    for wrong in ([], ["/var/log/kafkalens"]):
        assert main(wrong) == 2
        assert capsys.readouterr().err == (
            "usage: pipeline/cli.py {report,watch,ingest} ... (e.g. report LOGS --out DIR; "
            "COMMAND --help says more)\n")


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}


# --- no Python on the executors ------------------------------------------------------

# The report's code path (watch.py is held to the same by its own tests).
REPORT_MODULES = ("report", "read", "tables", "clients", "traffic", "semantics", "schema",
                  "session", "fsio", "summary", "readiness_data", "cli", "fine", "fleet")
# What would ship Python code to the executors.
FORBIDDEN = {"udf", "pandas_udf", "udtf", "mapInArrow", "mapInPandas", "applyInPandas",
             "applyInArrow", "applyInPandasWithState", "rdd", "parallelize", "createDataFrame",
             "foreach", "foreachPartition", "mapPartitions", "register", "toPandas"}


# Nor does the report need these (the `pipeline` extra is pyspark and matplotlib).
UNNEEDED = {"pandas", "pyarrow", "msgspec", "numpy"}


def forbidden_uses(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        name = (node.attr if isinstance(node, ast.Attribute)
                else node.id if isinstance(node, ast.Name) else None)
        if name in FORBIDDEN:
            found.append(f"{name} (line {node.lineno})")  # type: ignore[attr-defined]
        if isinstance(node, ast.alias) and node.name.split(".")[-1] in FORBIDDEN:
            found.append(f"import {node.name}")
        modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                   else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"import {m}" for m in modules if m.split(".")[0] in UNNEEDED]
    return found


def test_the_report_code_has_no_python_for_the_executors() -> None:
    for module in REPORT_MODULES:
        source = (ROOT / "pipeline" / f"{module}.py").read_text()
        assert forbidden_uses(source) == [], module
    # The scan sees what it looks for.
    assert forbidden_uses("df.mapInArrow(f, s)\nF.udf(len)\nx = df.rdd.map(g)") == [
        "mapInArrow (line 1)", "udf (line 2)", "rdd (line 3)"]
    assert forbidden_uses("import pyarrow.parquet as pq\nfrom pandas import DataFrame") == [
        "import pyarrow.parquet", "import pandas"]


@pytest.fixture
def no_python_workers(spark: SparkSession) -> Iterator[None]:
    """Any Python worker started now would run an interpreter that does not exist."""
    sc = spark.sparkContext
    saved = sc.pythonExec
    sc.pythonExec = "/nonexistent/python3"
    try:
        yield
    finally:
        sc.pythonExec = saved


def test_the_report_runs_where_executors_have_no_python(
        spark: SparkSession, tmp_path: Path, no_python_workers: None) -> None:
    # The poison works: a Python UDF fails here.
    plus_one = F.udf(lambda v: v + 1, IntegerType())
    with pytest.raises(Exception, match="nonexistent"):
        spark.range(3).select(plus_one(F.col("id").cast("int"))).collect()
    log = _log(tmp_path / "logs" / "requests.log", 300)
    result = run_report(spark, [str(log)], str(tmp_path / "out"))
    assert result.counts.lines == 300 and result.table_rows["latency_by_api"] > 0
    assert (tmp_path / "out" / "report.html").stat().st_size > 10_000
