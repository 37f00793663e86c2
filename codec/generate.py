"""Generate the codec's tables from Kafka's JSON message definitions.

Usage: python -m codec.generate [--schemas DIR] [--out DIR] [--readiness FILE]

Which definitions, and where to get them: codec/README.md, "Where the codec comes
from" (DIR defaults to $KAFKALENS_SCHEMAS, else ../shared/kafka-message-schemas beside
the repository). Reads every definition in the schema folders (oldest first) plus the
project's KIP-1313 overlays (`codec/kip1313/`, newest), and for each message and each
version keeps the definition of the newest source whose `validVersions` covers it.

Writes, into codec/generated/: `schemas.py`, the facts only (names, types, versions,
tags, defaults; never the `about` prose); `api_key.py`, the `ApiKey` enum of every
request; `kinds.h`, codec/kinds.py's numbers for the C interpreter. And the Kafka 4.0
readiness table (the versions the KIP-896 folder no longer accepts) to
`pipeline/data/kafka4_removed_versions.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from codec.kinds import ENUMS

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_SCHEMAS = Path(
    os.environ.get("KAFKALENS_SCHEMAS") or REPO.parent / "shared" / "kafka-message-schemas"
)
# Oldest first: a later source wins for the versions it covers.
SOURCE_FOLDERS = ("before-kip-896", "after-kip-896")
OVERLAY_FOLDER = HERE / "kip1313"
# What the committed output was generated from (codec/README.md says where to get it).
SOURCES = (
    "apache/kafka's clients/src/main/resources/common/message/ at trunk of 2024-12-06"
    " (4.0.0-SNAPSHOT: before-kip-896/) and of 2024-12-27 (4.1.0-SNAPSHOT: after-kip-896/)"
)
OPEN_END = 0x7FFF

_COMMENT = re.compile(r"^\s*//.*$", re.MULTILINE)


def load_json(path: Path) -> dict[str, Any]:
    """Kafka's schema JSON allows whole-line // comments."""
    data: dict[str, Any] = json.loads(_COMMENT.sub("", path.read_text()))
    return data


def parse_versions(spec: str | None) -> tuple[int, int] | None:
    """'3+' -> (3, OPEN_END); '1-4' -> (1, 4); '2' -> (2, 2); 'none'/None -> None."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), OPEN_END
    if "-" in spec:
        low, high = spec.split("-")
        return int(low), int(high)
    return int(spec), int(spec)


def snake_case(name: str) -> str:
    step = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", step).lower()


def parse_default(type_name: str, raw: Any) -> Any:
    """The default as a Python literal value, or the marker 'null'."""
    text = str(raw)
    if text == "null":
        return None
    if type_name in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(text, 0)
    if type_name == "float64":
        return float(text)
    if type_name == "bool":
        return text.lower() == "true"
    return text


def field_facts(field: dict[str, Any], structs: dict[str, Any]) -> tuple[Any, ...]:
    """One field as a tuple of facts (see codec/schema.py for the layout)."""
    type_name = field["type"]
    element = type_name[2:] if type_name.startswith("[]") else type_name
    children: tuple[Any, ...] | None = None
    if "fields" in field:
        children = tuple(field_facts(f, structs) for f in field["fields"])
    elif element in structs:
        children = tuple(field_facts(f, structs) for f in structs[element]["fields"])
    default = parse_default(element, field["default"]) if "default" in field else ...
    tag = field.get("tag")
    return (
        snake_case(field["name"]),
        type_name,
        parse_versions(field["versions"]),
        parse_versions(field.get("nullableVersions")),
        int(tag) if tag is not None else None,
        default,
        parse_versions(field["flexibleVersions"]) if "flexibleVersions" in field else ...,
        bool(field.get("mapKey", False)),
        field.get("entityType"),
        children,
    )


def message_facts(schema: dict[str, Any]) -> dict[str, Any]:
    structs = {s["name"]: s for s in schema.get("commonStructs", [])}
    header_versions = schema.get("headerVersions")
    return {
        "valid": parse_versions(schema["validVersions"]),
        "flexible": parse_versions(schema["flexibleVersions"]),
        "header_versions": (
            tuple(
                (*parse_versions(k), int(v))  # type: ignore[misc]
                for k, v in sorted(header_versions.items(), key=lambda kv: kv[0])
            )
            if header_versions
            else None
        ),
        "fields": tuple(field_facts(f, structs) for f in schema["fields"]),
    }


def collect_sources(schemas_dir: Path) -> list[dict[str, dict[str, Any]]]:
    """Each source folder as {message name: raw schema}, oldest first."""
    sources = []
    for folder in SOURCE_FOLDERS:
        sources.append({p.stem: load_json(p) for p in sorted((schemas_dir / folder).glob("*.json"))})
    sources.append({p.stem: load_json(p) for p in sorted(OVERLAY_FOLDER.glob("*.json"))})
    return sources


def merge_message(name: str, sources: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per version, the definition of the newest source that covers it."""
    definitions: list[dict[str, Any]] = []
    by_version: dict[int, int] = {}
    kind = api_key = None
    for source in reversed(sources):
        if name not in source:
            continue
        raw = source[name]
        kind, api_key = raw["type"], raw.get("apiKey")
        facts = message_facts(raw)
        low, high = facts["valid"]
        new_versions = [v for v in range(low, high + 1) if v not in by_version]
        if not new_versions:
            continue
        if facts not in definitions:
            definitions.append(facts)
        index = definitions.index(facts)
        for version in new_versions:
            by_version[version] = index
    return {
        "kind": kind,
        "api_key": api_key,
        "versions": dict(sorted(by_version.items())),
        "definitions": definitions,
    }


