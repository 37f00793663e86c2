"""`kafkalens decode`: print length-prefixed Kafka frames as JSON, one object per frame."""

from __future__ import annotations

import argparse
import json
import struct
import sys
from collections.abc import Iterator
from typing import Any

from codec import DecodeError, decode_request, decode_response
from codec.render import to_jsonable
from codec.schema import api_names


def parse_api(text: str) -> tuple[int, int]:
    try:
        key, version = text.split(":")
        return int(key), int(version)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected API_KEY:VERSION, got {text!r}") from None


def split_frames(data: bytes) -> Iterator[tuple[int, bytes | None, str | None]]:
    """(offset, frame, error) for each length-prefixed frame in `data`."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < 4:
            yield pos, None, f"{len(data) - pos} bytes left, too few for a length prefix"
            return
        (length,) = struct.unpack_from(">i", data, pos)
        if length < 0 or pos + 4 + length > len(data):
            yield pos, None, f"frame length {length} does not fit the {len(data) - pos - 4} bytes left"
            return
        yield pos, data[pos + 4 : pos + 4 + length], None
        pos += 4 + length


def describe(frame: bytes, response_to: tuple[int, int] | None) -> dict[str, Any]:
    try:
        if response_to is None:
            message: Any = decode_request(frame)
        else:
            message = decode_response(frame, *response_to)
    except DecodeError as exc:
        return {"error": str(exc), "offset": exc.offset, "length": len(frame)}
    return {
        "direction": "response" if response_to else "request",
        "api_key": message.api_key,
        "api": api_names().get(message.api_key),
        "api_version": message.api_version,
        "header_version": message.header_version,
        "header": to_jsonable(message.header),
        "body": to_jsonable(message.body, partial_tail=response_to is not None),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kafkalens decode",
        description="Decode length-prefixed Kafka frames (raw binary) to JSON lines.",
    )
    parser.add_argument("file", nargs="?", default="-", help="file of frames, or - for stdin")
    parser.add_argument(
        "--response-to",
        type=parse_api,
        metavar="API_KEY:VERSION",
        help="decode the frames as responses to this request (api key and version)",
    )
    args = parser.parse_args(argv)
    if args.file == "-":
        data = sys.stdin.buffer.read()
    else:
        with open(args.file, "rb") as handle:
            data = handle.read()
    status = 0
    for offset, frame, error in split_frames(data):
        if frame is None:
            result: dict[str, Any] = {"offset": offset, "error": error}
            status = 1
        else:
            result = {"offset": offset, **describe(frame, args.response_to)}
            status = status or (1 if "error" in result else 0)
        print(json.dumps(result, separators=(",", ":")))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
