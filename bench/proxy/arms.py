"""The arms: a fresh in-memory tansu broker each, behind a front (or none, `direct`).

The broker advertises the arm's front address, so every client connection, the
ones librdkafka opens after bootstrap included, goes through the front.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.proxy import fronts
from proxy.tansu import TansuBroker, free_port, wait_for_port

HOST = "127.0.0.1"
ALL_ARMS = ("direct", "haproxy", "tansu-proxy", "kafkalens", "kafkalens-workers2")
# Not in the default set; for PROFILE.md: kafkalens with its request log sampled at 0
# (decoding and metrics still on), its forwarding machinery with no hooks at all, and
# a plain Python (uvloop) byte relay: the floor of any Python proxy here.
EXTRA_ARMS = (
    "kafkalens-nolog",
    "kafkalens-nolag",
    "kafkalens-bare",
    "python-relay",
    "kafkalens-baseline",
    "kafkalens-bare-baseline",
    "kafkalens-bare-pure",
    "kafkalens-telemetry-off",
    "kafkalens-telemetry",
    "kafkalens-pure",
)
# The telemetry pair prices KIP-714 collection: telemetry off altogether, and collect mode with every client pushing
# its metrics each second (decoded, kept, logged). `kafkalens-nolag`: kafkalens with
# `lag.enabled: false` (consumer lag and topic traffic off), to price them against
# `kafkalens` in the same run. `kafkalens-pure` (and `kafkalens-bare-pure`): with KAFKALENS_PURE_CODEC=1,
# its Python path alone (no C: the codec's interpreter and the steady state in Python).
# `kafkalens-baseline` runs another checkout's code (a git worktree of an earlier
# commit, its C accelerator built or copied in) in the same run, so a change is
# measured before and after on the same host minute: KAFKALENS_BASELINE_TREE=DIR.
BASELINE_TREE = "KAFKALENS_BASELINE_TREE"
CONFIG_REFUSED = 2  # kafkalens's exit code for a configuration it cannot run


class ArmSkipped(RuntimeError):
    """The arm cannot run here (a tool missing, a feature not built); the message says why."""


@dataclass
class Launch:
    """What a front's builder gets: where to listen, where the broker is, where to write."""

    name: str
    work: Path
    front: int
    broker: int
    notes: list[str]

    @property
    def log(self) -> Path:
        return self.work / f"{self.name}.log"


@dataclass
class RunningArm:
    name: str
    host: str
    port: int
    broker: TansuBroker
    front: subprocess.Popen[bytes] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The process whose CPU and memory are measured (None for `direct`)."""
        return self.front.pid if self.front is not None else None

    def stop(self) -> None:
        if self.front is not None:
            fronts.stop_process(self.front)
        self.broker.stop()


def start_arm(name: str, work: Path) -> RunningArm:
    """Start the broker and the arm's front; ArmSkipped when it cannot run here."""
    builder = FRONTS.get(name)
    if builder is None and name != "direct":
        raise ArmSkipped(f"unknown arm {name!r}")
    front_port = free_port(HOST)
    broker_port = front_port if name == "direct" else free_port(HOST)
    broker = TansuBroker(
        host=HOST, port=broker_port, advertised_port=front_port, log_path=work / f"{name}-tansu.log"
    )
    broker.start()
    arm = RunningArm(name, HOST, front_port, broker)
    if builder is None:
        return arm
    try:
        launch = Launch(name, work, front_port, broker_port, arm.notes)
        arm.front = builder(launch)
        _wait_front(arm, launch.log)
    except BaseException:
        arm.stop()
        raise
    return arm


def _wait_front(arm: RunningArm, log: Path) -> None:
    assert arm.front is not None
    if wait_for_port(arm.host, arm.port, 20.0) and arm.front.poll() is None:
        return
    code = arm.front.poll()
    tail = fronts.log_tail(log)
    if code == CONFIG_REFUSED and arm.name.startswith("kafkalens"):
        raise ArmSkipped(f"kafkalens refused the configuration: {tail}")
    if code is not None:
        raise RuntimeError(f"{arm.name} exited with code {code} at start: {tail}")
    raise RuntimeError(f"{arm.name} did not listen on {arm.port}: {tail}")


FrontBuilder = Callable[[Launch], subprocess.Popen[bytes]]


def _haproxy(launch: Launch) -> subprocess.Popen[bytes]:
    binary = shutil.which("haproxy")
    if binary is None:
        raise ArmSkipped("haproxy is not installed (apt-get install haproxy)")
    config = fronts.write_haproxy_config(
        launch.work / "haproxy.cfg", HOST, launch.front, launch.broker
    )
    launch.notes.append(fronts.version_line([binary, "-v"]))
    return fronts.spawn([binary, "-db", "-f", str(config)], launch.log)


def _tansu_proxy(launch: Launch) -> subprocess.Popen[bytes]:
    from proxy.tansu import tansu_binary

    url = f"tcp://{HOST}:{launch.front}"
    cmd = [tansu_binary(), "proxy", "--listener-url", url, "--advertised-listener-url", url]
    cmd += ["--origin-url", f"tcp://{HOST}:{launch.broker}"]
    return fronts.spawn(cmd, launch.log)


