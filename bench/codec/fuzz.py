"""Mutation fuzzer for the codec, seeded with real traffic. Not a test; run from the
repository root:

    .venv/bin/python -m bench.codec.fuzz --seconds 600      # a long run, a fresh seed
    .venv/bin/python -m bench.codec.fuzz --seed 0 --runs 20000 --seconds 60 --json
                                                            # what tests/codec/test_fuzz_short.py runs

Seeds: every frame captured in tests/data/golden (decoded as the api and version it
was sent as), the record batches inside their Produce requests and Fetch responses and
those batches' compressed bodies, the group payloads of their JoinGroup/SyncGroup
frames, a few SASL tokens, and the records tests' batches when tests/ imports.

Each input is a corpus entry (of a target picked at random: records get as many runs as
requests though they have fewer seeds) with 1-4 mutations: bit flips, interesting bytes, int16,
int32 and varint values, inserts, deletes, duplicated runs, truncation, splices with
another entry, a response decoded as another version. An input that reaches an outcome
not seen before for its target (decoded, or a new DecodeError reason) joins the corpus,
so later mutations start further in. Requests and responses that decode are followed
into their records, group payloads and SASL tokens, as the proxy's hooks would.

Invariants, per input (a violation is a finding, saved under bench/codec/fuzz-findings/):
* only codec.errors.DecodeError is raised; codec.sasl raises nothing at all;
* tracemalloc's peak stays under 64 x the input's size + 1 MiB (the Rust decompressors
  allocate outside its sight; their output is capped by a 64 KiB max_bytes here);
* it takes less than --budget seconds (an input over it is timed again, so that a busy
  machine's stall is not a finding); after --hang seconds an alarm interrupts it.
Exit status 1 when there are findings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import signal
import sys
import time
import traceback
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from codec import ApiKey, decode_request, decode_request_header, decode_response
from codec.errors import DecodeError
from codec.groups import decode_assignment, decode_subscription, group_payloads
from codec.peek import peek_request, produce_acks
from codec.records import decompress, iter_batches, iter_records, summarize
from codec.sasl import sasl_principal

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"
FINDINGS = Path(__file__).resolve().parent / "fuzz-findings"
MAX_BYTES = 64 * 1024  # max_bytes given to the records readers and decompress
CORPUS_CAP = 5_000  # per target
SAVED_PER_KIND = 5  # inputs saved per distinct finding; the rest are only counted
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "OAUTHBEARER", "GSSAPI")
PROTOCOL_TYPES = ("consumer", "connect")
INT32S = (0, 1, -1, 2, 7, 61, 255, 65536, 2**24, 2**31 - 1, -(2**31))
INT16S = (0, 1, -1, 2, 0x7FFF, -0x8000, 255)
VARINTS = (b"\x00", b"\x01", b"\x7f", b"\x80\x01", b"\xff\xff\xff\xff\x0f", b"\x80" * 5 + b"\x08")
BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)


@dataclass(frozen=True, slots=True)
class Case:
    target: str  # request, response, records, compressed, group, sasl
    data: bytes
    api_key: int = -1  # response: decode as this api and version
    version: int = -1  # compressed: the codec id
    param: str = ""  # group: protocol type; sasl: mechanism

    def describe(self) -> str:
        where = f" api {self.api_key} v{self.version}" if self.api_key >= 0 else ""
        return f"{self.target}{where}{' ' + self.param if self.param else ''}, {len(self.data)} B"


# --- seeds -----------------------------------------------------------------------------


def golden_cases() -> list[Case]:
    index = json.loads((GOLDEN / "index.json").read_text())
    cases = []
    for entry in index["frames"]:
        data = (GOLDEN / entry["file"]).read_bytes()
        target = "request" if entry["direction"] == "req" else "response"
        cases.append(Case(target, data, entry["api_key"], entry["api_version"]))
    return cases


def derived_cases(frames: list[Case]) -> list[Case]:
    """What the proxy reads inside frames: records, compressed bodies, group payloads."""
    cases: list[Case] = []
    for frame in frames:
        try:
            body = decode(frame).body
        except DecodeError:
            continue
        for records in fields_named(body, "records"):
            cases.append(Case("records", bytes(records)))
            cases.extend(compressed_bodies(bytes(records)))
        for name in ("metadata", "assignment"):
            for payload in fields_named(body, name):
                cases.extend(Case("group", bytes(payload), param=p) for p in PROTOCOL_TYPES)
    return cases


def compressed_bodies(records: bytes) -> Iterator[Case]:
    try:
        for header in iter_batches(records, allow_partial_tail=True):
            if header.magic == 2 and header.codec:
                body = records[header.position + 61 : header.end]
                yield Case("compressed", body, version=header.codec)
    except DecodeError:
        return


def sasl_cases() -> list[Case]:
    jwt = b"eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9."
    tokens = {
        "PLAIN": b"\x00alice\x00secret",
        "SCRAM-SHA-256": b"n,,n=al=2Cice,r=fyko+d2lbbFgONRv9qkxdawL",
        "OAUTHBEARER": b"n,,\x01auth=Bearer " + jwt + b"\x01\x01",
        "GSSAPI": b"\x60\x82\x01\x00",
    }
    return [Case("sasl", token, param=mechanism) for mechanism, token in tokens.items()]


def records_test_batches() -> list[Case]:
    """The records tests' batches (all codecs, legacy and v2), if tests/ imports here."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from support.records_oracle import CODECS, MIXED, build_legacy, build_v2, make_specs
    except ImportError:
        return []
    finally:
        sys.path.remove(str(ROOT / "tests"))
    batches = [MIXED] + [build_v2(make_specs(6), compression=c) for c in CODECS]
    batches += [
        build_legacy(make_specs(3, headers=False), magic=m, compression="gzip") for m in (0, 1)
    ]
    cases = [Case("records", batch) for batch in batches]
    for batch in batches:
        cases.extend(compressed_bodies(batch))
    return cases


