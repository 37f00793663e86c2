"""The config language: how a key of kafkalens.yaml is declared, read and checked.

A key is declared where its value lives: a field of a frozen dataclass (a *section*,
made with `@config_section`), made by a *kind* function that says what the key holds:

    max_frame_bytes: int = size(
        default=104857600,
        at_most=(INT32_MAX, "a Kafka frame's length is an int32"),
        doc="The largest frame read from a client or a broker.",
    )

That one declaration is the key's name, type, default (the dataclass default), bounds
with their reason, and its documentation. The rest is derived from the declarations:
the reader (`read_section`, one generic walk), the unknown-key check and its suggestion,
the views `section_schemas` and `maxima` (for tests and tools), `kafkalens proxy
--help`'s defaults, and the documented file (proxy/config/file.py writes it).

The kinds: `integer`, `size` (bytes: `64KiB`, `10MB` read too), `seconds` and
`milliseconds` (`500ms`, `30s`, `1h30m` read too: parse_size, parse_duration), and
`integer_or_auto` (`auto`, sized by the process: limits.max_connections) (a finite
`at_most` with its reason is required: past it a value no longer tunes a protection but
switches it off), `fraction` (0..1), `flag`, `text`, `choice`, `file_path` (a file this
process can read, checked as the file is parsed), `address` (HOST:PORT), `items` (a
list, each item checked by a function), `section` (a nested mapping of keys: another
decorated dataclass), `custom` (a shape of its own: gateway.broker_ports,
kip1313.header_v3), and `SectionList` for a list of sections (`listeners`). A
declaration without `default=` is a required key. A rule across keys of one section is
that section's `_check` method, run once the section is read.

Errors: a `ConfigError` names the key path and what is wrong, e.g.
``limits.max_frame_bytes: must be a positive integer, got -1``; unknown keys are named
before anything else is checked, with the nearest known key suggested (the same key in
another section first: `max_frame_bytes` at the top level is `limits.max_frame_bytes`).

Hand-written rather than a schema library: msgspec (already a pipeline extra) reports
``Expected `int` <= 2147483647 - at `$.limits.max_frame_bytes` `` and ``Object contains
unknown field `upstrem` ``, with no suggestion and no reason, and would turn these
dataclasses into Structs; pydantic v2 adds pydantic-core (~5 MB) to the image, prints
multi-line errors, and still needs the host:port, version-range and cross-key checks
written by hand. Both would need the same layer for suggestions and reasons that the
kinds below already are.

This module knows no key of kafkalens.yaml: the core's sections are proxy/config/core.py,
each feature's are in its own package, and proxy/features.py puts them together.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any, TypeVar, cast, dataclass_transform

INT32_MAX = 2**31 - 1
LOOPBACK_HOSTS = ("localhost", "::1")
ABSENT: Any = object()  # a key the document does not give
REQUIRED: Any = dataclasses.MISSING  # a declaration without default=
NO_EXAMPLE: Any = object()
_KEY = "kafkalens.key"  # where a field's metadata holds its `Key`
AUTO = "auto"  # the value of a key the process sizes itself (integer_or_auto)


class ConfigError(ValueError):
    """A bad configuration value; `str()` is ``<key path>: <what is wrong>``."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


# --- kinds: what a key holds, how it is read and checked, how it is written -------------


class Kind:
    """How one key's YAML value becomes its Python value (`read`, raising ConfigError
    for `key`), and what config/kafkalens.yaml says of it (`bounds`, `as_yaml`)."""

    nullable = False  # null is "not given": the default (so is null for a None default)
    reads_absent = False  # `read` decides what a key left out means (else: the default)

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> Any:
        """`given`: the keys of the same section read so far (in declaration order)."""
        raise NotImplementedError

    def bounds(self) -> str:
        return ""

    def as_yaml(self, value: Any) -> object:
        """The value as the file writes it (plain YAML data)."""
        return plain(value)


@dataclass(frozen=True)
class Integer(Kind):
    minimum: int
    maximum: int
    why: str
    # `auto` is a value too (read as None), meaning what this says: the process sizes it
    auto: str | None = None

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> int | None:
        if self.auto is not None and value == AUTO:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum:
            what = "a positive integer" if self.minimum == 1 else f"an integer >= {self.minimum}"
            if self.auto is not None:
                what += f" or {AUTO}"
            raise ConfigError(key, f"must be {what}, got {show(value)}")
        if not value <= self.maximum:
            raise ConfigError(key, f"must be {self.bounds()}, got {show(value)}")
        return value

    def bounds(self) -> str:
        numbers = f"{self.minimum}..{self.maximum} ({self.why})"
        return numbers if self.auto is None else f"{AUTO} ({self.auto}), or {numbers}"

    def as_yaml(self, value: Any) -> object:
        return AUTO if value is None and self.auto is not None else value


