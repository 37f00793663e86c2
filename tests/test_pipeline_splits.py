"""The workers' own reader of local files (pipeline/splits.py): each line once.

Plain files are cut at arbitrary offsets, as Spark cuts them, and every cut must
give back every line exactly once (Hadoop's LineRecordReader rules); gzip files are
read whole, member after member, and a damaged one keeps the lines before the damage.
The lines Spark's own text reader gives for the same files are the reference in
test_pipeline_partials (test_local_reader_reads_what_spark_reads).
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

from pipeline.splits import Split, plan_splits, split_lines


def read(path: Path, split_bytes: int, uri: str = "file:/x") -> list[bytes]:
    """Every non-blank line the splits of `path` give, in file order."""
    splits = plan_splits([(uri, str(path), path.stat().st_size)], split_bytes)
    lines: list[bytes] = []
    for split in sorted(splits, key=lambda s: s.start):
        assert split.file == uri
        for chunk in split_lines(split):
            lines += chunk
    return [line for line in lines if line]


def reference(data: bytes) -> list[bytes]:
    return [line for line in data.splitlines() if line]


def random_lines(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    ends = [b"\n"] * 6 + [b"\r\n", b"\r", b"\n\n", b"\r\n\r\n"]
    parts = [b"x" * rng.randrange(0, 30) + str(i).encode() + rng.choice(ends)
             for i in range(n)]
    return b"".join(parts)


@pytest.mark.parametrize("seed", range(6))
def test_every_cut_gives_every_line_once(tmp_path: Path, seed: int) -> None:
    data = random_lines(seed, 200)
    if seed % 2:
        data = data.rstrip(b"\r\n") + b"last line without newline"
    path = tmp_path / "requests.log"
    path.write_bytes(data)
    want = reference(data)
    for split_bytes in (3, 7, 16, 31, 64, 1000, len(data), len(data) + 1):
        assert read(path, split_bytes) == want, split_bytes


def test_cuts_at_each_terminator_byte(tmp_path: Path) -> None:
    # A cut right before, inside and after each \r\n, \r and \n.
    data = b"a\r\nbb\rccc\ndddd\r\n\r\neeeee\n"
    path = tmp_path / "a.log"
    path.write_bytes(data)
    for size in range(1, len(data) + 2):
        assert read(path, size) == [b"a", b"bb", b"ccc", b"dddd", b"eeeee"], size


def test_long_lines_longer_than_splits(tmp_path: Path) -> None:
    data = b"".join(bytes([65 + i]) * 200_000 + b"\n" for i in range(5))
    path = tmp_path / "a.log"
    path.write_bytes(data)
    assert read(path, 70_000) == reference(data)


def test_byte_order_mark_dropped_at_file_start_only(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"\xef\xbb\xbf{}\n\xef\xbb\xbf{}\n")
    assert read(path, 4) == [b"{}", b"\xef\xbb\xbf{}"]
    assert read(path, 100) == [b"{}", b"\xef\xbb\xbf{}"]


def test_gzip_whole_concatenated_and_empty(tmp_path: Path) -> None:
    data = random_lines(7, 3000)
    path = tmp_path / "requests.log.1.gz"
    path.write_bytes(gzip.compress(data[:5000]) + gzip.compress(data[5000:]))
    splits = plan_splits([("file:/g", str(path), path.stat().st_size)], 10)
    assert len(splits) == 1  # never cut
    assert read(path, 10) == reference(data)
    empty = tmp_path / "empty.gz"
    empty.write_bytes(b"")
    assert read(empty, 10) == []


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_truncated_gzip_keeps_lines_before_the_damage(tmp_path: Path, keep: float) -> None:
    data = random_lines(8, 20_000)
    packed = gzip.compress(data)
    path = tmp_path / "cut.gz"
    path.write_bytes(packed[: int(len(packed) * keep)])
    got = read(path, 10)
    want = reference(data)
    assert 0 < len(got) < len(want)
    assert got == want[: len(got)]  # a prefix: the cut line itself is no line
    garbage = tmp_path / "garbage.gz"
    garbage.write_bytes(packed + b"not gzip at all")
    assert read(garbage, 10) == want


def test_costliest_splits_first() -> None:
    splits = plan_splits([("a", "a.log", 100), ("b", "b.log.1.gz", 10), ("c", "c.log", 300)],
                         split_bytes=100)
    assert splits[0] == Split("b", "b.log.1.gz", 0, 10)  # 10 bytes of gzip: ~190 of lines
    assert sorted((s.file, s.start, s.end) for s in splits) == [
        ("a", 0, 100), ("b", 0, 10), ("c", 0, 100), ("c", 100, 200), ("c", 200, 300)]