def load_seeds() -> list[Case]:
    frames = golden_cases()
    return frames + derived_cases(frames) + sasl_cases() + records_test_batches()


def fields_named(value: Any, name: str) -> Iterator[bytes | memoryview]:
    """Every bytes value under key `name` anywhere in a decoded body."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == name and isinstance(item, bytes | memoryview):
                yield item
            else:
                yield from fields_named(item, name)
    elif isinstance(value, list):
        for item in value:
            yield from fields_named(item, name)


# --- running one input -----------------------------------------------------------------


def decode(case: Case) -> Any:
    if case.target == "request":
        return decode_request(case.data)
    return decode_response(case.data, case.api_key, case.version)


def run_frame(case: Case) -> None:
    if case.target == "request":
        api_key, version, _ = peek_request(case.data)
        if api_key == ApiKey.PRODUCE:
            produce_acks(case.data, version)
        decode_request_header(case.data)
    message = decode(case)
    kind = case.target
    group_payloads(message.api_key, kind, message.body)
    for records in fields_named(message.body, "records"):
        read_records(records)
    if message.api_key == ApiKey.SASL_AUTHENTICATE and kind == "request":
        for mechanism in MECHANISMS:
            check_principal(sasl_principal(mechanism, message.body["auth_bytes"] or b""))


def read_records(buf: bytes | memoryview) -> None:
    """All three readers, their flags varied by the input (so runs are repeatable)."""
    partial, crc = bool(len(buf) & 1), bool(len(buf) & 2)
    list(iter_batches(buf, allow_partial_tail=partial, max_bytes=MAX_BYTES))
    summarize(buf, allow_partial_tail=partial, verify_crc=crc, max_bytes=MAX_BYTES)
    for record in iter_records(
        buf, allow_partial_tail=partial, verify_crc=crc, max_bytes=MAX_BYTES
    ):
        _ = (record.offset, record.timestamp, record.key, record.value, len(record.headers))


def check_principal(name: str | None) -> None:
    if name is not None and (not isinstance(name, str) or len(name) > 256):
        raise AssertionError(f"sasl_principal returned {name!r}")


def run_sasl(case: Case) -> None:
    try:
        check_principal(sasl_principal(case.param, case.data))
    except DecodeError as exc:  # sasl promises to raise nothing at all
        raise AssertionError(f"sasl_principal raised {exc!r}") from None


def run_group(case: Case) -> None:
    try:
        decode_subscription(case.param, case.data)
    finally:
        decode_assignment(case.param, case.data)


RUNNERS: dict[str, Callable[[Case], object]] = {
    "request": run_frame,
    "response": run_frame,
    "records": lambda case: read_records(case.data),
    "compressed": lambda case: decompress(case.version, case.data, max_bytes=MAX_BYTES),
    "group": run_group,
    "sasl": run_sasl,
}


# --- mutations -------------------------------------------------------------------------


def mutate(case: Case, corpus: list[Case], rng: random.Random) -> Case:
    data = bytearray(case.data)
    for _ in range(rng.randint(1, 4)):
        rng.choice(MUTATORS)(data, rng, corpus)
    case = replace(case, data=bytes(data))
    if case.target == "response" and rng.random() < 0.05:
        case = replace(case, version=rng.randint(0, 20))  # a broker answering another version
    return case


def _flip(data: bytearray, rng: random.Random, _: list[Case]) -> None:
    if data:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)


def _byte(data: bytearray, rng: random.Random, _: list[Case]) -> None:
    if data:
        data[rng.randrange(len(data))] = rng.choice(BYTES)


def _int(data: bytearray, rng: random.Random, _: list[Case]) -> None:
    width, values = (4, INT32S) if rng.random() < 0.6 else (2, INT16S)
    if len(data) >= width:
        at = rng.randrange(len(data) - width + 1)
        value = rng.choice(values + (len(data) - at,))  # "the rest of the frame" too
        value = min(value, 2 ** (8 * width - 1) - 1)
        data[at : at + width] = value.to_bytes(width, "big", signed=True)


def _varint(data: bytearray, rng: random.Random, _: list[Case]) -> None:
    at = rng.randrange(len(data) + 1)
    span = rng.randint(0, 2)
    data[at : at + span] = rng.choice(VARINTS)


def _insert(data: bytearray, rng: random.Random, _: list[Case]) -> None:
    at = rng.randrange(len(data) + 1)
    data[at:at] = rng.randbytes(rng.randint(1, 16))


def _delete(data: bytearray, rng: random.Random, _: list[Case]) -> None:
    if data:
        at = rng.randrange(len(data))
        del data[at : at + rng.randint(1, 16)]


def _duplicate(data: bytearray, rng: random.Random, _: list[Case]) -> None:
    if data and len(data) < 1 << 16:
        at = rng.randrange(len(data))
        run = data[at : at + rng.randint(1, 64)]
        at = rng.randrange(len(data) + 1)
        data[at:at] = run * rng.randint(1, 8)


def _truncate(data: bytearray, rng: random.Random, _: list[Case]) -> None:
    if data:
        del data[rng.randrange(len(data)) :]


def _splice(data: bytearray, rng: random.Random, corpus: list[Case]) -> None:
    other = rng.choice(corpus).data
    if data and other:
        data[rng.randrange(len(data)) :] = other[rng.randrange(len(other)) :]


MUTATORS = (_flip, _byte, _int, _int, _varint, _insert, _delete, _duplicate, _truncate, _splice)


# --- the loop --------------------------------------------------------------------------


class Hang(BaseException):
    """Raised by the alarm inside a decoder that runs too long (BaseException: no
    `except Exception` in the codec can swallow it)."""


@dataclass
class Stats:
    executions: int = 0
    seconds: float = 0.0
    types: Counter[str] = field(default_factory=Counter)
    per_target: Counter[str] = field(default_factory=Counter)
    outcomes: set[tuple[str, int, int, str]] = field(default_factory=set)
    findings: Counter[str] = field(default_factory=Counter)
    slowest: tuple[float, str] = (0.0, "")
    stalls: int = 0  # inputs over the budget once, not when timed again
    memory: tuple[float, str] = (0.0, "")  # the highest peak / limit ratio, and its input

    def summary(self, corpus: int, seeds: int) -> dict[str, Any]:
        return {
            "executions": self.executions,
            "seconds": round(self.seconds, 1),
            "exec_per_s": round(self.executions / max(self.seconds, 1e-9)),
            "per_target": dict(self.per_target),
            "exception_types": dict(self.types),
            "distinct_outcomes": len(self.outcomes),
            "seeds": seeds,
            "corpus": corpus,
            "slowest_s": round(self.slowest[0], 4),
            "slowest_input": self.slowest[1],
            "stalls": self.stalls,
            "highest_memory_ratio": round(self.memory[0], 3),
            "highest_memory_input": self.memory[1],
            "findings": sum(self.findings.values()),
            "finding_kinds": dict(self.findings),
        }


@dataclass
class Fuzzer:
    seeds: list[Case]
    rng: random.Random
    budget: float
    hang: float
    findings_dir: Path
    stats: Stats = field(default_factory=Stats)
    by_target: dict[str, list[Case]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for case in self.seeds:
            self.by_target.setdefault(case.target, []).append(case)

    def pick(self) -> tuple[Case, list[Case]]:
        """A corpus entry of a target chosen uniformly, and that target's entries."""
        entries = self.by_target[self.rng.choice(sorted(self.by_target))]
        return self.rng.choice(entries), entries

    def run_one(self, case: Case) -> None:
        limit = 64 * len(case.data) + (1 << 20)
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        started = time.perf_counter()
        outcome, error = self._execute(case)
        took = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1] - base
        self._account(case, outcome, took, peak / limit)
        if error is not None:
            self._finding(error[0], case, error[1])
        elif took > self.budget and self._still_slow(case):
            self._finding("slow", case, f"{took:.3f} s, budget {self.budget} s")
        elif peak > limit:
            self._finding("memory", case, f"peak {peak} B, limit {limit} B")

    def _execute(self, case: Case) -> tuple[str, tuple[str, str] | None]:
        signal.setitimer(signal.ITIMER_REAL, self.hang)
        try:
            RUNNERS[case.target](case)
            return "decoded", None
        except DecodeError as exc:
            self.stats.types[type(exc).__name__] += 1
            return _shape(exc.reason), None
        except Hang:
            return "hang", ("hang", f"interrupted after {self.hang} s")
        except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
            self.stats.types[type(exc).__name__] += 1
            return type(exc).__name__, ("exception", traceback.format_exc())
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _still_slow(self, case: Case) -> bool:
        started = time.perf_counter()
        self._execute(case)
        took = time.perf_counter() - started
        if took <= self.budget:
            self.stats.stalls += 1
        return took > self.budget

    def _account(self, case: Case, outcome: str, took: float, memory: float) -> None:
        stats = self.stats
        stats.executions += 1
        stats.per_target[case.target] += 1
        key = (case.target, case.api_key, case.version, outcome)
        if key not in stats.outcomes:
            stats.outcomes.add(key)
            self._keep(case)
        if took > stats.slowest[0]:
            stats.slowest = (took, case.describe())
        if memory > stats.memory[0]:
            stats.memory = (memory, case.describe())

    def _keep(self, case: Case) -> None:
        entries = self.by_target.setdefault(case.target, [])
        if len(entries) < CORPUS_CAP:
            entries.append(case)
        else:
            entries[self.rng.randrange(CORPUS_CAP)] = case

    def _finding(self, kind: str, case: Case, detail: str) -> None:
        last = detail.strip().splitlines()[-1] if detail.strip() else ""
        signature = f"{kind}: {case.target}: {_shape(last)}"
        self.stats.findings[signature] += 1
        if self.stats.findings[signature] > SAVED_PER_KIND:
            return
        self.findings_dir.mkdir(parents=True, exist_ok=True)
        name = f"{kind}-{case.target}-{hashlib.sha1(case.data).hexdigest()[:12]}"
        (self.findings_dir / f"{name}.bin").write_bytes(case.data)
        about = f"{case.describe()}\napi_key={case.api_key} version={case.version}"
        about += f" param={case.param!r}\n{detail}\n"
        (self.findings_dir / f"{name}.txt").write_text(about)
        print(f"FINDING {signature}\n  saved {name}.bin ({case.describe()})", file=sys.stderr)

    def loop(self, seconds: float, runs: int, progress: float) -> None:
        """Until `seconds` pass or `runs` inputs ran (a fixed count and seed replay
        exactly, whatever the machine's speed)."""
        started = time.monotonic()
        deadline, report = started + seconds, started + progress
        while (now := time.monotonic()) < deadline and self.stats.executions < runs:
            case, entries = self.pick()
            self.run_one(mutate(case, entries, self.rng))
            if now >= report:
                report = now + progress
                rate = self.stats.executions / (now - started)
                print(f"  {self.stats.executions} executions, {rate:.0f}/s", file=sys.stderr)
        self.stats.seconds = time.monotonic() - started


