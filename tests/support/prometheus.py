"""A real Prometheus for the tests: Debian's `prometheus` server and `promtool`.

`PrometheusServer` starts a server on a free loopback port that scrapes the targets it
is given (job `kafkalens`, as deploy/prometheus/alerts.yml expects) and evaluates a rule
file, both every second, with its storage in a directory of the test's; it stops when
the `with` block ends (and dies with the test process if that dies first). Tests ask it
questions only through its own HTTP API: `/api/v1/query`, `query_range`, `alerts`,
`series` and label values, the same answers an operator's Grafana and Alertmanager get.

`rules_for_tests()` is the shipped rule file with every alert's `for:` shortened and
nothing else changed; `shipped_rules()` is the file as it ships, parsed, so a test can
prove the two differ in `for:` only.

When the binaries are missing a test is skipped with the reason, unless
`KAFKALENS_REQUIRE_PEERS=1` (CI, whose .ci/run installs them) makes it fail.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import http.client
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from proxy.apache_kafka import KafkaCluster, KafkaNode
from proxy.tansu import free_port
from support.kafka import kafka_libs

ROOT = Path(__file__).resolve().parent.parent.parent
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
JOB = "kafkalens"
# Scrapes and rule evaluations every second; `for:` of every alert in the tests' copy
# of the rules: three evaluations in a row, so a one-off blip cannot fire an alert.
INTERVAL_SECONDS = 1
FOR_IN_TESTS = "2s"


def require(*tools: str) -> None:
    """Skip (or, under KAFKALENS_REQUIRE_PEERS=1, fail) when a binary is not on PATH."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if not missing:
        return
    reason = f"{', '.join(missing)} not installed (Debian's `prometheus` package; .ci/run installs it)"
    if os.environ.get("KAFKALENS_REQUIRE_PEERS") == "1":
        pytest.fail(f"KAFKALENS_REQUIRE_PEERS=1 but {reason}")
    pytest.skip(reason)


# --- the rules ---------------------------------------------------------------------------


def shipped_rules() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return loaded


def alert_rules(rules: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}


def rules_for_tests(for_: str = FOR_IN_TESTS) -> dict[str, Any]:
    """The shipped rules, every alert's non-zero `for:` replaced by `for_`."""
    rules = copy.deepcopy(shipped_rules())
    for rule in alert_rules(rules).values():
        if parse_duration(str(rule.get("for", "0s"))) > 0:
            rule["for"] = for_
    return rules


