"""Staging rotated log files under names that are never reused.

Spark's file source remembers the files it has read by path, and the proxy rotates by
renaming (pipeline/README.md, "Watch"), so a rotated file is named by its content: a
hash of its first line, which carries a microsecond timestamp and a connection id.
Staging is a hard link when the spool shares the log directory's file system, else a
copy.

A name in the log directory may change files at any moment (the proxy rotates while
we stage), so a file is opened once and everything is decided on that open file: its
fingerprint, its age, whether its gzip stream is whole, and what is staged (a hard
link made by name is kept only if it is that same inode; a copy is read from it).
Deciding by name instead stages the file that took the name under the fingerprint of
the one that left it: that one is then never read and the other is read twice.

Crash safety: link to a hidden temporary name, record the fingerprint in the ledger,
then rename. A temporary file whose fingerprint the ledger holds is finished on the
next run; one it does not hold is dropped. Spark (cleanSource=delete) removes staged
files once it has committed them; the ledger remembers their fingerprints.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

LEDGER = "_ledger.txt"  # Spark's file source skips names starting with "_" and "."
SETTLE_SECONDS = 2.0  # a file written to this recently may still be being compressed
RETENTION_SECONDS = 30 * 24 * 3600


def first_line(f: BinaryIO, gz: bool) -> bytes:
    f.seek(0)
    if gz:
        with gzip.GzipFile(fileobj=f, mode="rb") as unzipped:
            return unzipped.readline()
    return f.readline()


def gzip_complete(f: BinaryIO) -> bool:
    """True when the gzip stream ends properly (not a file still being compressed)."""
    f.seek(0)
    inflater = zlib.decompressobj(wbits=31)
    while chunk := f.read(1 << 20):
        try:
            inflater.decompress(chunk)
        except zlib.error:
            return False
    return inflater.eof


@dataclass
class Spool:
    logdir: Path
    spool: Path
    pattern: str
    settle_seconds: float = SETTLE_SECONDS
    retention_seconds: float = RETENTION_SECONDS

    def _ledger(self) -> dict[str, float]:
        path = self.spool / LEDGER
        if not path.exists():
            return {}
        entries = (line.split() for line in path.read_text().splitlines() if line.strip())
        return {fp: float(added) for fp, added in entries}

    def _record(self, fingerprint: str) -> None:
        with (self.spool / LEDGER).open("a") as f:
            f.write(f"{fingerprint} {time.time():.0f}\n")
            f.flush()
            os.fsync(f.fileno())

    def _candidates(self) -> list[Path]:
        now = time.time()
        files = []
        for path in self.logdir.glob(self.pattern):
            try:
                stat = path.stat()
            except FileNotFoundError:  # rotated away while listing
                continue
            if self._settled(stat, now):
                files.append((stat.st_mtime, path))
        return [path for _, path in sorted(files)]  # oldest first, as Spark orders them

    def _settled(self, stat: os.stat_result, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return bool(stat.st_size) and now - stat.st_mtime >= self.settle_seconds

    def _stage(self, source: Path, f: BinaryIO, fingerprint: str) -> bool:
        """Stage the open file `f` (opened at `source`); False if `source` now names
        another file (rotated meanwhile): the next pass stages it under its own name."""
        suffix = ".log.gz" if source.name.endswith(".gz") else ".log"
        temporary = self.spool / f".{fingerprint}{suffix}.tmp"
        opened = os.fstat(f.fileno())
        try:
            os.link(source, temporary)
        except FileNotFoundError:
            return False
        except OSError:  # another file system (or no hard links): copy, keeping mtime
            f.seek(0)
            with temporary.open("wb") as out:
                shutil.copyfileobj(f, out)
            os.utime(temporary, ns=(opened.st_atime_ns, opened.st_mtime_ns))
        else:
            if not os.path.samestat(os.stat(temporary), opened):
                temporary.unlink()
                return False
        self._record(fingerprint)
        temporary.rename(self.spool / f"{fingerprint}{suffix}")
        return True

    def _recover(self, ledger: dict[str, float]) -> None:
        for temporary in self.spool.glob(".*.tmp"):
            fingerprint = temporary.name[1:].split(".", 1)[0]
            if fingerprint in ledger:
                temporary.rename(self.spool / temporary.name[1:].removesuffix(".tmp"))
            else:
                temporary.unlink()

    def _prune(self, ledger: dict[str, float]) -> None:
        cutoff = time.time() - self.retention_seconds
        if any(added < cutoff for added in ledger.values()):
            kept = "".join(f"{fp} {added:.0f}\n" for fp, added in ledger.items() if added >= cutoff)
            tmp = self.spool / f"{LEDGER}.new"
            tmp.write_text(kept)
            tmp.replace(self.spool / LEDGER)

    def collect(self) -> list[Path]:
        """Stage every rotated file not staged before; return the new staged files."""
        self.spool.mkdir(parents=True, exist_ok=True)
        ledger = self._ledger()
        self._recover(ledger)
        self._prune(ledger)
        staged = []
        for source in self._candidates():
            gz = source.name.endswith(".gz")
            try:
                with source.open("rb") as f:
                    if not self._settled(os.fstat(f.fileno())):
                        continue  # the name now holds a file just rotated
                    fingerprint = hashlib.sha256(first_line(f, gz)).hexdigest()[:32]
                    if fingerprint in ledger or (gz and not gzip_complete(f)):
                        continue
                    if not self._stage(source, f, fingerprint):
                        continue
            except (FileNotFoundError, EOFError, gzip.BadGzipFile):
                continue  # rotated or still being written: the next pass sees it
            ledger[fingerprint] = time.time()
            staged.append(source)
        return staged