def _shape(message: str) -> str:
    """A message without its numbers (CRCs, offsets, sizes): one outcome per kind."""
    return _NUMBERS.sub("N", message)[:120]


_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|-?\d+")


def _alarm(signum: int, frame: object) -> None:
    raise Hang


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run")
    parser.add_argument("--runs", type=int, default=10**12, help="stop after this many inputs")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds allowed per input")
    parser.add_argument("--hang", type=float, default=10.0, help="seconds before the alarm")
    parser.add_argument("--findings", type=Path, default=FINDINGS, help="where inputs go")
    parser.add_argument("--progress", type=float, default=30.0, help="seconds between reports")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else time.time_ns() % 2**32
    seeds = load_seeds()
    signal.signal(signal.SIGALRM, _alarm)
    tracemalloc.start()
    fuzzer = Fuzzer(list(seeds), random.Random(seed), args.budget, args.hang, args.findings)
    for case in seeds:  # every seed must pass too, and sets the first outcomes
        fuzzer.run_one(case)
    fuzzer.loop(args.seconds, args.runs, args.progress)
    tracemalloc.stop()
    corpus = sum(len(entries) for entries in fuzzer.by_target.values())
    summary = {"seed": seed, **fuzzer.stats.summary(corpus, len(seeds))}
    print(json.dumps(summary) if args.json else _human(summary))
    return 1 if summary["findings"] else 0


def _human(summary: dict[str, Any]) -> str:
    return "\n".join(f"{key}: {value}" for key, value in summary.items())


if __name__ == "__main__":
    sys.exit(main())
