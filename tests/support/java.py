"""The Java client programs of tests/peers/java/, run on Apache Kafka's own jars.

`tests/peers/install` compiles every `tests/peers/java/<package>/*.java` into
`tests/peers/build/java`; a program runs as `<package>.<Class>` with the classpath of
one Kafka version's jars (the Java client is `kafka-clients` of that version).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from proxy.apache_kafka import java_binary
from support.kafka import NEWEST, java_classes, kafka_libs

# A client program's JVM: small, and C1 only (it starts sooner; the tests measure
# behaviour, not client throughput).
CLIENT_JVM_OPTS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData")


def java_command(main_class: str, *args: str, version: str = NEWEST) -> list[str]:
    """The command line that runs `main_class` (e.g. "clients.Driver") with `args`."""
    classpath = os.pathsep.join([str(java_classes()), str(kafka_libs(version) / "*")])
    return [java_binary(), *CLIENT_JVM_OPTS, "-cp", classpath, main_class, *args]


def run_java(
    main_class: str,
    *args: str,
    version: str = NEWEST,
    timeout: float = 120.0,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs a program to its end; stdout and stderr captured as text."""
    return subprocess.run(
        java_command(main_class, *args, version=version),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def start_java(main_class: str, *args: str, version: str = NEWEST) -> subprocess.Popen[str]:
    """Starts a long-running program with pipes on stdin, stdout and stderr (text)."""
    return subprocess.Popen(
        java_command(main_class, *args, version=version),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
