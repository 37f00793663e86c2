"""The report and the watch on a real Spark standalone cluster (a master and two
workers from the pyspark package's scripts, tests/support/spark_cluster.py) give the
same tables as on local[*], with executors that have a bare Python: nothing of the
project's environment (pyarrow, msgspec, pandas ...) is needed on the nodes.

Each cluster run is a separate driver process through the command line, as a user runs
it (the report's by `spark-submit pipeline/cli.py report`); the local[*] runs call the same command line in this process, on the tests' local
Spark session (one JVM start less each).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest
from support.ingest_run import (
    ingest_args,
    kill_after_first_batch,
    lines_per_file,
    rotated_logs,
    run_to_the_end,
)
from support.logs import age_like_proxy
from support.parquet_tables import tables
from support.paths import REPO as ROOT
from support.spark_cluster import PROJECT_PACKAGES, SparkCluster, importable, standalone_cluster
from support.synth import Synth, to_line, write_rotated

from pipeline.cli import report_main, watch_main

# Every test here runs a Spark standalone cluster or a `kafkalens` command on one.
pytestmark = pytest.mark.spark

RUN_TIMEOUT_S = 600
LOCAL = "local[2]"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as c:
        yield c
    assert c.leftovers() == [], "cluster processes outlived the fixture"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rotated logs as the proxy lays them out: plain and gzip, with bad lines."""
    directory = tmp_path_factory.mktemp("logs")
    synth = Synth(seed=21, rate=5, bad_every=97)
    write_rotated(directory, (to_line(e) for e in synth.events(3000)), 1000)
    write_rotated(directory, (to_line(e) for e in synth.events(2000)), 1000, gz=True)
    age_like_proxy(directory)
    return directory


def driver(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**env, "PYTHONPATH": str(ROOT), "KAFKALENS_SPARK_CDS": "0"}
    done = subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"{args}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def submit(cluster: SparkCluster, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`spark-submit --master URL pipeline/cli.py ARGS`, as pipeline/README.md says to run a
    command on a cluster: the file run as a script (not the package), by Spark's own
    launcher, the driver in this Python and the executors in the cluster's bare one."""
    env = cluster.driver_env(local_env())
    conf = env.pop("PYSPARK_SUBMIT_ARGS").removesuffix(" pyspark-shell").split()
    env.update(SPARK_HOME=str(Path(pyspark.__file__).parent),  # the pip package's
               PYSPARK_DRIVER_PYTHON=sys.executable)
    command = [str(Path(sys.executable).parent / "spark-submit"), "--master",
               cluster.master_url, *conf, "--conf", f"spark.pyspark.driver.python={sys.executable}",
               str(ROOT / "pipeline" / "cli.py"), *args]
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"{args}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def local_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}


PROOF = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master(sys.argv[1]).getOrCreate()
one = spark.sparkContext.parallelize([0], 1)
print("EXECUTOR", one.map(lambda _: sys.executable).first())
def needs_pyarrow(_):
    import pyarrow
    return pyarrow.__version__
try:
    one.map(needs_pyarrow).first()
except Exception as exc:
    print("PYARROW", "ModuleNotFoundError" in str(exc))
else:
    print("PYARROW", "imported")
spark.stop()
"""


def test_executors_run_a_python_without_the_projects_packages(
    cluster: SparkCluster, tmp_path: Path
) -> None:
    assert cluster.alive_workers() == 2
    for package in PROJECT_PACKAGES:
        assert not importable(cluster.python, package), package
    done = driver(["-c", PROOF, cluster.master_url], cluster.driver_env(local_env()), tmp_path)
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    # Python functions run there, in the bare interpreter; one that needs pyarrow cannot.
    assert said["EXECUTOR"] == str(cluster.python)
    assert said["PYARROW"] == "True", done.stderr[-3000:]


def test_report_on_the_cluster_equals_local(
    cluster: SparkCluster, logs: Path, tmp_path: Path, spark: Any
) -> None:
    local, remote = tmp_path / "local", tmp_path / "cluster"
    assert report_main([str(logs), "--out", str(local), "--master", LOCAL]) == 0
    submit(cluster, ["report", str(logs), "--out", str(remote)], tmp_path)
    want, got = tables(local), tables(remote)
    assert set(got) == set(want)
    for name in want:
        assert got[name] == want[name], name
    assert (remote / "report.html").exists()


def test_watch_on_the_cluster_equals_local(
    cluster: SparkCluster, logs: Path, tmp_path: Path, spark: Any
) -> None:
    local, remote = tmp_path / "local", tmp_path / "cluster"
    watch = ["-m", "pipeline.cli", "watch", str(logs), "--once"]
    assert watch_main([str(logs), "--once", "--out", str(local), "--master", LOCAL]) == 0
    driver([*watch, "--out", str(remote), "--master", cluster.master_url],
           cluster.driver_env(local_env()), tmp_path)
    want, got = tables(local), tables(remote)
    assert set(want) == {"by_api", "by_software", "input_files", "bad_lines"} == set(got)
    assert want["by_api"] and want["by_software"]
    for name in want:
        assert got[name] == want[name], name
    apps = [a["name"] for a in cluster.applications()]
    assert "kafkalens-watch" in apps  # it did run on the cluster


def test_ingest_killed_on_the_cluster_and_restarted_keeps_every_line_once(
    cluster: SparkCluster, tmp_path: Path, spark: Any
) -> None:
    """As tests/pipeline/test_pipeline_ingest.py on local[*]: the executors write the table's
    files; the driver is killed after the first batch and started again."""
    logs, table = tmp_path / "logs", tmp_path / "table"
    want = rotated_logs(logs, files=2, lines_per_file=150, seed=41)
    env = cluster.driver_env(local_env())
    args = ingest_args(logs, table, "--master", cluster.master_url)
    kill_after_first_batch(args, env, table, tmp_path, len(want))
    run_to_the_end(args, env, tmp_path)
    assert lines_per_file(spark, table) == want
    assert "kafkalens-ingest" in [a["name"] for a in cluster.applications()]