@dataclass(frozen=True)
class Size(Integer):
    """A number of bytes: a bare integer, or a number with a unit (`64KiB`, `10MB`)."""

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> int | None:
        if isinstance(value, str) and not (self.auto is not None and value == AUTO):
            return _as_given(value, key, lambda: super(Size, self).read(
                _with_unit(value, key, parse_size, SIZE_EXAMPLES), key, given
            ))  # fmt: skip
        return super().read(value, key, given)


@dataclass(frozen=True)
class Milliseconds(Integer):
    """A duration in milliseconds: a bare integer, or a number with a unit (`30s`)."""

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> int | None:
        if isinstance(value, str):
            millis = _with_unit(value, key, parse_duration, DURATION_EXAMPLES) * 1000
            number = round(millis) if abs(millis - round(millis)) < 1e-6 else millis
            return _as_given(value, key, lambda: super(Milliseconds, self).read(number, key, given))
        return super().read(value, key, given)


@dataclass(frozen=True)
class Seconds(Kind):
    maximum: float
    why: str

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> float:
        if isinstance(value, str):
            text = value
            return _as_given(text, key, lambda: self.read(
                _with_unit(text, key, parse_duration, DURATION_EXAMPLES), key, given
            ))  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ConfigError(key, f"must be a positive number, got {show(value)}")
        if not value <= self.maximum:
            raise ConfigError(key, f"must be {self.bounds()}, got {show(value)}")
        return float(value)

    def bounds(self) -> str:
        return f"more than 0 and at most {_number(self.maximum)} ({self.why})"

    def as_yaml(self, value: Any) -> object:
        return _number(value)


class Fraction(Kind):
    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ConfigError(key, f"must be a number 0..1, got {show(value)}")
        return float(value)

    def bounds(self) -> str:
        return "0..1"


class Flag(Kind):
    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"must be true or false, got {show(value)}")
        return value


@dataclass(frozen=True)
class Text(Kind):
    pattern: str | None = None
    shape: str = ""  # what `pattern` allows, in words

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> str:
        text = nonempty_str(value, key)
        if self.pattern is not None and not re.fullmatch(self.pattern, text):
            raise ConfigError(key, f"must be {self.shape}, got {text!r}")
        return text

    def bounds(self) -> str:
        return self.shape


@dataclass(frozen=True)
class Choice(Kind):
    options: tuple[str, ...]

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> str:
        if value not in self.options:
            raise ConfigError(key, f"must be {self.bounds()}, got {show(value)}")
        return str(value)

    def bounds(self) -> str:
        return f"one of {', '.join(self.options)}"


class ReadableFile(Kind):
    """A path that must name a readable file (checked now, not at the first handshake)."""

    nullable = True

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> str:
        return readable_file(nonempty_str(value, key), key)


@dataclass(frozen=True)
class AddressKind(Kind):
    listen: bool = False  # a listen address may have port 0 (any free port)
    loopback: bool = False

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> Address:
        address = (
            value
            if isinstance(value, Address)
            else parse_address(value, key, allow_port_zero=self.listen)
        )
        if self.loopback and not _is_loopback(address.host):
            raise ConfigError(
                key, f"must be a loopback address (127.0.0.1, [::1], localhost), got {address}"
            )
        return address

    def bounds(self) -> str:
        return "a loopback HOST:PORT" if self.loopback else ""


@dataclass(frozen=True)
class Items(Kind):
    """A list, each item checked (and converted) by `each(item, "key[i]")`."""

    each: Callable[[object, str], Any]
    at_least_one: str | None = None  # the problem an empty list is, if it is one

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise ConfigError(key, f"must be a list, got {show(value)}")
        if not value and self.at_least_one is not None:
            raise ConfigError(key, self.at_least_one)
        return tuple(self.each(item, f"{key}[{i}]") for i, item in enumerate(value))


@dataclass(frozen=True)
class Section(Kind):
    """A mapping of the keys that `cls` declares; null or left out: its defaults."""

    cls: type
    nullable = True

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> Any:
        return read_section(self.cls, value, key)


@dataclass(frozen=True)
class Custom(Kind):
    """A key of a shape of its own: `parse(value, key)`, and `to_yaml` back."""

    parse: Callable[[object, str], Any]
    to_yaml: Callable[[Any], object]
    nullable = True

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> Any:
        return self.parse(value, key)

    def as_yaml(self, value: Any) -> object:
        return self.to_yaml(value)


