"""`kafkalens fetch-kafka`: the jars the tests run Apache Kafka from, fetched with nothing
but Python, each checked before it takes its name."""

from __future__ import annotations

import hashlib
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.kafka import NEWEST, kafka_libs
from support.paths import REPO

from proxy.kafka_jars import MANIFEST, manifest


@pytest.mark.java  # the jars tests/peers/install fetches (with Maven: a JVM)
def test_the_manifest_is_the_jars_the_tests_run_kafka_from() -> None:
    """proxy/data/kafka-jars.json is up to date: the newest tested Kafka, and every jar
    tests/peers/install put beside it, by name, size and SHA-256 (regenerate with
    `python -m proxy.kafka_jars --generate`)."""
    wanted = manifest()
    assert wanted.kafka_version == NEWEST
    libs = kafka_libs(NEWEST)
    installed = {
        path.name: (path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
        for path in libs.glob("*.jar")
    }
    assert {jar.file_name: (jar.size, jar.sha256) for jar in wanted.jars} == installed
    assert "do not edit" in MANIFEST.read_text()


@contextmanager
def maven_repository(files: dict[str, bytes]) -> Iterator[str]:
    """An HTTP server answering Maven paths from `files` (path -> body), else 404."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/maven2"
    finally:
        server.shutdown()
        server.server_close()


def fetch_kafka(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", "fetch-kafka", *args],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


@pytest.mark.java  # the jars tests/peers/install fetches, served back (no JVM runs them)
def test_fetched_jars_are_checked_before_they_take_their_names(tmp_path: Path) -> None:
    """A repository with Maven Central's layout serving the installed jars: all fetched,
    then (a second run) all kept. One jar altered on the server, or missing: exit 1 with
    one line naming its URL and what was wrong, and no file of that name nor a partial
    download left behind."""
    libs = kafka_libs(NEWEST)
    wanted = manifest()
    files = {
        "/maven2" + jar.url(""): (libs / jar.file_name).read_bytes()
        for jar in wanted.jars
    }
    target = tmp_path / "jars"
    with maven_repository(files) as repository:
        first = fetch_kafka("--dir", str(target), "--repository", repository)
        assert first.returncode == 0, first.stderr
        assert first.stdout == f"{target}\n"
        assert f"{len(wanted.jars)} fetched, 0 already there" in first.stderr
        assert f"`kafkalens demo --broker apache-kafka --kafka-libs {target}`" in first.stderr
        assert sorted(p.name for p in target.iterdir()) == sorted(j.file_name for j in wanted.jars)
        again = fetch_kafka("--dir", str(target), "--repository", repository)
        assert f"0 fetched, {len(wanted.jars)} already there" in again.stderr, again.stderr

        smallest = min(wanted.jars, key=lambda jar: jar.size)
        (target / smallest.file_name).unlink()
        path = "/maven2" + smallest.url("")
        files[path] = files[path][:-1] + bytes([files[path][-1] ^ 1])
        altered = fetch_kafka("--dir", str(target), "--repository", repository)
        assert altered.returncode == 1
        error = altered.stderr.splitlines()[-1]
        assert error.startswith(f"kafkalens: error: fetch-kafka: {repository}{smallest.url('')}: ")
        assert f"expected {smallest.size} bytes with {smallest.sha256}" in error
        del files[path]
        missing = fetch_kafka("--dir", str(target), "--repository", repository)
        assert missing.returncode == 1
        assert missing.stderr.splitlines()[-1].endswith(": HTTP 404 Not Found"), missing.stderr
    assert not (target / smallest.file_name).exists()
    assert [p.name for p in target.iterdir() if p.name.startswith(".fetch-")] == []


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--repository", "ftp://mirror/maven2"), "--repository: must be an http(s) or file URL, got 'ftp://mirror/maven2'"),
        (("--dir", "/etc/hostname"), "--dir: /etc/hostname is not a directory"),
        (("--dri", "x"), "unrecognized arguments: --dri x (did you mean --dir?)"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: tuple[str, ...], line: str) -> None:
    done = fetch_kafka(*args)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"kafkalens: error: {line}\n")
