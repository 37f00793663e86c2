"""proxy.config: the documented file is the default, and every error names its key."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import get_type_hints

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.paths import REPO

from proxy.config import Address, ConfigError, Overrides, readable_file
from proxy.config.core import config_section, integer, read_section, seconds
from proxy.config.language import Integer
from proxy.features import (
    MAXIMA,
    SECTION_SCHEMAS,
    Config,
    documented_file,
    load_config,
    parse_config,
    summary,
)
from proxy.observe.kip1313.config import HeaderV3Rule
from proxy.observe.lag.config import LagConfig
from proxy.preflight import check_api_names

CONTRACT = REPO / "config" / "kafkalens.yaml"


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(yaml.safe_load(text))
    return str(info.value)


def test_the_documented_file_is_the_default() -> None:
    assert load_config(CONTRACT) == Config() == load_config(None) == parse_config({})
    assert parse_config(None) == Config()


def test_the_documented_file_is_written_from_the_declarations() -> None:
    """Stale: `python -m proxy.config > config/kafkalens.yaml` writes it again."""
    assert CONTRACT.read_text(encoding="utf-8") == documented_file(), (
        "config/kafkalens.yaml is stale: python -m proxy.config > config/kafkalens.yaml"
    )


def test_the_documented_file_gives_every_bound_with_its_reason() -> None:
    comments = " ".join(
        line.strip().lstrip("#").strip() for line in CONTRACT.read_text().splitlines()
    )
    missing = []
    for section, schema in SECTION_SCHEMAS.items():
        for f in fields(schema):
            kind = f.metadata["kafkalens.key"].kind
            if isinstance(kind, Integer):
                stated = f"{kind.minimum}..{kind.maximum} ({kind.why})"
                if stated not in comments:
                    missing.append(f"{section}.{f.name}: {stated}")
    assert not missing
    assert "Allowed: more than 0 and at most 86400 (1 day: a dead peer must be let go some time)" in comments


def test_a_key_declared_once_is_read_checked_and_suggested() -> None:
    """The one reader knows a key from its declaration alone: no parse line, no table."""

    @config_section
    class Extra:
        max_things: int = integer(default=5, at_most=(10, "each thing costs memory"), doc="kept")
        pace_seconds: float = seconds(default=1.0, at_most=(60, "1 minute"), doc="how often")

    assert read_section(Extra, None, "extra") == Extra() == Extra(max_things=5, pace_seconds=1)
    assert read_section(Extra, {"max_things": 10, "pace_seconds": 2}, "extra") == Extra(
        max_things=10, pace_seconds=2.0
    )
    for data, message in [
        ({"max_things": 11}, "extra.max_things: must be 1..10 (each thing costs memory), got 11"),
        ({"max_things": "5"}, "extra.max_things: must be a positive integer, got '5'"),
        ({"pace_seconds": 61}, "extra.pace_seconds: must be more than 0 and at most 60 (1 minute), got 61"),
        ({"max_thing": 1}, "extra.max_thing: unknown key (did you mean max_things?)"),
        ({"idle_timeout_seconds": 1}, "extra.idle_timeout_seconds: unknown key (did you mean limits.idle_timeout_seconds?)"),
        (3, "extra: must be a mapping, got 3"),
    ]:
        with pytest.raises(ConfigError) as info:
            read_section(Extra, data, "extra", root=Config)
        assert str(info.value) == message
    with pytest.raises(TypeError, match="declare it with a kind"):

        @config_section
        class Undeclared:
            size: int = 5


def test_the_commented_out_sections_parse(tmp_path: Path) -> None:
    """Uncommenting the example sections of the contract gives a valid file."""
    for name in ("ca.crt", "client.crt", "client.key", "server.crt", "server.key"):
        (tmp_path / name).write_text("x")
    text = CONTRACT.read_text().replace("/etc/kafkalens/tls", str(tmp_path))
    lines = []
    in_example = False
    for line in text.splitlines():
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        starts = stripped in ("# tls:", "# gateway:", "# upstream_tls:")
        in_example = starts or (in_example and stripped.startswith("#   "))
        lines.append(indent + stripped[2:] if in_example else line)
    data = yaml.safe_load("\n".join(lines))
    data["mode"] = "gateway"
    del data["listeners"]
    config = parse_config(data)
    assert config.gateway is not None
    assert config.gateway.bootstrap_servers == (
        Address("broker-0", 9092),
        Address("broker-1", 9092),
    )
    assert config.gateway.broker_port_base == 9100
    assert config.upstream_tls is not None and config.upstream_tls.check_hostname
    sidecar = yaml.safe_load("\n".join(lines))
    del sidecar["gateway"]
    listener = parse_config(sidecar).listeners[0]
    assert listener.tls is not None and listener.tls.min_version == "TLSv1.2"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "limits: {max_frame_bytes: -1}",
            "limits.max_frame_bytes: must be a positive integer, got -1",
        ),
        (
            "limits: {max_frame_bytes: 1.5}",
            "limits.max_frame_bytes: must be a positive integer, got 1.5",
        ),
        (
            "limits: {idle_timeout_seconds: 0}",
            "limits.idle_timeout_seconds: must be a positive number, got 0",
        ),
        (
            "limits: {max_connections: true}",
            "limits.max_connections: must be a positive integer or auto, got True",
        ),
        (
            "limits: {max_frame_bytes_before_auth: 200000000}",
            "limits.max_frame_bytes_before_auth: must not exceed",
        ),
        ("limits: {shutdown_grace: 1}", "limits.shutdown_grace: unknown key"),
        ("colour: blue", "colour: unknown key"),
        ("mode: mesh", "mode: must be one of sidecar, gateway, got 'mesh'"),
        ("mode: gateway", "gateway: is required when mode is gateway"),
        ("listeners: []", "listeners: must be a non-empty list, got a list"),
        (
            "listeners: [{name: a, listen: 'x', upstream: 'h:1'}]",
            "listeners[0].listen: must be HOST:PORT, got 'x'",
        ),
        (
            "listeners: [{name: a, listen: ':1', upstream: 'h:0'}]",
            "listeners[0].listen: must be HOST:PORT",
        ),
        (
            "listeners: [{name: a, listen: 'h:1', upstream: 'h:0'}]",
            "listeners[0].upstream: port must be 1..65535, got 0",
        ),
        (
            "listeners: [{name: a, listen: 'h:1', upstream: 'h:70000'}]",
            "listeners[0].upstream: port must be 1..65535",
        ),
        ("listeners: [{listen: 'h:1', upstream: 'h:2'}]", "listeners[0].name: is required"),
        (
            "listeners: [{name: a, listen: 'h:1', upstream: 'h:2', colour: 1}]",
            "listeners[0].colour: unknown key",
        ),
        (
            "listeners: [{name: a, listen: 'h:1', upstream: 'h:2'}, {name: a, listen: 'h:3', upstream: 'h:2'}]",
            "listeners[1].name: duplicate listener name 'a'",
        ),
        (
            "listeners: [{name: a, listen: 'h:1', upstream: 'h:2', tls: {cert: /nope.crt, key: /nope.key}}]",
            "listeners[0].tls.cert: file not found: /nope.crt",
        ),
        ("metrics: {listen: 'localhost'}", "metrics.listen: must be HOST:PORT, got 'localhost'"),
        (
            "metrics: {max_label_values: 0}",
            "metrics.max_label_values: must be a positive integer, got 0",
        ),
        ("request_log: {sample_rate: 2}", "request_log.sample_rate: must be a number 0..1, got 2"),
        ("request_log: {apis: [Produce, 'no such']}", "request_log.apis[1]: must be an api name"),
        ("request_log: {path: ''}", "request_log.path: must be a non-empty string, got ''"),
        (
            "request_log: {errors_only: 'yes'}",
            "request_log.errors_only: must be true or false, got 'yes'",
        ),
        (
            "kip1313: {enforcement: block}",
            "kip1313.enforcement: must be one of log, reject, got 'block'",
        ),
        (
            "kip1313: {header_v3: {Metadata: 'x'}}",
            "kip1313.header_v3.Metadata: must be versions like",
        ),
        (
            "kip1313: {header_v3: {Metadata: '5-3'}}",
            "kip1313.header_v3.Metadata: version range '5-3' is empty",
        ),
        ("workers: 0", "workers: must be a positive integer, got 0"),
        (
            "upstream_tls: {check_hostname: 1}",
            "upstream_tls.check_hostname: must be true or false, got 1",
        ),
        (
            "gateway: {bootstrap_servers: []}",
            "gateway.bootstrap_servers: must list at least one HOST:PORT",
        ),
        ("- a list", "(top level): must be a mapping, got a list"),
        ("limits: 5", "limits: must be a mapping, got 5"),
    ],
)
def test_errors_name_the_key(text: str, message: str) -> None:
    assert error_of(text).startswith(message)


def test_values_and_forms() -> None:
    config = parse_config(
        yaml.safe_load(
            """
            listeners:
              - {name: v6, listen: "[::1]:0", upstream: "broker:9093"}
            limits: {connect_timeout_seconds: 0.5, max_frame_bytes: 2048, max_frame_bytes_before_auth: 1024}
            request_log: {apis: [Produce, 1], sample_rate: 0}
            kip1313: {enforcement: reject, header_v3: {DeleteGroups: "3+", Metadata: "14-15", 19: 7}}
            """
        )
    )
    assert (
        config.listeners[0].listen == Address("::1", 0)
        and str(config.listeners[0].listen) == "[::1]:0"
    )
    assert config.limits.connect_timeout_seconds == 0.5
    assert config.request_log.apis == ("Produce", 1) and config.request_log.sample_rate == 0.0
    assert config.kip1313.header_v3 == (
        HeaderV3Rule("DeleteGroups", 3, None),
        HeaderV3Rule("Metadata", 14, 15),
        HeaderV3Rule(19, 7, 7),
    )


def test_max_connections_is_auto_unless_a_number_is_given() -> None:
    """`auto` (also left out, or null) is None: sized to the open-file limit at start
    (proxy/forward/fdlimit.py); a number is taken as given."""
    for text in ("{}", "limits: {max_connections: auto}", "limits: {max_connections: null}"):
        assert parse_config(yaml.safe_load(text)).limits.max_connections is None, text
    assert parse_config({"limits": {"max_connections": 5}}).limits.max_connections == 5
    assert error_of("limits: {max_connections: automatic}") == (
        "limits.max_connections: must be a positive integer or auto, got 'automatic'"
    )
    assert "max_connections: auto\n" in CONTRACT.read_text()


def test_sizes_and_durations_take_units_and_bare_numbers() -> None:
    """`64KiB`, `10MB`, `30s`, `1h30m` as people write them; bare numbers as before;
    a bound or a typo named with the value as written."""
    config = parse_config(yaml.safe_load(
        """
        limits: {max_frame_bytes: 10MB, observe_whole_frame_bytes: 64KiB, socket_buffer_bytes: 1048576,
                 idle_timeout_seconds: 10m, request_timeout_seconds: 1h30m, frame_timeout_seconds: 45}
        request_log: {max_bytes: 1.5 GiB, flush_interval_seconds: 500ms}
        telemetry: {push_interval_ms: 30s}
        """
    ))  # fmt: skip
    limits = config.limits
    assert (limits.max_frame_bytes, limits.observe_whole_frame_bytes, limits.socket_buffer_bytes) == (
        10_000_000, 65_536, 1_048_576
    )
    assert (limits.idle_timeout_seconds, limits.request_timeout_seconds, limits.frame_timeout_seconds) == (
        600.0, 5400.0, 45.0
    )
    assert config.request_log.max_bytes == 3 * 2**29 and config.request_log.flush_interval_seconds == 0.5
    assert config.telemetry.push_interval_ms == 30_000
    for text, message in [
        ("limits: {max_frame_bytes: 10XB}", "limits.max_frame_bytes: must be bytes, or with a unit: 64KiB, 10MB, 1GiB; got '10XB'"),
        ("limits: {max_frame_bytes: 3GiB}", "limits.max_frame_bytes: must be 1..2147483647 (a Kafka frame's length is an int32), got '3GiB'"),
        ("limits: {idle_timeout_seconds: 2d}", "limits.idle_timeout_seconds: must be more than 0 and at most 86400 (1 day: a dead peer must be let go some time), got '2d'"),
        ("limits: {idle_timeout_seconds: 30m1h}", "limits.idle_timeout_seconds: must be seconds, or with a unit: 500ms, 30s, 10m, 1h, 1d, 1h30m; got '30m1h'"),
        ("limits: {max_frame_bytes: 1.5B}", "limits.max_frame_bytes: must be bytes, or with a unit: 64KiB, 10MB, 1GiB; got '1.5B'"),
    ]:
        assert error_of(text) == message


def test_every_size_and_duration_key_takes_units() -> None:
    """Declared by kind, not by hand: every key named *_bytes is a size, every *_seconds
    key a duration (so a new key gets units by its name's promise)."""
    from proxy.config.language import Milliseconds, Seconds, Size, declared, section_schemas
    from proxy.features import Config

    for path, cls in section_schemas(Config).items():
        for name, (_field, key) in declared(cls).items():
            if name.endswith("_bytes"):
                assert isinstance(key.kind, Size), f"{path}.{name}"
            if name.endswith("_seconds"):
                assert isinstance(key.kind, Seconds), f"{path}.{name}"
            if name.endswith("_ms"):
                assert isinstance(key.kind, Milliseconds), f"{path}.{name}"
    assert "64KiB, 10MB" in CONTRACT.read_text() and "500ms, 30s, 10m, 1h" in CONTRACT.read_text()


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = tmp_path / "k.yaml"
    path.write_text(
        "listeners: [{name: main, listen: '0.0.0.0:1', upstream: 'b:2'}]\nrequest_log: {path: x.log}\n"
    )
    flags = Overrides(listen="127.0.0.1:9", upstream="c:3", metrics="127.0.0.1:8", request_log="-")
    config = load_config(path, flags)
    [listener] = config.listeners
    assert (listener.name, listener.listen, listener.upstream) == (
        "main",
        Address("127.0.0.1", 9),
        Address("c", 3),
    )
    assert config.metrics.listen == Address("127.0.0.1", 8) and config.request_log.path == "-"
    assert load_config(None, Overrides(upstream="c:3")).listeners[0].listen == Address(
        "0.0.0.0", 9092
    )


def test_flag_errors_name_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--upstream: must be HOST:PORT"):
        load_config(None, Overrides(upstream="nohost"))
    with pytest.raises(ConfigError, match=r"^--metrics: port must be 0..65535"):
        load_config(None, Overrides(metrics="h:99999"))
    two = tmp_path / "two.yaml"
    two.write_text(
        "listeners: [{name: a, listen: 'h:1', upstream: 'b:2'}, {name: b, listen: 'h:3', upstream: 'b:2'}]"
    )
    with pytest.raises(
        ConfigError, match=r"^--listen: applies to a config with exactly one listener"
    ):
        load_config(two, Overrides(listen="h:5"))


def test_gateway_flags() -> None:
    config = load_config(None, Overrides(listen="0.0.0.0:9"))
    assert config.mode == "sidecar"
    data = {"mode": "gateway", "gateway": {"bootstrap_servers": ["b:1"], "advertised_host": "p"}}
    config = parse_config(data)
    assert config.listeners == () and config.gateway is not None
    assert config.gateway.bootstrap_listen == Address("0.0.0.0", 9092)


def test_file_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("limits: {max_frame_bytes: [1\n")
    with pytest.raises(ConfigError, match="at line"):
        load_config(bad)


def test_summary_lines() -> None:
    lines = summary(Config())
    assert "listener plaintext: 0.0.0.0:9092 -> 127.0.0.1:19092" in lines
    assert "metrics: http://0.0.0.0:9180/metrics" in lines
    assert "consumer lag and topic traffic: on" in lines
    assert "consumer lag and topic traffic: off" in summary(Config(lag=LagConfig(enabled=False)))


# --- bounds and unknown keys (issue 18, item 6) ---------------------------------------


def with_value(key: str, value: object) -> dict[str, object]:
    """A minimal valid document with `key` (a MAXIMA path) set to `value`."""
    data: dict[str, object] = {}
    if key.startswith("gateway."):
        data = {"mode": "gateway", "gateway": {"bootstrap_servers": ["b:1"], "advertised_host": "p"}}
    if key == "limits.max_frame_bytes_before_auth":
        data["limits"] = {"max_frame_bytes": MAXIMA["limits.max_frame_bytes"][0]}  # its ceiling
    *sections, name = key.split(".")
    target = data
    for section in sections:  # nested sections too (telemetry.log.x)
        target = target.setdefault(section, {})  # type: ignore[assignment]
    target[name] = value
    return data


def is_a_key(key: str) -> bool:
    section, _, name = key.rpartition(".")
    schema = SECTION_SCHEMAS.get(section)
    return schema is not None and name in {f.name for f in fields(schema)}



def test_the_table_names_keys() -> None:
    """MAXIMA, a view of the declarations, names declared keys by their paths."""
    assert [key for key in MAXIMA if not is_a_key(key)] == []


@pytest.mark.parametrize("key", sorted(MAXIMA))
def test_every_number_has_a_finite_maximum_with_its_reason(key: str) -> None:
    maximum, why = MAXIMA[key]
    parse_config(with_value(key, maximum))  # the maximum itself is allowed
    over = [maximum + 1] if isinstance(maximum, int) and "seconds" not in key else []
    over += [maximum * 1.5, float("inf")] if "_seconds" in key else []
    assert over
    for value in over:
        with pytest.raises(ConfigError) as info:
            parse_config(with_value(key, value))
        message = str(info.value)
        assert message.startswith(f"{key}: must be "), message
        assert f"{maximum} ({why}), got {value!r}" in message and "\n" not in message


def test_every_numeric_key_is_in_the_table() -> None:
    """Every number declares its maximum (integer() and seconds() require at_most)."""
    missing = []
    for section, schema in SECTION_SCHEMAS.items():
        hints = get_type_hints(schema)
        for f in fields(schema):
            if hints[f.name] in (int, float):
                key = f"{section}.{f.name}" if section else f.name
                if key not in MAXIMA and key != "request_log.sample_rate":  # 0..1 itself
                    missing.append(key)
    assert not missing


def test_every_section_of_the_file_has_its_schema() -> None:
    """Walking the documented file: each mapping of keys has a SECTION_SCHEMAS entry,
    so its unknown keys are named before anything else."""
    document = yaml.safe_load(CONTRACT.read_text())
    sections = {""} | {k for k, v in document.items() if isinstance(v, dict)} | {"listeners[]"}
    sections.discard("kip1313.header_v3")
    assert sections <= set(SECTION_SCHEMAS)
    assert {"gateway", "upstream_tls", "listeners[].tls", "gateway.tls"} <= set(SECTION_SCHEMAS)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "limits: {idle_timeout_seconds: .inf}",
            "limits.idle_timeout_seconds: must be more than 0 and at most 86400 (1 day",
        ),
        ("limits: {connect_timeout_seconds: .nan}", "limits.connect_timeout_seconds: must be a positive number, got nan"),
        ("request_log: {sample_rate: .nan}", "request_log.sample_rate: must be a number 0..1, got nan"),
        ("request_log: {sample_rate: -.inf}", "request_log.sample_rate: must be a number 0..1, got -inf"),
        (
            "limits: {decompression_limit_bytes: 100000000000000000000}",
            "limits.decompression_limit_bytes: must be 1..4294967296 (4 GiB",
        ),
        ("workers: 100000", "workers: must be 1..256 ("),
        ("limits: {max_frame_bytes: 2147483648}", "limits.max_frame_bytes: must be 1..2147483647 ("),
    ],
)
def test_values_that_would_switch_a_protection_off(text: str, message: str) -> None:
    assert error_of(text).startswith(message)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # before "listeners[0].upstream: is required"
        (
            "listeners: [{name: a, listen: 'h:1', upstrem: 'h:2'}]",
            "listeners[0].upstrem: unknown key (did you mean upstream?)",
        ),
        # before "listeners[0].name: is required"
        (
            "listeners: [{nmae: a, listen: 'h:1', upstream: 'h:2'}]",
            "listeners[0].nmae: unknown key (did you mean name?)",
        ),
        ("limts: {}", "limts: unknown key (did you mean limits?)"),
        ("limits: {idle_timeout: 5}", "limits.idle_timeout: unknown key (did you mean idle_timeout_seconds?)"),
        ("max_frame_bytes: 5", "max_frame_bytes: unknown key (did you mean limits.max_frame_bytes?)"),
        ("metrics: {path: x}", "metrics.path: unknown key (did you mean request_log.path?)"),
        ("upstream: 'h:1'", "upstream: unknown key (did you mean listeners[].upstream?)"),
        (
            "mode: gateway\ngateway: {bootstrap_server: [b:1], advertised_host: p}",
            "gateway.bootstrap_server: unknown key (did you mean bootstrap_servers?)",
        ),
        (
            "listeners: [{name: a, listen: 'h:1', upstream: 'h:2', tls: {cert: /nope, kye: k}}]",
            "listeners[0].tls.kye: unknown key (did you mean key?)",
        ),
        ("upstream_tls: {check_hostnames: false}", "upstream_tls.check_hostnames: unknown key (did you mean check_hostname?)"),
        ("colour: blue", "colour: unknown key"),
    ],
)
def test_unknown_keys_come_first_with_the_nearest_known_key(text: str, message: str) -> None:
    assert error_of(text) == message


