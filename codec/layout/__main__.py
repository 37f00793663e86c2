"""`python -m codec.layout Produce 11 request`: print the wire layout of a message version.

The printing lives here, apart from the description (codec/layout/__init__.py): the codec
package imports the description on its first import, and `python -m` must run a module
that is not imported yet, else runpy warns that it runs a second copy.
"""

from __future__ import annotations

import argparse
import sys

from codec.kinds import Entity, Framing, Kind
from codec.layout import Field, Struct, layout


def render(struct: Struct, indent: str = "") -> list[str]:
    """The layout as text, a line per field: what `python -m codec.layout` prints."""
    lines = []
    for field in struct.fields:
        lines += _render_field(field, indent)
    if struct.flexible:
        lines.append(f"{indent}tagged fields" + ("" if struct.tagged else ": none declared (unknown ones kept)"))
        for field in struct.tagged:
            lines += _render_field(field, indent + "  ")
    return lines


def _render_field(field: Field, indent: str) -> list[str]:
    facts = []
    if field.tag is not None:
        facts.append(f"tag {field.tag}, default {field.default!r}")
    if field.framing is not Framing.NONE:
        facts.append(f"{field.framing.name.lower()} {'count' if field.kind is Kind.ARRAY else 'length'}")
    if field.nullable:
        facts.append("nullable")
    if field.size:
        facts.append(f"{field.size} bytes" + (f", check {field.check}" if field.check else ""))
    if field.peek:
        facts.append("checks the next byte")
    if field.entity is not Entity.NONE:
        facts.append(f"skim keeps: {field.entity.name.lower()}")
    head = f"{indent}{field.name or '(element)'}"
    kind = field.kind.name.lower()
    if field.struct is not None:
        kind = f"{field.struct.name} (min {field.struct.min_size} bytes)"
    line = f"{head:<40} {kind:<10} {', '.join(facts)}".rstrip()
    if field.element is not None:
        return [line + f", elements of {field.min_size}+ bytes", *_render_field(field.element, indent + "  ")]
    if field.struct is not None:
        return [line, *render(field.struct, indent + "  ")]
    return [line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the wire layout of a message version.")
    parser.add_argument("message", help="an api name (Produce) or a message name (ProduceRequest)")
    parser.add_argument("version", type=int)
    parser.add_argument("direction", nargs="?", choices=("request", "response"))
    args = parser.parse_args(argv)
    name = args.message + (args.direction or "").capitalize()
    try:
        struct = layout(name, args.version)
    except KeyError as exc:
        print(f"layout: {exc.args[0]}", file=sys.stderr)
        return 2
    flexible = "flexible: every struct ends with tagged fields" if struct.flexible else "not flexible"
    print(f"{name} v{args.version} ({flexible}; at least {struct.min_size} bytes)")
    print("\n".join(render(struct, "  ")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