def without_for(rules: dict[str, Any]) -> dict[str, Any]:
    stripped = copy.deepcopy(rules)
    for rule in alert_rules(stripped).values():
        rule.pop("for", None)
    return stripped


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_duration(text: str) -> float:
    """A Prometheus duration ("1h30m", "2s", "0m") in seconds."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)


# --- the server --------------------------------------------------------------------------


_prctl: Callable[..., int] | None
try:  # loaded before forking: dlopen in the child could wait on a lock forever
    _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except OSError:
    _prctl = None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    os.setsid()
    if _prctl is not None:
        _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no Prometheus outlives a dead run


class PrometheusError(AssertionError):
    pass


class PrometheusServer:
    """One Prometheus process; see the module docstring. `targets` are host:port of
    kafkalens admin ports, scraped as job "kafkalens" (instance = host:port)."""

    def __init__(self, work_dir: Path, targets: list[str], rules: dict[str, Any] | None = None) -> None:
        self.work_dir = work_dir
        self.targets = targets
        self.rules = rules_for_tests() if rules is None else rules
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = work_dir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        require("prometheus")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        rule_file = self.work_dir / "alerts.yml"
        rule_file.write_text(yaml.safe_dump(self.rules, sort_keys=False))
        interval = f"{INTERVAL_SECONDS}s"
        config = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "rule_files": [str(rule_file)],
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": self.targets}]}],
        }
        config_file = self.work_dir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={self.work_dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PrometheusError(f"prometheus exited: {self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise PrometheusError(f"prometheus not ready within {timeout:.0f}s")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the HTTP API ------------------------------------------------------------------

    def api(self, path: str, **params: Any) -> Any:
        """`data` of a /api/v1 answer; PrometheusError with Prometheus's message otherwise."""
        query = urllib.parse.urlencode(
            [(k.rstrip("_"), v) for k, vs in params.items() for v in (vs if isinstance(vs, list) else [vs])]
        )
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
            raise PrometheusError(f"{path} {params}: {body.get('error', exc)}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's vector: [{"metric": {...}, "value": [ts, "v"]}, ...]."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr}: a {data['resultType']}, not a vector")
        result: list[dict[str, Any]] = data["result"]
        return result

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The one sample an instant query returns; None if it returns none."""
        result = self.query(expr, at)
        if not result:
            return None
        if len(result) > 1:
            raise PrometheusError(f"{expr}: {len(result)} series, expected one: {result}")
        return float(result[0]["value"][1])

    def query_range(self, expr: str, start: float, end: float, step: float = INTERVAL_SECONDS) -> list[dict[str, Any]]:
        """A range query's matrix: [{"metric": {...}, "values": [[ts, "v"], ...]}, ...]."""
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step}s")
        result: list[dict[str, Any]] = data["result"]
        return result

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's label_values(match, label) lists."""
        values: list[str] = self.api(f"label/{label}/values", match_=[match])
        return values

    def alerts(self, name: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
        """/api/v1/alerts: [{"labels", "annotations", "state", "activeAt", "value"}, ...]."""
        found: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return [
            a for a in found
            if (name is None or a["labels"]["alertname"] == name) and (state is None or a["state"] == state)
        ]

    def targets_up(self) -> bool:
        """Every target scraped at least once, and up."""
        active = self.api("targets")["activeTargets"]
        return len(active) == len(self.targets) and all(t["health"] == "up" for t in active)

    def wait(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        """`check()` once true, polled every half second; PrometheusError naming `what`
        (and the alerts Prometheus holds then) after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise PrometheusError(f"not within {timeout:.0f}s: {what}; alerts: {self.alerts()}")
            time.sleep(0.5)

    def wait_firing(self, name: str, timeout: float, **labels: str) -> dict[str, Any]:
        """The firing alert `name` whose labels include `labels`, once Prometheus has it."""

        def firing() -> dict[str, Any] | None:
            for alert in self.alerts(name, "firing"):
                if labels.items() <= alert["labels"].items():
                    return alert
            return None

        found: dict[str, Any] = self.wait(firing, timeout, f"{name} {labels} firing")
        return found

    def wait_resolved(self, name: str, timeout: float, **labels: str) -> None:
        """Until no alert `name` with `labels` is pending or firing."""

        def gone() -> bool:
            return not [a for a in self.alerts(name) if labels.items() <= a["labels"].items()]

        self.wait(gone, timeout, f"{name} {labels} resolved")


@contextmanager
def prometheus(work_dir: Path, targets: list[str], rules: dict[str, Any] | None = None) -> Iterator[PrometheusServer]:
    """A started PrometheusServer that has scraped every target once (up)."""
    with PrometheusServer(work_dir, targets, rules) as server:
        # Prometheus hands its first targets to the scrapers after its discovery
        # manager's 5 s throttle: the first scrape comes 5-6 s after the start.
        server.wait(server.targets_up, 60, f"targets {targets} scraped and up")
        yield server


# --- the dashboard ---------------------------------------------------------------------


def dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in sorted(DASHBOARDS.glob("*.json"))}


def grafana_regex_escape(value: str) -> str:
    """A variable's value as Grafana's Prometheus datasource puts it in a `=~` matcher
    (its prometheusRegularEscape): regex metacharacters escaped, the backslashes doubled
    for the PromQL string."""
    escaped = re.sub(r"([\\$^*{}\[\]'+?.()|])", r"\\\1", value)
    return escaped.replace("\\", "\\\\")


def rate_interval(step: float, scrape_interval: float = INTERVAL_SECONDS) -> str:
    """Grafana's $__rate_interval: max($__interval + scrape interval, 4 x scrape interval)."""
    return f"{int(max(step + scrape_interval, 4 * scrape_interval))}s"


def resolve(expr: str, variables: dict[str, str], step: float) -> str:
    """`expr` with Grafana's variables replaced: `$name` and `${name}` by the (already
    escaped) values given, $__rate_interval and $__interval as Grafana computes them."""
    expr = expr.replace("$__rate_interval", rate_interval(step)).replace("$__interval", f"{int(step)}s")

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in variables:
            raise KeyError(f"dashboard variable ${name} has no value in {expr!r}")
        return variables[name]

    resolved = re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)
    return resolved


# --- the admin port under a flood --------------------------------------------------------


def open_idle(source: str, port: int, count: int) -> list[socket.socket]:
    """`count` connections to 127.0.0.1:`port` from `source` (another loopback address),
    opened without waiting for each handshake and left idle: the caller closes them."""
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind((source, 0))
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.connect(("127.0.0.1", port))
        socks.append(sock)
    return socks


def churn(source: str, port: int, count: int, seconds: float) -> None:
    """Keep `count` connections from `source` open for `seconds`, opening a new one the
    moment one is closed (a flood that reconnects as fast as it is turned away). Prints
    how many it opened. Run in a process of its own (see `churning`)."""
    selector = selectors.DefaultSelector()
    opened = 0

    def open_one() -> None:
        nonlocal opened
        (sock,) = open_idle(source, port, 1)
        selector.register(sock, selectors.EVENT_READ)
        opened += 1

    for _ in range(count):
        open_one()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for key, _ in selector.select(0.05):
            sock = cast(socket.socket, key.fileobj)
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if not data:  # closed by the port (after its 503): come back at once
                selector.unregister(sock)
                sock.close()
                open_one()
    print(opened, flush=True)


def churning(source: str, port: int, count: int, seconds: float) -> subprocess.Popen[str]:
    """`churn` in a process of its own; its stdout says how many connections it opened."""
    code = f"from support.prometheus import churn; churn({source!r}, {port}, {count}, {seconds})"
    tests = str(ROOT / "tests")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, str(ROOT)])}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)


