"""Local log files read by the Python workers themselves, split as Spark would.

Spark's text source costs the JVM ~10 us a line (reading, gunzip, the row format,
Arrow to the Python workers) before Python sees the line. For files on the local
filesystem (local mode, or a path every executor sees) the workers read and gunzip
them here instead (zlib in C), with the same lines as Spark's reader gives:

- a .gz file is one split, read to its end; a truncated or damaged .gz keeps the
  lines whose end was decompressed before the damage (as ignoreCorruptFiles does),
  concatenated gzip members are read in turn;
- a plain file is cut every SPLIT_BYTES and each split owns the lines *starting* in
  (start, end] (the first split also the line at 0), as Hadoop's LineRecordReader:
  a split skips its first partial line unless it starts at 0, and reads past its end
  to finish its last line, so each line is read once whatever the cut;
- lines end at \\n, \\r or \\r\\n; a UTF-8 byte order mark opening a file is dropped;
  a last line without a newline counts (blank lines are dropped by the fold anyway).

Other Hadoop codecs (.bz2, .zst ...) are left to Spark's reader (see read.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

SPLIT_BYTES = 32 * 2**20
# Compressed files Hadoop would decompress by extension; only .gz is read here.
SPARK_CODECS = (".bz2", ".deflate", ".lz4", ".snappy", ".zst")
# Bytes read at a time. A .gz block inflates ~19x (synthetic logs): 16 KiB gives
# ~300 KiB of lines, which stay in cache and in memory the allocator reuses; 1 MiB
# blocks (19 MiB of lines, and their copies as line objects) faulted in fresh pages
# every block: ~4x the page faults, ~110 MB more per worker, the same user CPU.
GZ_BLOCK = 2**14
PLAIN_BLOCK = 2**18
SCAN = 2**16  # bytes read at a time looking for a line's end
BOM = b"\xef\xbb\xbf"
GZIP_WBITS = 16 + zlib.MAX_WBITS


@dataclass(frozen=True)
class Split:
    file: str  # the name kept with bad lines: the file's URI, as Spark names it
    path: str  # where to open it
    start: int
    end: int  # a .gz file: its size (read whole)

    @property
    def gz(self) -> bool:
        return self.path.endswith(".gz")

    def cost(self) -> float:
        # A rotated .gz holds ~19x more lines than its size says (synthetic logs).
        return (self.end - self.start) * (19 if self.gz else 1)


def plan_splits(files: list[tuple[str, str, int]], split_bytes: int | None = None
                ) -> list[Split]:
    """(uri, path, size) files into splits, costliest first so that the last tasks to
    start are short ones (the cores stay busy to the end)."""
    split_bytes = split_bytes or SPLIT_BYTES
    splits = []
    for uri, path, size in files:
        if path.endswith(".gz") or size <= split_bytes:
            splits.append(Split(uri, path, 0, size))
            continue
        for start in range(0, size, split_bytes):
            splits.append(Split(uri, path, start, min(size, start + split_bytes)))
    return sorted(splits, key=lambda s: -s.cost())


def split_lines(split: Split) -> Iterator[list[bytes]]:
    """The split's lines, in lists of a few hundred (terminators removed; blank lines
    may appear and are the caller's to drop)."""
    with open(split.path, "rb") as f:
        chunks = _gunzip(f) if split.gz else _byte_range(f, split.start, split.end)
        yield from _lines(chunks, at_file_start=split.start == 0)


def _line_end(f: BinaryIO, position: int) -> int:
    """The offset just after the first line terminator at or after `position` (a
    \\r\\n counts as one), or the file's end."""
    f.seek(position)
    offset = position
    while block := f.read(SCAN):
        lf, cr = block.find(b"\n"), block.find(b"\r")
        if lf >= 0 or cr >= 0:
            if cr < 0 or 0 <= lf < cr:
                return offset + lf + 1
            after = block[cr + 1:cr + 2] or f.read(1)  # a \r may close the block
            return offset + cr + (2 if after == b"\n" else 1)
        offset += len(block)
    return offset


def _byte_range(f: BinaryIO, start: int, end: int) -> Iterator[bytes]:
    """The bytes of the lines a plain split owns: from its first line start after
    `start` (0: the file's start) to the end of the line holding `end`."""
    first = 0 if start == 0 else _line_end(f, start)
    # The line starting at or before `end` is this split's: read to its terminator.
    last = _line_end(f, end) if end > 0 else 0
    f.seek(first)
    left = last - first
    while left > 0 and (block := f.read(min(left, PLAIN_BLOCK))):
        left -= len(block)
        yield block


class Truncated(Exception):
    """The .gz ended (or broke) before its last member's end."""


def _gunzip(f: BinaryIO) -> Iterator[bytes]:
    """The decompressed bytes of a gzip file, member after member; raises Truncated
    after the last bytes it could decompress if the file is damaged or cut short."""
    inflate = zlib.decompressobj(GZIP_WBITS)
    started = False  # a member has begun: a file ending between members is whole
    while True:
        data = f.read(GZ_BLOCK)
        if not data:
            if started and not inflate.eof:
                raise Truncated
            return
        while data:
            started = True
            try:
                out = inflate.decompress(data)
            except zlib.error:
                raise Truncated from None
            if out:
                yield out
            if not inflate.eof:
                break
            # Another member may follow (concatenated gzip, as Hadoop reads them).
            data = inflate.unused_data
            inflate = zlib.decompressobj(GZIP_WBITS)
            started = False


def _lines(chunks: Iterator[bytes], at_file_start: bool) -> Iterator[list[bytes]]:
    """Whole lines out of byte chunks cut anywhere. The tail after the last
    terminator is a line at the end, unless the chunks stop with Truncated: a line
    cut by damage is not one (Spark's reader fails on it)."""
    carry = b""
    bom = at_file_start  # Hadoop drops a byte order mark at a file's first byte only
    try:
        for chunk in chunks:
            data = carry + chunk if carry else chunk
            if bom:  # (a mark cut between two chunks is not seen: 1-2 byte chunks)
                bom = False
                if data.startswith(BOM):
                    data = data[len(BOM):]
            # A line ends at \n, \r or \r\n: splitting on \n alone is much cheaper and
            # right whenever the chunk has no \r (a \r\n cut between chunks only
            # leaves a blank line, which is no line).
            lines = data.splitlines() if b"\r" in data else data.split(b"\n")
            ends_line = data.endswith((b"\n", b"\r"))
            carry = b"" if ends_line else lines.pop()
            yield lines
    except Truncated:
        return
    if carry:
        yield [carry]