def build_tables(schemas_dir: Path) -> dict[str, Any]:
    sources = collect_sources(schemas_dir)
    names = sorted({name for source in sources for name in source})
    return {name: merge_message(name, sources) for name in names}


def readiness_table(schemas_dir: Path) -> dict[str, Any]:
    """Request versions that the pre-4.0 folder accepts and the KIP-896 folder does not."""
    before = {p.stem: load_json(p) for p in (schemas_dir / SOURCE_FOLDERS[0]).glob("*Request.json")}
    after = {p.stem: load_json(p) for p in (schemas_dir / SOURCE_FOLDERS[1]).glob("*Request.json")}
    apis = []
    for name, old in before.items():
        if name not in after or "apiKey" not in old:
            continue
        old_low, old_high = parse_versions(old["validVersions"])  # type: ignore[misc]
        new_low, new_high = parse_versions(after[name]["validVersions"])  # type: ignore[misc]
        removed = [v for v in range(old_low, old_high + 1) if not new_low <= v <= new_high]
        if removed:
            apis.append(
                {
                    "api_key": old["apiKey"],
                    "api": name[: -len("Request")],
                    "removed_versions": removed,
                    "kafka4_min_version": new_low,
                }
            )
    apis.sort(key=lambda entry: entry["api_key"])
    return {"source": "kafka-message-schemas before-kip-896 vs after-kip-896", "apis": apis}


HEADER = '''\
# GENERATED by codec/generate.py from Kafka's JSON message definitions and
# codec/kip1313/. Do not edit: run `make generate` (python -m codec.generate).
#
# MESSAGES[name] = {"kind", "api_key", "versions": {version: definition index},
#                   "definitions": [{"valid", "flexible", "header_versions", "fields"}]}
# A field: (name, type, versions, nullable_versions, tag, default, flexible_override,
#           map_key, entity_type, children); "..." means "not given".
# fmt: off
from typing import Any

'''


def _literal(value: Any) -> str:
    return "..." if value is ... else repr(value)


def _render_fields(fields: tuple[Any, ...], indent: str) -> list[str]:
    lines = []
    for field in fields:
        *facts, children = field
        head = ", ".join(_literal(v) for v in facts)
        if children is None:
            lines.append(f"{indent}({head}, None),")
        else:
            lines.append(f"{indent}({head}, (")
            lines.extend(_render_fields(children, indent + "    "))
            lines.append(f"{indent})),")
    return lines


def _render_definition(definition: dict[str, Any]) -> list[str]:
    facts = ", ".join(
        f"{key!r}: {definition[key]!r}" for key in ("valid", "flexible", "header_versions")
    )
    return [f"        {{{facts}, 'fields': (", *_render_fields(definition["fields"], " " * 12), "        )},"]


