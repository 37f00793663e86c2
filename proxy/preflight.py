"""Start-up checks: what `kafkalens proxy` needs beyond a well-formed file.

proxy/config/ checks the file's shape; these check it against the codec and the
machine: api names the codec knows, a request log path that can be written, TLS
certificates and keys that load, the environment, and (when asked) free ports.
`kafkalens check-config` and `kafkalens proxy` both run them, so a file that passes
the first starts the second, and each problem is one `ConfigError` naming its key.
"""

from __future__ import annotations

import difflib
import os
import socket
import ssl
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from proxy.config import Address, ConfigError
from proxy.features import Config, check_supported
from proxy.tls import client_context, server_context

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def check_startup(config: Config, *, api_names: bool = True, ports: bool = False) -> None:
    """Every check. `api_names` False leaves those to the workers: the parent of
    workers > 1 only supervises, and the names are checked where the frames are
    decoded (the codec's schema tables' RSS: bench.proxy.choices). `ports` binds the listen addresses and
    releases them. (Files named by the config, such as certificates, were checked
    readable as it was parsed: proxy.config.readable_file.)"""
    check_supported(config)
    if api_names:
        check_api_names(config)
    for key, path in log_paths(config):
        check_request_log_path(path, key)
    check_tls(config)
    check_environment(config)
    if ports:
        check_ports(config)


def check_api_names(config: Config) -> None:
    """Names in request_log.apis and kip1313.header_v3 that the codec knows; header_v3
    also needs a schema for an api given by its key, to decode its frames."""
    if not (config.request_log.apis or config.kip1313.header_v3):
        return  # without loading the codec's tables
    from codec.schema import api_names

    keys = api_names()
    names = set(keys.values())
    for i, api in enumerate(config.request_log.apis):
        if isinstance(api, str) and api not in names:
            raise ConfigError(f"request_log.apis[{i}]", unknown_api(api, names))
    for rule in config.kip1313.header_v3:
        key = f"kip1313.header_v3.{rule.api}"
        if isinstance(rule.api, str) and rule.api not in names:
            raise ConfigError(key, unknown_api(rule.api, names))
        if isinstance(rule.api, int) and rule.api not in keys:
            raise ConfigError(key, f"no api has key {rule.api} in this build's schemas")


