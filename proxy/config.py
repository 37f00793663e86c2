"""Every key of kafkalens.yaml, declared once, and the one reader of the file.

A key is declared where its value lives: a field of one of the frozen dataclasses below
(`Config` and its sections), made by a *kind* function that says what the key holds:

    max_frame_bytes: int = size(
        default=104857600,
        at_most=(INT32_MAX, "a Kafka frame's length is an int32"),
        doc="The largest frame read from a client or a broker.",
    )

That one declaration is the key's name, type, default (the dataclass default: `Limits()`
has it), bounds with their reason, and its documentation. The rest is derived from the
declarations: the reader (`parse_config`, one generic walk, `read_section`), the
unknown-key check and its suggestion, `SECTION_SCHEMAS` and `MAXIMA` (views for tests and
tools), `kafkalens proxy --help`'s built-in defaults, and config/kafkalens.yaml, which
`python -m proxy.config > config/kafkalens.yaml` writes (tests/proxy/test_config.py fails when
the file in the repository is not what it would write).

The kinds: `integer`, `size` (bytes: `64KiB`, `10MB` read too), `seconds` and
`milliseconds` (`500ms`, `30s`, `1h30m` read too: parse_size, parse_duration), and
`integer_or_auto` (`auto`, sized by the process: limits.max_connections) (a finite
`at_most` with its reason is required: past it a value no longer tunes a protection but
switches it off), `fraction` (0..1), `flag`,
`text`, `choice`, `file_path` (a file this process can read, checked as the file is parsed),
`address` (HOST:PORT), `items` (a list, each item checked by a function), `section` (a
nested mapping of keys: another decorated dataclass) and `custom` (a shape of its own:
gateway.broker_ports, kip1313.header_v3); `listeners` has its own (`listener_list`). A declaration
without `default=` is a required key. A rule across keys of one section is that
section's `_check` method, run once the section is read.

Adding a key is one field in its section plus its use, then regenerating the file:

    max_share_groups: int = integer(
        default=1000, at_most=(100_000, "each share group is a time series"),
        doc="Share groups with their own series; later ones count under group=\"other\".",
    )

Porting a key from a branch written against the older layout (a dataclass field, an
`s.integer("name", default)` line in a `_section()` function, a line in `MAXIMA`, and
text in config/kafkalens.yaml): the field becomes the declaration above, with the
`MAXIMA` line's bound and reason as `at_most=` and the yaml comment as `doc=`; the parse
line and the `MAXIMA` line go, and config/kafkalens.yaml is regenerated rather than
merged. A new section is a new `@config_section` dataclass and one `section(...)` field
in its parent; a cross-key check in a `_section()` function moves to its `_check`.

Errors: a `ConfigError` names the key path and what is wrong, e.g.
``limits.max_frame_bytes: must be a positive integer, got -1``; unknown keys are named
before anything else is checked, with the nearest known key suggested (the same key in
another section first: `max_frame_bytes` at the top level is `limits.max_frame_bytes`).
Command-line flags are applied on top of the file through `Overrides`.

Hand-written rather than a schema library: msgspec (already a pipeline extra) reports
``Expected `int` <= 2147483647 - at `$.limits.max_frame_bytes` `` and ``Object contains
unknown field `upstrem` ``, with no suggestion and no reason, and would turn these
dataclasses into Structs; pydantic v2 adds pydantic-core (~5 MB) to the image, prints
multi-line errors, and still needs the host:port, version-range and cross-key checks
written by hand. Both would need the same layer for suggestions and reasons that the
kinds below already are.

Checks of the machine rather than the file (log path writable, certificates loadable,
api names known, ports free) are in proxy/preflight.py.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, cast, dataclass_transform

import yaml

TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")
MODES = ("sidecar", "gateway")
ENFORCEMENTS = ("log", "reject")
TELEMETRY_ANSWERERS = ("proxy", "broker")
LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")
# KIP-714 / Kafka's record compression ids, by the names the config uses.
COMPRESSION_TYPES = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
INT32_MAX = 2**31 - 1
LOOPBACK_HOSTS = ("localhost", "::1")
_VERSION_SPEC = re.compile(r"^\s*(\d+)\s*(\+|-\s*(\d+))?\s*$")
_ABSENT: Any = object()  # a key the document does not give
_REQUIRED: Any = dataclasses.MISSING  # a declaration without default=
_NO_EXAMPLE: Any = object()
_KEY = "kafkalens.key"  # where a field's metadata holds its `Key`
AUTO = "auto"  # the value of a key the process sizes itself (integer_or_auto)
# limits.max_connections when `auto`: what the open-file limit holds, at most this many
AUTO_MAX_CONNECTIONS = 10_000


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


@dataclass(frozen=True)
class HeaderV3Rule:
    """Request header v3 for `api` (a name like "Metadata" or a key) from `min_version`."""

    api: str | int
    min_version: int
    max_version: int | None = None  # None: every version from min_version on


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
        return _plain(value)


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
            raise ConfigError(key, f"must be {what}, got {_show(value)}")
        if not value <= self.maximum:
            raise ConfigError(key, f"must be {self.bounds()}, got {_show(value)}")
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
            raise ConfigError(key, f"must be a positive number, got {_show(value)}")
        if not value <= self.maximum:
            raise ConfigError(key, f"must be {self.bounds()}, got {_show(value)}")
        return float(value)

    def bounds(self) -> str:
        return f"more than 0 and at most {_number(self.maximum)} ({self.why})"

    def as_yaml(self, value: Any) -> object:
        return _number(value)


class Fraction(Kind):
    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ConfigError(key, f"must be a number 0..1, got {_show(value)}")
        return float(value)

    def bounds(self) -> str:
        return "0..1"


class Flag(Kind):
    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"must be true or false, got {_show(value)}")
        return value


@dataclass(frozen=True)
class Text(Kind):
    pattern: str | None = None
    shape: str = ""  # what `pattern` allows, in words

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> str:
        text = _nonempty_str(value, key)
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
            raise ConfigError(key, f"must be {self.bounds()}, got {_show(value)}")
        return str(value)

    def bounds(self) -> str:
        return f"one of {', '.join(self.options)}"


class ReadableFile(Kind):
    """A path that must name a readable file (checked now, not at the first handshake)."""

    nullable = True

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> str:
        return readable_file(_nonempty_str(value, key), key)


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
            raise ConfigError(key, f"must be a list, got {_show(value)}")
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
class Key:
    """What a field's metadata holds: the rest of the key's declaration."""

    kind: Kind
    doc: str
    example: object = _NO_EXAMPLE  # shown where the file has no default to show
    missing: str = "is required"  # the problem a required key left out is


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


def _declare(
    kind: Kind,
    doc: str,
    default: object,
    *,
    example: object = _NO_EXAMPLE,
    missing: str = "is required",
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    if not doc.strip():
        raise TypeError("every key has a doc")
    metadata = {_KEY: Key(kind, doc, example, missing)}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def integer(*, default: int, at_most: tuple[int, str], doc: str, minimum: int = 1) -> int:
    return _declare(Integer(minimum, *at_most), doc, default)


def size(*, default: int, at_most: tuple[int, str], doc: str, minimum: int = 1) -> int:
    """A number of bytes; `64KiB`, `10MB` and the like read too (parse_size)."""
    return _declare(Size(minimum, *at_most), doc, default)


def milliseconds(*, default: int, at_most: tuple[int, str], doc: str, minimum: int = 1) -> int:
    """A duration in whole milliseconds; `30s`, `500ms` and the like read too."""
    return _declare(Milliseconds(minimum, *at_most), doc, default)


def integer_or_auto(*, auto: str, at_most: tuple[int, str], doc: str) -> int | None:
    """An integer, or `auto` (the default, read as None): sized by the process as it
    starts, as `auto` says (haproxy sizes maxconn from the open-file limit so)."""
    return _declare(Integer(1, *at_most, auto=auto), doc, None)


def seconds(*, default: float, at_most: tuple[float, str], doc: str) -> float:
    return _declare(Seconds(*at_most), doc, default)


def fraction(*, default: float, doc: str) -> float:
    return _declare(Fraction(), doc, default)


def flag(*, default: bool, doc: str) -> bool:
    return _declare(Flag(), doc, default)


def text(
    *,
    default: str | None = _REQUIRED,
    doc: str,
    pattern: tuple[str, str] | None = None,
    example: object = _NO_EXAMPLE,
) -> Any:
    """A non-empty string; `pattern`: (regular expression, what it allows in words)."""
    kind = Text(*pattern) if pattern else Text()
    return _declare(kind, doc, default, example=example)


def choice(*, default: str, options: tuple[str, ...], doc: str) -> str:
    return _declare(Choice(options), doc, default)


def file_path(
    *,
    default: None = _REQUIRED,
    doc: str,
    example: object = _NO_EXAMPLE,
    missing: str = "is required",
) -> Any:
    """A file this process can read: certificates, keys, CAs, token files."""
    return _declare(ReadableFile(), doc, default, example=example, missing=missing)


def address(
    *,
    default: Address | None = _REQUIRED,
    doc: str,
    listen: bool = False,
    loopback: bool = False,
    example: object = _NO_EXAMPLE,
) -> Any:
    return _declare(AddressKind(listen, loopback), doc, default, example=example)


def items(
    *,
    default: tuple[Any, ...] | None = _REQUIRED,
    each: Callable[[object, str], Any],
    doc: str,
    at_least_one: str | None = None,
    example: object = _NO_EXAMPLE,
) -> Any:
    return _declare(
        Items(each, at_least_one),
        doc,
        default,
        example=example,
        missing=at_least_one or "is required",
    )


def section(cls: type, *, default: object, doc: str) -> Any:
    return _declare(Section(cls), doc, default)


def custom(
    *,
    parse: Callable[[object, str], Any],
    to_yaml: Callable[[Any], object],
    doc: str,
    default: object = _REQUIRED,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    return _declare(Custom(parse, to_yaml), doc, default, default_factory=default_factory)


def listener_list(*, default: tuple[ListenerConfig, ...], doc: str) -> Any:
    return _declare(Listeners(default), doc, default)


S = TypeVar("S")


@dataclass_transform(
    frozen_default=True,
    kw_only_default=True,
    field_specifiers=(
        integer, seconds, fraction, flag, text, choice, file_path, address, items,
        section, custom, listener_list,
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


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _show(value: object) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _number(value: float) -> float:
    """3600.0 as 3600, as the file and the messages write it."""
    return int(value) if float(value).is_integer() else value


def _nonempty_str(item: object, key: str) -> str:
    if not isinstance(item, str) or not item:
        raise ConfigError(key, f"must be a non-empty string, got {_show(item)}")
    return item


def _host_name(item: object, key: str) -> str:
    return _nonempty_str(item, key).lower()


def _is_loopback(host: str) -> bool:
    return host.lower() in LOOPBACK_HOSTS or host.startswith("127.")


def _api_ref(item: object, key: str) -> str | int:
    """An api named like "Produce" or given by its key (0..32767)."""
    if isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= 32767:
        return item
    if isinstance(item, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", item):
        return item
    raise ConfigError(key, f"must be an api name like Produce or an api key, got {item!r}")


def _metric_prefix(item: object, key: str) -> str:
    """A metric name prefix; "" subscribes to every metric (KIP-714)."""
    if not isinstance(item, str):
        raise ConfigError(key, f"must be a metric name prefix (a string), got {_show(item)}")
    return item


def _compression_type(item: object, key: str) -> str:
    if item not in COMPRESSION_TYPES:
        raise ConfigError(key, f"must be one of {', '.join(COMPRESSION_TYPES)}, got {_show(item)}")
    return str(item)


def _upstream(item: object, key: str) -> Address:
    return parse_address(item, key)


def _broker_ports(raw: object, key: str) -> dict[int, int]:
    if not isinstance(raw, dict):
        raise ConfigError(key, f"must be a mapping node_id: port, got {_show(raw)}")
    ports: dict[int, int] = {}
    for node, port in raw.items():
        where = f"{key}.{node}"
        if isinstance(node, bool) or not isinstance(node, int) or node < 0:
            raise ConfigError(where, f"node id must be an integer >= 0, got {node!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ConfigError(where, f"port must be 1..65535, got {port!r}")
        ports[node] = port
    return ports


def _header_v3(raw: object, key: str) -> tuple[HeaderV3Rule, ...]:
    if not isinstance(raw, dict):
        raise ConfigError(key, f"must be a mapping api: versions, got {_show(raw)}")
    return tuple(_header_v3_rule(api, spec, f"{key}.{api}") for api, spec in raw.items())


def _header_v3_rule(api: object, spec: object, key: str) -> HeaderV3Rule:
    """`spec`: "3+" (3 and later), "3-5", "3" or 3."""
    name = _api_ref(api, key)
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return HeaderV3Rule(name, spec, spec)
    match = _VERSION_SPEC.match(spec) if isinstance(spec, str) else None
    if match is None:
        raise ConfigError(key, f'must be versions like "3+", "3-5" or 3, got {spec!r}')
    low = int(match.group(1))
    if match.group(2) == "+":
        return HeaderV3Rule(name, low, None)
    high = int(match.group(3)) if match.group(3) else low
    if high < low:
        raise ConfigError(key, f"version range {spec!r} is empty")
    return HeaderV3Rule(name, low, high)


def _header_v3_yaml(rules: tuple[HeaderV3Rule, ...]) -> dict[object, object]:
    def versions(rule: HeaderV3Rule) -> object:
        if rule.max_version is None:
            return f"{rule.min_version}+"
        if rule.max_version == rule.min_version:
            return rule.min_version
        return f"{rule.min_version}-{rule.max_version}"

    return {rule.api: versions(rule) for rule in rules}


# --- the keys ---------------------------------------------------------------------------


@config_section
class ListenerTLS:
    cert: str = file_path(
        doc="the server certificate (PEM, with its chain)",
        example="/etc/kafkalens/tls/server.crt",
        missing="is required for TLS",
    )
    key: str = file_path(
        doc="its private key (PEM)",
        example="/etc/kafkalens/tls/server.key",
        missing="is required for TLS",
    )
    client_ca: str | None = file_path(
        default=None,
        doc="verify client certificates with this CA",
        example="/etc/kafkalens/tls/ca.crt",
    )
    require_client_cert: bool = flag(
        default=False, doc="refuse a client without a certificate client_ca signed"
    )
    min_version: str = choice(
        default="TLSv1.2", options=TLS_VERSIONS, doc="TLSv1.2 or TLSv1.3; older is refused"
    )

    def _check(self, path: str) -> None:
        if self.require_client_cert and self.client_ca is None:
            raise ConfigError(f"{path}.client_ca", "is required when require_client_cert is true")


@config_section
class ListenerConfig:
    name: str = text(
        doc="names the listener in metrics labels and log lines",
        pattern=(r"[A-Za-z0-9_.-]{1,64}", "1-64 of A-Z a-z 0-9 _ . -"),
    )
    listen: Address = address(
        doc="the address clients connect to (port 0: any free port)", listen=True
    )
    upstream: Address = address(doc="the broker this listener forwards to")
    tls: ListenerTLS | None = section(
        ListenerTLS, default=None, doc="Client-side TLS termination (omit for plaintext):"
    )


@config_section
class GatewayConfig:
    bootstrap_listen: Address = address(
        default=Address("0.0.0.0", 9092), doc="clients bootstrap here", listen=True
    )
    bootstrap_servers: tuple[Address, ...] = items(
        each=_upstream,
        doc="the cluster's brokers, asked for its metadata",
        at_least_one="must list at least one HOST:PORT",
        example=["broker-0:9092", "broker-1:9092"],
    )
    advertised_host: str = text(
        doc="host put into rewritten node addresses",
        example="kafkalens.example.com",
    )
    listen_host: str = text(default="0.0.0.0", doc="host the per-node listeners bind")
    broker_port_base: int = integer(
        default=9100, minimum=0, at_most=(65535, "a TCP port"),
        doc="broker node N is served on port base + N",
    )  # fmt: skip
    broker_ports: Mapping[int, int] = custom(
        parse=_broker_ports,
        to_yaml=dict,
        default_factory=dict,
        doc="or an explicit map, e.g. {0: 9200, 1: 9201}",
    )
    controller_bootstrap_listen: Address | None = address(
        default=None,
        doc="clients bootstrap on controllers here (KIP-919, --bootstrap-controller)",
        listen=True,
        example="0.0.0.0:9093",
    )
    controller_bootstrap_servers: tuple[Address, ...] = items(
        default=(),
        each=_upstream,
        doc="the cluster's controllers, for that bootstrap",
        example=["controller-0:9093", "controller-1:9093"],
    )
    controller_port_base: int = integer(
        default=9300, minimum=0, at_most=(65535, "a TCP port"),
        doc="controller node N is served on port base + N",
    )  # fmt: skip
    controller_ports: Mapping[int, int] = custom(
        parse=_broker_ports,
        to_yaml=dict,
        default_factory=dict,
        doc="or an explicit map, e.g. {0: 9400, 1: 9401}",
    )
    max_nodes: int = integer(
        default=1000,
        at_most=(65535, "each node is a listener on a port of its own"),
        doc="brokers, and controllers, served at most; one named past it is not",
    )
    route_check_timeout_seconds: float = seconds(
        default=5.0,
        at_most=(60, "a route waits for it to open or move"),
        doc="a node's new address answers ApiVersions within this, or no route goes there",
    )
    tls: ListenerTLS | None = section(
        ListenerTLS, default=None, doc="clients' side of the bootstrap and every node listener"
    )

    def _check(self, path: str) -> None:
        if (self.controller_bootstrap_listen is None) != (not self.controller_bootstrap_servers):
            which = (
                "controller_bootstrap_servers"
                if self.controller_bootstrap_listen is not None
                else "controller_bootstrap_listen"
            )
            raise ConfigError(
                f"{path}.{which}",
                "controller_bootstrap_listen and controller_bootstrap_servers go together",
            )
        if self.controller_port_base == self.broker_port_base:
            raise ConfigError(
                f"{path}.controller_port_base",
                f"must differ from broker_port_base ({self.broker_port_base}): a node that"
                " is broker and controller would need one port for both",
            )
        owner: dict[int, str] = {}
        for kind, ports in (("broker_ports", self.broker_ports),
                            ("controller_ports", self.controller_ports)):  # fmt: skip
            for node, port in ports.items():
                if port in owner:
                    raise ConfigError(
                        f"{path}.{kind}.{node}", f"port {port} is {owner[port]}'s already"
                    )
                owner[port] = f"{kind}.{node}"


@config_section
class UpstreamTLS:
    ca: str | None = file_path(
        default=None,
        doc="the brokers' CA (default: the system's)",
        example="/etc/kafkalens/tls/ca.crt",
    )
    cert: str | None = file_path(
        default=None, doc="optional client certificate", example="/etc/kafkalens/tls/client.crt"
    )
    key: str | None = file_path(
        default=None, doc="its private key", example="/etc/kafkalens/tls/client.key"
    )
    check_hostname: bool = flag(default=True, doc="the broker's certificate must name it")
    server_hostname: str | None = text(
        default=None, doc="override the name checked (default: upstream host)"
    )
    min_version: str = choice(
        default="TLSv1.2", options=TLS_VERSIONS, doc="TLSv1.2 or TLSv1.3; older is refused"
    )

    def _check(self, path: str) -> None:
        if (self.cert is None) != (self.key is None):
            which = "key" if self.key is None else "cert"
            raise ConfigError(f"{path}.{which}", "cert and key go together")


@config_section
class MetricsConfig:
    listen: Address = address(
        default=Address("0.0.0.0", 9180),
        doc="/metrics, /livez (/healthz), /readyz (and /clients with clients_token_file)",
        listen=True,
    )
    max_label_values: int = integer(
        default=50,
        at_most=(10_000, "each value is a time series of every labelled metric"),
        doc="Client-controlled label values (software name/version pairs) are capped to the"
        ' first N seen; the rest are reported as "other". Upstream addresses (gateway mode,'
        ' named by brokers) get max(N, 64). Api versions the codec does not know are "other".',
    )
    max_error_series: int = integer(
        default=256,
        at_most=(10_000, "each (api, error) pair is a time series"),
        doc="(api, error) pairs with their own series; later pairs, and error codes that are"
        ' not Kafka\'s, count under error="other".',
    )
    max_connections: int = integer(
        default=32,
        at_most=(10_000, "each open admin connection holds a socket and a buffer"),
        doc="Connections open at once on each admin listener. A connection past this (or past"
        " max_connections_per_address) takes the place of the oldest one still waiting for its"
        " request (of its own address, past the per-address limit), which is answered 503:"
        " idle connections cannot shut probes and scrapes out. Only if none is waiting is the"
        " newcomer answered 503. Counted in"
        ' kafkalens_admin_refused_total{reason="too_many_connections"|"per_address_limit"}.',
    )
    max_connections_per_address: int = integer(
        default=8,
        at_most=(10_000, "each open admin connection holds a socket and a buffer"),
        doc="Of those, open at once from one client address (an IPv6 /64).",
    )
    clients_token_file: str | None = file_path(
        default=None,
        doc='/clients on `listen`, for requests with "Authorization: Bearer <token>", the token'
        " being this file's content (surrounding whitespace ignored). The file is read again"
        " when it changes (a rotated Kubernetes Secret); unreadable or empty: refused.",
    )
    clients_listen: Address | None = address(
        default=None,
        loopback=True,
        listen=True,
        doc="/clients (and the other endpoints) on a second listener, without a token. Must be"
        " a loopback address, e.g. 127.0.0.1:9181; it only answers Host headers naming the"
        " loopback address it was reached on, localhost or allowed_hosts.",
    )
    allowed_hosts: tuple[str, ...] | None = items(
        default=None,
        each=_host_name,
        doc="Host header names (without port) the admin port answers besides the address a"
        " request came in on and localhost, e.g. [kafkalens.monitoring.svc]; others get 421"
        " (DNS rebinding). [] allows those two only; null answers any Host on `listen`.",
    )
    tls: ListenerTLS | None = section(
        ListenerTLS,
        default=None,
        doc="HTTPS on `listen` (clients_listen stays plain HTTP on loopback):",
    )


@config_section
class LogConfig:
    format: str = choice(
        default="auto",
        options=LOG_FORMATS,
        doc="json: one JSON object a line (ts, level, msg, worker, then the event's fields);"
        " console: for a person at a terminal; auto: console when stderr is a terminal,"
        " else json",
    )
    level: str = choice(
        default="info",
        options=LOG_LEVELS,
        doc="the least severe lines written: debug, info (start, upstream reachability,"
        " stop), warning, error",
    )


@config_section
class RequestLogConfig:
    path: str = text(
        default="-",
        doc='"-" for stdout, or a file (kafkalens proxy creates its folder if missing)',
    )
    max_bytes: int = size(
        default=104857600,
        at_most=(2**40, "1 TiB: the size a log file is rotated at"),
        doc="rotate past this size: requests.log -> requests.log.1 ...",
    )
    backups: int = integer(
        default=5, minimum=0, at_most=(1000, "every rotation renames each backup"),
        doc="rotated files kept",
    )  # fmt: skip
    flush_interval_seconds: float = seconds(
        default=0.5,
        at_most=(3600, "1 hour: lines wait in memory meanwhile"),
        doc="a line is in the file within this long, traffic or not",
    )
    max_queued_bytes: int = size(
        default=16777216,
        at_most=(2**32, "4 GiB held in memory"),
        doc="lines waiting for a slow or failing disk; beyond: dropped, counted",
    )
    sample_rate: float = fraction(
        default=1.0, doc="fraction of successful requests logged (errors always are)"
    )
    apis: tuple[str | int, ...] = items(
        default=(), each=_api_ref, doc="only these apis (names like Produce, or keys); [] = all"
    )
    errors_only: bool = flag(default=False, doc="only requests answered with an error")
    record_detail: bool = flag(
        default=False,
        doc="iterate records (decompressing) for per-record stats and header keys",
    )
    header_value_allowlist: tuple[str, ...] = items(
        default=("traceparent", "tracestate"),
        each=_nonempty_str,
        doc="record headers whose values are logged (the others: keys only)",
    )
    max_string_length: int = integer(
        default=256,
        at_most=(1_048_576, "1 MiB: client strings are copied into every line"),
        doc="client-controlled strings are cut to this many characters",
    )


@config_section
class Limits:
    max_frame_bytes: int = size(
        default=104857600,
        at_most=(INT32_MAX, "a Kafka frame's length is an int32"),
        doc="the largest frame read from a client or a broker",
    )
    max_frame_bytes_before_auth: int = integer(
        default=1048576,
        at_most=(INT32_MAX, "a Kafka frame's length is an int32"),
        doc="before SASL authentication completes (at most max_frame_bytes)",
    )
    max_connections: int | None = integer_or_auto(
        auto=f"as many as the open-file limit holds, at most {AUTO_MAX_CONNECTIONS}",
        at_most=(1_048_576, "Linux's default nr_open, and each connection needs two sockets"),
        doc="client connections open at once; the soft open-file limit is raised to the"
        " hard one at start, each connection takes two descriptors (client and broker), and"
        " a number the limit cannot hold is warned of at start",
    )
    max_connections_per_ip: int = integer(
        default=1000, at_most=(1_048_576, "Linux's default nr_open"), doc="of those, from one IP"
    )
    max_in_flight_requests: int = integer(
        default=100,
        at_most=(1_000_000, "librdkafka's own maximum per connection"),
        doc="per connection; reading from the client waits beyond",
    )
    request_timeout_seconds: float = seconds(
        default=600.0,
        at_most=(86400, "1 day: a stuck broker must be let go some time"),
        doc="unanswered this long: broker stuck, close; keep above clients'"
        " max.poll.interval.ms (JoinGroup)",
    )
    connect_timeout_seconds: float = seconds(
        default=10.0, at_most=(3600, "1 hour"), doc="to the upstream broker"
    )
    idle_timeout_seconds: float = seconds(
        default=600.0,
        at_most=(86400, "1 day: a dead peer must be let go some time"),
        doc="no bytes either way",
    )
    frame_timeout_seconds: float = seconds(
        default=30.0,
        at_most=(3600, "1 hour: a slow sender holds a frame buffer meanwhile"),
        doc="a started frame must complete within this",
    )
    shutdown_grace_seconds: float = seconds(
        default=25.0,
        at_most=(3600, "1 hour: orchestrators kill a stopping process long before"),
        doc="SIGTERM: drain in-flight requests this long",
    )
    decompression_limit_bytes: int = size(
        default=67108864,
        at_most=(2**32, "4 GiB: a batch is inflated in memory"),
        doc="per batch, when record_detail is on",
    )
    observe_whole_frame_bytes: int = size(
        default=262144,
        minimum=0,
        at_most=(2**30, "1 GiB: a frame assembled whole costs its size per direction"),
        doc="Frames the request log reads are assembled whole up to this size (the most a"
        " direction keeps for it); larger ones are decoded as they stream past, never kept.",
    )
    observe_seconds_per_read: float = seconds(
        default=0.1,
        at_most=(10, "10 s: decoding one read stalls every connection of the process"),
        doc="Decoding one read of such a frame may take this long; past it the frame is a"
        " decode error (counted) and the rest goes on unparsed: the event loop is never held"
        " longer.",
    )
    observe_max_field_bytes: int = size(
        default=65536,
        at_most=(2**30, "1 GiB: a field is held whole while it is parsed"),
        doc="Of a frame decoded as it streams: the most one field (a string, bytes, a tagged"
        " field) may hold while it is parsed (past it: a decode error).",
    )
    observe_max_elements: int = integer(
        default=20000,
        at_most=(10_000_000, "each decoded element costs memory per frame"),
        doc="Of a frame decoded as it streams: the most array elements decoded over the frame"
        " (past it they are read and dropped, counted in"
        " kafkalens_observed_elements_dropped_total and the line's observed_elements_dropped).",
    )
    socket_buffer_bytes: int = size(
        default=1048576,
        minimum=0,
        at_most=(2**28, "256 MiB: the kernel holds this much per socket"),
        doc="SO_SNDBUF and SO_RCVBUF of both sockets of a connection (the kernel doubles it):"
        " bounds the kernel's buffers as the proxy's own are bounded. 0: the kernel's"
        " autotuned sizes (up to net.ipv4.tcp_wmem/tcp_rmem max, MBs per socket). 256 KiB"
        " cost ~20 % more proxy CPU per GB on big frames than 1 MiB (bench.proxy.big_frames).",
    )

    def _check(self, path: str) -> None:
        if self.max_frame_bytes_before_auth > self.max_frame_bytes:
            raise ConfigError(
                f"{path}.max_frame_bytes_before_auth",
                f"must not exceed limits.max_frame_bytes ({self.max_frame_bytes}),"
                f" got {self.max_frame_bytes_before_auth}",
            )


@config_section
class LagConfig:
    """Consumer lag, share groups and topic traffic from the Fetch, ShareFetch,
    ShareAcknowledge, group heartbeat, OffsetCommit and Produce exchanges seen."""

    enabled: bool = flag(default=True, doc="off: none of the metrics and log fields above")
    max_topics: int = integer(
        default=1000,
        at_most=(100_000, "each (group, topic) pair is a time series"),
        doc="(group, topic) pairs of the per-topic lag and share counters; topics of traffic."
        " Past this cap (and"
        ' each below) the label values are "other" (summed), counted in'
        " kafkalens_lag_series_dropped_total{kind}; the per-topic lag sums every partition.",
    )
    max_partitions: int = integer(
        default=10000,
        at_most=(1_000_000, "each partition of each kind is a time series"),
        doc="per-partition series of each kind; traffic label sets",
    )
    max_clients: int = integer(
        default=1000,
        at_most=(100_000, "each client is a label value of every partition it reads"),
        doc="client label values of per-partition lag; principals of traffic",
    )
    max_tracked: int = integer(
        default=200000,
        at_most=(10_000_000, "each tracked partition costs about 200 bytes per table"),
        doc='partitions kept in memory per table (kind "tracked" past it)',
    )
    max_logged_partitions: int = integer(
        default=1000,
        minimum=0,
        at_most=(1_000_000, "each is an object in a request log line"),
        doc="Elements of one log line's positions, committed, acquired, acknowledgements,"
        " fetch_partitions, forgotten_partitions, assignment and owned_partitions lists (the"
        " rest counted in the line and in kafkalens_log_lists_truncated_total{field})",
    )
    max_logged_ranges: int = integer(
        default=1000,
        minimum=0,
        at_most=(1_000_000, "each is an array in a request log line"),
        doc="share-group offset ranges listed in one log line (the rest counted)",
    )
    max_range_offsets: int = integer(
        default=1_000_000,
        at_most=(2**31 - 1, "a broker locks at most a few thousand records of a partition"),
        doc="An acquired or acknowledged offset range longer than this is malformed: not"
        ' counted (kafkalens_share_ranges_invalid_total{reason="too_long"})',
    )
    idle_expiry_seconds: float = seconds(
        default=1800.0,
        at_most=(7 * 86400, "1 week: a consumer that left must be let go some time"),
        doc="A consumer's series goes this long after its last fetch of the partition, a"
        " group's committed lag this long after its last commit: longer than the lag alerts"
        " need (deploy/prometheus/alerts.yml: 20-30 minutes of growth) to page on a consumer"
        " that stopped altogether while its producers go on.",
    )


@config_section
class Kip1313Config:
    enforcement: str = choice(
        default="log",
        options=ENFORCEMENTS,
        doc="log (warning + counter) | reject (INVALID_REQUEST, error 42)",
    )
    header_v3: tuple[HeaderV3Rule, ...] = custom(
        parse=_header_v3,
        to_yaml=_header_v3_yaml,
        default=(),
        doc="(api, versions) that use request header v3 beyond the KIP's own three RPCs, for"
        " brokers that adopt it for every RPC. A version past the schema's newest reuses the"
        ' newest body. Example: {DeleteGroups: "3+", Metadata: "14+"}',
    )


@config_section
class TelemetryLogConfig:
    """The telemetry log: one JSON line per pushed data point (None: no file)."""

    path: str | None = text(default=None, doc='a file, "-" for stdout, or null (off)')
    max_bytes: int = size(
        default=104857600,
        at_most=(2**40, "1 TiB: the size a log file is rotated at"),
        doc="rotate past this size",
    )
    backups: int = integer(
        default=5, minimum=0, at_most=(1000, "every rotation renames each backup"),
        doc="rotated files kept",
    )  # fmt: skip
    flush_interval_seconds: float = seconds(
        default=1.0,
        at_most=(3600, "1 hour: lines wait in memory meanwhile"),
        doc="a line is in the file within this long",
    )
    max_queued_bytes: int = size(
        default=16777216,
        at_most=(2**32, "4 GiB held in memory"),
        doc="lines waiting for the disk; beyond: dropped, counted",
    )


@config_section
class TelemetryConfig:
    """KIP-714 client telemetry (proxy/observe/telemetry/pushes.py)."""

    observe: bool = flag(default=True, doc="decode the PushTelemetry requests forwarded")
    collect: bool = flag(default=False, doc="the proxy answers telemetry itself")
    answer: str = choice(
        default="proxy",
        options=TELEMETRY_ANSWERERS,
        doc="collect mode, broker that supports telemetry: who answers",
    )
    metrics: tuple[str, ...] = items(
        default=("org.apache.kafka.",),
        each=_metric_prefix,
        doc='metric name prefixes requested; [""] = every metric',
    )
    push_interval_ms: int = milliseconds(
        default=30000,
        minimum=100,
        at_most=(86_400_000, "1 day: a series expires a few intervals after its last push"),
        doc="the interval the proxy's subscription asks clients to push at",
    )
    compression_types: tuple[str, ...] = items(
        default=("zstd", "lz4", "gzip", "snappy"),
        each=_compression_type,
        doc="accepted for pushes (none always is)",
    )
    max_push_bytes: int = size(
        default=1048576,
        at_most=(64 * 2**20, "64 MiB: a push is held whole while it is decoded"),
        doc="a larger push is not decoded (counted); collect: TelemetryMaxBytes",
    )
    max_decompressed_bytes: int = size(
        default=8388608,
        at_most=(2**30, "1 GiB: a push is inflated in memory"),
        doc="a push inflating past this is not decoded (counted)",
    )
    max_instances: int = integer(
        default=1000,
        at_most=(1_000_000, "each client instance holds its latest values"),
        doc="client instances with series; more are dropped, counted",
    )
    max_series: int = integer(
        default=20000,
        at_most=(10_000_000, "each series is a line of /metrics"),
        doc="client metric series in all; more are dropped, counted",
    )
    max_points_per_push: int = integer(
        default=2000,
        at_most=(1_000_000, "a push's points are read on the event loop, ~20 us each"),
        doc="read of one push; more are counted",
    )
    max_attributes: int = integer(
        default=16,
        minimum=0,
        at_most=(1000, "each attribute is a label of a series"),
        doc="data point attributes kept as labels; more are dropped",
    )
    expire_after_intervals: int = integer(
        default=3,
        at_most=(1000, "series of gone clients linger this many push intervals"),
        doc="series of a client that stopped pushing go after this many intervals",
    )
    log: TelemetryLogConfig = section(
        TelemetryLogConfig,
        default=TelemetryLogConfig(),
        doc='One JSON line per pushed data point (event "client_metric"), rotated and'
        " reopened on SIGHUP like the request log.",
    )


DEFAULT_LISTENER = ListenerConfig(
    name="plaintext", listen=Address("0.0.0.0", 9092), upstream=Address("127.0.0.1", 19092)
)


@dataclass(frozen=True)
class Listeners(Kind):
    """`listeners`: sidecar mode's list of listener sections (left out: `default`);
    gateway mode has none."""

    default: tuple[ListenerConfig, ...]
    reads_absent = True

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> tuple[ListenerConfig, ...]:
        required = given["mode"] == "sidecar"
        if value is _ABSENT or value is None:
            return self.default if required else ()
        if not required:
            raise ConfigError(key, "is for mode sidecar; gateway mode uses `gateway`")
        if not isinstance(value, list) or not value:
            raise ConfigError(key, f"must be a non-empty list, got {_show(value)}")
        found = tuple(
            read_section(ListenerConfig, item, f"{key}[{i}]") for i, item in enumerate(value)
        )
        _check_unique(found)
        return found


def _check_unique(listeners: tuple[ListenerConfig, ...]) -> None:
    names: set[str] = set()
    addresses: set[Address] = set()
    for i, listener in enumerate(listeners):
        if listener.name in names:
            raise ConfigError(f"listeners[{i}].name", f"duplicate listener name {listener.name!r}")
        names.add(listener.name)
        if listener.listen in addresses and listener.listen.port != 0:
            raise ConfigError(f"listeners[{i}].listen", f"address {listener.listen} used twice")
        addresses.add(listener.listen)


@config_section
class Config:
    mode: str = choice(
        default="sidecar",
        options=MODES,
        doc="sidecar: each listener forwards to one upstream broker, frames pass unchanged"
        " (the broker advertises the sidecar's address itself).\n"
        "gateway: one bootstrap listener for a whole cluster plus one listener per broker;"
        " broker addresses in responses are rewritten to the proxy's.",
    )
    listeners: tuple[ListenerConfig, ...] = listener_list(
        default=(DEFAULT_LISTENER,),
        doc="Sidecar listeners: client-facing address -> one upstream broker.",
    )
    gateway: GatewayConfig | None = section(
        GatewayConfig,
        default=None,
        doc="Gateway mode (mode: gateway) uses this instead of `listeners`.",
    )
    upstream_tls: UpstreamTLS | None = section(
        UpstreamTLS, default=None, doc="TLS from the proxy to the brokers (omit for plaintext)."
    )
    metrics: MetricsConfig = section(
        MetricsConfig,
        default=MetricsConfig(),
        doc="The admin port: /metrics, /livez (/healthz), /readyz (open, for Prometheus and Kubernetes)"
        " and /clients (every connection's address, client id and SASL principal: off unless"
        " clients_token_file or clients_listen is set).",
    )
    log: LogConfig = section(
        LogConfig,
        default=LogConfig(),
        doc="The proxy's own log, on stderr (the request log is apart: a file, or stdout as"
        ' "-"): a line at start (version, listeners, upstreams, config, request log, metrics),'
        " each upstream's reachability as it changes (with the reason, and how long it was"
        " down), the drain and stop, and warnings.",
    )
    request_log: RequestLogConfig = section(
        RequestLogConfig,
        default=RequestLogConfig(),
        doc="One JSON line per request, to stdout or to a file rotated by size (max_bytes,"
        " backups) and reopened on SIGHUP (logrotate: deploy/logrotate/kafkalens).",
    )
    limits: Limits = section(
        Limits,
        default=Limits(),
        doc="What a client or a broker can make the proxy hold, and how long it waits.",
    )
    kip1313: Kip1313Config = section(
        Kip1313Config,
        default=Kip1313Config(),
        doc="KIP-1313: a connection whose first request used request header v3 must carry the"
        " same non-zero client instance id on every later request (SaslHandshake excepted).",
    )
    telemetry: TelemetryConfig = section(
        TelemetryConfig,
        default=TelemetryConfig(),
        doc="KIP-714 client telemetry (clients' own metrics: librdkafka >= 2.5, Java >= 3.7)."
        " observe: decode the PushTelemetry requests the proxy forwards (when the broker hands"
        " out subscriptions). collect: the proxy answers GetTelemetrySubscriptions and"
        " PushTelemetry itself (and adds them to the ApiVersions it returns), so every client"
        " gets a client instance id and its metrics reach /metrics on any broker. State is per"
        " worker process (workers > 1: each keeps the clients that pushed to it).",
    )
    workers: int = integer(
        default=1,
        at_most=(
            256,
            "each worker is a whole process; fixed rather than per core so a file validates"
            " alike on every machine",
        ),
        doc="Worker processes sharing the listen ports (SO_REUSEPORT) to use more than one core.",
    )
    lag: LagConfig = section(
        LagConfig,
        default=LagConfig(),
        doc="Consumer lag and topic traffic from the Fetch, OffsetCommit and Produce the proxy"
        ' forwards (README "Consumer lag and topic traffic"): the'
        " kafkalens_consumer_lag_records, kafkalens_committed_lag_records,"
        " kafkalens_follower_lag_records and kafkalens_topic_* metrics, and the request log's"
        ' "positions" and "committed" fields.',
    )

    def _check(self, path: str) -> None:
        if self.mode == "gateway" and self.gateway is None:
            raise ConfigError("gateway", "is required when mode is gateway")


@dataclass(frozen=True)
class Overrides:
    """Command-line flags; each replaces its key in the file (None: keep the file's)."""

    listen: str | None = None
    upstream: str | None = None
    metrics: str | None = None
    request_log: str | None = None
    log_format: str | None = None
    log_level: str | None = None


# --- views of the declarations ----------------------------------------------------------


@cache
def _declared(cls: type) -> dict[str, tuple[dataclasses.Field[Any], Key]]:
    """The keys of section `cls` in declaration order: name -> (field, Key)."""
    return {f.name: (f, f.metadata[_KEY]) for f in fields(cls)}


def _subsections(kind: Kind) -> Iterator[tuple[str, type]]:
    if isinstance(kind, Section):
        yield "", kind.cls
    elif isinstance(kind, Listeners):
        yield "[]", ListenerConfig


def _walk(cls: type = Config, path: str = "") -> Iterator[tuple[str, type]]:
    """(generic path, section class) of every section, depth first in declaration order."""
    yield path, cls
    for name, (_f, key) in _declared(cls).items():
        for suffix, inner in _subsections(key.kind):
            yield from _walk(inner, f"{_join(path, name)}{suffix}")


# The section class of each mapping of the file, by its path with list indices as []
# ("listeners[].tls"), so that an unknown key is named before any other problem.
SECTION_SCHEMAS: dict[str, type] = dict(_walk())

# The largest value of every number in the file, and why, by key path (as above): past
# it a value no longer tunes a protection but switches it off.
MAXIMA: dict[str, tuple[float, str]] = {
    _join(section_path, name): (key.kind.maximum, key.kind.why)
    for section_path, cls in SECTION_SCHEMAS.items()
    for name, (_f, key) in _declared(cls).items()
    if isinstance(key.kind, Integer | Seconds)
}


# --- the reader -------------------------------------------------------------------------


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


def read_section(cls: type[S], data: object, path: str) -> S:
    """The one reader: every key `cls` declares, from the mapping `data` at `path`.
    Unknown keys first (a typo must not surface as a missing key, nor fall back to a
    default), then each key in declaration order, then the section's `_check`."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path or "(top level)", f"must be a mapping, got {_show(data)}")
    declared = _declared(cast(type, cls))
    for name in data:
        if name not in declared:
            hint = _suggest(str(name), set(declared), path)
            raise ConfigError(_join(path, str(name)), f"unknown key{hint}")
    values: dict[str, Any] = {}
    for name, (f, key) in declared.items():
        where = _join(path, name)
        value = data.get(name, _ABSENT)
        if value is None and (key.kind.nullable or f.default is None):
            value = _ABSENT
        if value is not _ABSENT or key.kind.reads_absent:
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
    for section_path, cls in SECTION_SCHEMAS.items():
        if section_path != here and name in _declared(cls):
            return f" (did you mean {section_path + '.' if section_path else ''}{name}?)"
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def parse_config(data: object) -> Config:
    """Validate an already-loaded YAML document."""
    return read_section(Config, data, "")


def load_config(path: str | Path | None = None, overrides: Overrides | None = None) -> Config:
    """The configuration from `path` (None: the defaults) with `overrides` applied."""
    data: object = {}
    if path is not None:
        data = _read_yaml(Path(path))
    if overrides is not None:
        data = _apply_overrides(data, overrides)
    return parse_config(data)


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, but a key given twice in one mapping is an error: YAML keeps
    the last silently, so a second `limits:` further down would undo the first."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` then overriding keys is what merge is for
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # unhashable: the base class reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _read_yaml(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), f"not UTF-8 text (byte {exc.start})") from exc
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except RecursionError:
        raise ConfigError(str(path), "nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ConfigError(str(path), str(exc).split(":")[0]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(str(path), f"{problem}{where}") from exc


def _apply_overrides(data: object, flags: Overrides) -> object:
    """Put flag values into the raw mapping; flag errors name the flag, not the key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return data  # parse_config reports the bad top level
    data = dict(data)
    if flags.metrics is not None:
        metrics = dict(data.get("metrics") or {})
        metrics["listen"] = parse_address(flags.metrics, "--metrics", allow_port_zero=True)
        data["metrics"] = metrics
    if flags.request_log is not None:
        if not flags.request_log:
            raise ConfigError("--request-log", "must be a path or -")
        request_log = dict(data.get("request_log") or {})
        request_log["path"] = flags.request_log
        data["request_log"] = request_log
    for key, flag in (("format", flags.log_format), ("level", flags.log_level)):
        log = data.get("log")
        if flag is not None and (log is None or isinstance(log, dict)):  # else: named as bad
            data["log"] = {**(log or {}), key: flag}
    if flags.listen is not None or flags.upstream is not None:
        if data.get("mode", "sidecar") == "gateway":
            _override_gateway(data, flags)
        else:
            _override_listener(data, flags)
    return data


def _override_listener(data: dict[str, Any], flags: Overrides) -> None:
    listeners = data.get("listeners")
    if listeners is None:
        listeners = [{"name": DEFAULT_LISTENER.name}]
    if not isinstance(listeners, list) or len(listeners) != 1:
        raise ConfigError(
            "--listen" if flags.listen is not None else "--upstream",
            "applies to a config with exactly one listener; edit `listeners` in the file",
        )
    first = dict(listeners[0]) if isinstance(listeners[0], dict) else {}
    if flags.listen is not None:
        first["listen"] = parse_address(flags.listen, "--listen", allow_port_zero=True)
    if flags.upstream is not None:
        first["upstream"] = parse_address(flags.upstream, "--upstream")
    first.setdefault("listen", DEFAULT_LISTENER.listen)
    first.setdefault("upstream", DEFAULT_LISTENER.upstream)
    data["listeners"] = [first]


def _override_gateway(data: dict[str, Any], flags: Overrides) -> None:
    gateway = dict(data.get("gateway") or {})
    if flags.listen is not None:
        gateway["bootstrap_listen"] = parse_address(flags.listen, "--listen", allow_port_zero=True)
    if flags.upstream is not None:
        gateway["bootstrap_servers"] = [str(parse_address(flags.upstream, "--upstream"))]
    data["gateway"] = gateway


def summary(config: Config) -> list[str]:
    """Human lines describing a valid config, for `kafkalens check-config`."""
    lines = [f"mode: {config.mode}, workers: {config.workers}"]
    for listener in config.listeners:
        tls = " (TLS)" if listener.tls else ""
        lines.append(f"listener {listener.name}: {listener.listen}{tls} -> {listener.upstream}")
    if config.gateway is not None:
        gw = config.gateway
        servers = ", ".join(str(a) for a in gw.bootstrap_servers)
        lines.append(f"gateway: bootstrap {gw.bootstrap_listen} -> {servers}")
        lines.append(
            f"gateway: brokers advertised as {gw.advertised_host}, ports from {gw.broker_port_base}"
        )
        if gw.controller_bootstrap_listen is not None:
            servers = ", ".join(str(a) for a in gw.controller_bootstrap_servers)
            lines.append(f"gateway: controller bootstrap {gw.controller_bootstrap_listen} -> {servers}")
        lines.append(
            f"gateway: controllers advertised as {gw.advertised_host},"
            f" ports from {gw.controller_port_base}"
        )
        if gw.tls is not None:
            lines.append("gateway: client listeners TLS")
    if config.upstream_tls is not None:
        lines.append("upstream TLS: on")
    metrics = config.metrics
    scheme = "https" if metrics.tls else "http"
    lines.append(f"metrics: {scheme}://{metrics.listen}/metrics")
    if metrics.clients_token_file:
        lines.append(f"clients: {scheme}://{metrics.listen}/clients (bearer token)")
    if metrics.clients_listen:
        lines.append(f"clients: http://{metrics.clients_listen}/clients")
    if not (metrics.clients_token_file or metrics.clients_listen):
        lines.append("clients: off")
    lines.append(f"request log: {config.request_log.path}")
    lines.append(f"kip1313 enforcement: {config.kip1313.enforcement}")
    telemetry = config.telemetry
    mode = "collect" if telemetry.collect else "observe" if telemetry.observe else "off"
    lines.append(f"telemetry: {mode}, log {telemetry.log.path or 'off'}")
    lines.append(f"consumer lag and topic traffic: {'on' if config.lag.enabled else 'off'}")
    return lines


def check_supported(config: Config) -> None:
    """What the configuration may ask for that this build cannot do yet."""
    if config.workers > 1:
        check_shareable(config)


def check_shareable(config: Config) -> None:
    """Port 0 would give every worker a different port."""
    for i, listener in enumerate(config.listeners):
        if listener.listen.port == 0:
            raise ConfigError(f"listeners[{i}].listen", "port 0 cannot be shared by workers > 1")
    if config.mode == "gateway" and config.gateway and config.gateway.bootstrap_listen.port == 0:
        raise ConfigError("gateway.bootstrap_listen", "port 0 cannot be shared by workers > 1")


# --- config/kafkalens.yaml, written from the declarations --------------------------------

DOCUMENTED_FILE_HEADER = """\
kafkalens configuration: the documented default.

Every key is optional; the values below are the defaults. Command-line flags
(`kafkalens proxy --listen ... --upstream ... --metrics ... --request-log ...`)
override the file. Validate a file without starting: `kafkalens check-config FILE`
(add --check-ports to also bind the listen addresses); it also checks api names,
that request_log.path can be written and that certificates load. Unknown keys are
errors. Every number has a finite maximum, named with its reason when exceeded and
given below with each key: timeouts 1 hour (idle_timeout_seconds 1 day), frame
sizes 2^31-1 (Kafka's int32), decompression_limit_bytes 4 GiB, request_log.max_bytes
1 TiB, connections 1048576, workers 256.
Sizes (the keys ending in _bytes) are bytes, or a number with a unit: 64KiB, 10MB,
1GiB (KiB, MiB, GiB, TiB are 1024s; KB, MB, GB, TB 1000s). Durations (the keys ending
in _seconds, and telemetry.push_interval_ms) are seconds (milliseconds), or a number
with a unit: 500ms, 30s, 10m, 1h, 1d, 1h30m.
In the container image the file is read from /etc/kafkalens/kafkalens.yaml.

Written by `python -m proxy.config` from the keys declared in proxy/config.py."""
WIDTH = 88  # of the file's comment lines


def documented_file() -> str:
    """config/kafkalens.yaml: every key with its default, documentation and bounds."""
    out = [f"# {line}".rstrip() for line in DOCUMENTED_FILE_HEADER.splitlines()]
    _write_keys(Config, Config(), "", out)
    return "\n".join(out) + "\n"


def _write_keys(cls: type, value: object, indent: str, out: list[str]) -> None:
    for name, (_f, key) in _declared(cls).items():
        if not indent:
            out.append("")
        current = getattr(value, name)
        kind = key.kind
        _comment(out, indent, key.doc)
        if bounds := _bounds_of(key):
            _comment(out, indent, f"Allowed: {bounds}")
        if isinstance(kind, Section) and current is None:  # optional: an example to uncomment
            out.append(f"{indent}# {name}:")
            out.extend(f"{indent}# {line}" for line in _aligned(_example(kind.cls, "  ")))
        elif isinstance(kind, Section):
            out.append(f"{indent}{name}:")
            _write_keys(kind.cls, current, indent + "  ", out)
        elif isinstance(kind, Listeners):
            out.append(f"{indent}{name}:")
            for listener in current:
                item: list[str] = []
                _write_keys(ListenerConfig, listener, indent + "    ", item)
                first = next(i for i, line in enumerate(item) if not line.lstrip().startswith("#"))
                item[:first] = [f"{indent}  {line.lstrip()}" for line in item[:first]]
                item[first] = f"{indent}  - {item[first].lstrip()}"
                out.extend(item)
        else:
            out.append(f"{indent}{name}: {_yaml_text(kind.as_yaml(current))}{_unit(name, current)}")


def _example(cls: type, indent: str) -> list[tuple[str, str]]:
    """The keys of an optional section as (line, its doc), to write as an example."""
    rows: list[tuple[str, str]] = []
    for name, (f, key) in _declared(cls).items():
        doc = "; ".join(part for part in (key.doc.rstrip(".:"), _bounds_of(key)) if part)
        if isinstance(key.kind, Section):
            rows.append((f"{indent}{name}:", doc))
            rows.extend(_example(key.kind.cls, indent + "  "))
            continue
        if key.example is not _NO_EXAMPLE:
            shown = key.example
        elif f.default_factory is not dataclasses.MISSING:
            shown = key.kind.as_yaml(f.default_factory())
        else:
            shown = key.kind.as_yaml(f.default)
        rows.append((f"{indent}{name}: {_yaml_text(shown)}", doc))
    return rows


def _aligned(rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(line) for line, _doc in rows) + 2
    return [f"{line:<{width}}# {doc}" if doc else line for line, doc in rows]


def _bounds_of(key: Key) -> str:
    """What the documented file says of a key's bounds (a choice its doc names: nothing)."""
    kind = key.kind
    if isinstance(kind, Choice) and all(option in key.doc for option in kind.options):
        return ""
    return kind.bounds()


def _comment(out: list[str], indent: str, doc: str) -> None:
    for paragraph in doc.split("\n"):
        out.extend(
            textwrap.wrap(
                paragraph,
                WIDTH,
                initial_indent=f"{indent}# ",
                subsequent_indent=f"{indent}# ",
                break_on_hyphens=False,
                break_long_words=False,
            )
        )


def _unit(name: str, value: object) -> str:
    """# 100 MiB after a size in bytes that is a whole number of KiB."""
    if "_bytes" not in name or not isinstance(value, int) or value < 1024:
        return ""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value % size == 0:
            return f"  # {value // size} {unit}"
    return ""


def _plain(value: object) -> object:
    """A value of the dataclasses as plain YAML data."""
    if isinstance(value, Address):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _yaml_text(value: object) -> str:
    """`value` as YAML on one line (flow style, quoted where YAML would misread it)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False).strip()
    return text.removesuffix("\n...").strip()


if __name__ == "__main__":
    sys.stdout.write(documented_file())
