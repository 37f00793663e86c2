"""Staging rotated log files under names that are never reused.

Spark's file source remembers the files it has read by path, and the proxy rotates by
renaming (pipeline/README.md, "Watch"), so a rotated file is named by its content: a
hash of its first line, which carries a microsecond timestamp and a connection id,
followed by the name it had when staged (`<hash>.requests.log.3.gz`: the tables' `file`
says where a line came from). Staging is a hard link when the spool shares the log
directory's file system, else a copy.

A file that cannot be staged for good is never passed over in silence: one that cannot
be opened, a `.gz` that is not gzip data, and a `.gz` still cut short BAD_AFTER_SECONDS
after its last write (a compressor that died) are returned by `collect` (`unreadable`),
with why, on every pass until the command accepts to go on without them (`leave_out`,
for --skip-unreadable): then they are remembered in UNREADABLE and not named again. A
command that stops on them instead finds them again when it restarts, so a restart
does not pass over what stopped the run before it.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

SUBDIR = "~"  # a staged name's stand-in for `/` (unreserved in a URI: Spark keeps it)
LEDGER = "_ledger.txt"  # Spark's file source skips names starting with "_" and "."
UNREADABLE = "_unreadable.txt"
SETTLE_SECONDS = 2.0  # a file written to this recently may still be being compressed
# A compressor writes as it goes: a .gz not whole this long after its last write is cut.
BAD_AFTER_SECONDS = 60.0
RETENTION_SECONDS = 30 * 24 * 3600
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Unreadable:
    """A file in the log directory that will not be staged, and why."""

    path: Path
    reason: str
    key: str = ""  # the file as found (device, inode, size, mtime)


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
    bad_after_seconds: float = BAD_AFTER_SECONDS
    unreadable: list[Unreadable] = field(default_factory=list)  # found by the last collect

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
        temporary = self.spool / f".{fingerprint}.{self.staged_name(source)}.tmp"
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
        temporary.rename(self.spool / f"{fingerprint}.{self.staged_name(source)}")
        return True

    def fingerprint(self, source: Path, first: bytes) -> str:
        """A file's fingerprint: its first line's hash, with its subdirectory's when
        it is in one (two proxies' files may begin alike)."""
        folder = source.parent.relative_to(self.logdir).as_posix() \
            if source.parent != self.logdir else ""
        return hashlib.sha256((f"{folder}/".encode() if folder else b"") + first
                              ).hexdigest()[:32]

    def staged_name(self, source: Path) -> str:
        """`source`'s path under the log directory, a subdirectory's `/` written as
        SUBDIR (a pattern such as `*/*.log.[0-9]*` reads a directory per proxy: the
        tables' `file`, and the watch's sources, keep the subdirectory)."""
        try:
            relative = source.relative_to(self.logdir)
        except ValueError:
            return source.name
        return SUBDIR.join(relative.parts)

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

    def _known_unreadable(self) -> set[str]:
        path = self.spool / UNREADABLE
        if not path.exists():
            return set()
        return {line.split("\t", 1)[0] for line in path.read_text().splitlines() if line}

    def _give_up(self, source: Path, stat: os.stat_result, reason: str, known: set[str]) -> None:
        """`source` (this very file: inode, size, mtime) will not be staged: named in
        `unreadable` unless left out before."""
        key = f"{stat.st_dev}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"
        if key not in known:
            self.unreadable.append(Unreadable(source, reason, key))

    def leave_out(self, files: list[Unreadable]) -> None:
        """Go on without these files (found by `collect`): never named again."""
        with (self.spool / UNREADABLE).open("a") as f:
            for u in files:
                f.write(f"{u.key}\t{u.path}\t{u.reason}\t{time.time():.0f}\n")
            f.flush()
            os.fsync(f.fileno())

    def collect(self) -> list[Path]:
        """Stage every rotated file not staged before; return the new staged files.
        Files found unreadable on this pass are in `self.unreadable`."""
        self.spool.mkdir(parents=True, exist_ok=True)
        self.unreadable = []
        ledger = self._ledger()
        known = self._known_unreadable()
        self._recover(ledger)
        self._prune(ledger)
        staged = []
        for source in self._candidates():
            gz = source.name.endswith(".gz")
            stat: os.stat_result | None = None
            try:
                stat = source.stat()
                with source.open("rb") as f:
                    stat = os.fstat(f.fileno())
                    if not self._settled(stat):
                        continue  # the name now holds a file just rotated
                    if gz and f.read(2) != GZIP_MAGIC:
                        self._give_up(source, stat, "not gzip data, though its name says .gz",
                                      known)
                        continue
                    if gz and not gzip_complete(f):
                        if time.time() - stat.st_mtime >= self.bad_after_seconds:
                            self._give_up(source, stat, "truncated: the gzip stream is cut "
                                          "short", known)
                        continue  # else maybe still being compressed
                    fingerprint = self.fingerprint(source, first_line(f, gz))
                    if fingerprint in ledger:
                        continue
                    if not self._stage(source, f, fingerprint):
                        continue
            except FileNotFoundError:
                continue  # rotated away: the next pass sees it under its new name
            except OSError as e:  # permission denied, an I/O error
                if stat is not None:
                    self._give_up(source, stat, f"cannot be opened: {e.strerror or e}", known)
                continue
            ledger[fingerprint] = time.time()
            staged.append(source)
        return staged
