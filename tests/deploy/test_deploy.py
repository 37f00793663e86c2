"""Static checks of the packaging and deploy files: no Docker or Kubernetes needed.

They catch the drift that otherwise shows only at deploy time: a port changed in one
file and not another, a COPY of a path that moved, a probe on the wrong path, a
dashboard querying a metric the proxy never exports.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import fnmatch
import json
import os
import re
import shlex
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import pod_security
from support.paths import REPO as ROOT

from proxy.features import metric_names, parse_config

DEPLOY = ROOT / "deploy"
COMPOSE_DIR = DEPLOY / "compose"
K8S = DEPLOY / "kubernetes"
CONFIG_PATH = "/etc/kafkalens/kafkalens.yaml"
# The Apache Kafka releases the tests run (docs/compatibility.md's table's columns).
KAFKA_VERSIONS = (ROOT / "tests" / "peers" / "kafka-versions").read_text().split()
KAFKA_IMAGES = {f"apache/kafka:{version}" for version in KAFKA_VERSIONS}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def default_config() -> dict[str, Any]:
    return load(ROOT / "config" / "kafkalens.yaml")


def listen_ports(config: dict[str, Any]) -> set[int]:
    if config.get("mode") == "gateway":
        gw = config["gateway"]
        return {port(gw["bootstrap_listen"])}
    return {port(listener["listen"]) for listener in config["listeners"]}


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


# --- Dockerfile ------------------------------------------------------------------------


@dataclass
class Instruction:
    name: str
    args: str
    stage: int


def dockerfile() -> list[Instruction]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out: list[Instruction] = []
    stage = -1
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, args = line.partition(" ")
        if name.upper() == "FROM":
            stage += 1
        out.append(Instruction(name.upper(), args.strip(), stage))
    return out


def final(instructions: list[Instruction], name: str) -> list[Instruction]:
    last = instructions[-1].stage
    return [i for i in instructions if i.name == name and i.stage == last]


def copy_args(instr: Instruction) -> tuple[list[str], str, dict[str, str]]:
    words = shlex.split(instr.args)
    flags = dict(w[2:].split("=", 1) for w in words if w.startswith("--"))
    paths = [w for w in words if not w.startswith("--")]
    return paths[:-1], paths[-1], flags


def base_images(instructions: list[Instruction]) -> list[str]:
    defaults = dict(i.args.split("=", 1) for i in instructions if i.name == "ARG" and i.stage == -1)
    images = []
    for i in instructions:
        if i.name == "FROM":
            image = i.args.split()[0]
            images.append(re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], image))
    return images


def test_dockerfile_is_multistage_on_python_311_slim() -> None:
    images = base_images(dockerfile())
    assert len(images) >= 2
    assert all(re.fullmatch(r"python:3\.11-slim(-\w+)?", image) for image in images), images


def test_dockerfile_runs_as_non_root() -> None:
    users = final(dockerfile(), "USER")
    assert users, "the final stage must set USER"
    user = users[-1].args.split(":")[0]
    assert user not in {"root", "0"}


def healthcheck() -> tuple[dict[str, str], list[str]]:
    """(--options, the exec-form command) of the final stage's HEALTHCHECK."""
    (check,) = final(dockerfile(), "HEALTHCHECK")
    words = check.args.split(" CMD ", 1)
    options = dict(w[2:].split("=", 1) for w in words[0].split())
    return options, json.loads(words[1])


def test_healthcheck_gets_healthz_on_the_metrics_port_without_python() -> None:
    options, command = healthcheck()
    metrics_port = port(default_config()["metrics"]["listen"])
    assert command[:2] == ["bash", "-c"] and len(command) == 3
    assert f"/dev/tcp/127.0.0.1/{metrics_port}" in command[2] and "GET /healthz " in command[2]
    assert not re.search(r"\b(python|curl|wget|kafkalens)\b", command[2])  # no interpreter started
    assert options["interval"] == "10s" and options["timeout"] == "3s"


async def run_healthcheck(admin_port: int) -> int:
    _, command = healthcheck()
    script = command[2].replace("/dev/tcp/127.0.0.1/9180", f"/dev/tcp/127.0.0.1/{admin_port}")
    process = await asyncio.create_subprocess_exec(command[0], command[1], script)
    return await asyncio.wait_for(process.wait(), 5)


async def test_the_healthcheck_passes_on_a_live_admin_port_and_fails_otherwise() -> None:
    """The command itself, run by bash against the proxy's real admin endpoint: exit 0
    on 200, non-zero on any other status, a refused port, or a port that never answers."""
    import socket

    from proxy.admin.http import Endpoints, start_http
    from proxy.config import Address

    endpoints = Endpoints(metrics=lambda: b"", ready=lambda: (True, "ok"), clients=list)
    server = await start_http(Address("127.0.0.1", 0), endpoints)
    live = server.sockets[0].getsockname()[1]
    assert await run_healthcheck(live) == 0
    server.close()
    await server.wait_closed()
    assert await run_healthcheck(live) != 0  # refused
    # A port that answers 404 (the path moved) and one that accepts and never answers.
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()
    wrong = await asyncio.start_server(answer, "127.0.0.1", 0)
    assert await run_healthcheck(wrong.sockets[0].getsockname()[1]) != 0
    wrong.close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    try:
        assert await run_healthcheck(silent.getsockname()[1]) != 0  # read -t 2 gives up
    finally:
        silent.close()


OCI = "org.opencontainers.image."


def labels() -> dict[str, str]:
    """The final stage's LABELs, its ARG defaults substituted."""
    instructions = dockerfile()
    last = instructions[-1].stage
    args = {}
    for i in instructions:
        if i.name == "ARG" and "=" in i.args and i.stage in (-1, last):
            name, value = i.args.split("=", 1)
            args[name] = value
    found = {}
    for instr in final(instructions, "LABEL"):
        for word in shlex.split(instr.args):
            key, value = word.split("=", 1)
            found[key] = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], value)
    return found


def test_the_image_carries_the_oci_annotations() -> None:
    found = labels()
    project = pyproject()["project"]
    assert found[OCI + "title"] == project["name"]
    assert found[OCI + "version"] == project["version"]
    assert found[OCI + "description"] == project["description"]
    assert found[OCI + "licenses"] == project["license"]["text"]
    assert {OCI + "revision", OCI + "created", OCI + "base.name"} <= set(found)
    assert found[OCI + "base.name"] == "docker.io/library/" + base_images(dockerfile())[-1]
    assert all(k.startswith(OCI) for k in found), "labels outside the OCI keys"


