"""`kafkalens fetch-kafka`: the jars of one Apache Kafka release, for `kafkalens demo
--broker apache-kafka`, from Maven Central with nothing but Python.

What to fetch is `proxy/data/kafka-jars.json`: the broker's runtime classpath
(`org.apache.kafka:kafka_2.13`, the Java client and a log4j2 binding, with what they
depend on), each jar by its Maven coordinates, size and SHA-256. It is generated data:
`python -m proxy.kafka_jars --generate` writes it from what Maven resolves for
`tests/peers/pom.xml` and the jars `bash tests/peers/install` fetched for the newest
version of `tests/peers/kafka-versions`, and a test holds it equal to them. So the
demo runs the very jars the tests run, and fetching them needs no Maven, javac or Go.

Each jar is checked against its size and SHA-256 before it takes its name (a partial
or altered download never looks like a jar), and a jar already there with the right
hash is not fetched again: a second run is a check. `KAFKALENS_MAVEN_REPOSITORY` (or
`--repository`) names a mirror with Maven Central's layout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from proxy.console import OneLineParser, fail

MANIFEST = Path(__file__).resolve().parent / "data" / "kafka-jars.json"
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"  # Maven's own default
REPOSITORY_ENV = "KAFKALENS_MAVEN_REPOSITORY"
TIMEOUT_SECONDS = 60.0
_CHUNK = 1 << 16
_PEERS = Path(__file__).resolve().parent.parent / "tests" / "peers"


@dataclass(frozen=True)
class Jar:
    group: str
    artifact: str
    version: str
    size: int
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str) -> str:
        group = self.group.replace(".", "/")
        return f"{repository.rstrip('/')}/{group}/{self.artifact}/{self.version}/{self.file_name}"


@dataclass(frozen=True)
class Manifest:
    kafka_version: str
    jars: tuple[Jar, ...]

    @property
    def size(self) -> int:
        return sum(jar.size for jar in self.jars)


def manifest(path: Path = MANIFEST) -> Manifest:
    data = json.loads(path.read_text())
    return Manifest(data["kafka_version"], tuple(Jar(**jar) for jar in data["jars"]))


def default_dir() -> Path:
    """Where `kafkalens fetch-kafka` puts the jars and the demo looks for them:
    $XDG_CACHE_HOME/kafkalens/kafka-<version> (~/.cache by default)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "kafkalens" / f"kafka-{manifest().kafka_version}"


def has_jars(directory: Path) -> bool:
    return any(directory.glob("kafka_2.13-*.jar"))


class FetchError(Exception):
    """A jar that could not be had: its name and why (one line)."""


def fetch(
    directory: Path, repository: str = MAVEN_CENTRAL, progress: IO[str] | None = None
) -> tuple[int, int]:
    """Every jar of the manifest into `directory`; (fetched, already there)."""
    wanted = manifest()
    directory.mkdir(parents=True, exist_ok=True)
    fetched = kept = 0
    done_bytes = 0
    for jar in wanted.jars:
        target = directory / jar.file_name
        if _sha256(target) == jar.sha256:
            kept += 1
        else:
            _download(jar, repository, target)
            fetched += 1
        done_bytes += jar.size
        if progress is not None:
            share = done_bytes * 100 // max(wanted.size, 1)
            progress.write(f"\r  {share:3d} %  {jar.file_name:<60.60}")
            progress.flush()
    if progress is not None:
        progress.write("\r" + " " * 68 + "\r")
    return fetched, kept


def _sha256(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def _download(jar: Jar, repository: str, target: Path) -> None:
    url = jar.url(repository)
    digest = hashlib.sha256()
    size = 0
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".fetch-", delete=False) as out:
        try:
            try:
                with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
                    while chunk := response.read(_CHUNK):
                        size += len(chunk)
                        if size > jar.size:
                            raise FetchError(f"{url}: more than the {jar.size} bytes expected")
                        digest.update(chunk)
                        out.write(chunk)
            except urllib.error.HTTPError as exc:
                raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", None) or exc
                raise FetchError(f"{url}: {reason}") from None
            if size != jar.size or digest.hexdigest() != jar.sha256:
                raise FetchError(
                    f"{url}: {size} bytes with SHA-256 {digest.hexdigest()}, expected"
                    f" {jar.size} bytes with {jar.sha256}"
                )
            out.close()
            os.replace(out.name, target)
        finally:
            out.close()
            if os.path.exists(out.name):
                os.unlink(out.name)


