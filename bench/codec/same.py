"""Does a change to the codec decode exactly as before? Two checkouts, one corpus.

Not a test: a tool for changes to codec/ that must not change a single decode. Run it
from the root of each checkout, with that checkout's venv (the script may live in
either; only the public codec API is used, so it runs against older trees too):

    .venv/bin/python -m bench.codec.same corpus /tmp/corpus.pickle     # once, in either
    .venv/bin/python bench/codec/same.py outcomes /tmp/corpus.pickle /tmp/new.json
    (cd ../baseline && .venv/bin/python ../kafkalens/bench/codec/same.py \
        outcomes /tmp/corpus.pickle /tmp/old.json)
    .venv/bin/python -m bench.codec.same compare /tmp/old.json /tmp/new.json
    .venv/bin/python -m bench.codec.same show /tmp/corpus.pickle 1234  # one case, in full

Run `outcomes` with and without KAFKALENS_PURE_CODEC=1 to cover both interpreters.

The corpus: every golden frame (tests/data/golden) whole, cut at up to 40 places, with
junk after it and with bytes changed; frames of every api, version and direction built
from Hypothesis values (unknown tagged fields, explicit tags, records of real batches
where the tests put them); the inputs of a seeded bench.codec.fuzz run. For each frame
the outcome is the decoded header and body (every key, value and type, bytes fields as
views of the frame or not, read-only shared defaults as such) or the error (class,
message, offset, api, version, direction), then re-encoding it, the skimmer's result
(responses), the request header alone, the group payloads inside, and the frame fed to
codec.stream whole, byte by byte (frames up to 3 KiB) and in three random cuts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import random
import struct
import sys
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path.cwd()))  # the checkout it runs in, whichever file this is
sys.path.insert(1, str(Path.cwd() / "tests"))  # its test helpers, as `support`

Case = tuple[str, bytes, int, int]  # (kind, frame, api key, version); requests: -1, -1


# --- the corpus ----------------------------------------------------------------------------


def golden_cases(root: Path) -> list[Case]:
    folder = root / "tests" / "data" / "golden"
    rng = random.Random(32)
    cases: list[Case] = []
    for entry in json.loads((folder / "index.json").read_text())["frames"]:
        frame = (folder / entry["file"]).read_bytes()
        kind = "request" if entry["direction"] == "req" else "response"
        key, version = (entry["api_key"], entry["api_version"]) if kind == "response" else (-1, -1)
        variants = [frame, frame + b"\x00", frame + b"\xff" * 7]
        step = max(1, len(frame) // 40)
        variants += [frame[:cut] for cut in range(0, len(frame), step)]
        for _ in range(8):
            data = bytearray(frame)
            at = rng.randrange(len(data))
            if rng.random() < 0.5:
                data[at] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF))
            else:
                data[at : at + 4] = struct.pack(">i", rng.choice((-1, -2, 2**31 - 1, len(data) - at)))
            variants.append(bytes(data))
        cases += [(kind, v, key, version) for v in variants]
    return cases


def hypothesis_cases(per_case: int) -> list[Case]:
    from codec import DEFAULT_POLICY
    from codec.schema import api_messages, message
    try:
        from support.codec_strategies import struct_value
    except ImportError:  # a checkout from before the helpers moved into tests/support
        from tests.codec_strategies import struct_value

    found: list[Case] = []
    for api_key, (request, response) in api_messages().items():
        for version in request.versions:
            for kind, msg in (("request", request), ("response", response)):
                definition = msg.definition(version)
                assert definition is not None
                if kind == "request":
                    header_name = "RequestHeader"
                    header_version = DEFAULT_POLICY.request_header_version(api_key, version)
                else:
                    header_name = "ResponseHeader"
                    header_version = DEFAULT_POLICY.response_header_version(api_key, version)
                head = message(header_name).definition(header_version)
                assert head is not None
                body_s = struct_value(definition.fields, version, definition.is_flexible(version), True)
                head_s = struct_value(head.fields, header_version, head.is_flexible(header_version), True)

                found += _examples(per_case, body_s, head_s, definition.fields, kind, api_key, version)
    return found


def mark_explicit(fields: Any, version: int, value: Any) -> None:
    """Every tagged field explicit: written even at its default, so decoding meets it."""
    if not isinstance(value, dict):
        return
    tags = [f.tag for f in fields if f.tag is not None and f.present_in(version)]
    if tags:
        value["_explicit_tags"] = tags
    for field in fields:
        if field.is_struct and field.present_in(version):
            inner = value.get(field.name)
            for item in inner if isinstance(inner, list) else [inner]:
                mark_explicit(field.children or (), version, item)


def _examples(per_case: int, body_s: Any, head_s: Any, fields: Any, kind: str, api_key: int,
              version: int) -> list[Case]:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from codec import Request, Response, encode_request, encode_response

    found: list[Case] = []

    @settings(max_examples=per_case, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(body=body_s, header=head_s, tail=st.binary(max_size=3), explicit=st.booleans())
    def collect(body: Any, header: Any, tail: bytes, explicit: bool) -> None:
        if explicit:
            mark_explicit(fields, version, body)
        if kind == "request":
            frame = encode_request(Request(api_key, version, header, body))
            found.append(("request", frame + tail, -1, -1))
        else:
            frame = encode_response(Response(api_key, version, header, body))
            found.append(("response", frame + tail, api_key, version))

    collect()
    return found


def fuzz_cases(runs: int, seed: int) -> list[Case]:
    """Every input a seeded fuzz run executes (frames only)."""
    import signal
    import tracemalloc

    from bench.codec import fuzz as fuzz_codec

    seen: list[Case] = []
    real_run = fuzz_codec.Fuzzer.run_one

    def run_one(self: Any, case: Any) -> None:
        if case.target == "request":
            seen.append(("request", case.data, -1, -1))
        elif case.target == "response":
            seen.append(("response", case.data, case.api_key, case.version))
        real_run(self, case)

    fuzz_codec.Fuzzer.run_one = run_one  # type: ignore[method-assign]
    seeds = fuzz_codec.load_seeds()
    signal.signal(signal.SIGALRM, fuzz_codec._alarm)
    tracemalloc.start()
    fuzzer = fuzz_codec.Fuzzer(list(seeds), random.Random(seed), 10.0, 60.0, Path("/tmp/codec-same-findings"))
    fuzzer.loop(10**9, runs, 10**9)
    tracemalloc.stop()
    return seen


# --- outcomes ------------------------------------------------------------------------------


def canon(value: Any, base: Any) -> str:
    """Everything about a decoded value that a caller could see, as text."""
    kind = type(value)
    if isinstance(value, dict):
        items = ",".join(f"{k!r}:{canon(v, base)}" for k, v in value.items())
        return f"{kind.__name__}{{{items}}}"
    if isinstance(value, list | tuple):
        return f"{kind.__name__}[{','.join(canon(v, base) for v in value)}]"
    if isinstance(value, memoryview):
        own = "frame" if value.obj is base else type(value.obj).__name__
        return f"view<{own},{value.format},{value.shape},{value.readonly}>{value.tobytes().hex()}"
    if isinstance(value, bytes | bytearray):
        return f"{kind.__name__}:{bytes(value).hex()}"
    if isinstance(value, float):
        return "float:" + struct.pack(">d", value).hex()
    if isinstance(value, bool | int | str | uuid.UUID) or value is None:
        return f"{kind.__name__}:{value!r}"
    if hasattr(value, "__dataclass_fields__"):
        fields = value.__dataclass_fields__
        return f"{kind.__name__}({','.join(f'{n}={canon(getattr(value, n), base)}' for n in fields)})"
    if isinstance(value, set | frozenset):
        return f"set{sorted(map(repr, value))}"
    return f"{kind.__name__}:{value!r}"


def error(exc: BaseException) -> str:
    where = [getattr(exc, n, None) for n in ("offset", "api_key", "api_version", "direction")]
    return f"!{type(exc).__name__}|{exc}|{where}"


def attempt(action: Callable[[], Any], base: Any) -> tuple[str, Any]:
    try:
        value = action()
    except Exception as exc:  # noqa: BLE001 - compared, whatever it is
        return error(exc), None
    return canon(value, base), value


def outcome(case: Case) -> str:
    from codec import (
        decode_request,
        decode_request_header,
        decode_response,
        encode_request,
        encode_response,
    )
    from codec.groups import group_payloads
    from codec.skim import skim_response
    from codec.stream import request_stream, response_stream

    kind, frame, api_key, version = case
    base = frame
    parts = []
    if kind == "request":
        text, message = attempt(lambda: decode_request(frame), base)
        parts.append(text)
        parts.append(attempt(lambda: decode_request_header(frame), base)[0])
        if message is not None:
            api_key, version = message.api_key, message.api_version
            parts.append(attempt(lambda: encode_request(message), base)[0])
    else:
        text, message = attempt(lambda: decode_response(frame, api_key, version), base)
        parts.append(text)
        parts.append(attempt(lambda: skim_response(frame, api_key, version), base)[0])
        if message is not None:
            parts.append(attempt(lambda: encode_response(message), base)[0])
    if message is not None:
        parts.append(attempt(lambda: group_payloads(api_key, kind, message.body), base)[0])
    if api_key < 0 and len(frame) >= 4:
        api_key, version = struct.unpack_from(">hh", frame)
    if api_key >= 0:
        rng = random.Random(hashlib.sha1(frame).digest())
        cuts = [[frame]]
        if len(frame) <= 3072:
            cuts.append([frame[i : i + 1] for i in range(len(frame))])
        for _ in range(3):
            points = sorted({rng.randrange(len(frame) + 1) for _ in range(6)} | {0, len(frame)})
            cuts.append([frame[a:b] for a, b in zip(points, points[1:], strict=False)])
        for pieces in cuts:
            def streamed(pieces: list[bytes] = pieces) -> Any:
                make = request_stream if kind == "request" else response_stream
                stream = make(api_key, version, len(frame))
                for piece in pieces:
                    stream.feed(memoryview(piece))
                return stream.finish(), stream.dropped_elements
            parts.append(attempt(streamed, base)[0])
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("corpus")
    make.add_argument("out", type=Path)
    make.add_argument("--hypothesis", type=int, default=5, help="examples per api/version/direction")
    make.add_argument("--fuzz-runs", type=int, default=20_000)
    make.add_argument("--seed", type=int, default=0)
    run = sub.add_parser("outcomes")
    run.add_argument("corpus", type=Path)
    run.add_argument("out", type=Path)
    compare = sub.add_parser("compare")
    compare.add_argument("old", type=Path)
    compare.add_argument("new", type=Path)
    show = sub.add_parser("show")
    show.add_argument("corpus", type=Path)
    show.add_argument("index", type=int)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    if args.command == "corpus":
        root = Path.cwd()
        cases = golden_cases(root)
        print(f"golden: {len(cases)}", file=sys.stderr)
        cases += hypothesis_cases(args.hypothesis)
        print(f"+ hypothesis: {len(cases)}", file=sys.stderr)
        cases += fuzz_cases(args.fuzz_runs, args.seed)
        print(f"+ fuzz: {len(cases)}", file=sys.stderr)
        args.out.write_bytes(pickle.dumps(cases))
        return 0
    if args.command == "outcomes":
        cases = pickle.loads(args.corpus.read_bytes())
        digests = [hashlib.sha1(outcome(case).encode()).hexdigest() for case in cases]
        args.out.write_text(json.dumps(digests))
        print(f"{len(digests)} outcomes", file=sys.stderr)
        return 0
    if args.command == "show":
        print(outcome(pickle.loads(args.corpus.read_bytes())[args.index]))
        return 0
    old, new = (json.loads(p.read_text()) for p in (args.old, args.new))
    differ = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
    print(json.dumps({"cases": len(old), "differ": len(differ), "first": differ[:20]}))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