def test_expose_matches_default_config() -> None:
    config = default_config()
    exposed = {int(p) for i in final(dockerfile(), "EXPOSE") for p in i.args.split()}
    assert exposed == listen_ports(config) | {port(config["metrics"]["listen"])}


def test_entrypoint_runs_kafkalens_proxy_with_a_copied_config() -> None:
    instructions = dockerfile()
    (entrypoint,) = final(instructions, "ENTRYPOINT")
    (cmd,) = final(instructions, "CMD")
    assert json.loads(entrypoint.args) == ["kafkalens", "proxy"]
    args = json.loads(cmd.args)
    config_path = args[args.index("--config") + 1]
    assert config_path == CONFIG_PATH
    targets = {copy_args(i)[1] for i in final(instructions, "COPY")}
    assert config_path in targets


def dockerignored(path: str) -> bool:
    """Docker's rule: the last matching pattern wins; a path matches through its parents."""
    patterns = (ROOT / ".dockerignore").read_text().splitlines()
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for raw in patterns:
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/").removeprefix("**/")
        if any(fnmatch.fnmatch(p, pattern) or p.endswith("/" + pattern) for p in prefixes):
            ignored = not negate
    return ignored


def test_every_copy_source_exists_in_the_build_context() -> None:
    for instr in dockerfile():
        if instr.name != "COPY":
            continue
        sources, _, flags = copy_args(instr)
        if "from" in flags:
            continue
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: missing"
            assert not dockerignored(source.rstrip("/")), f"COPY {source}: in .dockerignore"


def test_builder_copies_every_package_and_installs_no_extras() -> None:
    instructions = dockerfile()
    copied = {Path(s).parts[0] for i in instructions if i.name == "COPY" for s in copy_args(i)[0]}
    include = pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    wanted = {p for p in packages if any(fnmatch.fnmatch(p, pat) for pat in include)}
    assert wanted <= copied, wanted - copied
    assert "pyproject.toml" in copied
    installs = [i.args for i in final(instructions, "RUN") if "pip install" in i.args]
    assert installs and not any("[" in line for line in installs)


def test_console_script_kafkalens_has_a_proxy_subcommand() -> None:
    assert pyproject()["project"]["scripts"]["kafkalens"] == "proxy.cli:main"
    cli = ROOT / "proxy" / "cli.py"
    assert re.search(r"""["']proxy["']""", cli.read_text()), "no `proxy` subcommand in cli.py"


# --- compose ---------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return load(COMPOSE_DIR / "docker-compose.yml")


def mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        out[target] = (COMPOSE_DIR / source).resolve()
    return out


def published(service: dict[str, Any]) -> dict[int, int]:
    return {int(p.split(":")[1]): int(p.split(":")[0]) for p in service.get("ports", [])}


def kafka_env(env: dict[str, Any] | list[dict[str, Any]], name: str) -> str:
    if isinstance(env, list):
        env = {e["name"]: e.get("value") for e in env}
    return str(env[name])


def listener(spec: str, name: str) -> str:
    """host:port of listener `name` in a Kafka listeners string (CLIENT://host:port,...)."""
    found = dict(item.split("://", 1) for item in spec.split(","))
    return found[name]


def test_compose_build_contexts_and_mounts_exist() -> None:
    for name, service in compose()["services"].items():
        build = service.get("build")
        if build:
            context = (COMPOSE_DIR / build["context"]).resolve()
            assert (context / build.get("dockerfile", "Dockerfile")).is_file(), name
        for target, source in mounts(service).items():
            assert source.exists(), f"{name}: {source} (for {target}) missing"


def test_compose_kafkalens_is_built_and_configured_by_mount() -> None:
    kafkalens = compose()["services"]["kafkalens"]
    assert kafkalens["build"]["context"] == "../.."
    assert kafkalens_image_ok(kafkalens["image"])
    assert CONFIG_PATH in mounts(kafkalens)
    assert kafkalens["command"] == ["--config", CONFIG_PATH]


def test_compose_ports_agree_with_the_configs() -> None:
    services = compose()["services"]
    config = load(mounts(services["kafkalens"])[CONFIG_PATH])
    metrics_port = port(config["metrics"]["listen"])
    client_ports = listen_ports(config)
    assert set(published(services["kafkalens"])) == client_ports | {metrics_port}
    env = services["kafka"]["environment"]
    advertised = listener(kafka_env(env, "KAFKA_ADVERTISED_LISTENERS"), "CLIENT")
    assert port(advertised) in client_ports
    assert published(services["kafkalens"])[port(advertised)] == port(advertised)
    (upstream,) = {entry["upstream"] for entry in config["listeners"]}
    host, _ = upstream.split(":")
    assert host in services and host == "kafka"
    assert port(listener(kafka_env(env, "KAFKA_LISTENERS"), "CLIENT")) == port(upstream)
    assert not published(services["kafka"]), "the broker must be reachable only via kafkalens"
    assert services["kafka"]["image"] in KAFKA_IMAGES
    assert "broker,controller" in kafka_env(env, "KAFKA_PROCESS_ROLES")


def test_compose_prometheus_scrapes_kafkalens_and_loads_the_rules() -> None:
    services = compose()["services"]
    prom_mounts = mounts(services["prometheus"])
    prom = load(prom_mounts["/etc/prometheus/prometheus.yml"])
    config = load(mounts(services["kafkalens"])[CONFIG_PATH])
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "kafkalens"]
    targets = {t for sc in job["static_configs"] for t in sc["targets"]}
    assert targets == {f"kafkalens:{port(config['metrics']['listen'])}"}
    for rule_file in prom["rule_files"]:
        assert prom_mounts[rule_file] == (DEPLOY / "prometheus" / "alerts.yml").resolve()