@dataclass(frozen=True)
class SectionList(Kind):
    """A list of the sections `item` declares (`listeners`); `read` is the owner's."""

    item: type


@dataclass(frozen=True)
class Key:
    """What a field's metadata holds: the rest of the key's declaration."""

    kind: Kind
    doc: str
    example: object = NO_EXAMPLE  # shown where the file has no default to show
    missing: str = "is required"  # the problem a required key left out is
    owner: object = None  # the feature whose section this is (proxy/features.py)


# --- units: sizes and durations as people write them -------------------------------------

# Binary units are 1024s, decimal ones 1000s (IEC 80000-13, as Kubernetes reads Ki/K);
# any case (`64kib`), a space allowed before the unit.
SIZE_UNITS = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip
# Go's time.ParseDuration's units, from milliseconds to days; parts may follow each
# other, largest first (`1h30m`), as Go reads them.
DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
SIZE_EXAMPLES = "bytes, or with a unit: 64KiB, 10MB, 1GiB"
DURATION_EXAMPLES = "seconds, or with a unit: 500ms, 30s, 10m, 1h, 1d, 1h30m"
_NUMBER = r"(\d+(?:\.\d+)?|\.\d+)"
_SIZE_TEXT = re.compile(rf"{_NUMBER}\s*([a-zA-Z]+)")
_DURATION_PART = re.compile(rf"{_NUMBER}\s*(ms|s|m|h|d)", re.IGNORECASE)


def parse_size(text: str) -> int | None:
    """`64KiB` -> 65536, `10MB` -> 10000000, `1.5KiB` -> 1536; None if it is no size
    (or not a whole number of bytes)."""
    match = _SIZE_TEXT.fullmatch(text.strip())
    if match is None or match[2].lower() not in SIZE_UNITS:
        return None
    value = float(match[1]) * SIZE_UNITS[match[2].lower()]
    return int(value) if value.is_integer() else None


def parse_duration(text: str) -> float | None:
    """`30s` -> 30.0, `500ms` -> 0.5, `1h30m` -> 5400.0; None if it is no duration."""
    text = text.strip()
    total, pos, last = 0.0, 0, float("inf")
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            return None
        unit = DURATION_UNITS[match[2].lower()]
        if unit >= last:  # each part smaller than the one before: 1h30m, not 30m1h
            return None
        total, pos, last = total + float(match[1]) * unit, match.end(), unit
    return total if pos == len(text) and pos > 0 else None


def _as_given(text: str, key: str, read: Callable[[], Any]) -> Any:
    """`read()`, its error naming the value as written (`got '3GiB'`), not in bytes."""
    try:
        return read()
    except ConfigError as exc:
        if exc.key != key or "; got " in exc.problem:
            raise
        problem = exc.problem.rsplit(", got ", 1)[0]
        raise ConfigError(key, f"{problem}, got {text!r}") from None


def _with_unit(text: str, key: str, parse: Callable[[str], float | None], examples: str) -> float:
    value = parse(text)
    if value is None:
        raise ConfigError(key, f"must be {examples}; got {text!r}")
    return value


# --- declaring keys: the field specifiers ---------------------------------------------


def declare(
    kind: Kind,
    doc: str,
    default: object,
    *,
    example: object = NO_EXAMPLE,
    missing: str = "is required",
    default_factory: Any = dataclasses.MISSING,
    owner: object = None,
) -> Any:
    if not doc.strip():
        raise TypeError("every key has a doc")
    metadata = {_KEY: Key(kind, doc, example, missing, owner)}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def integer(*, default: int, at_most: tuple[int, str], doc: str, minimum: int = 1) -> int:
    return declare(Integer(minimum, *at_most), doc, default)


def size(*, default: int, at_most: tuple[int, str], doc: str, minimum: int = 1) -> int:
    """A number of bytes; `64KiB`, `10MB` and the like read too (parse_size)."""
    return declare(Size(minimum, *at_most), doc, default)


def milliseconds(*, default: int, at_most: tuple[int, str], doc: str, minimum: int = 1) -> int:
    """A duration in whole milliseconds; `30s`, `500ms` and the like read too."""
    return declare(Milliseconds(minimum, *at_most), doc, default)


def integer_or_auto(*, auto: str, at_most: tuple[int, str], doc: str) -> int | None:
    """An integer, or `auto` (the default, read as None): sized by the process as it
    starts, as `auto` says (haproxy sizes maxconn from the open-file limit so)."""
    return declare(Integer(1, *at_most, auto=auto), doc, None)


