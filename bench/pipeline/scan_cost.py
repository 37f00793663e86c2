"""Where the report's scan spends its CPU (#19): variants of the scan over the same
input in one local SparkSession (built as pipeline.session builds it), interleaved
round by round, each written to Spark's `noop` sink, with the tasks' CPU per line.

    PYTHONPATH=. .venv/bin/python -m bench.pipeline.scan_cost                 # every arm, 3 rounds
    PYTHONPATH=. .venv/bin/python -m bench.pipeline.scan_cost --arms json fine --rounds 5
    PYTHONPATH=. .venv/bin/python -m bench.pipeline.scan_cost --arms fine \
        --jvm base= --jvm huge=-XX:-DontCompileHugeMethods         # JVM arms, see below
    ... --conf spark.sql.codegen.hugeMethodLimit=8000                 # any Spark setting
    ... --input /tmp/kafkalens-bench/1000000                          # other input

Input: by default `--lines` lines of the benchmark's generator (tests/support/synth.py with
bench_pipeline's mix: fleet fields, telemetry, bad lines) written once as plain text
(no gzip in the picture) into --data; `--input` reads any logs instead.

Measured per job (arm and round): the tasks' CPU from Spark's event log (each task's
executorCpuTime, summed over the job's stages), and from /proc the CPU of the JVM's
task threads ("Executor task launch worker") and of its JIT compiler threads over the
job. The first round of an arm pays for compiling its code (Janino, then the JIT); the
median of the later rounds is its steady cost. With `--jvm NAME=OPTIONS` (repeatable)
each JVM arm is a process of its own (the options appended to the local JVM's), run
in turn `--rounds` times, each process running the arms once in a fresh JVM as the
report does: so the JIT's cost is in the figures. `--codegen` prints each arm's
whole-stage code size (the largest generated method's bytecode: HotSpot compiles no
method over 8,000 bytes unless -XX:-DontCompileHugeMethods).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.synth import Synth, to_line, write_rotated

from bench.pipeline.speed import LINES_PER_FILE

Arm = Callable[[Any, list[str]], Any]
TICK = os.sysconf("SC_CLK_TCK")


def _schema(change: Callable[[Any], Any] | None = None, drop: tuple[str, ...] = ()) -> Any:
    from pyspark.sql.types import StructType

    from pipeline.schema import LINE_SCHEMA

    fields = [f for f in LINE_SCHEMA.fields if f.name not in drop]
    return StructType([change(f) if change else f for f in fields])


def _ts_string(field: Any) -> Any:
    from pyspark.sql.types import StringType, StructField

    return StructField("ts", StringType()) if field.name == "ts" else field


def _json(schema: Callable[[], Any] | None = None) -> Arm:
    def arm(spark: Any, paths: list[str]) -> Any:
        from pipeline.read import read_logs

        return read_logs(spark, paths, schema() if schema else None)
    return arm


def _text(spark: Any, paths: list[str]) -> Any:
    return spark.read.option("recursiveFileLookup", "true").text(paths)


def _event_only(spark: Any, paths: list[str]) -> Any:
    from pipeline.read import read_logs

    return read_logs(spark, paths).select("event")


def _no_file(spark: Any, paths: list[str]) -> Any:
    from pipeline.read import read_logs

    return read_logs(spark, paths).drop("file")


def _parsed(spark: Any, paths: list[str]) -> Any:
    from pipeline.read import read_logs
    from pipeline.report import report_lines

    return report_lines(read_logs(spark, paths))


def _fine_no_retype(spark: Any, paths: list[str]) -> Any:
    """fine_rows over lines parsed without reading a corrupt line's fields again (a
    line with a field of another type a bad line: what the retype check costs)."""
    from pipeline.fine import fine_rows
    from pipeline.read import parse_lines, read_logs

    return fine_rows(parse_lines(read_logs(spark, paths)))


def _parts(spark: Any, paths: list[str]) -> Any:
    from pipeline.fine import keyed_parts

    return keyed_parts(_parsed(spark, paths))


def _fine(spark: Any, paths: list[str]) -> Any:
    from pipeline.fine import fine_rows

    return fine_rows(_parsed(spark, paths))


def _fine_seq(spark: Any, paths: list[str]) -> Any:
    """fine_rows with each line's parts listed by sequence/arrays_zip (generated code)
    instead of transform (a higher-order function, evaluated without generated code)."""
    from pyspark.sql import functions as F

    from pipeline import fine

    def indexed(kind: str, n: Any) -> Any:
        parts = F.arrays_zip(F.array_repeat(F.lit(fine.KINDS.index(kind)), n),
                             F.sequence(F.lit(0), n - 1))
        return F.when(n > 0, parts.cast("array<struct<k:int,i:int>>")).otherwise(fine.none())

    def parts(is_request: Any, refused: Any, good: Any, retyped: Any = None) -> Any:
        # (the `r` part of retyped lines left out: a handful of lines)
        carries = F.col("api_key").isin(fine.PRODUCE, fine.FETCH, fine.SHARE_FETCH)
        topics = F.coalesce(F.size(F.col("per_topic")), F.lit(0))
        request = F.concat(
            F.array(fine.part_of("g"), fine.part_of("l")),
            F.when(carries, indexed("t", topics)).otherwise(fine.none()),
            indexed("p", F.coalesce(F.size(F.col("positions")), F.lit(0))),
            indexed("c", F.coalesce(F.size(F.col("committed")), F.lit(0))))
        other = F.when(F.col("event") == "client_metric",
                       F.array(fine.part_of("e"), fine.part_of("m"))).otherwise(
            F.array(fine.part_of("e")))
        return (F.when(is_request, request).when(refused, F.array(fine.part_of("g")))
                .when(good, other).otherwise(F.array(fine.part_of("b"))))

    saved = fine._parts
    fine._parts = parts
    try:
        return fine.fine_rows(_parsed(spark, paths))
    finally:
        fine._parts = saved


def _fine_no_file(spark: Any, paths: list[str]) -> Any:
    """fine_rows without the file as a key of the request groups and other events
    (what counting every file's lines costs)."""
    import dataclasses

    from pipeline import fine

    saved = dict(fine.PARTS)
    for kind in ("g", "e"):
        part = fine.PARTS[kind]
        fine.PARTS[kind] = dataclasses.replace(
            part, keys=tuple(k for k in part.keys if k != "file"))
    try:
        return fine.fine_rows(_parsed(spark, paths))
    finally:
        fine.PARTS.update(saved)


def _table(spark: Any, paths: list[str]) -> Any:
    """The lines as `kafkalens ingest` wrote them (--table TABLE), read back."""
    from pipeline.ingest import read_table

    return read_table(spark, TABLE[0])


def _table_fine(spark: Any, paths: list[str]) -> Any:
    from pipeline.fine import fine_rows

    return fine_rows(_table(spark, paths))


TABLE: list[str] = []  # --table

ARMS: dict[str, Arm] = {
    "text": _text,  # the lines read (gunzipped, split), nothing parsed
    "json-event": _event_only,  # every line tokenized, one field converted
    "json": _json(),  # the report's schema, every field converted
    "json-no-file": _no_file,  # without the file's name (_metadata.file_path) on each row
    "json-ts-string": _json(lambda: _schema(_ts_string)),
    "json-no-record-stats": _json(lambda: _schema(drop=("record_stats",))),
    "json-no-positions": _json(lambda: _schema(drop=("positions", "committed"))),
    "json-no-attributes": _json(lambda: _schema(drop=("attributes",))),
    "json-no-errors": _json(lambda: _schema(drop=("errors",))),
    "parsed": _parsed,  # report.report_lines: + bad_reason, sample, per_topic, retyped
    "parts": _parts,  # fine.keyed_parts: + the explode into parts and their keys
    "fine": _fine,  # fine.fine_rows: + the partial (and final) hash aggregation
    "fine-no-retype": _fine_no_retype,  # fine without the retype check
    "fine-seq": _fine_seq,  # the parts listed without higher-order functions
    "fine-no-file": _fine_no_file,  # without lines per file
    "table": _table,  # an ingested table (--table) read, nothing else
    "table-fine": _table_fine,  # fine_rows over it
}


def make_input(data: Path, lines: int) -> Path:
    """`lines` lines of the benchmark's mix as plain text files, written once."""
    target = data / f"plain-{lines}"
    if not (target / ".complete").exists():
        synth = Synth(seed=100, rate=2000.0, bad_every=100_003, other_every=5003,
                      follower_every=499, telemetry_every=211)
        write_rotated(target, (to_line(e) for e in synth.events(lines)), LINES_PER_FILE)
        for rotated in target.glob("requests.log.*"):  # plain rotated files: no gzip
            rotated.rename(target / f"{rotated.name}.log")
        (target / ".complete").write_text("")
    return target


def _threads_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (thread name, CPU seconds) of the JVM's threads."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def _cpu_delta(before: dict[int, tuple[str, float]],
               after: dict[int, tuple[str, float]]) -> dict[str, float]:
    sums = {"tasks_proc": 0.0, "jit": 0.0, "jvm": 0.0}
    for tid, (name, cpu) in after.items():
        spent = cpu - before.get(tid, (name, 0.0))[1]
        sums["jvm"] += spent
        if name.startswith("Executor task"):
            sums["tasks_proc"] += spent
        elif "Compiler" in name:
            sums["jit"] += spent
    return sums