def timed_get(port: int, path: str, timeout: float = 10.0) -> tuple[int | str, float]:
    """(HTTP status, or the exception's name; seconds taken) of GET `path` from 127.0.0.1."""
    started = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request("GET", path)
            answer = conn.getresponse()
            answer.read()
            status: int | str = answer.status
        finally:
            conn.close()
    except (OSError, http.client.HTTPException) as exc:
        status = type(exc).__name__
    return status, time.perf_counter() - started


# --- a broker to alert on ---------------------------------------------------------------

SASL_USERS = {"admin": "admin-secret", "alice": "alice-secret"}  # alice: no ACL at all


class AlertingKafka:
    """One Apache Kafka node for the alert scenarios: topics are never created on first
    use (a client producing to a topic that does not exist is answered
    UNKNOWN_TOPIC_OR_PARTITION), ACLs are enforced (StandardAuthorizer; the PLAINTEXT
    listeners' ANONYMOUS and SASL's `admin` are super users, `alice` may do nothing), and
    idle connections are closed after 5 s (connections.max.idle.ms). Three listeners
    advertise a sidecar each, so that scenarios can watch separate kafkalens instances
    of one broker: PROXIED and OTHER (PLAINTEXT) and SASL (SASL_PLAINTEXT, PLAIN).
    `direct` is the CLIENT listener, which no sidecar fronts."""

    def __init__(self, cluster: KafkaCluster, listeners: dict[str, tuple[int, int]]) -> None:
        self.cluster = cluster
        self.listeners = listeners  # name -> (the broker's port, the sidecar's it advertises)

    @property
    def direct(self) -> str:
        return str(self.cluster.bootstrap)

    def upstream(self, listener: str = "PROXIED") -> str:
        return f"127.0.0.1:{self.listeners[listener][0]}"

    def sidecar_address(self, listener: str = "PROXIED") -> str:
        return f"127.0.0.1:{self.listeners[listener][1]}"


IDLE_CLOSE_MS = 5_000


