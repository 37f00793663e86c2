"""The reader and the writer of a whole kafkalens.yaml, for any top section (proxy/features.py
has kafkalens's): `parse` a loaded document, `load` a file with the command line's
`Overrides` applied (each flag replaces its key), and `documented`, the file with every
key, its default, documentation and bounds (config/kafkalens.yaml is written so:
`python -m proxy.config > config/kafkalens.yaml`; tests/proxy/test_config.py fails when
the file in the repository is not what it would write).

Checks of the machine rather than the file (log path writable, certificates loadable,
api names known, ports free) are in proxy/preflight.py.
"""

from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from proxy.config.core import DEFAULT_LISTENER
from proxy.config.language import (
    NO_EXAMPLE,
    Choice,
    ConfigError,
    Key,
    Section,
    SectionList,
    declared,
    parse_address,
    read_document,
)

S = TypeVar("S")


@dataclass(frozen=True)
class Overrides:
    """Command-line flags; each replaces its key in the file (None: keep the file's)."""

    listen: str | None = None
    upstream: str | None = None
    metrics: str | None = None
    request_log: str | None = None
    log_format: str | None = None
    log_level: str | None = None


def parse(root: type[S], data: object) -> S:
    """Validate an already-loaded YAML document whose top level `root` declares."""
    return read_document(root, data)


def load(root: type[S], path: str | Path | None = None, overrides: Overrides | None = None) -> S:
    """The configuration from `path` (None: the defaults) with `overrides` applied."""
    data: object = {}
    if path is not None:
        data = _read_yaml(Path(path))
    if overrides is not None:
        data = _apply_overrides(data, overrides)
    return parse(root, data)


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


# --- the documented file, written from the declarations ----------------------------------

WIDTH = 88  # of the file's comment lines


def documented(root: type, header: str) -> str:
    """The file with every key of `root`: its default, documentation and bounds, under
    `header` (comment lines)."""
    out = [f"# {line}".rstrip() for line in header.splitlines()]
    _write_keys(root, root(), "", out)
    return "\n".join(out) + "\n"


def _write_keys(cls: type, value: object, indent: str, out: list[str]) -> None:
    for name, (_f, key) in declared(cls).items():
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
        elif isinstance(kind, SectionList):
            out.append(f"{indent}{name}:")
            for listener in current:
                item: list[str] = []
                _write_keys(kind.item, listener, indent + "    ", item)
                first = next(i for i, line in enumerate(item) if not line.lstrip().startswith("#"))
                item[:first] = [f"{indent}  {line.lstrip()}" for line in item[:first]]
                item[first] = f"{indent}  - {item[first].lstrip()}"
                out.extend(item)
        else:
            out.append(f"{indent}{name}: {_yaml_text(kind.as_yaml(current))}{_unit(name, current)}")


def _example(cls: type, indent: str) -> list[tuple[str, str]]:
    """The keys of an optional section as (line, its doc), to write as an example."""
    rows: list[tuple[str, str]] = []
    for name, (f, key) in declared(cls).items():
        doc = "; ".join(part for part in (key.doc.rstrip(".:"), _bounds_of(key)) if part)
        if isinstance(key.kind, Section):
            rows.append((f"{indent}{name}:", doc))
            rows.extend(_example(key.kind.cls, indent + "  "))
            continue
        if key.example is not NO_EXAMPLE:
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


def _yaml_text(value: object) -> str:
    """`value` as YAML on one line (flow style, quoted where YAML would misread it)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False).strip()
    return text.removesuffix("\n...").strip()
