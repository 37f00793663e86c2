"""`kafkalens top`: a live terminal view of a running proxy, from its /top endpoint.

    kafkalens top [ADDRESS] [--token-file FILE] [--interval SECONDS] [--once]

ADDRESS is the admin port that serves /top (/clients' rules: the loopback
`metrics.clients_listen` without a token, or `metrics.listen` with the bearer token of
`metrics.clients_token_file`, given by --token-file or $KAFKALENS_TOKEN): `host:port` or
an http(s):// URL, 127.0.0.1:9180 by default. Each refresh (every second) shows the
busiest clients by requests and bytes per second, request rate, error rate and
latency (p50, p99) by api, open connections by client software, and consumer lag by
group; rates are over the last refresh (proxy/admin/top.py).

Keys: `s` sorts the clients by the next key (requests/s, bytes/s, total requests,
total bytes, connections), `a` the apis (requests/s, errors/s, p99, bytes/s, name), `q`
quits; Ctrl-C quits too. An address that is wrong, unreachable or refused ends the
command at once with one line and exit code 2; a proxy that goes away later is shown
as such and asked again each refresh. `--once` prints one view and exits (no keys),
for scripts and pipes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import sys
import termios
import time
import tty
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from proxy.admin.top import API_SORTS, CLIENT_SORTS, MAX_ROWS
from proxy.console import EXIT_CONFIG, OneLineParser, fail

DEFAULT_ADDRESS = "127.0.0.1:9180"
TIMEOUT_SECONDS = 2.0
SORT_TITLES = {
    "requests": "requests/s", "bytes": "bytes/s", "total_requests": "total requests",
    "total_bytes": "total bytes", "connections": "connections",
}  # fmt: skip
API_SORT_TITLES = {"requests": "requests/s", "errors": "errors/s", "p99": "p99", "bytes": "bytes/s", "name": "name"}


class Unreachable(Exception):
    """The address gave no /top answer; the message says why, in one line."""


def url_of(address: str) -> str:
    base = address if "://" in address else f"http://{address}"
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"{address}: not host:port or an http(s):// URL")
    return base.rstrip("/") + "/top"


@dataclass
class Client:
    url: str
    token: str | None = None

    def fetch(self, sort: str, api_sort: str, limit: int) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.url}?sort={sort}&api_sort={api_sort}&limit={limit}")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:
                body = answer.read(8 * 1024 * 1024)
        except urllib.error.HTTPError as exc:
            detail = exc.read(500).decode("utf-8", "replace").strip()
            hint = ""
            if exc.code == 401:
                hint = " (give the token of metrics.clients_token_file: --token-file or $KAFKALENS_TOKEN)"
            elif exc.code == 404:
                hint = " (not a kafkalens admin port serving /top: is metrics.clients_token_file or clients_listen set?)"
            raise Unreachable(f"{self.url}: HTTP {exc.code}: {detail}{hint}") from None
        except urllib.error.URLError as exc:
            raise Unreachable(f"{self.url}: {getattr(exc.reason, 'strerror', None) or exc.reason}") from None
        except (OSError, ValueError) as exc:  # timeouts, resets, bad URLs
            raise Unreachable(f"{self.url}: {exc}") from None
        try:
            view = json.loads(body)
        except ValueError:
            raise Unreachable(f"{self.url}: the answer is not JSON: not a kafkalens admin port") from None
        if not isinstance(view, dict) or "clients" not in view:
            raise Unreachable(f"{self.url}: the answer is not a kafkalens /top view")
        return view


# --- rendering -----------------------------------------------------------------------


def rate(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}{unit}" if value < 100 else f"{value:,.0f}{unit}"


def size(value: float | None, per_second: bool = False) -> str:
    if value is None:
        return "-"
    suffix = "/s" if per_second else ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}{suffix}" if unit == "B" else f"{value:,.1f} {unit}{suffix}"
        value /= 1024
    return "-"


def millis(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value < 10 else f"{value:,.0f}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def whole(value: float | int | None) -> str:
    return "-" if value is None else f"{int(value):,}"


@dataclass
class State:
    sort: str = "requests"
    api_sort: str = "requests"
    view: dict[str, Any] | None = None
    error: str | None = None
    fetched_at: float | None = None
    address: str = ""
    rows: dict[str, int] = field(default_factory=lambda: {"clients": 10, "apis": 10, "groups": 5})

    def cycle(self, which: str) -> None:
        if which == "clients":
            self.sort = CLIENT_SORTS[(CLIENT_SORTS.index(self.sort) + 1) % len(CLIENT_SORTS)]
        else:
            self.api_sort = API_SORTS[(API_SORTS.index(self.api_sort) + 1) % len(API_SORTS)]


def header(state: State) -> Text:
    view = state.view or {}
    line = Text()
    line.append("kafkalens top ", style="bold")
    line.append(state.address)
    if state.error:
        line.append(f"  {state.error} (retrying)", style="bold red")
    elif state.fetched_at is not None:
        line.append("  " + time.strftime("%H:%M:%S", time.localtime(state.fetched_at)))
    line.append("\n")
    line.append(f"connections {whole(view.get('connections'))}", style="bold")
    line.append(f"   clients {whole(view.get('clients_count'))}")
    line.append(f"   requests/s {rate(view.get('requests_per_second'))}")
    errors = view.get("errors_per_second")
    line.append(f"   errors/s {rate(errors)}", style="bold red" if errors else "")
    line.append(f"   requests {whole(view.get('requests_total'))}")
    software = view.get("connections_by_software") or []
    if software:
        shown = ", ".join(
            f"{s['client_software_name']} {s['client_software_version']}: {s['connections']}" for s in software[:4]
        )
        more = view.get("connections_by_software_count", 0) - len(software[:4])
        line.append(f"\nby software  {shown}" + (f", +{more} more" if more > 0 else ""))
    return line


def add_column(table: Table, name: str, justify: str) -> None:
    """Numbers keep their width; names (left-justified) share what is left and are cut."""
    if justify == "right":
        table.add_column(name, justify="right", no_wrap=True, min_width=max(len(name), 7))
    else:
        table.add_column(name, justify="left", no_wrap=True, overflow="ellipsis", ratio=1, min_width=4)


def clients_table(state: State) -> Table:
    view = state.view or {}
    rows = (view.get("clients") or [])[: state.rows["clients"]]
    title = f"clients by {SORT_TITLES[state.sort]} ({len(rows)} of {view.get('clients_count', 0)})"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, expand=True, pad_edge=False)
    for name, justify in (("client id", "left"), ("software", "left"), ("host", "left"), ("principal", "left"),
                          ("conns", "right"), ("req/s", "right"), ("bytes/s", "right"),
                          ("requests", "right"), ("bytes in", "right"), ("bytes out", "right")):  # fmt: skip
        add_column(table, name, justify)
    for row in rows:
        software = " ".join(v for v in (row.get("client_software_name"), row.get("client_software_version")) if v)
        table.add_row(
            row.get("client_id") or "-", software or "-", row.get("client_host") or "-", row.get("principal") or "-",
            whole(row["connections"]), rate(row["requests_per_second"]), size(row["bytes_per_second"], True),
            whole(row["requests_total"]), size(row["bytes_in_total"]), size(row["bytes_out_total"]),
        )  # fmt: skip
    return table


def apis_table(state: State) -> Table:
    view = state.view or {}
    rows = (view.get("apis") or [])[: state.rows["apis"]]
    title = f"apis by {API_SORT_TITLES[state.api_sort]} ({len(rows)} of {view.get('apis_count', 0)})"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, expand=True, pad_edge=False)
    for name, justify in (("api", "left"), ("req/s", "right"), ("p50 ms", "right"), ("p99 ms", "right"),
                          ("errors/s", "right"), ("error %", "right"), ("top error", "left"),
                          ("bytes/s", "right"), ("requests", "right"), ("errors", "right")):  # fmt: skip
        add_column(table, name, justify)
    for row in rows:
        failing = bool(row.get("errors_per_second"))
        table.add_row(
            row["api"], rate(row["requests_per_second"]), millis(row["p50_ms"]), millis(row["p99_ms"]),
            Text(rate(row["errors_per_second"]), style="red" if failing else ""), percent(row["error_ratio"]),
            row.get("top_error") or "", size(row["bytes_per_second"], True), whole(row["requests_total"]),
            whole(row["errors_total"]),
        )  # fmt: skip
    return table


def groups_table(state: State) -> Table:
    view = state.view or {}
    rows = (view.get("groups") or [])[: state.rows["groups"]]
    title = f"consumer lag by group ({len(rows)} of {view.get('groups_count', 0)})"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, expand=True, pad_edge=False)
    for name, justify in (("group", "left"), ("lag (records)", "right"), ("topics", "right"),
                          ("most behind", "left"), ("its lag", "right")):  # fmt: skip
        add_column(table, name, justify)
    for row in rows:
        table.add_row(row["group"] or '""', whole(row["lag"]), whole(row["topics"]), row["max_topic"],
                      whole(row["max_topic_lag"]))  # fmt: skip
    return table


KEYS_LINE = "s sort clients   a sort apis   q quit"


def screen(state: State, height: int | None = None) -> Group:
    if height is not None:
        fit_rows(state, height)
    return Group(header(state), clients_table(state), apis_table(state), groups_table(state),
                 Text(KEYS_LINE, style="dim"))  # fmt: skip


def fit_rows(state: State, height: int) -> None:
    """Share the terminal's rows out: the header, three tables' titles and heads, the
    keys line take 15; the rest goes to clients, apis and groups, 2:2:1."""
    view = state.view or {}
    free = max(3, height - 15)
    want = {k: len(view.get(k) or []) for k in ("clients", "apis", "groups")}
    shares = {"clients": 2 * free // 5, "apis": 2 * free // 5, "groups": free - 4 * free // 5}
    spare = sum(max(0, shares[k] - want[k]) for k in shares)
    for k in ("clients", "apis", "groups"):  # what one table leaves goes to the others
        extra = min(spare, max(0, want[k] - shares[k]))
        shares[k] += extra
        spare -= extra
    state.rows = {k: max(1, min(shares[k], want[k] or 1)) for k in shares}


# --- the loop ------------------------------------------------------------------------


@contextlib.contextmanager
def keys_mode(stream: Any) -> Iterator[bool]:
    """cbreak on a terminal (keys arrive one by one, unechoed; Ctrl-C still interrupts),
    restored however the command ends. Yields whether keys can be read."""
    if not stream.isatty():
        yield False
        return
    fd = stream.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def read_keys(stream: Any, timeout: float) -> str:
    """The keys typed within `timeout` seconds ("" if none)."""
    ready, _, _ = select.select([stream], [], [], max(0.0, timeout))
    if not ready:
        return ""
    return os.read(stream.fileno(), 64).decode("utf-8", "replace")


def run(client: Client, state: State, interval: float, console: Console) -> int:
    with keys_mode(sys.stdin) as interactive, Live(console=console, screen=True, auto_refresh=False) as live:
        next_fetch = 0.0
        while True:
            now = time.monotonic()
            if now >= next_fetch:
                refresh(client, state)
                next_fetch = now + interval
            live.update(screen(state, console.size.height), refresh=True)
            keys = read_keys(sys.stdin, next_fetch - time.monotonic()) if interactive else ""
            if not interactive:
                time.sleep(max(0.0, next_fetch - time.monotonic()))
            for key in keys:
                if key in "qQ":
                    return 0
                if key in "sS":
                    state.cycle("clients")
                    next_fetch = 0.0
                elif key in "aA":
                    state.cycle("apis")
                    next_fetch = 0.0


def refresh(client: Client, state: State) -> None:
    try:
        state.view = client.fetch(state.sort, state.api_sort, MAX_ROWS)
        state.error = None
        state.fetched_at = time.time()
    except Unreachable as exc:
        state.error = str(exc)


def parse(argv: list[str]) -> argparse.Namespace:
    return parser().parse_args(argv)


def parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="kafkalens top", description="A live view of a running proxy, from its /top endpoint.")
    parser.add_argument("address", nargs="?", default=DEFAULT_ADDRESS,
                        help=f"the admin port serving /top: host:port or an http(s):// URL (default {DEFAULT_ADDRESS})")
    parser.add_argument("--token-file", metavar="FILE",
                        help="the bearer token (metrics.clients_token_file's); default $KAFKALENS_TOKEN")
    parser.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="refresh every (default 1)")
    parser.add_argument("--once", action="store_true", help="print one view and exit")
    parser.add_argument("--sort", choices=CLIENT_SORTS, default="requests", help="the clients' order at start")
    return parser  # fmt: skip


def main(argv: list[str]) -> int:
    args = parse(argv)
    if not 0.1 <= args.interval <= 3600:
        fail("--interval: from 0.1 to 3600 seconds")
    token = os.environ.get("KAFKALENS_TOKEN")
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.read(8192).strip()
        except OSError as exc:
            fail(f"--token-file: {exc.strerror or exc}: {args.token_file}")
    try:
        client = Client(url_of(args.address), token)
    except ValueError as exc:
        fail(str(exc))
    state = State(sort=args.sort, address=client.url.removesuffix("/top"))
    try:
        state.view = client.fetch(state.sort, state.api_sort, MAX_ROWS)  # a wrong address ends here
    except Unreachable as exc:
        fail(f"cannot read {exc}")
    state.fetched_at = time.time()
    console = Console()
    if args.once:  # a second look after the interval, for the rates
        time.sleep(args.interval)
        refresh(client, state)
        if state.error:
            fail(f"cannot read {state.error}")
        console.print(screen(state, console.size.height if console.is_terminal else 10_000))
        return 0
    try:
        return run(client, state, args.interval, console)
    except KeyboardInterrupt:
        return 0


__all__ = ["main", "EXIT_CONFIG"]
