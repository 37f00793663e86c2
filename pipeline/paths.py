"""The paths a pipeline command is given, checked before Spark starts: an input that
does not exist, or an output that cannot be written, is one line and exit 2 at once,
not a Java stack half a minute later (pipeline/cli.py runs these checks first).

Only what the driver's own file system can answer is checked here: local paths and
`file:` URIs. Any other Hadoop path (`hdfs://`, `s3a://` ...) is checked through
Hadoop's FileSystem once the session is up and before any line is read
(`read.expand_inputs`, `fsio.check_writable`). Nothing is created, except that the
checks of an output write and remove a probe directory to learn whether they can.

Inputs are matched as Hadoop matches them (`fs.globStatus`: `*`, `?`, `[a-z]`, `[^a]`,
`{a,b}`, a backslash escaping), so that what passes here is what the job lists. A file
that exists but cannot be read is not refused here: the read names every such file,
and `--skip-unreadable` reports without them (read.py).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse


class PathError(Exception):
    """A path the command cannot use: one line for the user, exit code 2."""


def local_path(path: str) -> Path | None:
    """The local file system path of `path` (a plain path or a `file:` URI), None for
    any other Hadoop scheme."""
    parsed = urlparse(path)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path) or "/")
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return Path(path).expanduser()
    return None


_GLOB_CHARS = re.compile(r"[*?\[{\\]")


def has_glob(text: str) -> bool:
    return _GLOB_CHARS.search(text) is not None


def _expand_braces(pattern: str) -> list[str]:
    """`a{b,c{d,e}}f` -> abf, acdf, acef (Hadoop's GlobExpander; a backslash escapes)."""
    depth, start = 0, -1
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                options, level, last = [], 0, start + 1
                for j in range(start + 1, i):
                    ch = pattern[j]
                    if ch == "\\":
                        continue
                    if ch == "{":
                        level += 1
                    elif ch == "}":
                        level -= 1
                    elif ch == "," and level == 0 and pattern[j - 1] != "\\":
                        options.append(pattern[last:j])
                        last = j + 1
                options.append(pattern[last:i])
                head, tail = pattern[:start], pattern[i + 1:]
                return [x for option in options for x in _expand_braces(head + option + tail)]
        i += 1
    return [pattern]


def _component_regex(component: str) -> re.Pattern[str]:
    """One path component of a Hadoop glob (braces expanded) as a regular expression."""
    out, i = [], 0
    while i < len(component):
        c = component[i]
        if c == "\\" and i + 1 < len(component):
            out.append(re.escape(component[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            end = component.find("]", i + 2)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = component[i + 1:end]
                negate = body[:1] in ("^", "!")
                body = body[1:] if negate else body
                body = body.replace("\\", "\\\\")
                out.append(f"[{'^' if negate else ''}{body}]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out), re.S)


def _unescape(component: str) -> str:
    return re.sub(r"\\(.)", r"\1", component)


def glob_matches(pattern: str, limit: int = 1) -> list[Path]:
    """Local paths matching a Hadoop glob (at most `limit`; 0: all)."""
    found: list[Path] = []
    for alternative in _expand_braces(pattern):
        absolute = alternative.startswith("/")
        parts = [p for p in alternative.split("/") if p]
        level = [Path("/") if absolute else Path(".")]
        for part in parts:
            following: list[Path] = []
            if not has_glob(part):
                following = [d / _unescape(part) for d in level
                             if os.path.lexists(d / _unescape(part))]
            else:
                regex = _component_regex(part)
                for directory in level:
                    try:
                        names = sorted(os.listdir(directory))
                    except OSError:
                        continue
                    following += [directory / n for n in names if regex.fullmatch(n)]
            level = following
            if not level:
                break
        for path in level:
            if path not in found:
                found.append(path)
            if limit and len(found) >= limit:
                return found
    return found


def check_inputs(inputs: list[str], what: str = "input") -> list[Path]:
    """Each local input exists (a glob matches something) and a directory named can be
    listed; the local directories the inputs name or match (read recursively). Raises
    PathError naming the inputs that match nothing, or the first that cannot be listed."""
    missing: list[str] = []
    directories: list[Path] = []
    for raw in inputs:
        path = local_path(raw)
        if path is None:
            continue
        text = str(path)
        matches = glob_matches(text, limit=0) if has_glob(text) else (
            [path] if os.path.lexists(path) else [])
        if not matches:
            missing.append(raw)
            continue
        for match in matches:
            if match.is_dir():
                try:
                    os.listdir(match)
                except OSError as e:
                    raise PathError(f"cannot list the {what} {match}: {_why(e)}") from e
                directories.append(match)
            elif not match.exists():
                raise PathError(f"the {what} {match} is a broken symbolic link")
    if missing:
        raise PathError(f"no file matches {', '.join(missing)}")
    return directories


def check_directory_input(path: str, what: str) -> None:
    """A directory the command reads (a table, a log directory) exists and can be listed."""
    local = local_path(path)
    if local is None:
        return
    if not local.exists():
        raise PathError(f"{what} {path} does not exist")
    if not local.is_dir():
        raise PathError(f"{what} {path} is a file, not a directory")
    try:
        os.listdir(local)
    except OSError as e:
        raise PathError(f"cannot list {what} {path}: {_why(e)}") from e


def check_output(path: str, what: str, inputs: Sequence[Path] = ()) -> None:
    """`path` is, or can be made, a directory this process writes into, and lies in none
    of the `inputs` directories (which are read recursively: the next run would read
    what this one wrote as input). Nothing is left behind: the probe is removed."""
    local = local_path(path)
    if local is None:
        return
    target = local.resolve()
    for directory in inputs:
        source = directory.resolve()
        if target == source or source in target.parents:
            raise PathError(f"{what} {path} is inside the input {directory}: a later run "
                            f"would read what this one writes as log lines; write elsewhere")
    existing = target
    while not existing.exists():
        if existing.is_symlink():
            raise PathError(f"{what} {path}: {existing} is a broken symbolic link")
        existing = existing.parent
    if not existing.is_dir():
        where = "is a file" if existing == target else f"lies under the file {existing}"
        raise PathError(f"{what} {path} {where}, not a directory")
    try:
        probe = tempfile.mkdtemp(prefix=".kafkalens-probe-", dir=existing)
    except OSError as e:
        place = "" if existing == target else f" (in {existing}, where it would be made)"
        raise PathError(f"cannot write {what} {path}{place}: {_why(e)}") from e
    os.rmdir(probe)


def _why(error: OSError) -> str:
    return error.strerror or type(error).__name__