def codegen_size(df: Any) -> int:
    """The largest method's bytecode in the plan's whole-stage generated code."""
    spark = df.sparkSession
    # Adaptive execution plans the stages only as they run: explain the static plan.
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        plan = df._jdf.queryExecution()
        text = spark.sparkContext._jvm.PythonSQLUtils.explainString(plan, "codegen")
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")
    return max((int(m) for m in re.findall(r"maxMethodCodeSize:(\d+)", text)), default=0)


def task_cpu_by_job(event_dir: Path) -> dict[str, float]:
    """Job description -> the CPU seconds of its tasks, from the event log."""
    stage_job: dict[int, str] = {}
    cpu: dict[str, float] = {}
    for log in sorted(event_dir.rglob("events_*")):
        for line in log.open(encoding="utf-8"):
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerJobStart":
                name = (event.get("Properties") or {}).get("spark.job.description") or ""
                for stage in event["Stage IDs"]:
                    stage_job[stage] = name
            elif kind == "SparkListenerTaskEnd" and event.get("Task Metrics"):
                name = stage_job.get(event["Stage ID"], "")
                cpu[name] = cpu.get(name, 0.0) + event["Task Metrics"]["Executor CPU Time"] / 1e9
    return cpu


def run_arms(args: argparse.Namespace, paths: list[str]) -> list[dict[str, Any]]:
    """Every arm, round after round, in this process's one session."""
    events = Path(tempfile.mkdtemp(prefix="scan-cost-events-"))
    confs = ["spark.eventLog.enabled=true", "spark.eventLog.compress=false",
             "spark.ui.showConsoleProgress=false",
             f"spark.eventLog.dir={events}", *args.conf]
    os.environ["PYSPARK_SUBMIT_ARGS"] = " ".join(f"--conf {c}" for c in confs) + " pyspark-shell"
    from pipeline import session

    session.LOCAL_JAVA_OPTIONS = f"{session.LOCAL_JAVA_OPTIONS} {args.java_options}".strip()
    spark = session.build_session("scan-cost")
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    spark.sparkContext.setJobDescription("count")
    lines = spark.read.option("recursiveFileLookup", "true").text(paths).count()
    results = []
    for round_ in range(args.rounds):
        for name in args.arms:
            arm, *settings = name.split("+")
            saved = {}
            for key, _, value in (s.partition("=") for s in settings):
                saved[key] = spark.conf.get(key, None)
                spark.conf.set(key, value)
            df = ARMS[arm](spark, paths)
            if args.codegen and round_ == 0:
                print(f"{name}: largest generated method {codegen_size(df):,} bytes", flush=True)
            job = f"{name}#{round_}"
            spark.sparkContext.setJobDescription(job)
            before, started = _threads_cpu(jvm_pid), time.monotonic()
            df.write.format("noop").mode("overwrite").save()
            wall = time.monotonic() - started
            cpu = _cpu_delta(before, _threads_cpu(jvm_pid))
            for key, value in saved.items():
                spark.conf.unset(key) if value is None else spark.conf.set(key, value)
            results.append({"arm": name, "round": round_, "job": job, "lines": lines,
                            "wall": wall, **cpu})
            print(f"  {job}: tasks {cpu['tasks_proc'] / lines * 1e6:.2f} us/line (proc), "
                  f"JIT {cpu['jit']:.1f} s, wall {wall:.1f} s", flush=True)
    spark.stop()
    by_job = task_cpu_by_job(events)
    shutil.rmtree(events, ignore_errors=True)
    for r in results:
        r["tasks"] = by_job.get(r["job"], 0.0)
    return results


