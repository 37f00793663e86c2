"""Static checks of the packaging and deploy files: no Docker or Kubernetes needed.

They catch the drift that otherwise shows only at deploy time: a port changed in one
file and not another, a COPY of a path that moved, a probe on the wrong path, a
dashboard querying a metric the proxy never exports.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.paths import REPO as ROOT

from proxy.metrics import metric_names

DEPLOY = ROOT / "deploy"
COMPOSE_DIR = DEPLOY / "compose"
K8S = DEPLOY / "kubernetes"
CONFIG_PATH = "/etc/kafkalens/kafkalens.yaml"
KAFKA_IMAGES = {"apache/kafka:3.9.0", "apache/kafka:4.0.0"}


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


def test_healthcheck_gets_healthz_on_the_metrics_port() -> None:
    (check,) = final(dockerfile(), "HEALTHCHECK")
    metrics_port = port(default_config()["metrics"]["listen"])
    assert f"http://127.0.0.1:{metrics_port}/healthz" in check.args
    assert "urllib" in check.args and "curl" not in check.args


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
    if not cli.exists():
        pytest.skip("proxy/cli.py not written yet: cannot check the `proxy` subcommand")
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
    uids = {t["datasource"]["uid"] for p in dashboard()["panels"] for t in p["targets"]}
    assert uids == {datasource["uid"]}


# --- Kubernetes ------------------------------------------------------------------------


def k8s_docs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in k8s_docs() if d["kind"] == kind]


def configmaps() -> dict[str, dict[str, Any]]:
    return {cm["metadata"]["name"]: cm for cm in of_kind("ConfigMap")}


def mounted_config(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The kafkalens config a container gets: its --config file, from a ConfigMap volume."""
    args = container["args"]
    path = Path(args[args.index("--config") + 1])
    (mount,) = [m for m in container["volumeMounts"] if path.parent == Path(m["mountPath"])]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    data = configmaps()[volume["configMap"]["name"]]["data"]
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


def test_k8s_docs_are_well_formed_and_kustomizations_complete() -> None:
    for doc in k8s_docs():
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"], doc
        assert "namespace" not in doc["metadata"], "namespaces come from kustomization.yaml"
    for kustomization in K8S.rglob("kustomization.yaml"):
        listed = set(load(kustomization)["resources"])
        present = {p.name for p in kustomization.parent.glob("*.yaml")} - {kustomization.name}
        assert listed == present, kustomization


