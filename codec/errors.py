"""The codec's single error type for bad peer input."""

from __future__ import annotations


class DecodeError(ValueError):
    """Bytes from a peer that do not form a valid message.

    Every decoder in `codec` raises this and only this for bad input, whatever the
    input. It says where: the api key and version being decoded (when known), the
    direction (``"request"`` or ``"response"``, or a sub-format such as ``"records"``)
    and the byte offset at which decoding failed.
    """

    def __init__(
        self,
        message: str,
        *,
        api_key: int | None = None,
        api_version: int | None = None,
        direction: str | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = message
        self.api_key = api_key
        self.api_version = api_version
        self.direction = direction
        self.offset = offset

    def with_context(
        self,
        *,
        api_key: int | None = None,
        api_version: int | None = None,
        direction: str | None = None,
    ) -> DecodeError:
        """Fill in context that the inner decoder did not know."""
        if self.api_key is None:
            self.api_key = api_key
        if self.api_version is None:
            self.api_version = api_version
        if self.direction is None:
            self.direction = direction
        return self

    def __str__(self) -> str:
        where = []
        if self.direction is not None:
            where.append(self.direction)
        if self.api_key is not None:
            where.append(f"api_key={self.api_key}")
        if self.api_version is not None:
            where.append(f"v{self.api_version}")
        if self.offset is not None:
            where.append(f"at byte {self.offset}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason


class EncodeError(ValueError):
    """A message that cannot be encoded (a programming error, never peer input)."""
