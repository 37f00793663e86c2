"""What an absent tagged struct decodes to: one shared, read-only dict of its defaults.

Fetch v12+ gives every partition three tagged structs (diverging_epoch,
current_leader, snapshot_id) that brokers almost never send. Building a fresh dict
for each of them was a fifth of a Fetch response's decode time, for values nobody
changes. Sharing one object is only safe if nobody can change it, so the shared
default refuses mutation (a TypeError) instead of silently altering every message
that shares it. A tagged struct present on the wire, even with default values, is
still an ordinary dict of its own.

Lists (tagged arrays) keep a fresh empty list per message: they are rarer per
message, and code appends to them.
"""

from __future__ import annotations

from typing import Any, NoReturn
from uuid import UUID

from codec.schema import Field

_IMMUTABLE = (int, float, str, bool, bytes, UUID, type(None))


class ReadOnlyDict(dict[str, Any]):
    """A dict that refuses every change. copy, deepcopy and pickle give read-only
    ones too; its .copy() gives a plain dict to change."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            "an absent tagged field's shared default cannot be changed; "
            "assign a new dict to the field instead"
        )

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        # copy, deepcopy and pickle rebuild it from its items rather than by setitem.
        return (type(self), (dict(self),))

    def copy(self) -> dict[str, Any]:
        return dict(self)


def shared_default(field: Field) -> ReadOnlyDict | None:
    """The shared default of a tagged struct whose defaults are all immutable, else None
    (the field then gets a new default per decode, as before)."""
    if field.tag is None or not field.is_struct or field.is_array:
        return None
    default = field.default_value()
    if not isinstance(default, dict) or not all(
        isinstance(v, _IMMUTABLE) for v in default.values()
    ):
        return None
    return ReadOnlyDict(default)