def test_compose_grafana_provisions_datasource_and_dashboard() -> None:
    services = compose()["services"]
    grafana = mounts(services["grafana"])
    provisioning = grafana["/etc/grafana/provisioning"]
    (provider,) = load(provisioning / "dashboards" / "kafkalens.yml")["providers"]
    assert (grafana[provider["options"]["path"]] / "kafkalens.json").is_file()
    (datasource,) = load(provisioning / "datasources" / "prometheus.yml")["datasources"]
    prom_port = {int(p.split(":")[1]) for p in services["prometheus"]["ports"]}
    assert datasource["url"] in {f"http://prometheus:{p}" for p in prom_port}
    # Provisioning does not substitute __inputs: the datasource variable's current value
    # stays "${DS_PROMETHEUS}", names no datasource, and Grafana selects the default
    # Prometheus instead, which this one must be.
    assert datasource["type"] == "prometheus" and datasource["isDefault"] is True
    (variable,) = [v for v in dashboard()["templating"]["list"] if v["type"] == "datasource"]
    assert variable["query"] == datasource["type"]


# --- Grafana's import ---------------------------------------------------------------

# Grafana's dashboard import (pkg/services/dashboardimport/utils/dash_template_evaluator.go):
# every `${...}` in any string that names an input is replaced by the value chosen for
# it; `__inputs` is dropped; an input without a value fails the import.
TEMPLATE = re.compile(r"(\$\{.+?\})")


def grafana_import(board: dict[str, Any], chosen: dict[str, str]) -> dict[str, Any]:
    values = {}
    for spec in board.get("__inputs", []):
        if spec["name"] not in chosen:
            raise KeyError(f"Dashboard input variable: {spec['name']} missing from import command")
        values["${" + spec["name"] + "}"] = chosen[spec["name"]]

    def evaluate(node: Any) -> Any:
        if isinstance(node, str):
            return TEMPLATE.sub(lambda m: values.get(m.group(1), m.group(1)), node)
        if isinstance(node, dict):
            return {k: evaluate(v) for k, v in node.items() if k != "__inputs"}
        if isinstance(node, list):
            return [evaluate(v) for v in node]
        return node

    result: dict[str, Any] = evaluate(board)
    return result


def datasource_refs(board: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(where, ref) of every datasource reference: panels, their queries, variables,
    annotations."""
    for panel in board["panels"]:
        if panel["type"] != "row" or "datasource" in panel:
            yield f"panel {panel['title']}", panel.get("datasource")
        for target in panel.get("targets", []):
            yield f"panel {panel['title']} query {target['refId']}", target.get("datasource")
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable.get("datasource")
    for annotation in board["annotations"]["list"]:
        yield f"annotation {annotation.get('name')}", annotation.get("datasource")


def resolve_datasource(board: dict[str, Any], ref: Any, existing: dict[str, str]) -> str:
    """The uid of the datasource a reference lands on in a Grafana that has `existing`
    ({uid: type}); AssertionError if it lands on none. A `$var`/`${var}` uid is a
    datasource variable, whose current value (after the import) must be one."""
    assert isinstance(ref, dict), f"{ref!r}: not a {{type, uid}} reference (null means the default datasource, of any type)"
    uid = ref["uid"]
    named = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", uid)
    if named:
        name = named.group(1) or named.group(2)
        (variable,) = [v for v in board["templating"]["list"] if v["name"] == name]
        assert variable["type"] == "datasource" and variable["query"] == ref["type"], variable
        uid = variable["current"]["value"]
    assert existing.get(uid) == ref["type"], f"datasource {uid!r} of type {ref['type']} does not exist"
    return str(uid)


def test_the_dashboard_imports_into_an_existing_grafana() -> None:
    """Imported as Grafana's import does, with the Prometheus chosen in its dialog (not
    one named "prometheus"): every panel, query and variable lands on that datasource,
    and no `${...}` input is left behind."""
    board = dashboard()
    (prom_input,) = board["__inputs"]
    assert prom_input["type"] == "datasource" and prom_input["pluginId"] == "prometheus"
    required = {(r["type"], r["id"]) for r in board["__requires"]}
    panel_types = {p["type"] for p in board["panels"]} - {"row"}
    assert {("grafana", "grafana"), ("datasource", "prometheus")} | {("panel", t) for t in panel_types} <= required
    existing = {"a1b2c3-mimir": "prometheus", "loki-logs": "loki"}  # the default is not even Prometheus
    with pytest.raises(KeyError, match="DS_PROMETHEUS"):
        grafana_import(board, {})
    imported = grafana_import(board, {prom_input["name"]: "a1b2c3-mimir"})
    assert "__inputs" not in imported
    refs = list(datasource_refs(imported))
    assert len(refs) > 40
    for where, ref in refs:
        assert resolve_datasource(imported, ref, existing) == "a1b2c3-mimir", where
    left = TEMPLATE.findall(json.dumps(imported))
    assert not [v for v in left if v.startswith("${DS_")], left
    assert '"uid": "prometheus"' not in json.dumps(board), "a hard-coded datasource uid"
    # As committed, nothing resolves: the dashboard only works once imported.
    with pytest.raises(AssertionError):
        resolve_datasource(board, refs[0][1], existing)


# --- Kubernetes: the static manifests and the Helm chart's output, by the same tests ----

# The chart rendered with both of its modes on (and the PodMonitors): one StatefulSet of
# brokers with sidecars and one gateway Deployment, as deploy/kubernetes/ has.
HELM_VALUES = {"sidecar.enabled": "true", "metrics.podMonitor.enabled": "true"}
SOURCES = ("kubernetes", "helm")


def static_docs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def k8s_docs(source: str = "kubernetes") -> list[dict[str, Any]]:
    if source == "helm":
        from support.helm import render

        return render(HELM_VALUES)
    return static_docs()


@pytest.fixture(params=SOURCES)
def docs(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    """Every manifest of one source: deploy/kubernetes/, or the Helm chart rendered."""
    return k8s_docs(request.param)


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def configmaps(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {cm["metadata"]["name"]: cm for cm in of_kind(docs, "ConfigMap")}


def mounted_config(docs: list[dict[str, Any]], pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The kafkalens config a container gets: its --config file, from a ConfigMap volume."""
    args = container["args"]
    path = Path(args[args.index("--config") + 1])
    (mount,) = [m for m in container["volumeMounts"] if path.parent == Path(m["mountPath"])]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    data = configmaps(docs)[volume["configMap"]["name"]]["data"]
    return yaml.safe_load(data[path.name])


def named_ports(pod: dict[str, Any]) -> dict[str, int]:
    containers = pod.get("initContainers", []) + pod["containers"]
    return {p["name"]: p["containerPort"] for c in containers for p in c.get("ports", [])}


