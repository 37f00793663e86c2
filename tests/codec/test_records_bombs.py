"""Decompression bombs: 1 GiB of zeros per codec must fail fast, in bounded memory.

cramjam allocates in Rust, out of tracemalloc's sight, so child processes measure their
own peak RSS (ru_maxrss): one builds the bombs into files, then one per bomb loads its
file, wraps it in a v2 batch and a legacy wrapper, and only then takes its baseline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # 1 GiB bombs, measured in child processes

LIMIT = 16 << 20

BUILD = textwrap.dedent(
    """
    import struct, sys
    from pathlib import Path
    import cramjam

    GIB = 1 << 30
    out = Path(sys.argv[1])

    def stream(module, data, **kwargs):
        compressor = module.Compressor(**kwargs)
        compressor.compress(data)
        return bytes(compressor.finish())

    def gzip_lying_size(data):
        bomb = bytearray(cramjam.gzip.compress(data, level=1))
        struct.pack_into("<I", bomb, len(bomb) - 4, 100)
        return bytes(bomb)

    def xerial(total):
        block = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
        head = b"\\x82SNAPPY\\x00" + struct.pack(">ii", 1, 1)
        return head + (struct.pack(">i", len(block)) + block) * (total // (32 * 1024))

    zeros = bytes(GIB)  # calloc'd: untouched zero pages cost no RSS
    bombs = {
        "gzip": lambda: cramjam.gzip.compress(zeros, level=1),
        "gzip-lying-size": lambda: gzip_lying_size(zeros),
        "snappy-raw": lambda: cramjam.snappy.compress_raw(zeros),
        "snappy-xerial": lambda: xerial(GIB),
        "lz4": lambda: stream(cramjam.lz4, zeros, block_linked=False),
        "lz4-linked": lambda: cramjam.lz4.compress(zeros[: GIB // 4]),
        "zstd": lambda: cramjam.zstd.compress(zeros, level=1),
        "zstd-no-size": lambda: stream(cramjam.zstd, zeros),
    }
    for name, make in bombs.items():
        (out / name).write_bytes(bytes(make()))
    """
)

ATTACK = textwrap.dedent(
    """
    import json, resource, struct, sys, time, zlib
    from crc32c import crc32c
    from codec.errors import DecodeError
    from codec.records import decompress, iter_records

    path, codec, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    bomb = open(path, "rb").read()

    def v2_batch(body):
        head = struct.pack(">qiibIhiqqqhii", 0, 49 + len(body), 0, 2, 0, codec, 0,
                           0, 0, -1, -1, -1, 1000)
        batch = bytearray(head + body)
        struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
        return bytes(batch)

    def legacy_wrapper(value):
        body = struct.pack(">bbqii", 1, codec, 0, -1, len(value)) + value
        return struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body

    runs = {"decompress": lambda: decompress(codec, bomb, max_bytes=limit)}
    batch = v2_batch(bomb)
    runs["v2"] = lambda: list(iter_records(batch, max_bytes=limit))
    if codec != 4:  # no zstd in legacy messages
        wrapper = legacy_wrapper(bomb)
        runs["legacy"] = lambda: list(iter_records(wrapper, max_bytes=limit))
    results = {}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for how, run in runs.items():
        start = time.perf_counter()
        try:
            run()
            outcome = "no error"
        except DecodeError as exc:
            outcome = "DecodeError" if "more than" in str(exc) else str(exc)
        except BaseException as exc:
            outcome = repr(exc)
        results[how] = [outcome, time.perf_counter() - start]
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"results": results, "grown_kib": after - before, "size": len(bomb)}))
    """
)

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BOMBS = [
    "gzip", "gzip-lying-size", "snappy-raw", "snappy-xerial",
    "lz4", "lz4-linked", "zstd", "zstd-no-size",
]  # fmt: skip


@pytest.fixture(scope="module")
def bomb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bombs")
    subprocess.run([sys.executable, "-c", BUILD, str(path)], timeout=120, check=True)
    return path


def attack(path: Path, codec: int) -> dict:
    command = [sys.executable, "-c", ATTACK, str(path), str(codec), str(LIMIT)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", BOMBS)
def test_bomb_fails_fast_in_bounded_memory(bomb_dir: Path, name: str) -> None:
    report = attack(bomb_dir / name, CODECS[name.split("-")[0]])
    assert report["size"] < 64 << 20  # a real bomb: 1 GiB (lz4-linked: 256 MiB) in less
    for how, (outcome, seconds) in report["results"].items():
        assert outcome == "DecodeError", (how, outcome)
        assert seconds < 1.0, (how, seconds)
    # Decompressing for real would grow by 1 GiB; the limit allows 16 MiB.
    assert report["grown_kib"] < 3 * LIMIT // 1024, report["grown_kib"]