@pytest.mark.slow
def test_a_file_that_is_no_text_or_too_deep_is_one_error(tmp_path: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"limits: {\xff\xfe}\n")
    with pytest.raises(ConfigError, match=r"binary.yaml: not UTF-8 text"):
        load_config(binary)
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match=r"deep.yaml: nested too deeply"):
        load_config(deep)
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    with pytest.raises(ConfigError, match=r"folder.yaml: cannot read: Is a directory"):
        load_config(folder)


def test_readable_file(tmp_path: Path) -> None:
    good = tmp_path / "token"
    good.write_text("t")
    assert readable_file(str(good), "k") == str(good)
    with pytest.raises(ConfigError, match=r"^k: file not found: "):
        readable_file(str(tmp_path / "missing"), "k")
    with pytest.raises(ConfigError, match=r"^k: is a directory, not a file: "):
        readable_file(str(tmp_path), "k")


def test_the_maxima_the_documented_file_names_are_the_table() -> None:
    header = " ".join(CONTRACT.read_text().replace("#", " ").split())
    for key, stated, value in [
        ("workers", "workers 256", 256),
        ("limits.decompression_limit_bytes", "decompression_limit_bytes 4 GiB", 4 * 2**30),
        ("limits.max_frame_bytes", "sizes 2^31-1", 2**31 - 1),
        ("request_log.max_bytes", "max_bytes 1 TiB", 2**40),
        ("limits.max_connections", "connections 1048576", 1048576),
        ("limits.connect_timeout_seconds", "timeouts 1 hour", 3600),
        ("limits.idle_timeout_seconds", "idle_timeout_seconds 1 day", 86400),
    ]:
        assert stated in header and MAXIMA[key][0] == value, key