def probe_port(pod: dict[str, Any], probe: dict[str, Any]) -> int:
    value = probe["httpGet"]["port"]
    return named_ports(pod)[value] if isinstance(value, str) else int(value)


def kafkalens_image_ok(image: str) -> bool:
    name, _, tag = image.rpartition(":")
    return name.endswith("kafkalens") and tag == pyproject()["project"]["version"]


def workload(docs: list[dict[str, Any]], kind: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(the workload, its pod spec, its kafkalens container) of the one `kind`."""
    (found,) = of_kind(docs, kind)
    pod = found["spec"]["template"]["spec"]
    (proxy,) = [c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == "kafkalens"]
    return found, pod, proxy


def test_k8s_docs_are_well_formed_and_kustomizations_complete() -> None:
    for doc in static_docs():
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"], doc
        assert "namespace" not in doc["metadata"], "namespaces come from kustomization.yaml"
    for kustomization in K8S.rglob("kustomization.yaml"):
        listed = set(load(kustomization)["resources"])
        present = {p.name for p in kustomization.parent.glob("*.yaml")} - {kustomization.name}
        assert listed == present, kustomization


def sidecar_pod(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    (statefulset,) = of_kind(docs, "StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    (sidecar,) = [c for c in pod["initContainers"] if c["name"] == "kafkalens"]
    (broker,) = pod["containers"]
    return statefulset, sidecar, broker


def test_kafkalens_is_a_native_sidecar_of_the_broker(docs: list[dict[str, Any]]) -> None:
    statefulset, sidecar, broker = sidecar_pod(docs)
    pod = statefulset["spec"]["template"]["spec"]
    assert sidecar["restartPolicy"] == "Always"
    assert all(c["name"] != "kafkalens" for c in pod["containers"])
    assert kafkalens_image_ok(sidecar["image"])
    assert broker["image"] in KAFKA_IMAGES


def test_examples_run_the_kafka_versions_the_compatibility_table_covers(docs: list[dict[str, Any]]) -> None:
    """Every broker image in deploy/ is an Apache Kafka release the tests ran against
    (tests/peers/kafka-versions, docs/compatibility.md's table's columns)."""
    _, _, broker = sidecar_pod(docs)
    images = {broker["image"], compose()["services"]["kafka"]["image"]}
    assert images <= KAFKA_IMAGES, images - KAFKA_IMAGES
    table = (ROOT / "docs" / "compatibility.md").read_text()
    for image in images:
        assert f"Apache Kafka {image.rpartition(':')[2]}" in table, image


@pytest.mark.parametrize("kind", ["StatefulSet", "Deployment"])
def test_probes_hit_health_endpoints_on_the_metrics_port(docs: list[dict[str, Any]], kind: str) -> None:
    found, pod, proxy = workload(docs, kind)
    metrics_port = port(mounted_config(docs, pod, proxy)["metrics"]["listen"])
    assert proxy["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert proxy["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in proxy:
            assert probe_port(pod, proxy[probe]) == metrics_port, probe
    annotations = found["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == metrics_port
    assert proxy["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("kind", ["StatefulSet", "Deployment"])
def test_clients_token_is_a_secret_mounted_where_the_config_reads_it(
    docs: list[dict[str, Any]], kind: str
) -> None:
    _, pod, proxy = workload(docs, kind)
    token_file = Path(mounted_config(docs, pod, proxy)["metrics"]["clients_token_file"])
    (mount,) = [m for m in proxy["volumeMounts"] if Path(m["mountPath"]) == token_file.parent]
    assert mount["readOnly"] is True and "subPath" not in mount  # subPath never sees updates
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = volume["secret"]
    items = {i["path"]: i["key"] for i in secret.get("items", [])}
    key = items.get(token_file.name, token_file.name)
    secrets = {s["metadata"]["name"]: s for s in of_kind(docs, "Secret")}
    if secret["secretName"] in secrets:  # the chart's: a token under the key mounted
        assert secrets[secret["secretName"]]["data"][key]
        return
    # deploy/kubernetes: kustomization.yaml's secretGenerator makes it from a file.
    (kustomization,) = [
        p for p in K8S.rglob("kustomization.yaml")
        if kind in {d["kind"] for r in load(p)["resources"] for d in yaml.safe_load_all((p.parent / r).read_text()) if d}
    ]  # fmt: skip
    (generator,) = [g for g in load(kustomization)["secretGenerator"] if g["name"] == secret["secretName"]]
    (source,) = [f for f in generator["files"] if f.startswith(f"{key}=")]
    assert generator["options"]["disableNameSuffixHash"] is True  # updated in place
    ignored = (kustomization.parent / ".gitignore").read_text().split()
    assert source.split("=", 1)[1] in ignored, "the token file must never be committed"


def test_broker_advertises_the_sidecar_and_listens_where_it_forwards(docs: list[dict[str, Any]]) -> None:
    statefulset, sidecar, broker = sidecar_pod(docs)
    config = mounted_config(docs, statefulset["spec"]["template"]["spec"], sidecar)
    (entry,) = config["listeners"]
    advertised = listener(kafka_env(broker["env"], "KAFKA_ADVERTISED_LISTENERS"), "CLIENT")
    assert port(advertised) == port(entry["listen"])
    assert "kafka-headless" in advertised
    client = listener(kafka_env(broker["env"], "KAFKA_LISTENERS"), "CLIENT")
    assert client == entry["upstream"]
    assert client.startswith("127.0.0.1:"), "the broker's client port must not bypass the proxy"
    # Every voter is a pod of this StatefulSet, on the controller port, through the
    # headless Service the pods are published by.
    replicas = statefulset["spec"]["replicas"]
    voters = kafka_env(broker["env"], "KAFKA_CONTROLLER_QUORUM_VOTERS").split(",")
    name, service = statefulset["metadata"]["name"], statefulset["spec"]["serviceName"]
    assert voters == [f"{n}@{name}-{n}.{service}.$(POD_NAMESPACE).svc.cluster.local:9093" for n in range(replicas)]
    assert service in {s["metadata"]["name"] for s in of_kind(docs, "Service")}


def test_services_and_podmonitors_point_at_real_ports(docs: list[dict[str, Any]]) -> None:
    templates = [w["spec"]["template"] for w in of_kind(docs, "StatefulSet") + of_kind(docs, "Deployment")]
    for template in templates:
        ports = named_ports(template["spec"])
        for service in of_kind(docs, "Service"):
            if service["spec"]["selector"].items() <= template["metadata"]["labels"].items():
                for p in service["spec"]["ports"]:
                    assert p["targetPort"] in ports, (service["metadata"]["name"], p)
    for service in of_kind(docs, "Service"):  # every Service selects a pod
        assert any(service["spec"]["selector"].items() <= t["metadata"]["labels"].items() for t in templates)
    monitors = of_kind(docs, "PodMonitor")
    assert monitors
    for monitor in monitors:
        selector = monitor["spec"]["selector"]["matchLabels"]
        (template,) = [t for t in templates if selector.items() <= t["metadata"]["labels"].items()]
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            assert endpoint["port"] in named_ports(template["spec"])
            assert endpoint["path"] == "/metrics"
            assert {"targetLabel": "job", "replacement": "kafkalens", "action": "replace"} in endpoint["relabelings"]


def test_gateway_serves_its_bootstraps_and_every_broker_and_controller_port(
    docs: list[dict[str, Any]],
) -> None:
    """Every port the gateway's config gives clients (its two bootstraps, broker node N on
    broker_port_base + N, controller node N on controller_port_base + N) is a port of the
    pod and of the client-facing Service, and nothing else is."""
    deployment, pod, proxy = workload(docs, "Deployment")
    config = mounted_config(docs, pod, proxy)
    gateway = config["gateway"]
    assert kafkalens_image_ok(proxy["image"])
    ports = named_ports(pod)
    brokers = {n: p for n, p in ports.items() if n.startswith("broker-")}
    controllers = {n: p for n, p in ports.items() if n.startswith("controller-")}
    base = gateway["broker_port_base"]
    assert brokers == {f"broker-{i}": base + i for i in range(len(brokers))} and brokers
    base = gateway["controller_port_base"]
    assert controllers == {f"controller-{i}": base + i for i in range(len(controllers))}
    assert controllers
    clients = {
        "bootstrap": port(gateway["bootstrap_listen"]),
        "ctrl-bootstrap": port(gateway["controller_bootstrap_listen"]),
        **brokers,
        **controllers,
    }
    assert ports == {**clients, "metrics": port(config["metrics"]["listen"])}
    (facing,) = [s for s in of_kind(docs, "Service") if s["spec"].get("type") == "LoadBalancer"
                 and selects({"matchLabels": s["spec"]["selector"]},
                             deployment["spec"]["template"]["metadata"]["labels"])]  # fmt: skip
    exposed = {p["targetPort"]: p["port"] for p in facing["spec"]["ports"]}
    assert exposed == clients


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return selector["matchLabels"].items() <= labels.items() and not selector.get("matchExpressions")


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_replicas_have_a_disruption_budget_and_spread_over_nodes(docs: list[dict[str, Any]], kind: str) -> None:
    """A drain takes one replica at a time, and replicas land on different nodes where
    the nodes allow: the gateway keeps serving (and the brokers keep their quorum)."""
    found, pod, _ = workload(docs, kind)
    labels = found["spec"]["template"]["metadata"]["labels"]
    (budget,) = [b for b in of_kind(docs, "PodDisruptionBudget") if selects(b["spec"]["selector"], labels)]
    assert budget["apiVersion"] == "policy/v1"
    assert budget["spec"].get("maxUnavailable") == 1 or budget["spec"].get("minAvailable", 0) >= 1
    assert found["spec"]["replicas"] >= 2
    spread = {c["topologyKey"]: c for c in pod.get("topologySpreadConstraints", [])}
    anti = (pod.get("affinity") or {}).get("podAntiAffinity")
    assert "kubernetes.io/hostname" in spread or anti, "replicas may all land on one node"
    for constraint in spread.values():
        assert selects(constraint["labelSelector"], labels), constraint
        assert constraint["maxSkew"] == 1
    if kind == "Deployment":  # the gateway's replicas: required to be on different nodes
        assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
        assert "pod-template-hash" in spread["kubernetes.io/hostname"]["matchLabelKeys"]


def every_pod(source: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return list(pod_security.pod_templates(k8s_docs(source)))


@pytest.mark.parametrize("source", SOURCES)
def test_every_pod_meets_the_restricted_pod_security_standard(source: str) -> None:
    pods = every_pod(source)
    assert {name.split("/")[0] for name, _, _ in pods} == {"StatefulSet", "Deployment"}
    for name, metadata, spec in pods:
        assert pod_security.violations(spec, metadata) == {}, name
        # RuntimeDefault set for the pod, so every container (and any added) has it.
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name


# One way to break each rule, applied to a compliant pod: each must be caught, by its
# own rule, so no rule of the checker is a rule that cannot fail.
BREAKS: dict[str, Callable[[dict[str, Any], dict[str, Any]], None]] = {
    "hostNamespaces": lambda pod, meta: pod.update(hostNetwork=True),
    "privileged": lambda pod, meta: pod["containers"][0]["securityContext"].update(privileged=True),
    "capabilities_baseline": lambda pod, meta: pod["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
    "hostPathVolumes": lambda pod, meta: pod["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "hostPorts": lambda pod, meta: pod["containers"][0]["ports"][0].update(hostPort=9092),
    "appArmorProfile": lambda pod, meta: pod["securityContext"].update(appArmorProfile={"type": "Unconfined"}),
    "seLinuxOptions": lambda pod, meta: pod["containers"][0]["securityContext"].update(seLinuxOptions={"type": "spc_t"}),
    "procMount": lambda pod, meta: pod["containers"][0]["securityContext"].update(procMount="Unmasked"),
    "seccompProfile_baseline": lambda pod, meta: pod["containers"][0]["securityContext"].update(seccompProfile={"type": "Unconfined"}),
    "sysctls": lambda pod, meta: pod["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
    "windowsHostProcess": lambda pod, meta: pod["securityContext"].update(windowsOptions={"hostProcess": True}),
    "hostProbesAndHostLifecycle": lambda pod, meta: pod["containers"][0]["livenessProbe"]["httpGet"].update(host="10.0.0.1"),
    "restrictedVolumes": lambda pod, meta: pod["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}),
    "allowPrivilegeEscalation": lambda pod, meta: pod["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
    "runAsNonRoot": lambda pod, meta: (pod["securityContext"].pop("runAsNonRoot"), pod["containers"][0]["securityContext"].pop("runAsNonRoot")),
    "runAsUser": lambda pod, meta: pod["containers"][0]["securityContext"].update(runAsUser=0),
    "seccompProfile_restricted": lambda pod, meta: pod["securityContext"].pop("seccompProfile"),
    "capabilities_restricted": lambda pod, meta: pod["containers"][0]["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
}  # fmt: skip


@pytest.mark.parametrize("rule", sorted(pod_security.RULES))
def test_each_pod_security_rule_catches_what_it_forbids(rule: str) -> None:
    assert set(BREAKS) == set(pod_security.RULES)
    (_, metadata, spec) = [p for p in every_pod("kubernetes") if p[0].startswith("Deployment/")][0]
    broken, meta = copy.deepcopy(spec), copy.deepcopy(metadata)
    BREAKS[rule](broken, meta)
    assert set(pod_security.violations(broken, meta)) == {rule} | SUBSUMED_BY.get(rule, set())


# A baseline rule whose restricted counterpart forbids the same and more.
SUBSUMED_BY = {
    "capabilities_baseline": {"capabilities_restricted"},
    "hostPathVolumes": {"restrictedVolumes"},
    "seccompProfile_baseline": {"seccompProfile_restricted"},
}


def test_sidecars_injected_by_an_umbrella_chart_meet_the_same_rules(tmp_path: Path) -> None:
    """The chart's named templates put the sidecar into a pod of another chart (here a
    parent chart with kafkalens as its dependency, brokers off): the container and its
    volumes arrive whole, restricted, reading the config and token the chart makes."""
    from support.helm import CHART, helm, render

    parent = tmp_path / "brokers"
    (parent / "templates").mkdir(parents=True)
    (parent / "Chart.yaml").write_text(
        "apiVersion: v2\nname: brokers\nversion: 1.0.0\n"
        f"dependencies:\n  - name: kafkalens\n    version: 0.1.0\n    repository: file://{CHART}\n"
    )
    (parent / "values.yaml").write_text(
        "kafkalens:\n  gateway: {enabled: false}\n  sidecar: {enabled: true, kafka: {enabled: false}}\n"
    )
    (parent / "templates" / "broker.yaml").write_text("""\
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: my-broker}
spec:
  serviceName: my-broker
  selector: {matchLabels: {app: my-broker}}
  template:
    metadata: {labels: {app: my-broker}}
    spec:
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      initContainers:
        {{- include "kafkalens.sidecar.container" .Subcharts.kafkalens | nindent 8 }}
      containers:
        - name: broker
          image: my/broker:1
          securityContext: {runAsUser: 1000, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumes:
        {{- include "kafkalens.sidecar.volumes" .Subcharts.kafkalens | nindent 8 }}
""")
    helm("dependency", "build", str(parent))
    docs = render(chart=parent)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "Secret", "StatefulSet"], kinds  # no brokers, no gateway of its own
    (statefulset,) = of_kind(docs, "StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    assert pod_security.violations(pod, statefulset["spec"]["template"]["metadata"]) == {}
    (sidecar,) = pod["initContainers"]
    assert sidecar["restartPolicy"] == "Always" and kafkalens_image_ok(sidecar["image"])
    config = mounted_config(docs, pod, sidecar)
    assert config["listeners"][0]["upstream"] == "127.0.0.1:19092"
    test_clients_token_is_a_secret_mounted_where_the_config_reads_it(docs, "StatefulSet")


def test_the_chart_passes_helm_lint_in_every_mode() -> None:
    from support.helm import CHART, KUBE_VERSION, helm, set_flags

    for values in ({}, HELM_VALUES, {"gateway.enabled": "false", "sidecar.enabled": "true"}):
        done = helm("lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART), *set_flags(values), check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_chart_follows_the_project_version() -> None:
    chart = load(ROOT / "deploy" / "helm" / "kafkalens" / "Chart.yaml")
    assert chart["appVersion"] == chart["version"] == pyproject()["project"]["version"]


def test_the_chart_keeps_a_given_token_and_an_existing_secret() -> None:
    from support.helm import render

    docs = render({"clientsToken.value": "s3cret"})
    (secret,) = of_kind(docs, "Secret")
    assert base64.b64decode(secret["data"]["token"]) == b"s3cret"
    docs = render({"clientsToken.existingSecret": "mine", "clientsToken.key": "t"})
    assert not of_kind(docs, "Secret")
    _, pod, _ = workload(docs, "Deployment")
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"] == {"secretName": "mine", "items": [{"key": "t", "path": "token"}]}


def test_the_chart_lays_config_values_over_its_own() -> None:
    from support.helm import render

    docs = render({"config.request_log.sample_rate": "1", "config.kip1313.enforcement": "reject"})
    _, pod, proxy = workload(docs, "Deployment")
    config = mounted_config(docs, pod, proxy)
    assert config["request_log"] == {"path": "-", "sample_rate": 1}
    assert config["kip1313"] == {"enforcement": "reject"}
    assert config["mode"] == "gateway"


# --- PromQL in the dashboard and the alert rules --------------------------------------


def dashboard() -> dict[str, Any]:
    return json.loads((DEPLOY / "grafana" / "dashboards" / "kafkalens.json").read_text())


def dashboard_queries() -> list[str]:
    board = dashboard()
    queries = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    for var in board["templating"]["list"]:
        if var["type"] == "datasource":
            continue  # its query is a plugin id
        query = var["query"]
        queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def all_rules() -> list[dict[str, Any]]:
    groups = load(DEPLOY / "prometheus" / "alerts.yml")["groups"]
    return [rule for group in groups for rule in group["rules"]]


def alert_rules() -> list[dict[str, Any]]:
    return [rule for rule in all_rules() if "alert" in rule]


def recording_rules() -> dict[str, str]:
    return {rule["record"]: rule["expr"] for rule in all_rules() if "record" in rule}


def used_metrics(queries: list[str]) -> set[str]:
    return {m for q in queries for m in re.findall(r"\bkafkalens_[a-z0-9_]+\b", q)}


# The lag (#21) metrics the dashboard and alerts are held to, with their labels as the
# proxy's own registry declares them (test_the_lag_metrics_are_registered_as_used).
LAG_METRICS = (
    "kafkalens_consumer_lag_records",
    "kafkalens_consumer_topic_lag_records",
    "kafkalens_committed_lag_records",
    "kafkalens_follower_lag_records",
    "kafkalens_topic_records_total",
    "kafkalens_topic_bytes_total",
    "kafkalens_lag_series_dropped_total",
)


def registered_labels() -> dict[str, set[str]]:
    """Sample name -> label names, from the registry of a proxy (every feature's too)."""
    from proxy.features import Config, proxy_metrics

    found: dict[str, set[str]] = {}
    for collector, names in proxy_metrics(Config()).registry._collector_to_names.items():  # noqa: SLF001
        for name in names:
            found[name] = set(getattr(collector, "_labelnames", ()))
    return found


CONTRACT_METRICS: dict[str, set[str]] = {name: registered_labels()[name] for name in LAG_METRICS}
# Client metrics (#20) are kafkalens_client_<OTLP name converted>, labelled with the
# client's identity plus the data point's attributes: the dashboard may use those of
# KIP-714's standard metrics it names here (OTLP name, type, attributes).
TELEMETRY_PREFIX = "kafkalens_client_org_"
CLIENT_METRICS = {
    "org.apache.kafka.producer.record.queue.time.avg": ("gauge", set()),
    "org.apache.kafka.producer.node.request.latency.avg": ("gauge", {"node.id"}),
}
CLIENT_LABELS = {"client_instance_id", "client_id", "software"}
SCRAPE_LABELS = {"instance", "job"}


def prometheus_name(otlp: str, kind: str) -> str:
    """The exported name, by the proxy's own converter (proxy/observe/telemetry/otlp.py)."""
    from proxy.observe.telemetry.otlp import Point
    from proxy.observe.telemetry.otlp import prometheus_name as convert

    point = Point(otlp, kind.upper(), kind == "sum", 0.0, None, ())
    return convert(point) + ("_total" if kind == "sum" else "")


def telemetry_metrics() -> dict[str, set[str]]:
    from proxy.observe.telemetry.otlp import label_name

    return {prometheus_name(otlp, kind): CLIENT_LABELS | {label_name(a) for a in attrs}
            for otlp, (kind, attrs) in CLIENT_METRICS.items()}


def exported_names() -> set[str]:
    return metric_names() | set(telemetry_metrics())


def test_every_queried_metric_is_exported() -> None:
    queries = dashboard_queries() + [rule["expr"] for rule in all_rules()]
    used = used_metrics(queries)
    assert used, "no kafkalens metrics found in the PromQL"
    assert used <= exported_names(), used - exported_names()


def labels_used(query: str) -> set[str]:
    """The label names a query selects on, groups by or prints (legends aside)."""
    names = {m for sel in re.findall(r"\{([^}]*)\}", query)
             for m in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", sel)}
    for clause in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", query):
        names |= {n.strip() for n in clause.split(",") if n.strip()}
    return names


def test_lag_and_telemetry_queries_use_only_their_labels() -> None:
    """A query on the contract's metrics selects and groups by their labels only: a
    typo (consumer_group for group) would silently give an empty panel or an alert
    that never fires."""
    known = {**CONTRACT_METRICS, **telemetry_metrics()}
    queries = dashboard_queries() + [rule["expr"] for rule in all_rules()]
    checked = 0
    for query in queries:
        metrics = used_metrics([query]) & set(known)
        if not metrics:
            continue
        assert used_metrics([query]) <= set(known), query  # not mixed with other metrics
        allowed = set().union(*(known[m] for m in metrics)) | SCRAPE_LABELS
        assert labels_used(query) <= allowed, (query, labels_used(query) - allowed)
        checked += 1
    assert checked >= 10


def test_dashboard_shows_lag_traffic_and_telemetry() -> None:
    used = used_metrics(dashboard_queries())
    assert set(CONTRACT_METRICS) <= used, set(CONTRACT_METRICS) - used
    assert any(m.startswith(TELEMETRY_PREFIX) for m in used)
    exprs = dashboard_queries()
    for label in ("software", "principal"):  # topic traffic by software and by principal
        assert any(f"by ({label}, direction)" in e and "kafkalens_topic_bytes_total" in e
                   for e in exprs), label
    # Every panel fits the 24-column grid and none overlaps another.
    cells: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, panel["title"]
        cells |= mine


def test_lag_alerts_fire_on_sustained_growth() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    for name, metric, growth in (
        ("KafkalensConsumerLagGrowing", "kafkalens_consumer_topic_lag_records", "deriv("),
        ("KafkalensCommittedLagGrowing", "kafkalens_committed_lag_records", "delta("),
    ):
        rule = rules[name]
        expr = " ".join(rule["expr"].split())
        assert f"{growth}{metric}" in expr and "> 0" in expr, name
        window = re.search(rf"{re.escape(growth)}{metric}[^\[]*\[(\d+)m\]", expr)
        assert window and int(window.group(1)) >= 5, name
        assert int(str(rule["for"]).rstrip("m")) >= 5, name  # N minutes, not one blip
        assert "by (group, topic)" in expr


def test_dashboard_has_the_required_panels() -> None:
    used = used_metrics(dashboard_queries())
    assert {
        "kafkalens_requests_total",
        "kafkalens_request_duration_seconds_bucket",
        "kafkalens_request_errors_total",
        "kafkalens_connections",
        "kafkalens_client_instances",
        "kafkalens_decode_errors_total",
        "kafkalens_upstream_failures_total",
    } <= used
    exprs = " ".join(dashboard_queries())
    assert "histogram_quantile(0.5," in exprs and "histogram_quantile(0.99," in exprs
    ids = [panel["id"] for panel in dashboard()["panels"]]
    assert len(ids) == len(set(ids))


def test_alert_rules_are_complete() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    required = {
        "KafkalensDown",
        "KafkalensDecodeErrors",
        "KafkalensUpstreamFailures",
        "KafkalensErrorRateSpike",
    }
    assert required <= set(rules)
    for rule in rules.values():
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"] and rule["for"]
    assert 'job="kafkalens"' in rules["KafkalensDown"]["expr"]


FAILURES = "kafkalens:request_failures:rate5m"
SELECTOR = re.compile(r"kafkalens_request_errors_total\{([^}]*)\}")
MATCHER = re.compile(r'\s*(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*(?:,|$)')


def expected_errors() -> dict[str, list[str]]:
    data = json.loads((ROOT / "pipeline" / "data" / "expected_errors.json").read_text())
    return {api: errors for api, errors in data.items() if not api.startswith("_")}


def selector_matches(matchers: list[tuple[str, str, str]], labels: dict[str, str]) -> bool:
    """PromQL label matching: regexes are anchored at both ends."""
    for name, op, value in matchers:
        got = labels.get(name, "")
        ok = {"=": got == value, "!=": got != value,
              "=~": re.fullmatch(value, got) is not None,
              "!~": re.fullmatch(value, got) is None}[op]
        if not ok:
            return False
    return True


def failure_selectors() -> list[list[tuple[str, str, str]]]:
    expr = recording_rules()[FAILURES]
    branches = [b.strip() for b in expr.strip().split("\n") if b.strip()]
    selectors = []
    for i, branch in enumerate(branches):
        # Each branch the same shape, joined by `or`: label sets disjoint by api.
        body = branch.removeprefix("or ") if i else branch
        assert body.startswith("sum by (instance, api, error) (rate(") and body.endswith("[5m]))")
        [inside] = SELECTOR.findall(body)
        assert MATCHER.sub("", inside) == "", inside
        selectors.append(MATCHER.findall(inside))
    return selectors


def test_error_rate_alert_leaves_out_protocol_steps() -> None:
    """The recorded failures count every (api, error) once, except the errors
    pipeline/data/expected_errors.json lists as protocol steps of that api."""
    from codec import api_names
    from codec.error_codes import ERROR_CODES

    expected = expected_errors()
    apis, errors = set(api_names().values()), set(ERROR_CODES.values())
    assert set(expected) <= apis and {e for es in expected.values() for e in es} <= errors
    selectors = failure_selectors()
    for api in apis:
        for error in errors | {"UNKNOWN_ERROR_999", "other"}:  # error_capper's overflow too
            hits = sum(selector_matches(m, {"api": api, "error": error}) for m in selectors)
            assert hits == (0 if error in expected.get(api, ()) else 1), (api, error, hits)

    spike = next(r for r in alert_rules() if r["alert"] == "KafkalensErrorRateSpike")["expr"]
    assert "kafkalens_request_errors_total" not in spike  # only the failures
    assert spike.count(f"sum by (instance, api) ({FAILURES})") == 2


# --- example configs -------------------------------------------------------------------

# Maps whose keys are data (node ids, api names), not config keys.
FREE_FORM = {"broker_ports", "header_v3"}
KEY_LINE = re.compile(r"^\s*(?:#\s*)?(?:-\s+)?([a-z_0-9]+):(?:\s|$)")


def documented_keys() -> tuple[set[str], set[str]]:
    """(all keys, top-level keys) of config/kafkalens.yaml, commented-out examples included."""
    lines = (ROOT / "config" / "kafkalens.yaml").read_text().splitlines()
    keys = {m.group(1) for line in lines if (m := KEY_LINE.match(line))}
    top = {m.group(1) for line in lines if (m := re.match(r"^(?:# )?([a-z_0-9]+):", line))}
    return keys, top


def config_keys(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            if key not in FREE_FORM:
                yield from config_keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from config_keys(item)


def all_example_configs() -> dict[str, dict[str, Any]]:
    configs = {p.name: load(p) for p in (ROOT / "config").glob("*.yaml")}
    configs["compose/kafkalens.yaml"] = load(COMPOSE_DIR / "kafkalens.yaml")
    for name, cm in configmaps(static_docs()).items():
        configs[f"configmap {name}"] = yaml.safe_load(cm["data"]["kafkalens.yaml"])
    return configs


def chart_configs() -> dict[str, dict[str, Any]]:
    from support.helm import render

    configs = {}
    for name, cm in configmaps(render(HELM_VALUES)).items():
        configs[f"helm {name}"] = yaml.safe_load(cm["data"]["kafkalens.yaml"])
    assert len(configs) == 2  # the gateway's and the sidecar's
    return configs


@pytest.mark.parametrize("name", sorted(all_example_configs()))
def test_example_configs_use_only_documented_keys(name: str) -> None:
    check_documented_keys(all_example_configs()[name])


def test_the_charts_configs_use_only_documented_keys_and_pass_the_validator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for config in chart_configs().values():
        check_documented_keys(config)
        check_validates(config, monkeypatch)


def check_documented_keys(config: dict[str, Any]) -> None:
    keys, top = documented_keys()
    assert set(config) <= top, set(config) - top
    assert set(config_keys(config)) <= keys, set(config_keys(config)) - keys
    assert config["mode"] in {"sidecar", "gateway"}
    assert ("gateway" in config) == (config["mode"] == "gateway")


@pytest.mark.parametrize("name", sorted(all_example_configs()))
def test_example_configs_pass_the_proxy_validator(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_validates(all_example_configs()[name], monkeypatch)


def test_no_shipped_config_warns_at_a_normal_start() -> None:
    """A number of connections the open-file limit cannot hold is warned of at start
    (proxy/forward/fdlimit.py): every shipped config leaves limits.max_connections to
    `auto`, what the limit holds, so a normal start says no warning."""
    configs = {**all_example_configs(), **chart_configs()}
    given = {
        name: config["limits"]["max_connections"]
        for name, config in configs.items()
        if (config.get("limits") or {}).get("max_connections", "auto") != "auto"
    }
    assert given == {}


def check_validates(config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # TLS files named by the examples exist only where they are deployed.
    real_isfile, real_access = os.path.isfile, os.access
    deployed = ("/etc/kafkalens/", "/var/log/kafkalens/", "/var/run/secrets/kafkalens/")
    monkeypatch.setattr(os.path, "isfile", lambda p: str(p).startswith(deployed) or real_isfile(p))
    monkeypatch.setattr(os, "access", lambda p, m: str(p).startswith(deployed) or real_access(p, m))
    parse_config(config)


def test_the_deploy_readme_names_every_alert() -> None:
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    missing = [rule["alert"] for rule in alert_rules() if f"`{rule['alert']}`" not in readme]
    assert not missing, f"deploy/README.md does not name {missing}"


def test_the_alerts_page_has_a_row_for_every_alert_and_its_severity() -> None:
    """docs/alerts.md: what fires each alert and what to do next, one row per rule of
    deploy/prometheus/alerts.yml, its severity as the rule labels it; no row for an
    alert that is gone."""
    page = (ROOT / "docs" / "alerts.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(Kafkalens\w+)` \((\w+)\) \|", page, re.MULTILINE))
    assert rows == {rule["alert"]: rule["labels"]["severity"] for rule in alert_rules()}