def seconds(*, default: float, at_most: tuple[float, str], doc: str) -> float:
    return declare(Seconds(*at_most), doc, default)


def fraction(*, default: float, doc: str) -> float:
    return declare(Fraction(), doc, default)


def flag(*, default: bool, doc: str) -> bool:
    return declare(Flag(), doc, default)


def text(
    *,
    default: str | None = REQUIRED,
    doc: str,
    pattern: tuple[str, str] | None = None,
    example: object = NO_EXAMPLE,
) -> Any:
    """A non-empty string; `pattern`: (regular expression, what it allows in words)."""
    kind = Text(*pattern) if pattern else Text()
    return declare(kind, doc, default, example=example)


def choice(*, default: str, options: tuple[str, ...], doc: str) -> str:
    return declare(Choice(options), doc, default)


def file_path(
    *,
    default: None = REQUIRED,
    doc: str,
    example: object = NO_EXAMPLE,
    missing: str = "is required",
) -> Any:
    """A file this process can read: certificates, keys, CAs, token files."""
    return declare(ReadableFile(), doc, default, example=example, missing=missing)


def address(
    *,
    default: Address | None = REQUIRED,
    doc: str,
    listen: bool = False,
    loopback: bool = False,
    example: object = NO_EXAMPLE,
) -> Any:
    return declare(AddressKind(listen, loopback), doc, default, example=example)


def items(
    *,
    default: tuple[Any, ...] | None = REQUIRED,
    each: Callable[[object, str], Any],
    doc: str,
    at_least_one: str | None = None,
    example: object = NO_EXAMPLE,
) -> Any:
    return declare(
        Items(each, at_least_one),
        doc,
        default,
        example=example,
        missing=at_least_one or "is required",
    )


def section(cls: type, *, default: object, doc: str, owner: object = None) -> Any:
    """A nested mapping: the keys `cls` declares. `owner`: the feature whose section it
    is, for a feature's section in the whole file (proxy/features.py)."""
    return declare(Section(cls), doc, default, owner=owner)


def custom(
    *,
    parse: Callable[[object, str], Any],
    to_yaml: Callable[[Any], object],
    doc: str,
    default: object = REQUIRED,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    return declare(Custom(parse, to_yaml), doc, default, default_factory=default_factory)


S = TypeVar("S")


@dataclass_transform(
    frozen_default=True,
    kw_only_default=True,
    field_specifiers=(
        integer, seconds, fraction, flag, text, choice, file_path, address, items,
        section, custom,
    ),
)  # fmt: skip
def config_section(cls: type[S]) -> type[S]:
    """A mapping of kafkalens.yaml: a frozen dataclass whose every field is a key."""
    made = dataclass(frozen=True, kw_only=True)(cls)
    for f in fields(made):  # type: ignore[arg-type]
        if _KEY not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name}: declare it with a kind (integer, text...)")
    return made


# --- item and value checks the declarations name ----------------------------------------


def join_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def show(value: object) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _number(value: float) -> float:
    """3600.0 as 3600, as the file and the messages write it."""
    return int(value) if float(value).is_integer() else value


def nonempty_str(item: object, key: str) -> str:
    if not isinstance(item, str) or not item:
        raise ConfigError(key, f"must be a non-empty string, got {show(item)}")
    return item


def host_name(item: object, key: str) -> str:
    return nonempty_str(item, key).lower()


def _is_loopback(host: str) -> bool:
    return host.lower() in LOOPBACK_HOSTS or host.startswith("127.")


