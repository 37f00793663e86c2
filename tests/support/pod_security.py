"""The Kubernetes Pod Security Standards' *restricted* profile, as rules over a pod spec.

Each rule is one of the checks Kubernetes' own Pod Security Admission runs at the
restricted level (its baseline checks included, as the profile includes them), named by
that check's id and read the way it reads the fields: a container-level field left
unset is fine where the pod-level one holds (runAsNonRoot, seccompProfile), an
explicit bad value anywhere is not. Values are those of the newest Kubernetes release
whose profile this follows (1.34: the probes' and lifecycle handlers' `host` field is
forbidden too). `violations(spec, metadata)` gives every broken rule, with what broke
it; `tests/deploy/test_deploy.py` holds every pod template in deploy/ (and the Helm chart's
rendered output) to none, and breaks each rule once to show it is checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Pod = dict[str, Any]
Rule = Callable[[Pod, dict[str, Any]], list[str]]

# The baseline's capabilities a container may add (Docker's default set); the
# restricted profile allows only NET_BIND_SERVICE and wants ALL dropped.
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})  # fmt: skip
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
})  # fmt: skip
RESTRICTED_VOLUMES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
})  # fmt: skip
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
SECCOMP_OK = frozenset({"RuntimeDefault", "Localhost"})


def containers(spec: Pod) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(node: dict[str, Any]) -> dict[str, Any]:
    return node.get("securityContext") or {}


# --- baseline -------------------------------------------------------------------------


def host_namespaces(spec: Pod, _: dict[str, Any]) -> list[str]:
    return [f"spec.{key}" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]


def privileged(spec: Pod, _: dict[str, Any]) -> list[str]:
    return [c["name"] for c in containers(spec) if _sc(c).get("privileged")]


def capabilities_baseline(spec: Pod, _: dict[str, Any]) -> list[str]:
    return [
        f"{c['name']} adds {cap}"
        for c in containers(spec)
        for cap in (_sc(c).get("capabilities") or {}).get("add") or []
        if cap not in BASELINE_CAPABILITIES
    ]


def host_path_volumes(spec: Pod, _: dict[str, Any]) -> list[str]:
    return [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]


def host_ports(spec: Pod, _: dict[str, Any]) -> list[str]:
    return [f"{c['name']}:{p['hostPort']}" for c in containers(spec) for p in c.get("ports") or [] if p.get("hostPort")]


def app_armor_profile(spec: Pod, metadata: dict[str, Any]) -> list[str]:
    bad = []
    for where, sc in [("pod", _sc(spec))] + [(c["name"], _sc(c)) for c in containers(spec)]:
        kind = (sc.get("appArmorProfile") or {}).get("type")
        if kind not in (None, "RuntimeDefault", "Localhost"):
            bad.append(f"{where}: {kind}")
    for key, value in (metadata.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            bad.append(f"{key}: {value}")
    return bad


def se_linux_options(spec: Pod, _: dict[str, Any]) -> list[str]:
    bad = []
    for where, sc in [("pod", _sc(spec))] + [(c["name"], _sc(c)) for c in containers(spec)]:
        options = sc.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES or options.get("user") or options.get("role"):
            bad.append(f"{where}: {options}")
    return bad


def proc_mount(spec: Pod, _: dict[str, Any]) -> list[str]:
    return [c["name"] for c in containers(spec) if _sc(c).get("procMount", "Default") != "Default"]


def seccomp_profile_baseline(spec: Pod, _: dict[str, Any]) -> list[str]:
    bad = []
    for where, sc in [("pod", _sc(spec))] + [(c["name"], _sc(c)) for c in containers(spec)]:
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            bad.append(where)
    return bad


def sysctls(spec: Pod, _: dict[str, Any]) -> list[str]:
    return [s["name"] for s in _sc(spec).get("sysctls") or [] if s["name"] not in SAFE_SYSCTLS]


def windows_host_process(spec: Pod, _: dict[str, Any]) -> list[str]:
    bad = []
    for where, sc in [("pod", _sc(spec))] + [(c["name"], _sc(c)) for c in containers(spec)]:
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            bad.append(where)
    return bad


def host_probes_and_host_lifecycle(spec: Pod, _: dict[str, Any]) -> list[str]:
    bad = []
    for c in containers(spec):
        handlers = [c.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += list((c.get("lifecycle") or {}).values())
        for handler in handlers:
            for kind in ("httpGet", "tcpSocket"):
                host = ((handler or {}).get(kind) or {}).get("host")
                if host:
                    bad.append(f"{c['name']}: {kind}.host {host}")
    return bad


# --- restricted -----------------------------------------------------------------------


def restricted_volumes(spec: Pod, _: dict[str, Any]) -> list[str]:
    bad = []
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            bad.append(f"{volume['name']}: {sorted(kinds - RESTRICTED_VOLUMES)}")
    return bad


def allow_privilege_escalation(spec: Pod, _: dict[str, Any]) -> list[str]:
    """Must be set to false on every container (unset is refused: the default is true)."""
    return [c["name"] for c in containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]


def run_as_non_root(spec: Pod, _: dict[str, Any]) -> list[str]:
    pod = _sc(spec).get("runAsNonRoot")
    bad = ["pod"] if pod is False else []
    for c in containers(spec):
        mine = _sc(c).get("runAsNonRoot")
        if mine is False or (mine is None and pod is not True):
            bad.append(c["name"])
    return bad


def run_as_user(spec: Pod, _: dict[str, Any]) -> list[str]:
    bad = ["pod"] if _sc(spec).get("runAsUser") == 0 else []
    return bad + [c["name"] for c in containers(spec) if _sc(c).get("runAsUser") == 0]


def seccomp_profile_restricted(spec: Pod, _: dict[str, Any]) -> list[str]:
    pod = (_sc(spec).get("seccompProfile") or {}).get("type")
    bad = ["pod"] if pod is not None and pod not in SECCOMP_OK else []
    for c in containers(spec):
        mine = (_sc(c).get("seccompProfile") or {}).get("type")
        if (mine is not None and mine not in SECCOMP_OK) or (mine is None and pod not in SECCOMP_OK):
            bad.append(c["name"])
    return bad


def capabilities_restricted(spec: Pod, _: dict[str, Any]) -> list[str]:
    bad = []
    for c in containers(spec):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            bad.append(f"{c['name']} does not drop ALL")
        bad += [f"{c['name']} adds {cap}" for cap in caps.get("add") or [] if cap != "NET_BIND_SERVICE"]
    return bad


# Pod Security Admission's check ids, in its order: baseline, then restricted.
RULES: dict[str, Rule] = {
    "hostNamespaces": host_namespaces,
    "privileged": privileged,
    "capabilities_baseline": capabilities_baseline,
    "hostPathVolumes": host_path_volumes,
    "hostPorts": host_ports,
    "appArmorProfile": app_armor_profile,
    "seLinuxOptions": se_linux_options,
    "procMount": proc_mount,
    "seccompProfile_baseline": seccomp_profile_baseline,
    "sysctls": sysctls,
    "windowsHostProcess": windows_host_process,
    "hostProbesAndHostLifecycle": host_probes_and_host_lifecycle,
    "restrictedVolumes": restricted_volumes,
    "allowPrivilegeEscalation": allow_privilege_escalation,
    "runAsNonRoot": run_as_non_root,
    "runAsUser": run_as_user,
    "seccompProfile_restricted": seccomp_profile_restricted,
    "capabilities_restricted": capabilities_restricted,
}


def violations(spec: Pod, metadata: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """{rule id: what breaks it} for every restricted rule the pod breaks; {} if none."""
    found = {}
    for name, rule in RULES.items():
        bad = rule(spec, metadata or {})
        if bad:
            found[name] = bad
    return found


POD_TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")


def pod_templates(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any], Pod]]:
    """("Kind/name", pod metadata, pod spec) of every pod a list of manifests makes."""
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "Pod":
            yield f"Pod/{name}", doc["metadata"], doc["spec"]
        elif kind in POD_TEMPLATE_KINDS:
            template = doc["spec"]["template"]
            yield f"{kind}/{name}", template.get("metadata") or {}, template["spec"]
        elif kind == "CronJob":
            template = doc["spec"]["jobTemplate"]["spec"]["template"]
            yield f"{kind}/{name}", template.get("metadata") or {}, template["spec"]