def _kafkalens(
    workers: int, log: bool, baseline: bool = False, telemetry: str = "", lag: bool = True, pure: bool = False
) -> FrontBuilder:
    def build(launch: Launch) -> subprocess.Popen[bytes]:
        env = baseline_env(launch.notes) if baseline else fronts.working_tree_env()
        if pure:
            env = dict(env or os.environ, KAFKALENS_PURE_CODEC="1")
            launch.notes.append("KAFKALENS_PURE_CODEC=1: no C")
        config = fronts.write_kafkalens_config(
            launch.work / f"{launch.name}.yaml", workers, log, telemetry, lag
        )
        if telemetry:
            launch.notes.append(f"telemetry {telemetry}")
        request_log = launch.work / f"{launch.name}-requests.log"
        cmd = [sys.executable, "-P", "-m", "proxy.cli", "proxy", "--config", str(config)]
        if not baseline:
            cmd[:4] = [kafkalens_command()]
        cmd += _addresses(launch) + ["--request-log", str(request_log)]
        sampled = "" if log else " (sample_rate 0: only errors are written)"
        launch.notes.append(f"request log {request_log}{sampled}, workers {workers}" + ("" if lag else ", lag off"))
        return fronts.spawn(cmd, launch.log, env)

    return build


def baseline_env(notes: list[str]) -> dict[str, str]:
    """The environment that runs another checkout's proxy/ (KAFKALENS_BASELINE_TREE), its C
    extensions built in place: a change measured before and after against the same broker
    in the same run. Says which code in `notes`."""
    tree = os.environ.get(BASELINE_TREE)
    if not tree or not (Path(tree) / "proxy" / "cli.py").exists():
        raise ArmSkipped(f"set {BASELINE_TREE} to a checkout of the code to compare with")
    head = subprocess.run(
        ["git", "-C", tree, "log", "-1", "--format=%h %s"], capture_output=True, text=True
    ).stdout.strip()
    notes.append(f"baseline code from {tree} ({head or 'not a git checkout'})")
    env = dict(os.environ)
    env["PYTHONPATH"] = tree
    return env


def _bare(launch: Launch) -> subprocess.Popen[bytes]:
    config = fronts.write_kafkalens_config(launch.work / f"{launch.name}.yaml", 1, False)
    cmd = [sys.executable, "-m", "bench.proxy.bare_proxy", "--config", str(config), *_addresses(launch)]
    launch.notes.append("no hooks: no decoding, request log or per-request metrics")
    return fronts.spawn(cmd, launch.log, fronts.working_tree_env())


def _bare_pure(launch: Launch) -> subprocess.Popen[bytes]:
    """kafkalens-bare with KAFKALENS_PURE_CODEC=1: the forwarding machinery in Python alone."""
    config = fronts.write_kafkalens_config(launch.work / f"{launch.name}.yaml", 1, False)
    cmd = [sys.executable, "-m", "bench.proxy.bare_proxy", "--config", str(config), *_addresses(launch)]
    launch.notes.append("no hooks, KAFKALENS_PURE_CODEC=1: no C")
    env = dict(fronts.working_tree_env(), KAFKALENS_PURE_CODEC="1")
    return fronts.spawn(cmd, launch.log, env)


def _bare_baseline(launch: Launch) -> subprocess.Popen[bytes]:
    """The bare machinery of the baseline checkout (bench.proxy.bare_proxy from this tree on
    top of the baseline's proxy/): a change to forwarding, priced without the hooks."""
    env = baseline_env(launch.notes)
    env["PYTHONPATH"] += os.pathsep + str(fronts.REPO)
    config = fronts.write_kafkalens_config(launch.work / f"{launch.name}.yaml", 1, False)
    cmd = [sys.executable, "-P", "-m", "bench.proxy.bare_proxy", "--config", str(config)]
    launch.notes.append("no hooks, the baseline checkout's forwarding")
    return fronts.spawn([*cmd, *_addresses(launch)], launch.log, env)


def _python_relay(launch: Launch) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "bench.proxy.plain_relay",
        "--listen",
        f"{HOST}:{launch.front}",
        "--upstream",
        f"{HOST}:{launch.broker}",
    ]
    launch.notes.append("a plain uvloop byte relay: no framing, no hooks")
    return fronts.spawn(cmd, launch.log, fronts.working_tree_env())


def _addresses(launch: Launch) -> list[str]:
    metrics = f"{HOST}:{free_port(HOST)}"
    launch.notes.append(f"metrics on {metrics}")
    return [
        "--listen",
        f"{HOST}:{launch.front}",
        "--upstream",
        f"{HOST}:{launch.broker}",
        "--metrics",
        metrics,
    ]


def kafkalens_command() -> str:
    """The console script next to this interpreter (the venv's), else PATH's."""
    beside = Path(sys.executable).with_name("kafkalens")
    found = str(beside) if beside.exists() else shutil.which("kafkalens")
    if found is None:
        raise ArmSkipped("no kafkalens console script (pip install -e .)")
    return found


FRONTS: dict[str, FrontBuilder] = {
    "haproxy": _haproxy,
    "tansu-proxy": _tansu_proxy,
    "kafkalens": _kafkalens(1, True),
    "kafkalens-workers2": _kafkalens(2, True),
    "kafkalens-nolog": _kafkalens(1, False),
    "kafkalens-nolag": _kafkalens(1, True, lag=False),
    "kafkalens-bare": _bare,
    "kafkalens-bare-baseline": _bare_baseline,
    "kafkalens-bare-pure": _bare_pure,
    "python-relay": _python_relay,
    "kafkalens-baseline": _kafkalens(1, True, baseline=True),
    "kafkalens-telemetry-off": _kafkalens(1, True, telemetry="off"),
    "kafkalens-telemetry": _kafkalens(1, True, telemetry="collect"),
    "kafkalens-pure": _kafkalens(1, True, pure=True),
}