def _parser() -> argparse.ArgumentParser:
    version = manifest().kafka_version
    parser = OneLineParser(
        prog="kafkalens fetch-kafka",
        description=f"Fetch Apache Kafka {version}'s jars from Maven Central (only Python"
        " needed; each checked against its SHA-256) for `kafkalens demo --broker apache-kafka`,"
        " which then finds them (running it needs Java 17 or newer).",
    )
    parser.add_argument(
        "--dir",
        metavar="DIR",
        help=f"where to put them (default {default_dir()}, where the demo looks)",
    )
    parser.add_argument(
        "--repository",
        metavar="URL",
        help=f"a Maven repository with Maven Central's layout (default ${REPOSITORY_ENV},"
        f" else {MAVEN_CENTRAL})",
    )
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    directory = Path(args.dir) if args.dir else default_dir()
    repository = args.repository or os.environ.get(REPOSITORY_ENV) or MAVEN_CENTRAL
    if not repository.startswith(("https://", "http://", "file:")):
        fail(f"--repository: must be an http(s) or file URL, got {repository!r}")
    if directory.exists() and not directory.is_dir():
        fail(f"--dir: {directory} is not a directory")
    wanted = manifest()
    print(
        f"kafkalens fetch-kafka: Apache Kafka {wanted.kafka_version}, {len(wanted.jars)} jars"
        f" ({wanted.size / 2**20:.0f} MiB) from {repository} into {directory}",
        file=sys.stderr,
        flush=True,
    )
    try:
        fetched, kept = fetch(directory, repository, sys.stderr if sys.stderr.isatty() else None)
    except FetchError as exc:
        print(f"kafkalens: error: fetch-kafka: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        fail(f"--dir: cannot write {directory}: {exc.strerror or exc}")
    libs = "" if args.dir is None else f" --kafka-libs {directory}"
    print(
        f"kafkalens fetch-kafka: {fetched} fetched, {kept} already there; run the demo with"
        f" `kafkalens demo --broker apache-kafka{libs}`",
        file=sys.stderr,
    )
    print(directory)
    return 0


# --- generating proxy/data/kafka-jars.json -------------------------------------------


def generate(version: str | None = None) -> str:
    """The manifest for `version` (the newest of tests/peers/kafka-versions): Maven's
    resolution of tests/peers/pom.xml for the coordinates, the jars tests/peers/install
    put in tests/peers/build/kafka-<version>/ for sizes and hashes."""
    version = version or (_PEERS / "kafka-versions").read_text().split()[0]
    libs = _PEERS / "build" / f"kafka-{version}"
    with tempfile.TemporaryDirectory() as tmp:
        listing = Path(tmp) / "list.txt"
        subprocess.run(
            [
                "mvn", "-B", "-q", "-Dstyle.color=never", "-f", str(_PEERS / "pom.xml"),
                "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:list",
                "-DincludeScope=runtime", f"-Dkafka.version={version}",
                f"-DoutputFile={listing}",
            ],
            check=True,
        )  # fmt: skip
        coordinates = [
            line.split()[0].split(":")
            for line in listing.read_text().splitlines()
            if line.startswith("   ")
        ]
    jars = []
    for group, artifact, _kind, jar_version, *_scope in sorted(coordinates):
        path = libs / f"{artifact}-{jar_version}.jar"
        jars.append({
            "group": group,
            "artifact": artifact,
            "version": jar_version,
            "size": path.stat().st_size,
            "sha256": _sha256(path),
        })
    note = "generated by `python -m proxy.kafka_jars --generate`; do not edit"
    return json.dumps({"_": note, "kafka_version": version, "jars": jars}, indent=1) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--generate"]:
        MANIFEST.parent.mkdir(exist_ok=True)
        MANIFEST.write_text(generate())
    else:
        sys.exit(main(sys.argv[1:]))