def sidecar_pod() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    (statefulset,) = of_kind("StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    (sidecar,) = [c for c in pod["initContainers"] if c["name"] == "kafkalens"]
    (broker,) = pod["containers"]
    return statefulset, sidecar, broker


def test_kafkalens_is_a_native_sidecar_of_the_broker() -> None:
    statefulset, sidecar, broker = sidecar_pod()
    pod = statefulset["spec"]["template"]["spec"]
    assert sidecar["restartPolicy"] == "Always"
    assert all(c["name"] != "kafkalens" for c in pod["containers"])
    assert kafkalens_image_ok(sidecar["image"])
    assert broker["image"] in KAFKA_IMAGES | {compose()["services"]["kafka"]["image"]}


@pytest.mark.parametrize("kind", ["StatefulSet", "Deployment"])
def test_probes_hit_health_endpoints_on_the_metrics_port(kind: str) -> None:
    (workload,) = of_kind(kind)
    pod = workload["spec"]["template"]["spec"]
    containers = pod.get("initContainers", []) + pod["containers"]
    (proxy,) = [c for c in containers if c["name"] == "kafkalens"]
    metrics_port = port(mounted_config(pod, proxy)["metrics"]["listen"])
    assert proxy["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert proxy["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in proxy:
            assert probe_port(pod, proxy[probe]) == metrics_port, probe
    annotations = workload["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == metrics_port
    assert proxy["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("kind", ["StatefulSet", "Deployment"])
def test_clients_token_is_a_generated_secret_mounted_where_the_config_reads_it(kind: str) -> None:
    (workload,) = of_kind(kind)
    pod = workload["spec"]["template"]["spec"]
    containers = pod.get("initContainers", []) + pod["containers"]
    (proxy,) = [c for c in containers if c["name"] == "kafkalens"]
    token_file = Path(mounted_config(pod, proxy)["metrics"]["clients_token_file"])
    (mount,) = [m for m in proxy["volumeMounts"] if Path(m["mountPath"]) == token_file.parent]
    assert mount["readOnly"] is True and "subPath" not in mount  # subPath never sees updates
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret_name = volume["secret"]["secretName"]
    (kustomization,) = [
        p for p in K8S.rglob("kustomization.yaml")
        if kind in {d["kind"] for r in load(p)["resources"] for d in yaml.safe_load_all((p.parent / r).read_text()) if d}
    ]  # fmt: skip
    (generator,) = [g for g in load(kustomization)["secretGenerator"] if g["name"] == secret_name]
    (source,) = [f for f in generator["files"] if f.startswith(f"{token_file.name}=")]
    assert generator["options"]["disableNameSuffixHash"] is True  # updated in place
    ignored = (kustomization.parent / ".gitignore").read_text().split()
    assert source.split("=", 1)[1] in ignored, "the token file must never be committed"


def test_broker_advertises_the_sidecar_and_listens_where_it_forwards() -> None:
    statefulset, sidecar, broker = sidecar_pod()
    config = mounted_config(statefulset["spec"]["template"]["spec"], sidecar)
    (entry,) = config["listeners"]
    advertised = listener(kafka_env(broker["env"], "KAFKA_ADVERTISED_LISTENERS"), "CLIENT")
    assert port(advertised) == port(entry["listen"])
    assert "kafka-headless" in advertised
    client = listener(kafka_env(broker["env"], "KAFKA_LISTENERS"), "CLIENT")
    assert client == entry["upstream"]
    assert client.startswith("127.0.0.1:"), "the broker's client port must not bypass the proxy"


def test_services_and_podmonitor_point_at_real_ports() -> None:
    for workload in of_kind("StatefulSet") + of_kind("Deployment"):
        template = workload["spec"]["template"]
        ports = named_ports(template["spec"])
        for service in of_kind("Service"):
            if service["spec"]["selector"].items() <= template["metadata"]["labels"].items():
                for p in service["spec"]["ports"]:
                    assert p["targetPort"] in ports, (service["metadata"]["name"], p)
    (monitor,) = of_kind("PodMonitor")
    (statefulset,) = of_kind("StatefulSet")
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        assert endpoint["port"] in named_ports(statefulset["spec"]["template"]["spec"])
        assert endpoint["path"] == "/metrics"


def test_gateway_serves_bootstrap_and_every_broker_port() -> None:
    (deployment,) = of_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (proxy,) = pod["containers"]
    config = mounted_config(pod, proxy)
    gateway = config["gateway"]
    assert kafkalens_image_ok(proxy["image"])
    ports = set(named_ports(pod).values())
    brokers = {p for p in ports if p >= gateway["broker_port_base"]} - {9180}
    assert port(gateway["bootstrap_listen"]) in ports
    assert port(config["metrics"]["listen"]) in ports
    expected = {gateway["broker_port_base"] + n for n in range(len(brokers))}
    assert brokers == expected and len(brokers) >= 1


# --- PromQL in the dashboard and the alert rules --------------------------------------


def dashboard() -> dict[str, Any]:
    return json.loads((DEPLOY / "grafana" / "dashboards" / "kafkalens.json").read_text())


def dashboard_queries() -> list[str]:
    board = dashboard()
    queries = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    for var in board["templating"]["list"]:
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
    """Sample name -> label names, from a real Metrics registry."""
    from proxy.metrics import Metrics

    found: dict[str, set[str]] = {}
    for collector, names in Metrics().registry._collector_to_names.items():  # noqa: SLF001
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
    for name, cm in configmaps().items():
        configs[f"configmap {name}"] = yaml.safe_load(cm["data"]["kafkalens.yaml"])
    return configs


@pytest.mark.parametrize("name", sorted(all_example_configs()))
def test_example_configs_use_only_documented_keys(name: str) -> None:
    config = all_example_configs()[name]
    keys, top = documented_keys()
    assert set(config) <= top, set(config) - top
    assert set(config_keys(config)) <= keys, set(config_keys(config)) - keys
    assert config["mode"] in {"sidecar", "gateway"}
    assert ("gateway" in config) == (config["mode"] == "gateway")


@pytest.mark.parametrize("name", sorted(all_example_configs()))
def test_example_configs_pass_the_proxy_validator(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_module = pytest.importorskip("proxy.config", reason="proxy/config.py not written yet")
    # TLS files named by the examples exist only where they are deployed.
    real_isfile, real_access = os.path.isfile, os.access
    deployed = ("/etc/kafkalens/", "/var/log/kafkalens/", "/var/run/secrets/kafkalens/")
    monkeypatch.setattr(os.path, "isfile", lambda p: str(p).startswith(deployed) or real_isfile(p))
    monkeypatch.setattr(os, "access", lambda p, m: str(p).startswith(deployed) or real_access(p, m))
    config_module.parse_config(all_example_configs()[name])


def test_the_deploy_readme_names_every_alert() -> None:
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    missing = [rule["alert"] for rule in alert_rules() if f"`{rule['alert']}`" not in readme]
    assert not missing, f"deploy/README.md does not name {missing}"
