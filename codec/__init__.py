"""kafkalens codec: the Kafka wire protocol, sans-I/O (bytes in, messages out, bytes out)."""

from codec.errors import DecodeError, EncodeError
from codec.generated.api_key import ApiKey
from codec.messages import (
    DEFAULT_POLICY,
    HeaderPolicy,
    Request,
    Response,
    UnknownApiError,
    decode_data,
    decode_request,
    decode_request_header,
    decode_response,
    encode_data,
    encode_request,
    encode_response,
)
from codec.peek import peek_correlation_id, peek_request, produce_acks
from codec.schema import api_messages, api_names

__all__ = [
    "DEFAULT_POLICY",
    "ApiKey",
    "DecodeError",
    "EncodeError",
    "HeaderPolicy",
    "Request",
    "Response",
    "UnknownApiError",
    "api_messages",
    "api_names",
    "decode_data",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_data",
    "encode_request",
    "encode_response",
    "peek_correlation_id",
    "peek_request",
    "produce_acks",
]
