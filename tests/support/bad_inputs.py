"""Input files Spark cannot read to their end, as operators' logs hold them: a plain
file named .gz (a rotation misnamed), a gzip cut short (a compressor that died), a file
that cannot be opened once listed (removed meanwhile, or a path only the driver sees),
and a file whose reading fails part way with an I/O error from Hadoop's FileSystem (as
an object store's connection reset does): here Hadoop's local FileSystem, which checks
each 512-byte chunk against the file's `.crc` and fails at the damaged one, after the
lines before it were read."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.synth import Synth, to_line

CHECKSUM_CHUNK = 512  # Hadoop's io.bytes.per.checksum


def lines(seed: int, n: int) -> bytes:
    return "".join(to_line(e) + "\n" for e in Synth(seed=seed, rate=5).events(n)).encode()


def write_through_hadoop(spark: Any, path: Path, data: bytes) -> None:
    """Write `data` with Hadoop's local FileSystem, which writes `.<name>.crc` beside it."""
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path.as_uri())
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.create(hadoop_path, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()
    assert (path.parent / f".{path.name}.crc").exists()


def damage(path: Path, at: int) -> None:
    """Change one byte at `at` (the checksum of its chunk no longer matches)."""
    data = bytearray(path.read_bytes())
    data[at] ^= 0x20
    path.write_bytes(bytes(data))


@dataclass(frozen=True)
class BadFiles:
    """A directory of good logs and one bad file of each kind (names below)."""

    logs: Path
    good: dict[str, int]  # file name -> lines
    misnamed: str = "requests.log.5.gz"
    truncated: str = "requests.log.6.gz"
    fails_mid_read: str = "requests.log.7"
    vanishes: str = "requests.log.8"

    @property
    def bad(self) -> list[str]:
        return [self.misnamed, self.truncated, self.fails_mid_read, self.vanishes]

    def restore_vanishing(self) -> None:
        (self.logs / self.vanishes).write_bytes(lines(8, 50))


def make_bad_files(spark: Any, logs: Path) -> BadFiles:
    logs.mkdir(parents=True)
    good = {"requests.log": 300, "requests.log.1": 400, "requests.log.2.gz": 500}
    for seed, (name, n) in enumerate(good.items()):
        data = lines(seed, n)
        (logs / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    files = BadFiles(logs, good)
    (logs / files.misnamed).write_bytes(lines(5, 200))
    whole = gzip.compress(lines(6, 2000))
    (logs / files.truncated).write_bytes(whole[: len(whole) // 2])
    mid = logs / files.fails_mid_read
    write_through_hadoop(spark, mid, lines(7, 400))
    damage(mid, mid.stat().st_size * 2 // 3)  # some chunks read whole before it
    assert mid.stat().st_size > 4 * CHECKSUM_CHUNK
    files.restore_vanishing()
    return files
