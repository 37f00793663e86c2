"""kafkalens codec: the Kafka wire protocol, sans-I/O (bytes in, messages out, bytes out)."""

from codec.errors import DecodeError, EncodeError
from codec.peek import peek_correlation_id, peek_request, produce_acks

__all__ = ["DecodeError", "EncodeError", "peek_correlation_id", "peek_request", "produce_acks"]