def summarize(results: list[dict[str, Any]], key: str = "arm") -> list[str]:
    rows = ["| arm | tasks' CPU, us/line: first | later (median) | all rounds | JIT s (first) |",
            "|---|---|---|---|---|"]
    for name in dict.fromkeys(r[key] for r in results):
        mine = [r for r in results if r[key] == name]
        per_line = [r["tasks"] / r["lines"] * 1e6 for r in mine]
        later = statistics.median(per_line[1:]) if len(per_line) > 1 else float("nan")
        rounds = " ".join(f"{v:.2f}" for v in per_line)
        rows.append(f"| {name} | {per_line[0]:.2f} | {later:.2f} | {rounds} | "
                    f"{mine[0]['jit']:.1f} |")
    return rows


def run_jvm_arms(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each JVM arm a process of its own, in turn, --rounds times."""
    results = []
    for round_ in range(args.rounds):
        for spec in args.jvm:
            name, _, options = spec.partition("=")
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                cmd = [sys.executable, "-m", "bench.pipeline.scan_cost", "--rounds", "1",
                       f"--java-options={args.java_options} {options}".strip(),
                       "--json", out.name, "--data", str(args.data), "--lines", str(args.lines),
                       "--arms", *args.arms, *[x for c in args.conf for x in ("--conf", c)],
                       *(["--input", args.input] if args.input else [])]
                print(f"{name} round {round_}: {options or '(no options)'}", flush=True)
                subprocess.run(cmd, check=True)
                for r in json.loads(Path(out.name).read_text()):
                    results.append({**r, "jvm": name, "arm": f"{name}:{r['arm']}",
                                    "round": round_})
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", nargs="+", default=list(ARMS),
                   help=f"of {', '.join(ARMS)}; ARM+KEY=VALUE runs ARM with a Spark SQL setting")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--lines", type=int, default=400_000)
    p.add_argument("--data", type=Path, default=Path("/tmp/kafkalens-scan-cost"))
    p.add_argument("--input", help="logs to read instead of the generated plain text")
    p.add_argument("--conf", action="append", default=[], help="KEY=VALUE for Spark")
    p.add_argument("--java-options", default="", help="appended to the local JVM's")
    p.add_argument("--jvm", action="append", default=[], help="NAME=OPTIONS: a JVM arm")
    p.add_argument("--codegen", action="store_true")
    p.add_argument("--json", type=Path, help="write the per-job figures here")
    p.add_argument("--table", help="an ingested table, for the table arms")
    args = p.parse_args(argv)
    if args.table:
        TABLE.append(args.table)
    if args.jvm:
        results = run_jvm_arms(args)
        # Per process, the arms' first (and only) round: compiled in that JVM.
        print("\n".join(summarize([{**r, "arm": r["arm"]} for r in results])))
    else:
        paths = [args.input or str(make_input(args.data, args.lines))]
        results = run_arms(args, paths)
        print("\n".join(summarize(results)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
