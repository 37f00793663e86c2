"""Staging rotated log files under names that are never reused.

Spark's file source remembers the files it has read by path. The proxy rotates by
renaming: requests.log -> requests.log.1, and on the next rotation .1 -> .2 and a new
.1. Read directly, every shift looks like a new file (.2 is "new": counted twice) and
the reused name .1 looks old (never read again: lost). The spool fixes both: a rotated
file is named by its content (a hash of its first line, which carries a microsecond
timestamp and a connection id), so a renamed file is recognised as already staged and
new content always gets a new name. Staging is a hard link when the spool shares the
log directory's file system (no copy), else a copy.

Crash safety: link to a hidden temporary name, record the fingerprint in the ledger,
then rename. A temporary file whose fingerprint the ledger holds is finished on the
next run; one it does not hold is dropped. Spark (cleanSource=delete) removes staged
files once it has committed them; the ledger remembers their fingerprints.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import os
import shutil
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

LEDGER = "_ledger.txt"  # Spark's file source skips names starting with "_" and "."
SETTLE_SECONDS = 2.0  # a file written to this recently may still be being compressed
RETENTION_SECONDS = 30 * 24 * 3600


def first_line(path: Path) -> bytes:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.readline()


def gzip_complete(path: Path) -> bool:
    """True when the gzip stream ends properly (not a file still being compressed)."""
    inflater = zlib.decompressobj(wbits=31)
    with path.open("rb") as f:
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
        for path in self.logdir.iterdir():
            if not fnmatch.fnmatch(path.name, self.pattern):
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:  # rotated away while listing
                continue
            if stat.st_size and now - stat.st_mtime >= self.settle_seconds:
                files.append((stat.st_mtime, path))
        return [path for _, path in sorted(files)]  # oldest first, as Spark orders them

    def _stage(self, source: Path, fingerprint: str) -> None:
        suffix = ".log.gz" if source.name.endswith(".gz") else ".log"
        temporary = self.spool / f".{fingerprint}{suffix}.tmp"
        try:
            os.link(source, temporary)
        except OSError:  # another file system (or no hard links): copy, keeping mtime
            shutil.copy2(source, temporary)
        self._record(fingerprint)
        temporary.rename(self.spool / f"{fingerprint}{suffix}")

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
            try:
                fingerprint = hashlib.sha256(first_line(source)).hexdigest()[:32]
                if fingerprint in ledger or (
                    source.name.endswith(".gz") and not gzip_complete(source)
                ):
                    continue
                self._stage(source, fingerprint)
            except (FileNotFoundError, EOFError, gzip.BadGzipFile):
                continue  # rotated or still being written: the next pass sees it
            ledger[fingerprint] = time.time()
            staged.append(source)
        return staged
