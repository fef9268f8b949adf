"""Policy: pod templates meet the Pod Security Standards level of their namespace.

Called by ``validate``: ``namespace_levels`` once per bundle, ``check`` per workload. The level of
a namespace is the strictest of what components declare (``ComponentObjects.pod_security``) and
what a rendered Namespace enforces (label ``pod-security.kubernetes.io/enforce``); namespaces
with neither get ``PolicyConfig.default_pod_security``. This mirrors the admission controller's
main rules, so a pod the cluster would refuse is caught before install. Rule ids are
``pod-security/<check>``, named after the standard's checks:

baseline: host-namespaces, privileged, capabilities_baseline, hostPath-volumes, host-ports,
apparmor, selinux, proc-mount, seccomp_baseline, sysctls, windows-hostProcess.
restricted (adds): restricted-volumes, allow-privilege-escalation, run-as-non-root,
run-as-user, seccomp_restricted, capabilities_restricted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpucatalog.core import errors
from gpucatalog.validators.static import objects, target, types

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"

BASELINE_CAPABILITIES = frozenset(
    {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
     "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
)  # fmt: skip
SAFE_SYSCTLS = frozenset(
    {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
     "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
     "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
     "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}
)  # fmt: skip
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUMES = frozenset(
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
SECCOMP_RESTRICTED = ("RuntimeDefault", "Localhost")

Path = tuple[str | int, ...]
Violation = tuple[str, Path, str]  # (check, field path, what is wrong)


def namespace_levels(
    components: list[types.ComponentObjects], all_objects: list[dict[str, Any]]
) -> dict[str, types.PodSecurityLevel]:
    """namespace -> the strictest level declared for it or enforced by its Namespace object."""
    wanted: dict[str, list[str]] = {}
    for comp in components:
        for ns, level in comp.pod_security.items():
            if level not in types.LEVELS:
                raise errors.InputError(
                    f"component {comp.name}: unknown Pod Security level {level!r} for namespace {ns}",
                    field="podSecurity",
                    expected=" | ".join(types.LEVELS),
                )
            wanted.setdefault(ns, []).append(level)
    for obj in all_objects:
        if obj.get("kind") == "Namespace" and obj.get("apiVersion") == "v1":
            meta = objects.mapping(obj, "metadata")
            labels = objects.mapping(meta, "labels")
            enforced = labels.get(ENFORCE_LABEL)
            if enforced in types.LEVELS and isinstance(meta.get("name"), str):
                wanted.setdefault(meta["name"], []).append(enforced)
    return {ns: types.LEVELS[max(types.LEVELS.index(lv) for lv in lvls)] for ns, lvls in wanted.items()}  # type: ignore[arg-type]


def check(t: target.Target, level: types.PodSecurityLevel) -> Iterator[errors.Finding]:
    tpl = objects.pod_template(t.obj)
    if tpl is None or level == "privileged":
        return
    found = list(baseline(tpl))
    if level == "restricted":
        found += restricted(tpl)
    ns = t.ident.namespace or "?"
    for chk, path, what in found:
        yield t.finding(
            f"pod-security/{chk}", path, f"{what}: not allowed in namespace {ns} (Pod Security {level})"
        )


def _sc(node: dict[str, Any]) -> dict[str, Any]:
    return objects.mapping(node, "securityContext")


def _contexts(tpl: objects.PodTemplate) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(path of securityContext, securityContext) for the pod and each container."""
    yield (*tpl.spec_path, "securityContext"), _sc(tpl.spec)
    for path, c in objects.containers(tpl):
        yield (*path, "securityContext"), _sc(c)