def test_a_key_given_twice_or_a_number_too_long_is_one_error(tmp_path: Path) -> None:
    twice = tmp_path / "twice.yaml"
    twice.write_text("limits: {max_frame_bytes: 2048}\nworkers: 1\nlimits: {max_connections: 5}\n")
    with pytest.raises(ConfigError, match=r"twice.yaml: duplicate key 'limits' at line 3$"):
        load_config(twice)
    inner = tmp_path / "inner.yaml"
    inner.write_text("limits: {max_connections: 5, max_connections: 6}\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'max_connections' at line 1$"):
        load_config(inner)
    merged = tmp_path / "merged.yaml"  # a merge key, then overriding one of its keys
    merged.write_text(
        "limits:\n  <<: {max_frame_bytes: 2048, max_frame_bytes_before_auth: 1024}\n"
        "  max_frame_bytes: 4096\n"
    )
    assert load_config(merged).limits.max_frame_bytes == 4096
    long = tmp_path / "long.yaml"
    long.write_text("workers: " + "9" * 5000 + "\n")
    with pytest.raises(ConfigError, match=r"long.yaml: Exceeds the limit \(4300 digits\)"):
        load_config(long)


# Any document: parse_config returns a Config or raises ConfigError, nothing else.
_KEYS = sorted({f.name for schema in SECTION_SCHEMAS.values() for f in fields(schema)})
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "-", "h:1", "[::1]:0", "127.0.0.1:9092", "3+", "5-3", "Produce", "x"]),
    st.text(max_size=8),
)
_DOCUMENTS = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.sampled_from(_KEYS), st.text(max_size=4), st.integers()), inner, max_size=4),
    ),
    max_leaves=12,
)


@pytest.mark.slow
@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_KEYS), _DOCUMENTS, max_size=5))
def test_any_document_is_a_config_or_a_config_error(document: dict[str, object]) -> None:
    try:
        config = parse_config(document)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    try:
        check_api_names(config)
    except ConfigError as exc:
        assert "\n" not in str(exc)


def test_the_streaming_decoders_bounds_come_from_the_config() -> None:
    from proxy.features import build_hooks
    from proxy.metrics import Metrics

    config = parse_config(
        {
            "listeners": [{"name": "p", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"}],
            "limits": {"observe_max_field_bytes": 1234, "observe_max_elements": 56},
        }
    )
    limits = build_hooks(config, Metrics()).stream_limits
    assert (limits.max_field_bytes, limits.max_elements) == (1234, 56)
