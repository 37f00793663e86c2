"""A file that passes `check-config` starts `proxy`; one that would not is one line
and exit code 2 from both, never a traceback (issue 18, item 6: the operator's cases)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from support.paths import REPO

from proxy.config import ConfigError
from proxy.features import Config, parse_config
from proxy.observe.request_log import LineSink
from proxy.preflight import (
    check_api_names,
    check_ports,
    check_request_log_path,
    check_startup,
    check_tls,
)
from proxy.tansu import free_port, wait_for_port

LOCAL = "127.0.0.1"


def config_of(text: str) -> Config:
    return parse_config(yaml.safe_load(text))


def error_of(check: Callable[[Config], None], config: Config) -> str:
    with pytest.raises(ConfigError) as info:
        check(config)
    return str(info.value)


# --- the checks ------------------------------------------------------------------------


def test_api_names_are_resolved_against_the_codec() -> None:
    check_api_names(config_of("request_log: {apis: [Produce, 1, 9999]}\nkip1313: {header_v3: {Metadata: '14+', 19: 7}}"))
    assert error_of(check_api_names, config_of("kip1313: {header_v3: {Metdata: '3+'}}")) == (
        "kip1313.header_v3.Metdata: unknown api 'Metdata' (did you mean Metadata?)"
    )
    assert error_of(check_api_names, config_of("request_log: {apis: [Fetch, produce]}")) == (
        "request_log.apis[1]: unknown api 'produce' (did you mean Produce?)"
    )
    assert error_of(check_api_names, config_of("kip1313: {header_v3: {Nothing: '1'}}")) == (
        "kip1313.header_v3.Nothing: unknown api 'Nothing'"
    )
    assert error_of(check_api_names, config_of("kip1313: {header_v3: {9999: '1'}}")) == (
        "kip1313.header_v3.9999: no api has key 9999 in this build's schemas"
    )


def test_request_log_path(tmp_path: Path) -> None:
    key = "request_log.path"
    check_request_log_path("-", key)
    deep = tmp_path / "missing" / "folders" / "requests.log"
    check_request_log_path(str(deep), key)  # the proxy creates the folders...
    LineSink(str(deep)).close()  # ...as the sink does
    assert deep.exists()
    check_request_log_path(str(deep), key)  # an existing file is appended to
    with pytest.raises(ConfigError, match=r"^request_log.path: .* is a directory; name a file in it$"):
        check_request_log_path(str(tmp_path), key)
    (tmp_path / "plain").write_text("x")
    with pytest.raises(ConfigError, match=r"^request_log.path: .*/plain is not a directory$"):
        check_request_log_path(str(tmp_path / "plain" / "sub" / "r.log"), key)
    # /proc takes no new files, even from root (for whom os.access says yes)
    with pytest.raises(ConfigError, match=r"^request_log.path: cannot create files in /proc: "):
        check_request_log_path("/proc/kafkalens-no/requests.log", key)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    for name in ("a", "b"):
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
             "-subj", f"/CN={name}"],
            cwd=folder, check=True, capture_output=True,
        )  # fmt: skip
    (folder / "garbage.crt").write_text("-----BEGIN CERTIFICATE-----\nnot base64\n")
    return folder


def tls_listener(cert: Path, key: Path, **extra: str) -> Config:
    more = "".join(f", {k}: {v}" for k, v in extra.items())
    return config_of(
        f"listeners: [{{name: a, listen: 'h:1', upstream: 'h:2', tls: {{cert: {cert}, key: {key}{more}}}}}]"
    )


def test_tls_files_must_load(certs: Path) -> None:
    check_tls(tls_listener(certs / "a.crt", certs / "a.key", client_ca=str(certs / "b.crt")))
    message = error_of(check_tls, tls_listener(certs / "garbage.crt", certs / "a.key"))
    assert message.startswith("listeners[0].tls: cannot load the certificate, key or CA: ")
    message = error_of(check_tls, tls_listener(certs / "a.crt", certs / "b.key"))  # not its key
    assert message.startswith("listeners[0].tls: cannot load the certificate, key or CA: ")
    message = error_of(check_tls, config_of(f"upstream_tls: {{ca: {certs / 'a.key'}}}"))
    assert message.startswith("upstream_tls: cannot load the certificate, key or CA: ")


def test_the_metrics_dir_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "none"))
    assert error_of(check_startup, Config()).startswith(
        "environment variable PROMETHEUS_MULTIPROC_DIR: "
    )
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    check_startup(Config())


def ports_config(listen: int, metrics: int) -> Config:
    return config_of(
        f"listeners: [{{name: a, listen: '{LOCAL}:{listen}', upstream: 'h:2'}}]\n"
        f"metrics: {{listen: '{LOCAL}:{metrics}'}}"
    )


def test_ports(tmp_path: Path) -> None:
    listen, metrics = free_port(), free_port()
    check_ports(ports_config(listen, metrics))
    check_ports(ports_config(listen, metrics))  # and released them
    with socket.create_server((LOCAL, 0)) as taken:
        port = taken.getsockname()[1]
        assert error_of(check_ports, ports_config(listen, port)).startswith(
            f"metrics.listen: cannot listen on {LOCAL}:{port}: "
        )
    assert error_of(check_ports, ports_config(listen, listen)).startswith(
        f"metrics.listen: cannot listen on {LOCAL}:{listen}: "
    )
    unresolvable = config_of("listeners: [{name: a, listen: 'no-such-host.invalid:1', upstream: 'h:2'}]")
    assert error_of(check_ports, unresolvable).startswith(
        "listeners[0].listen: cannot resolve no-such-host.invalid: "
    )


# --- the command line ------------------------------------------------------------------


def kafkalens(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Exit code, stdout, stderr; a proxy still running after 30 s failed the test."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running after 30 s (it started): {err}")
    return proc.returncode, out, err


def startable(tmp_path: Path, **sections: str) -> str:
    """A config that starts a proxy on free ports, with `sections` replaced."""
    parts = {
        "listeners": f"[{{name: a, listen: '{LOCAL}:{free_port()}', upstream: '{LOCAL}:1'}}]",
        "metrics": f"{{listen: '{LOCAL}:0'}}",
        "request_log": f"{{path: '{tmp_path / 'requests.log'}'}}",
    } | sections
    return "".join(f"{key}: {value}\n" for key, value in parts.items())


OPERATOR_CASES = {
    "unknown api": ({"kip1313": "{header_v3: {Metdata: '3+'}}"}, "kip1313.header_v3.Metdata: unknown api 'Metdata' (did you mean Metadata?)"),
    "log path is a directory": ({"request_log": "{path: /tmp}"}, "request_log.path: /tmp is a directory"),
    "log path under a file": ({"request_log": "{path: /etc/passwd/logs/r.log}"}, "request_log.path: /etc/passwd is not a directory"),
    "log path not creatable": ({"request_log": "{path: /proc/kafkalens/r.log}"}, "request_log.path: cannot create files in /proc"),
    "endless timeout": ({"limits": "{idle_timeout_seconds: .inf}"}, "limits.idle_timeout_seconds: must be more than 0 and at most 86400"),
    "huge decompression limit": ({"limits": "{decompression_limit_bytes: 100000000000000000000}"}, "limits.decompression_limit_bytes: must be 1..4294967296"),
    "too many workers": ({"workers": "100000"}, "workers: must be 1..256"),
    "typo": ({"listeners": "[{name: a, listen: '127.0.0.1:0', upstrem: '127.0.0.1:1'}]"}, "listeners[0].upstrem: unknown key (did you mean upstream?)"),
    "workers and unknown api": ({"workers": "2", "kip1313": "{header_v3: {19: 1, Metdata: '3+'}}"}, "kip1313.header_v3.Metdata: unknown api"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(OPERATOR_CASES))
def test_what_check_config_passes_starts_and_what_would_crash_is_one_line(
    tmp_path: Path, case: str
) -> None:
    sections, line = OPERATOR_CASES[case]
    path = tmp_path / "k.yaml"
    path.write_text(startable(tmp_path, **sections))
    runs = [("check-config", str(path)), ("proxy", "--config", str(path))]
    if case == "workers and unknown api":
        runs = runs[1:]  # check-config reads the names itself; the proxy's workers do here
    for args in runs:
        code, out, err = kafkalens(*args)
        assert (code, out) == (2, ""), err
        assert err.count("\n") == 1 and err.startswith(f"kafkalens: error: {line}"), err
        assert "Traceback" not in err


def test_bad_certificate_and_environment_are_one_line(tmp_path: Path, certs: Path) -> None:
    tls = f"[{{name: a, listen: '{LOCAL}:0', upstream: '{LOCAL}:1', tls: {{cert: {certs / 'garbage.crt'}, key: {certs / 'a.key'}}}}}]"
    path = tmp_path / "tls.yaml"
    path.write_text(startable(tmp_path, listeners=tls))
    for args in (("check-config", str(path)), ("proxy", "--config", str(path))):
        code, _out, err = kafkalens(*args)
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith("kafkalens: error: listeners[0].tls: cannot load the certificate")
    plain = tmp_path / "plain.yaml"
    plain.write_text(startable(tmp_path))
    code, _out, err = kafkalens(
        "proxy", "--config", str(plain), env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "no")}
    )
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("kafkalens: error: environment variable PROMETHEUS_MULTIPROC_DIR: ")


def test_check_config_check_ports(tmp_path: Path) -> None:
    path = tmp_path / "k.yaml"
    with socket.create_server((LOCAL, 0)) as taken:
        port = taken.getsockname()[1]
        path.write_text(startable(tmp_path, metrics=f"{{listen: '{LOCAL}:{port}'}}"))
        code, out, err = kafkalens("check-config", str(path))
        assert (code, err) == (0, "") and out.startswith(f"{path}: OK")  # not asked
        code, out, err = kafkalens("check-config", "--check-ports", str(path))
        assert (code, out) == (2, "") and err.count("\n") == 1
        assert err.startswith(f"kafkalens: error: metrics.listen: cannot listen on {LOCAL}:{port}: ")
    code, out, err = kafkalens("check-config", "--check-ports", str(path))
    assert (code, err) == (0, ""), err


def test_a_binary_config_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "k.yaml"
    path.write_bytes(b"\x00\xff\xfe binary")
    for args in (("check-config", str(path)), ("proxy", "--config", str(path))):
        code, _out, err = kafkalens(*args)
        assert code == 2 and err == f"kafkalens: error: {path}: not UTF-8 text (byte 1)\n"


def test_flags_naming_a_bad_log_path_are_named(tmp_path: Path) -> None:
    config = tmp_path / "k.yaml"
    config.write_text(startable(tmp_path))
    code, _out, err = kafkalens("proxy", "--config", str(config), "--request-log", str(tmp_path))
    assert code == 2 and err == f"kafkalens: error: --request-log: {tmp_path} is a directory; name a file in it\n"
    ports = ("--port", str(free_port()), "--metrics-port", str(free_port()))
    code, _out, err = kafkalens("demo", *ports, "--log", "/etc/passwd/demo/requests.log")
    assert code == 2 and err == "kafkalens: error: --log: /etc/passwd is not a directory\n"


@pytest.mark.slow
def test_check_config_creates_no_folder_and_names_those_the_proxy_creates(tmp_path: Path) -> None:
    """As docs/configuration.md says: check-config changes nothing and names each log folder that
    does not exist yet; kafkalens proxy creates them as it starts."""
    log = tmp_path / "var" / "log" / "kafkalens" / "requests.log"
    telemetry = tmp_path / "telemetry" / "telemetry.log"
    port = free_port()
    path = tmp_path / "k.yaml"
    path.write_text(
        startable(
            tmp_path,
            listeners=f"[{{name: a, listen: '{LOCAL}:{port}', upstream: '{LOCAL}:1'}}]",
            request_log=f"{{path: '{log}'}}",
            telemetry=f"{{log: {{path: '{telemetry}'}}}}",
        )
    )
    code, out, err = kafkalens("check-config", str(path))
    assert (code, err) == (0, ""), err
    assert f"  request_log.path: {log.parent} does not exist yet; kafkalens proxy creates it as it starts\n" in out
    assert f"  telemetry.log.path: {telemetry.parent} does not exist yet; kafkalens proxy creates it as it starts\n" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.yaml"]
    proxy = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "proxy", "--config", str(path)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (log.exists() and telemetry.exists()) and proxy.poll() is None:
            assert time.monotonic() < deadline, "the proxy did not create its logs in 30 s"
            time.sleep(0.05)
        assert log.exists() and telemetry.exists(), proxy.communicate()[1]
        assert wait_for_port(LOCAL, port, 30)  # started: SIGTERM is a clean stop now
        proxy.send_signal(signal.SIGTERM)
        assert proxy.wait(30) == 0
    finally:
        proxy.kill()
        proxy.communicate()
    code, out, err = kafkalens("check-config", str(path))  # now there: nothing to name
    assert (code, err) == (0, "") and "does not exist yet" not in out


def test_check_config_says_what_max_connections_comes_to(tmp_path: Path) -> None:
    """From a shell whose soft open-file limit is below the hard one (1024 of 4096):
    `auto` is what the raised limit holds, and a number it cannot hold is named with
    what to do, before any proxy starts."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"hard RLIMIT_NOFILE {hard} < 4096")
    path = tmp_path / "k.yaml"

    def check(limits: str) -> str:
        path.write_text(startable(tmp_path, limits=limits))
        proc = subprocess.run(
            [sys.executable, "-m", "proxy.cli", "check-config", str(path)],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
            text=True, timeout=30,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 4096)),
        )  # fmt: skip
        assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
        return proc.stdout.splitlines()[-1].strip()

    auto = check("{}").split()
    assert auto[:2] == ["max", "connections:"] and auto[3:] == [
        "per", "process", "(auto;", "open-file", "limit", "4096)"
    ]  # fmt: skip
    assert 2000 < int(auto[2]) < (4096 - 32) // 2
    assert check("{max_connections: 3000}").startswith(
        "max connections: 3000, but the open-file limit 4096 holds 20"
    )
    assert check("{max_connections: 1000}") == "max connections: 1000 per process (open-file limit 4096)"
