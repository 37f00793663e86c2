"""`kafkalens ingest` run as a user runs it (a process of its own, its JVM its child),
killed with SIGKILL part way through and run again: the crash the checkpoint and the
file sink's log must make harmless. Used on local[*] and on a standalone cluster."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from support.logs import age_like_proxy
from support.synth import Synth, to_line, write_rotated

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 600


def rotated_logs(directory: Path, files: int, lines_per_file: int, seed: int = 31) -> Counter:
    """Rotated request logs (plain and gzip, bad lines among them) and a rotated
    telemetry log; returns the non-blank lines of each rotated file (what the ingest
    must hold of it), by name."""
    synth = Synth(seed=seed, rate=5, bad_every=53, telemetry_every=7)
    half = files // 2
    write_rotated(directory, map(to_line, synth.events(half * lines_per_file + 10)),
                  lines_per_file)
    write_rotated(directory, map(to_line, synth.events((files - half) * lines_per_file)),
                  lines_per_file, gz=True)
    telemetry = [to_line(e) for e in synth.events(100) if isinstance(e, dict)
                 and e["event"] == "client_metric"]
    write_rotated(directory, telemetry + telemetry[:1], len(telemetry), name="telemetry.log")
    age_like_proxy(directory)
    age_like_proxy(directory, "telemetry.log*")
    want: Counter = Counter()
    for path in directory.glob("*.log.[0-9]*"):
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            want[path.name] = sum(1 for line in f if line.strip())
    return want


def lines_per_file(spark: Any, table: Path) -> Counter:
    """The ingested table's lines per file name (read through the sink's log)."""
    from pipeline.ingest import read_table

    rows = read_table(spark, str(table)).groupBy("file").count().collect()
    return Counter({r["file"].rsplit("/", 1)[1]: r["count"] for r in rows})


def active_files(table: Path) -> list[Path]:
    """The data files of the Delta table's current version, as its log says (delta-rs:
    no Spark)."""
    from deltalake import DeltaTable

    return sorted(Path(uri.removeprefix("file://")) for uri in DeltaTable(str(table)).file_uris())


def duckdb_lines_per_file(table: Path) -> Counter:
    """The table's lines per file name as DuckDB counts them: delta-rs (from PyPI) reads
    the Delta log and hands its current files to DuckDB as an Arrow dataset (DuckDB's
    own delta extension is a download this network does not reach)."""
    import duckdb
    from deltalake import DeltaTable

    lines = DeltaTable(str(table)).to_pyarrow_dataset()  # noqa: F841 - DuckDB reads it by name
    rows = duckdb.sql("select file, count(*) from lines group by file").fetchall()
    return Counter({file.rsplit("/", 1)[1]: count for file, count in rows})


def operation(commit: Path) -> str | None:
    """The operation a Delta log commit recorded (STREAMING UPDATE, OPTIMIZE ...)."""
    for line in commit.read_text().splitlines():
        info = json.loads(line).get("commitInfo")
        if info:
            return str(info.get("operation"))
    return None


def is_hidden(table: Path, path: Path) -> bool:
    """Under one of the table's own directories (_delta_log, _checkpoint, _spool ...)."""
    return any(part.startswith(("_", ".")) for part in path.relative_to(table).parts)


def committed_batches(table: Path) -> int:
    """The ingest's batches committed to the Delta table (its log's commits after the
    one that created the table; compactions, which rewrite no line, not counted)."""
    log = table / "_delta_log"
    if not log.exists():
        return 0
    return sum(operation(commit) == "STREAMING UPDATE" for commit in log.glob("*.json"))


def ingest_args(logs: Path, table: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "ingest", str(logs), "--table", str(table),
            "--once", "--max-files-per-trigger", "1", *extra]


def kill_after_first_batch(args: list[str], env: dict[str, str], table: Path, cwd: Path,
                           files: int) -> int:
    """Runs the ingest until its first batch is committed, then SIGKILLs it (and its
    JVM); returns the batches committed by then (fewer than `files`: it was cut short)."""
    env = {**env, "PYTHONPATH": str(ROOT), "KAFKALENS_SPARK_CDS": "0"}
    with (cwd / "killed.err").open("wb") as err:
        proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while committed_batches(table) < 1 and proc.poll() is None:
            assert time.monotonic() < deadline, "the first batch never committed"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = committed_batches(table)
    assert proc.returncode == -signal.SIGKILL, (cwd / "killed.err").read_text()[-3000:]
    assert 1 <= done < files, f"{done} of {files} batches: not killed part way"
    return done


def run_to_the_end(args: list[str], env: dict[str, str], cwd: Path) -> str:
    env = {**env, "PYTHONPATH": str(ROOT), "KAFKALENS_SPARK_CDS": "0"}
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr


def old_format_ingest(spark: Any, o: Any) -> int:
    """`kafkalens ingest` as an older kafkalens ran it: the same lines, written by
    Spark's Parquet file sink (its log `_spark_metadata`, INT96 timestamps), not Delta:
    the table `--convert` takes."""
    from pipeline import follow, ingest
    from pipeline.session import session_conf

    def start() -> Any:
        rows = ingest.table_rows(follow.parsed_stream(spark, o))
        writer = rows.writeStream.format("parquet").option("compression", "zstd").partitionBy(
            *ingest.PARTITIONS).option("checkpointLocation", o.checkpoint_dir).option(
            "path", o.table)
        with session_conf(spark, {"spark.sql.parquet.outputTimestampType": "INT96"}):
            return writer.trigger(availableNow=True).start()

    return follow.follow(spark, o, "ingest", start, lambda found: None)