def render_module(tables: dict[str, Any]) -> str:
    lines = [HEADER + "MESSAGES: dict[str, Any] = {"]
    for name, message in tables.items():
        lines.append(f"    {name!r}: {{")
        lines.append(f"        'kind': {message['kind']!r}, 'api_key': {message['api_key']!r},")
        lines.append(f"        'versions': {message['versions']!r},")
        lines.append("        'definitions': [")
        for definition in message["definitions"]:
            lines.extend("    " + line for line in _render_definition(definition))
        lines.append("        ],")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_api_keys(messages: dict[str, Any]) -> str:
    """codec/generated/api_key.py: `ApiKey`, from the request messages of the tables
    (those build_tables makes, or the committed codec.generated.schemas.MESSAGES)."""
    keys = sorted(
        (raw["api_key"], snake_case(name[: -len("Request")]).upper())
        for name, raw in messages.items()
        if raw["kind"] == "request"
    )
    lines = [
        "# GENERATED by codec/generate.py from codec/generated/schemas.py. Do not edit:",
        "# run `make generate` (python -m codec.generate).",
        '"""Kafka\'s api keys, named after their request messages."""',
        "",
        "from enum import IntEnum",
        "",
        "",
        "class ApiKey(IntEnum):",
        *(f"    {name} = {key}" for key, name in keys),
    ]
    return "\n".join(lines) + "\n"


def render_kinds_header() -> str:
    """codec/generated/kinds.h: codec/kinds.py's enums for the C interpreter."""
    lines = [
        "/* GENERATED by codec/generate.py from codec/kinds.py. Do not edit: run `make generate`. */",
        "#ifndef KAFKALENS_KINDS_H",
        "#define KAFKALENS_KINDS_H",
    ]
    table = []
    for enum in ENUMS:
        prefix = snake_case(enum.__name__).upper()
        members = ", ".join(f"{prefix}_{member.name} = {member.value}" for member in enum)
        lines.append(f"enum {{ {members} }};")
        table += [f'    {{"{enum.__name__}", "{member.name}", {prefix}_{member.name}}},' for member in enum]
    lines += [
        "/* The same, for the module's NUMBERS (codec/accel.py checks them at import). */",
        "static const struct { const char *type, *name; int value; } kinds_numbers[] = {",
        *table,
        "    {NULL, NULL, 0},",
        "};",
        "#endif",
    ]
    return "\n".join(lines) + "\n"


def write_outputs(schemas_dir: Path, out_dir: Path, readiness_path: Path | None) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = build_tables(schemas_dir)
    outputs = {
        "schemas.py": render_module(tables),
        "api_key.py": render_api_keys(tables),
        "kinds.h": render_kinds_header(),
        "__init__.py": "# GENERATED by codec/generate.py. Do not edit.\n",
    }
    written = []
    for name, text in outputs.items():
        (out_dir / name).write_text(text)
        written.append(out_dir / name)
    if readiness_path is not None:
        readiness_path.parent.mkdir(parents=True, exist_ok=True)
        readiness_path.write_text(json.dumps(readiness_table(schemas_dir), indent=1) + "\n")
        written.append(readiness_path)
    return written


def missing(schemas: Path) -> str:
    """What to do when the definitions are not at `schemas`."""
    return (
        f"Kafka's message definitions are not at {schemas}. codec/generated/schemas.py was"
        f" generated from {SOURCES}; codec/README.md (\"Where the codec comes from\") says"
        " where to get them. Then run `make generate`, or point KAFKALENS_SCHEMAS at them."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=Path, default=DEFAULT_SCHEMAS)
    parser.add_argument("--out", type=Path, default=HERE / "generated")
    parser.add_argument(
        "--readiness", type=Path, default=REPO / "pipeline" / "data" / "kafka4_removed_versions.json"
    )
    args = parser.parse_args(argv)
    if not args.schemas.is_dir():
        print(f"generate: {missing(args.schemas)}", file=sys.stderr)
        return 2
    for path in write_outputs(args.schemas, args.out, args.readiness):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