def baseline(tpl: objects.PodTemplate) -> Iterator[Violation]:
    spec, sp = tpl.spec, tpl.spec_path
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key) is True:
            yield "host-namespaces", (*sp, key), f"{key} is true"
    for i, vol in enumerate(objects.sequence(spec, "volumes")):
        if isinstance(vol, dict) and "hostPath" in vol:
            yield (
                "hostPath-volumes",
                (*sp, "volumes", i, "hostPath"),
                f"volume {vol.get('name')!r} is a hostPath",
            )
    for path, c in objects.containers(tpl):
        sc = _sc(c)
        scp = (*path, "securityContext")
        if sc.get("privileged") is True:
            yield "privileged", (*scp, "privileged"), f"container {c.get('name')!r} is privileged"
        caps = objects.mapping(sc, "capabilities")
        for j, cap in enumerate(caps.get("add") or []):
            if cap not in BASELINE_CAPABILITIES:
                yield (
                    "capabilities_baseline",
                    (*scp, "capabilities", "add", j),
                    f"capability {cap!r} is added",
                )
        if sc.get("procMount") not in (None, "Default"):
            yield "proc-mount", (*scp, "procMount"), f"procMount is {sc.get('procMount')!r}"
        for j, port in enumerate(objects.sequence(c, "ports")):
            if isinstance(port, dict) and port.get("hostPort") not in (None, 0):
                yield (
                    "host-ports",
                    (*path, "ports", j, "hostPort"),
                    f"hostPort {port.get('hostPort')} is used",
                )
    for scp, sc in _contexts(tpl):
        win = objects.mapping(sc, "windowsOptions")
        if win.get("hostProcess") is True:
            yield "windows-hostProcess", (*scp, "windowsOptions", "hostProcess"), "hostProcess is true"
        seccomp = objects.mapping(sc, "seccompProfile")
        if seccomp.get("type") == "Unconfined":
            yield "seccomp_baseline", (*scp, "seccompProfile", "type"), "seccomp profile is Unconfined"
        apparmor = objects.mapping(sc, "appArmorProfile")
        if apparmor.get("type") == "Unconfined":
            yield "apparmor", (*scp, "appArmorProfile", "type"), "AppArmor profile is Unconfined"
        selinux = objects.mapping(sc, "seLinuxOptions")
        if selinux.get("type", "") not in SELINUX_TYPES:
            yield "selinux", (*scp, "seLinuxOptions", "type"), f"SELinux type {selinux.get('type')!r}"
        for key in ("user", "role"):
            if selinux.get(key):
                yield "selinux", (*scp, "seLinuxOptions", key), f"SELinux {key} is set"
    for j, s in enumerate(objects.sequence(_sc(spec), "sysctls")):
        if isinstance(s, dict) and s.get("name") not in SAFE_SYSCTLS:
            yield (
                "sysctls",
                (*sp, "securityContext", "sysctls", j, "name"),
                f"sysctl {s.get('name')!r} is not safe",
            )
    for key, value in objects.mapping(tpl.metadata, "annotations").items():
        if str(key).startswith(APPARMOR_ANNOTATION) and not (
            value == "runtime/default" or str(value).startswith("localhost/")
        ):
            meta_path = (*sp[:-1], "metadata", "annotations", key)
            yield "apparmor", meta_path, f"AppArmor profile {value!r}"


def restricted(tpl: objects.PodTemplate) -> Iterator[Violation]:
    spec, sp = tpl.spec, tpl.spec_path
    for i, vol in enumerate(objects.sequence(spec, "volumes")):
        if not isinstance(vol, dict):
            continue
        kinds = [k for k in vol if k != "name"]
        for k in kinds:
            if k not in RESTRICTED_VOLUMES:
                yield (
                    "restricted-volumes",
                    (*sp, "volumes", i, k),
                    f"volume {vol.get('name')!r} is of type {k}",
                )
    pod_sc = _sc(spec)
    pod_non_root = pod_sc.get("runAsNonRoot")
    pod_seccomp = objects.mapping(pod_sc, "seccompProfile").get("type")
    psp = (*sp, "securityContext")
    if pod_non_root is False:
        yield "run-as-non-root", (*psp, "runAsNonRoot"), "runAsNonRoot is false"
    if pod_sc.get("runAsUser") == 0:
        yield "run-as-user", (*psp, "runAsUser"), "runAsUser is 0 (root)"
    for path, c in objects.containers(tpl):
        sc = _sc(c)
        scp = (*path, "securityContext")
        name = c.get("name")
        if sc.get("allowPrivilegeEscalation") is not False:
            yield (
                "allow-privilege-escalation",
                (*scp, "allowPrivilegeEscalation"),
                (f"container {name!r} does not set allowPrivilegeEscalation: false"),
            )
        non_root = sc.get("runAsNonRoot")
        if non_root is False or (non_root is None and pod_non_root is None):
            yield (
                "run-as-non-root",
                (*scp, "runAsNonRoot"),
                f"container {name!r} may run as root (runAsNonRoot not true)",
            )
        if sc.get("runAsUser") == 0:
            yield "run-as-user", (*scp, "runAsUser"), f"container {name!r} runs as user 0"
        seccomp = objects.mapping(sc, "seccompProfile")
        effective = seccomp.get("type", pod_seccomp)
        if effective not in SECCOMP_RESTRICTED:
            yield (
                "seccomp_restricted",
                (*scp, "seccompProfile", "type"),
                (f"container {name!r} has no RuntimeDefault or Localhost seccomp profile"),
            )
        caps = objects.mapping(sc, "capabilities")
        if "ALL" not in (caps.get("drop") or []):
            yield (
                "capabilities_restricted",
                (*scp, "capabilities", "drop"),
                f"container {name!r} does not drop ALL",
            )
        for j, cap in enumerate(caps.get("add") or []):
            if cap != "NET_BIND_SERVICE":
                yield (
                    "capabilities_restricted",
                    (*scp, "capabilities", "add", j),
                    f"capability {cap!r} is added",
                )
