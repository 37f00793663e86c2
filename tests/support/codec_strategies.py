"""Hypothesis strategies that build valid values for any message at any version."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from codec.schema import Field

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


def scalar(type_name: str) -> st.SearchStrategy[Any]:
    if type_name in _INT_RANGES:
        low, high = _INT_RANGES[type_name]
        return st.integers(low, high)
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "bool":
        return st.booleans()
    if type_name == "string":
        return _TEXT
    if type_name == "uuid":
        return st.uuids()
    if type_name in ("bytes", "records"):
        return st.binary(max_size=24)
    raise AssertionError(f"no strategy for {type_name}")


def field_value(field: Field, version: int, flexible: bool) -> st.SearchStrategy[Any]:
    if field.is_array:
        if field.is_struct:
            element = struct_value(field.children or (), version, flexible)
        else:
            element = scalar(field.element_type)
        value: st.SearchStrategy[Any] = st.lists(element, max_size=3)
    elif field.is_struct:
        value = struct_value(field.children or (), version, flexible)
    else:
        value = scalar(field.type)
    if field.nullable_in(version):
        value = st.one_of(st.none(), value)
    return value


def struct_value(
    fields: tuple[Field, ...], version: int, flexible: bool, unknown_tags: bool = False
) -> st.SearchStrategy[dict[str, Any]]:
    present = {f.name: field_value(f, version, flexible) for f in fields if f.present_in(version)}
    base = st.fixed_dictionaries(present)
    if not (flexible and unknown_tags):
        return base
    known = {f.tag for f in fields if f.tag is not None and f.present_in(version)}
    tags = st.lists(
        st.integers(0, 300).filter(lambda t: t not in known), unique=True, max_size=2
    ).map(sorted)
    unknown = tags.flatmap(
        lambda ts: st.tuples(*[st.tuples(st.just(t), st.binary(max_size=6)) for t in ts])
    )
    return st.tuples(base, unknown).map(
        lambda pair: {**pair[0], "_unknown_tags": list(pair[1])} if pair[1] else pair[0]
    )


def plain(value: Any) -> Any:
    """Decoded values with memoryviews turned into bytes, for comparison."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k not in ("_explicit_tags",)}
    if isinstance(value, list | tuple):
        return type(value)(plain(v) for v in value)
    return value