def unknown_api(name: str, names: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
    if not close:  # a case slip: produce -> Produce
        close = [n for n in names if n.lower() == name.lower()]
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown api {name!r}{hint}"


def log_paths(config: Config) -> Iterator[tuple[str, str]]:
    """(key, path) of the files `kafkalens proxy` writes lines to (stdout, "-", aside)."""
    for key, path in (
        ("request_log.path", config.request_log.path),
        ("telemetry.log.path", config.telemetry.log.path),
    ):
        if path is not None and path != "-":
            yield key, path


def folders_created_at_start(config: Config) -> list[tuple[str, Path]]:
    """(key, folder) of each log's folder that does not exist yet: `kafkalens proxy`
    creates it as it starts (check_request_log_path checked that it can), while
    `kafkalens check-config` creates nothing and names them."""
    return [
        (key, Path(path).parent)
        for key, path in log_paths(config)
        if not Path(path).parent.exists()
    ]


def check_request_log_path(path: str, key: str) -> None:
    """A file the proxy can append to and rotate beside: not a directory, and either
    writable or creatable (the proxy creates missing folders as it starts, so the
    nearest existing one must take new files; nothing is created here)."""
    if path == "-":
        return
    target = Path(path)
    if target.is_dir():
        raise ConfigError(key, f"{path} is a directory; name a file in it")
    if target.exists():
        try:
            with open(target, "ab"):
                pass
        except OSError as exc:
            raise ConfigError(key, f"cannot write {path}: {exc.strerror or exc}") from exc
    folder = target.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(key, f"{folder} is not a directory")
    try:  # really creating one: for root, os.access says yes even on a read-only mount
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(key, f"cannot create files in {folder}: {exc.strerror or exc}") from exc


def check_tls(config: Config) -> None:
    """Certificates, keys and CAs that load, as the listeners will load them."""
    listeners = [(f"listeners[{i}].tls", lst.tls) for i, lst in enumerate(config.listeners)]
    if config.gateway is not None:
        listeners.append(("gateway.tls", config.gateway.tls))
    listeners.append(("metrics.tls", config.metrics.tls))
    for key, tls in listeners:
        if tls is not None:
            _loads(key, partial(server_context, tls))
    if config.upstream_tls is not None:
        upstream = config.upstream_tls
        _loads("upstream_tls", partial(client_context, upstream))


def _loads(key: str, load: Callable[[], object]) -> None:
    try:
        load()
    except (ssl.SSLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise ConfigError(key, f"cannot load the certificate, key or CA: {reason}") from exc


def check_environment(config: Config) -> None:
    """A single process honours PROMETHEUS_MULTIPROC_DIR from the environment (workers
    set their own): it must be a folder the metrics files can be created in."""
    folder = os.environ.get(MULTIPROC_ENV)
    if config.workers > 1 or folder is None:
        return
    key = f"environment variable {MULTIPROC_ENV}"
    if not os.path.isdir(folder):
        raise ConfigError(key, f"{folder!r} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(key, f"cannot create files in {folder}: {exc.strerror or exc}") from exc


def connections_line(config: Config) -> str:
    """What `limits.max_connections` comes to in a proxy started from this shell: its
    open-file limit raised as `kafkalens proxy` raises it (only this process's, which
    exits), two descriptors a connection (proxy/forward/fdlimit.py)."""
    from proxy.forward import fdlimit

    fdlimit.raise_open_file_limit()
    configured = config.limits.max_connections
    possible = fdlimit.connections_possible()
    limit = fdlimit.soft_limit()
    held = "no open-file limit" if limit is None else f"open-file limit {limit}"
    if configured is None:
        sized = fdlimit.size_max_connections(None)
        return f"max connections: {sized} per process (auto; {held})"
    if possible is not None and configured > possible:
        return (
            f"max connections: {configured}, but the {held} holds {possible}: connections"
            " past it are refused as fd_limit; raise the hard limit (ulimit -Hn,"
            " LimitNOFILE=) or leave limits.max_connections to auto"
        )
    return f"max connections: {configured} per process ({held})"


def listen_addresses(config: Config) -> Iterator[tuple[str, Address]]:
    """(key, address) of everything `kafkalens proxy` binds at start-up or knows it will."""
    for i, listener in enumerate(config.listeners):
        yield f"listeners[{i}].listen", listener.listen
    if config.gateway is not None:
        gateway = config.gateway
        yield "gateway.bootstrap_listen", gateway.bootstrap_listen
        if gateway.controller_bootstrap_listen is not None:
            yield "gateway.controller_bootstrap_listen", gateway.controller_bootstrap_listen
        for node, port in gateway.broker_ports.items():
            yield f"gateway.broker_ports.{node}", Address(gateway.listen_host, port)
        for node, port in gateway.controller_ports.items():
            yield f"gateway.controller_ports.{node}", Address(gateway.listen_host, port)
    yield "metrics.listen", config.metrics.listen


def check_ports(config: Config) -> None:
    """Bind and listen on every address at once, as the proxy will (so two keys naming
    the same port conflict here too), then release them."""
    sockets: list[socket.socket] = []
    try:
        for key, address in listen_addresses(config):
            sockets.append(_listen(key, address))
    finally:
        for sock in sockets:
            sock.close()


def _listen(key: str, address: Address) -> socket.socket:
    try:
        family, kind, proto, _name, where = socket.getaddrinfo(
            address.host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ConfigError(key, f"cannot resolve {address.host}: {exc.strerror}") from exc
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's servers
        sock.bind(where)
        sock.listen(1)
    except OSError as exc:
        sock.close()
        raise ConfigError(key, f"cannot listen on {address}: {exc.strerror or exc}") from exc
    return sock