@contextmanager
def alerting_kafka(work_dir: Path) -> Iterator[AlertingKafka]:
    host = "127.0.0.1"
    node = KafkaNode(
        node_id=1,
        host=host,
        port=free_port(host),
        controller_port=free_port(host),
        proxied_port=free_port(host),
        data_dir=work_dir / "node-1" / "data",
        log_path=work_dir / "node-1" / "kafka.log",
    )
    listeners = {
        "PROXIED": (node.proxied_port or 0, free_port(host)),
        "OTHER": (free_port(host), free_port(host)),
        "SASL": (free_port(host), free_port(host)),
    }
    users = " ".join(f'user_{name}="{password}"' for name, password in SASL_USERS.items())
    bound = ",".join(f"{name}://{host}:{broker}" for name, (broker, _) in listeners.items())
    advertised = ",".join(f"{name}://{host}:{sidecar}" for name, (_, sidecar) in listeners.items())
    cluster = KafkaCluster(
        libs=kafka_libs(),
        work_dir=work_dir,
        members=[node],
        advertise_proxied={1: f"{host}:{listeners['PROXIED'][1]}"},
        properties={
            "listeners": f"CLIENT://{host}:{node.port},{bound},CONTROLLER://{host}:{node.controller_port}",
            "advertised.listeners": f"CLIENT://{host}:{node.port},{advertised}",
            "listener.security.protocol.map": (
                "CLIENT:PLAINTEXT,PROXIED:PLAINTEXT,OTHER:PLAINTEXT,SASL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
            ),
            "listener.name.sasl.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
            ),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS;User:admin",
            "auto.create.topics.enable": "false",
            "connections.max.idle.ms": str(IDLE_CLOSE_MS),
        },
    )
    with cluster:
        yield AlertingKafka(cluster, listeners)


# --- kafkalens in front of it -------------------------------------------------------------


class Sidecar:
    """`kafkalens proxy` in a process of its own, as users run it: `listeners` are
    (name, listen, upstream), its admin port a free loopback port (`target`, what
    Prometheus scrapes), `sections` more of its config file (limits, lag, ...)."""

    def __init__(self, work_dir: Path, listeners: list[tuple[str, str, str]], **sections: Any) -> None:
        self.work_dir = work_dir
        self.admin = free_port()
        limits = {"shutdown_grace_seconds": 1, **sections.pop("limits", {})}
        self.config: dict[str, Any] = {
            "listeners": [{"name": n, "listen": listen, "upstream": up} for n, listen, up in listeners],
            "metrics": {"listen": f"127.0.0.1:{self.admin}"},
            "request_log": {"path": str(work_dir / "requests.log")},
            "limits": limits,
            **sections,
        }
        self.process: subprocess.Popen[str] | None = None
        self.stderr = ""  # what it wrote, once stopped

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.admin}"

    def status(self, path: str) -> int | str:
        return timed_get(self.admin, path, 5)[0]

    def start(self) -> Sidecar:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "kafkalens.yaml"
        config.write_text(yaml.safe_dump(self.config, sort_keys=False))
        # Its output to a file: a pipe nobody reads fills, and then its writes block.
        with open(self.output, "ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "proxy.cli", "proxy", "--config", str(config)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,  # gone with the test run, however it ends
            )
        deadline = time.monotonic() + 60
        while self.status("/healthz") != 200:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"kafkalens did not start: {self.stderr}")
            time.sleep(0.1)
        return self

    @property
    def output(self) -> Path:
        return self.work_dir / "kafkalens.out"

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self.stderr = self.output.read_text(errors="replace")[-5000:]

    def __enter__(self) -> Sidecar:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- the dashboard's queries, as Grafana sends them ----------------------------------------


def variable_query(variable: dict[str, Any]) -> tuple[str, str]:
    """(metric selector, label) of a `label_values(selector, label)` variable."""
    query = variable["query"]
    text = query["query"] if isinstance(query, dict) else query
    found = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", text.strip())
    assert found, f"variable {variable['name']}: not label_values(...): {text}"
    return found.group(1), found.group(2)


def resolve_variables(
    prom: PrometheusServer, board: dict[str, Any], chosen: dict[str, str], step: float
) -> dict[str, str]:
    """Each variable's value as Grafana would put it in the queries: the `chosen` value
    (which the variable's own query must list, the way Grafana offers it), else its
    "All" value. Variables are resolved in order, each query with the earlier ones."""
    values: dict[str, str] = {}
    for variable in board["templating"]["list"]:
        if variable["type"] == "datasource":
            continue  # which Prometheus: the one queried here
        name = variable["name"]
        selector, label = variable_query(variable)
        offered = prom.label_values(label, resolve(selector, values, step))
        if name in chosen:
            assert chosen[name] in offered, f"${name}: {chosen[name]!r} not among {offered}"
            values[name] = grafana_regex_escape(chosen[name])
        else:
            assert variable.get("includeAll"), f"${name} has no All value: choose one"
            values[name] = variable.get("allValue") or ".*"
    return values