def api_ref(item: object, key: str) -> str | int:
    """An api named like "Produce" or given by its key (0..32767)."""
    if isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= 32767:
        return item
    if isinstance(item, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", item):
        return item
    raise ConfigError(key, f"must be an api name like Produce or an api key, got {item!r}")


def upstream_address(item: object, key: str) -> Address:
    return parse_address(item, key)


def plain(value: object) -> object:
    """A value of the dataclasses as plain YAML data."""
    if isinstance(value, Address):
        return str(value)
    if isinstance(value, tuple | list):
        return [plain(item) for item in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


# --- views of the declarations ----------------------------------------------------------


@cache
def declared(cls: type) -> dict[str, tuple[dataclasses.Field[Any], Key]]:
    """The keys of section `cls` in declaration order: name -> (field, Key)."""
    return {f.name: (f, f.metadata[_KEY]) for f in fields(cls)}


def _subsections(kind: Kind) -> Iterator[tuple[str, type]]:
    if isinstance(kind, Section):
        yield "", kind.cls
    elif isinstance(kind, SectionList):
        yield "[]", kind.item


@cache
def section_schemas(root: type) -> dict[str, type]:
    """The section class of each mapping of a file whose top level `root` declares, by
    its path with list indices as [] ("listeners[].tls"), depth first in declaration
    order: so that an unknown key is named before any other problem."""
    return dict(_walk(root, ""))


def _walk(cls: type, path: str) -> Iterator[tuple[str, type]]:
    yield path, cls
    for name, (_f, key) in declared(cls).items():
        for suffix, inner in _subsections(key.kind):
            yield from _walk(inner, f"{join_path(path, name)}{suffix}")


@cache
def maxima(root: type) -> dict[str, tuple[float, str]]:
    """The largest value of every number in the file, and why, by key path (as above):
    past it a value no longer tunes a protection but switches it off."""
    return {
        join_path(section_path, name): (key.kind.maximum, key.kind.why)
        for section_path, cls in section_schemas(root).items()
        for name, (_f, key) in declared(cls).items()
        if isinstance(key.kind, Integer | Seconds)
    }


# --- the reader -------------------------------------------------------------------------

# The top section of the file being read, for the suggestion of an unknown key.
_ROOT: ContextVar[type | None] = ContextVar("kafkalens_config_root", default=None)


def read_document(root: type[S], data: object) -> S:
    """The section `root` from a whole document (its top level)."""
    return read_section(root, data, "", root=root)


def parse_address(text: object, key: str, *, allow_port_zero: bool = False) -> Address:
    """HOST:PORT or [IPV6]:PORT."""
    if not isinstance(text, str):
        raise ConfigError(key, f"must be HOST:PORT, got {text!r}")
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^:\s\[\]]+):(\d+)", text.strip())
    if not match:
        raise ConfigError(key, f"must be HOST:PORT, got {text!r}")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    lowest = 0 if allow_port_zero else 1
    if not lowest <= port <= 65535:
        raise ConfigError(key, f"port must be {lowest}..65535, got {port}")
    return Address(host, port)


def readable_file(path: str, key: str) -> str:
    """`path`, if it names a file this process may read; else ConfigError for `key`.
    For any file a config names (certificates, token files), at parse time."""
    if not os.path.isfile(path):
        what = "is a directory, not a file" if os.path.isdir(path) else "file not found"
        raise ConfigError(key, f"{what}: {path}")
    if not os.access(path, os.R_OK):
        raise ConfigError(key, f"file not readable: {path}")
    return path


def generic_key(key: str) -> str:
    """listeners[2].tls -> listeners[].tls: the path as SECTION_SCHEMAS and MAXIMA name it."""
    return re.sub(r"\[\d+\]", "[]", key)


def read_section(cls: type[S], data: object, path: str, *, root: type | None = None) -> S:
    """The one reader: every key `cls` declares, from the mapping `data` at `path`.
    Unknown keys first (a typo must not surface as a missing key, nor fall back to a
    default), then each key in declaration order, then the section's `_check`. `root`:
    the top section of the file `cls` is part of, whose other sections an unknown key
    is looked for in (by default, that of the document being read, if any)."""
    if root is None:
        return _read_section(cls, data, path)
    token = _ROOT.set(root)
    try:
        return _read_section(cls, data, path)
    finally:
        _ROOT.reset(token)


def _read_section(cls: type[S], data: object, path: str) -> S:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path or "(top level)", f"must be a mapping, got {show(data)}")
    keys = declared(cast(type, cls))
    for name in data:
        if name not in keys:
            hint = _suggest(str(name), set(keys), path)
            raise ConfigError(join_path(path, str(name)), f"unknown key{hint}")
    values: dict[str, Any] = {}
    for name, (f, key) in keys.items():
        where = join_path(path, name)
        value = data.get(name, ABSENT)
        if value is None and (key.kind.nullable or f.default is None):
            value = ABSENT
        if value is not ABSENT or key.kind.reads_absent:
            values[name] = key.kind.read(value, where, values)
        elif f.default is not dataclasses.MISSING:
            values[name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[name] = f.default_factory()
        else:
            raise ConfigError(where, key.missing)
    result = cls(**values)
    check: Callable[[str], None] | None = getattr(result, "_check", None)
    if check is not None:
        check(path)
    return result


def _suggest(name: str, known: set[str], path: str) -> str:
    """(did you mean X?): the same key in another section (put at the wrong level),
    else the nearest key of this one (misspelt)."""
    here = generic_key(path)
    root = _ROOT.get()
    for section_path, cls in (section_schemas(root) if root is not None else {}).items():
        if section_path != here and name in declared(cls):
            return f" (did you mean {section_path + '.' if section_path else ''}{name}?)"
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
