"""Pod Security Standards, "restricted" profile: the security contexts msgstore puts on every
pod it creates, and a checker of a pod spec against the profile's rules.

The rules follow https://kubernetes.io/docs/concepts/security/pod-security-standards/ (the
baseline controls plus the restricted ones, as enforced by the PodSecurity admission
plugin at ``restricted:latest``). ``restricted_violations`` returns every violation in the
words of the admission plugin's field names, so a test failure reads like the API server's
refusal would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Identities of the images: the node/operator image runs as 10001, Spark's as 185.
NODE_UID = 10001
SPARK_UID = 185

RESTRICTED_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
# Baseline allows adding these; restricted allows adding NET_BIND_SERVICE only.
ALLOWED_ADDED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)


def pod_security_context(uid: int, fs_group: int | None = None) -> dict[str, Any]:
    """Pod-level context: a fixed non-root identity, the runtime's seccomp profile."""
    ctx: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if fs_group is not None:
        ctx["fsGroup"] = fs_group
        # Only walk the volume to fix ownership when its root does not match already.
        ctx["fsGroupChangePolicy"] = "OnRootMismatch"
    return ctx


def container_security_context(read_only_root: bool = True) -> dict[str, Any]:
    """Container-level context: no privilege escalation, no capabilities."""
    ctx: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if read_only_root:
        ctx["readOnlyRootFilesystem"] = True
    return ctx


def _containers(spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    out = []
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            out.append((f"{field}[{c.get('name', '?')}]", c))
    return out


def _seccomp_ok(profile: Mapping[str, Any] | None) -> bool | None:
    """True for RuntimeDefault/Localhost, False for anything else, None when unset."""
    if not profile or "type" not in profile:
        return None
    return profile["type"] in ("RuntimeDefault", "Localhost")


def restricted_violations(spec: Mapping[str, Any]) -> list[str]:
    """Every rule of the "restricted" profile that the pod spec breaks (empty: compliant)."""
    problems: list[str] = []
    pod_ctx = spec.get("securityContext") or {}
    containers = _containers(spec)
    if not containers:
        problems.append("the pod has no containers")
    # baseline: host namespaces, host ports, hostPath, privileged, sysctls, proc mount...
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            problems.append(f"{flag}=true")
    for sysctl in pod_ctx.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            problems.append(f"forbidden sysctl {sysctl.get('name')}")
    se_linux = pod_ctx.get("seLinuxOptions") or {}
    if se_linux.get("user") or se_linux.get("role"):
        problems.append("pod seLinuxOptions sets user or role")
    for volume in spec.get("volumes") or []:
        kinds = [k for k in volume if k != "name"]
        bad = [k for k in kinds if k not in RESTRICTED_VOLUME_TYPES]
        if bad or not kinds:
            problems.append(f"volume {volume.get('name')} has a restricted type {bad or kinds}")
    # restricted: runAsNonRoot, runAsUser != 0, seccomp
    pod_non_root = pod_ctx.get("runAsNonRoot")
    if pod_ctx.get("runAsUser") == 0:
        problems.append("pod runAsUser=0")
    pod_seccomp = _seccomp_ok(pod_ctx.get("seccompProfile"))
    if pod_seccomp is False:
        problems.append("pod seccompProfile is not RuntimeDefault or Localhost")
    for where, c in containers:
        ctx = c.get("securityContext") or {}
        if ctx.get("privileged"):
            problems.append(f"{where}: privileged=true")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation != false")
        caps = ctx.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f'{where}: capabilities.drop does not include "ALL"')
        added = set(caps.get("add") or []) - ALLOWED_ADDED_CAPABILITIES
        if added:
            problems.append(f"{where}: capabilities.add {sorted(added)}")
        non_root = ctx.get("runAsNonRoot", pod_non_root)
        if non_root is not True:
            problems.append(f"{where}: runAsNonRoot != true")
        if ctx.get("runAsUser") == 0:
            problems.append(f"{where}: runAsUser=0")
        seccomp = _seccomp_ok(ctx.get("seccompProfile"))
        if seccomp is False or (seccomp is None and pod_seccomp is not True):
            problems.append(f"{where}: seccompProfile.type is not RuntimeDefault or Localhost")
        if ctx.get("procMount") not in (None, "Default"):
            problems.append(f"{where}: procMount={ctx.get('procMount')}")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"{where}: hostPort {port['hostPort']}")
        c_se = ctx.get("seLinuxOptions") or {}
        if c_se.get("user") or c_se.get("role"):
            problems.append(f"{where}: seLinuxOptions sets user or role")
    return problems