def panel_targets(board: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """("<panel id>: <title>", refId, expr) of every query of every panel."""
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield f"{panel['id']}: {panel['title']}", target["refId"], target["expr"]


def evaluate_dashboards(
    prom: PrometheusServer, chosen: dict[str, str], start: float, end: float, step: float = INTERVAL_SECONDS
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every query of every dashboard, its variables resolved, as a range query over
    [start, end]: {(panel title, refId): the matrix Prometheus returned}. A query
    Prometheus refuses raises."""
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for board in dashboards().values():
        variables = resolve_variables(prom, board, chosen, step)
        for title, ref, expr in panel_targets(board):
            results[(title, ref)] = prom.query_range(resolve(expr, variables, step), start, end, step)
    return results


def filled(matrix: list[dict[str, Any]]) -> bool:
    """A panel shows something: a sample that is a number and not 0."""
    for series in matrix:
        for _, value in series["values"]:
            number = float(value)
            if number == number and number != 0:  # NaN: histogram_quantile of nothing
                return True
    return False


@contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (as mount's size= takes it) mounted at `path`: a disk that fills.
    Needs root with the right to mount; skipped, with the reason, where mount is refused
    (an unprivileged container)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (a full disk is needed): {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


# Which dashboard queries each end-to-end scenario must fill (a non-zero number), by
# ("<panel id>: <title>", refId); tests/deploy/test_prometheus_rules.py checks that every query
# of the dashboards is here or in UNFILLABLE.
DASHBOARD_FILLS: dict[str, set[tuple[str, str]]] = {
    # tests/deploy/test_prometheus_alerts.py
    "errors": {
        ("6: Errors by api and error", "A"),
        ("14: Connections opened, closed and rejected", "B"),
    },
    "errors-sasl": {
        ("6: Errors by api and error", "A"),
        ("23: Topic bytes/s by principal", "A"),
        ("30: Failures by api and error", "A"),
    },
    "lag": {
        ("1: Requests/s", "A"), ("2: Open connections", "A"), ("3: Client instances", "A"),
        ("5: Request rate by api", "A"), ("7: Latency p50 by api", "A"), ("8: Latency p99 by api", "A"),
        ("9: Open connections by client software", "A"), ("10: Client instances", "A"),
        ("13: Throughput by api", "A"), ("13: Throughput by api", "B"),
        ("14: Connections opened, closed and rejected", "A"),
        ("16: Consumer lag by group and topic", "A"), ("17: Consumer lag by partition", "A"),
        ("18: Committed lag by partition", "A"), ("20: Records/s by topic", "A"), ("21: Bytes/s by topic", "A"),
        ("22: Topic bytes/s by client software", "A"), ("23: Topic bytes/s by principal", "A"),
        ("24: Lag series folded by the caps", "A"),
        ("26: Producer record queue time (client-reported)", "A"), ("27: Request latency as clients see it", "A"),
        ("34: Client telemetry dropped", "A"),
    },  # fmt: skip
    "broker": {
        ("4: Pending requests", "A"),
        ("12: Upstream failures", "A"),
        ("14: Connections opened, closed and rejected", "B"),
        ("29: Brokers reachable", "A"),
        ("31: Requests the broker left unanswered", "A"),
    },
    "trouble": {
        ("11: Decode errors", "A"),
        ("11: Decode errors", "B"),
        ("14: Connections opened, closed and rejected", "C"),
        ("32: Request log lines dropped", "A"),
    },
    # tests/deploy/test_prometheus_probes.py
    "flood": {("33: Admin port refusals", "A")},
}
UNFILLABLE: dict[tuple[str, str], str] = {
    ("19: Follower (replication) lag", "A"): (
        "replication is not proxied: a follower fetches from the leader's inter-broker"
        " listener, which no sidecar fronts (as in deploy/kubernetes), and the broker here is alone"
    ),
    ("14: Connections opened, closed and rejected", "D"): (
        "KIP-1313 violations: no Kafka client sends request header v3 yet"
    ),
}


def check_dashboard(prom: PrometheusServer, scenario: str, chosen: dict[str, str], start: float) -> None:
    """Every dashboard query evaluated over [start, now] with `chosen` variables; the
    ones DASHBOARD_FILLS names for `scenario` must show a non-zero number."""
    results = evaluate_dashboards(prom, chosen, start, time.time())
    shown = {key for key, matrix in results.items() if filled(matrix)}
    missing = DASHBOARD_FILLS[scenario] - shown
    assert not missing, f"{scenario}: panels without data: {sorted(missing)}"
