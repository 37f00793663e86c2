"""Generate the codec's tables from Kafka's JSON message definitions.

Usage: python -m codec.generate [--schemas DIR] [--kafka-clients-jar JAR] [--out DIR]
                                [--readiness FILE]

Which definitions, and where to get them: codec/README.md, "Where the codec comes
from". The sources, oldest first (a later one wins for the versions it covers):
- `DIR/before-kip-896/`: the definitions before Kafka 4.0 removed old versions (so the
  codec still reads the clients that use them); DIR defaults to $KAFKALENS_SCHEMAS, else
  ../shared/kafka-message-schemas beside the repository;
- `DIR/after-kip-896/`: a trunk snapshot with KIP-896's removals (2024-12-27);
- the definitions of the newest Apache Kafka release the tests run against, as that
  release ships them: `common/message/*.json` inside its `kafka-clients` jar from Maven
  Central (`bash tests/peers/install` puts it in `tests/peers/build/kafka-<version>/`;
  the version is the first line of `tests/peers/kafka-versions`);
- the project's KIP-1313 overlays (`codec/kip1313/`).

For each message and each version it keeps the definition of the newest source whose
`validVersions` covers it. Writes, into codec/generated/: `schemas.py`, the facts only
(names, types, versions, tags, defaults; never the `about` prose); `api_key.py`, the
`ApiKey` enum of every request; `kinds.h`, codec/kinds.py's numbers for the C
interpreter. And the Kafka 4.0 readiness table (the versions the KIP-896 folder no
longer accepts) to
`pipeline/data/kafka4_removed_versions.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import zipfile
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
    " (4.0.0-SNAPSHOT: before-kip-896/) and of 2024-12-27 (4.1.0-SNAPSHOT: after-kip-896/),"
    " and the common/message/*.json of the newest Kafka release's kafka-clients jar"
    " (tests/peers/kafka-versions; `bash tests/peers/install` fetches it)"
)
PEERS = REPO / "tests" / "peers"


def newest_kafka_version() -> str:
    """The newest Apache Kafka version the tests run against (tests/peers/kafka-versions)."""
    return (PEERS / "kafka-versions").read_text().split()[0]


def default_clients_jar() -> Path:
    version = newest_kafka_version()
    return PEERS / "build" / f"kafka-{version}" / f"kafka-clients-{version}.jar"


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


def load_jar(jar: Path) -> dict[str, dict[str, Any]]:
    """{message name: raw schema} of a kafka-clients jar's common/message/*.json."""
    found: dict[str, dict[str, Any]] = {}
    with zipfile.ZipFile(jar) as archive:
        for name in sorted(archive.namelist()):
            if name.startswith("common/message/") and name.endswith(".json"):
                text = archive.read(name).decode()
                found[Path(name).stem] = json.loads(_COMMENT.sub("", text))
    return found


def collect_sources(schemas_dir: Path, clients_jar: Path) -> list[dict[str, dict[str, Any]]]:
    """Each source as {message name: raw schema}, oldest first."""
    sources = []
    for folder in SOURCE_FOLDERS:
        sources.append({p.stem: load_json(p) for p in sorted((schemas_dir / folder).glob("*.json"))})
    sources.append(load_jar(clients_jar))
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
        if parse_versions(raw.get("validVersions")) is None:
            continue  # "none": an API a newer Kafka removed whole (LeaderAndIsr, ...)
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


def follow_renames(sources: list[dict[str, dict[str, Any]]]) -> list[dict[str, dict[str, Any]]]:
    """Requests and responses under the name the newest source gives their api key:
    Kafka renamed ListClientMetricsResources (api 74) to ListConfigResources, and the
    older sources' versions belong to the same message."""
    newest: dict[tuple[str, int], str] = {}
    for source in reversed(sources):
        for name, raw in source.items():
            if raw.get("apiKey") is not None:
                newest.setdefault((raw["type"], raw["apiKey"]), name)
    renamed = []
    for source in sources:
        renamed.append(
            {
                (newest[(raw["type"], raw["apiKey"])] if raw.get("apiKey") is not None else name): raw
                for name, raw in source.items()
            }
        )
    return renamed


def build_tables(schemas_dir: Path, clients_jar: Path) -> dict[str, Any]:
    sources = follow_renames(collect_sources(schemas_dir, clients_jar))
    names = sorted({name for source in sources for name in source})
    return {name: merge_message(name, sources) for name in names}


# Versions the KIP-896 folder (a trunk snapshot of 2024-12-27) lacks but Kafka 4 brokers
# accept: Metadata v0-3 were added back before 4.0.0 (KAFKA-18648: kafka-python and
# aiokafka need them), JoinGroup v0-1 in 4.0.1 and 4.1.0 (KAFKA-19444: librdkafka before
# 2.11 with Kerberos). Apache Kafka 4.2 and 4.4 answer both (tests/
# test_kafka_removed_versions.py asks them), so a client that uses them is ready.
ACCEPTED_AGAIN = {"MetadataRequest": range(0, 4), "JoinGroupRequest": range(0, 2)}


def readiness_table(schemas_dir: Path) -> dict[str, Any]:
    """Request versions that the pre-4.0 folder accepts and the KIP-896 folder does not,
    less those Kafka 4 brokers accept again (ACCEPTED_AGAIN)."""
    before = {p.stem: load_json(p) for p in (schemas_dir / SOURCE_FOLDERS[0]).glob("*Request.json")}
    after = {p.stem: load_json(p) for p in (schemas_dir / SOURCE_FOLDERS[1]).glob("*Request.json")}
    apis = []
    for name, old in before.items():
        if name not in after or "apiKey" not in old:
            continue
        old_low, old_high = parse_versions(old["validVersions"])  # type: ignore[misc]
        new_low, new_high = parse_versions(after[name]["validVersions"])  # type: ignore[misc]
        removed = [v for v in range(old_low, old_high + 1)
                   if not new_low <= v <= new_high and v not in ACCEPTED_AGAIN.get(name, ())]
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
    source = "kafka-message-schemas before-kip-896 vs after-kip-896, less versions accepted again"
    return {"source": source, "apis": apis}


HEADER = '''\
# GENERATED by codec/generate.py from Kafka's JSON message definitions (the
# kafka-message-schemas folders and Apache Kafka's kafka-clients jar: see the
# generator's docstring) and codec/kip1313/. Do not edit: run `make generate`.
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


def write_outputs(
    schemas_dir: Path, clients_jar: Path, out_dir: Path, readiness_path: Path | None
) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = build_tables(schemas_dir, clients_jar)
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
    parser.add_argument("--kafka-clients-jar", type=Path, default=default_clients_jar())
    parser.add_argument("--out", type=Path, default=HERE / "generated")
    parser.add_argument(
        "--readiness", type=Path, default=REPO / "pipeline" / "data" / "kafka4_removed_versions.json"
    )
    args = parser.parse_args(argv)
    if not args.schemas.is_dir():
        print(f"generate: {missing(args.schemas)}", file=sys.stderr)
        return 2
    if not args.kafka_clients_jar.is_file():
        print(
            f"generate: {args.kafka_clients_jar} not found: `bash tests/peers/install` fetches it",
            file=sys.stderr,
        )
        return 2
    for path in write_outputs(args.schemas, args.kafka_clients_jar, args.out, args.readiness):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
