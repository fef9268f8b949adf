"""Policy: RBAC wildcards and host access only where the component declares why."""

from __future__ import annotations

from typing import Any

POD = "spec.template.spec"


def cluster_role(**rule: Any) -> dict[str, Any]:
    base = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
    base.update(rule)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "operator"},
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}, base],
    }


def test_narrow_role_passes(validate):
    assert validate([cluster_role()]) == []


def test_wildcards_are_reported_per_entry(validate, where):
    role = cluster_role(verbs=["*"], resources=["pods", "pods/*"])
    found = validate([role])
    assert where(found) == {
        ("rbac-wildcard", "ClusterRole/operator", "rules[1].verbs[0]"),
        ("rbac-wildcard", "ClusterRole/operator", "rules[1].resources[1]"),
    }


def test_declared_wildcard_passes_only_with_a_reason(validate, where):
    role = cluster_role(apiGroups=["*"])
    assert validate([role], rbac_wildcards={"ClusterRole/operator": "manages any CRD kind"}) == []
    assert where(validate([role], rbac_wildcards={"ClusterRole/operator": " "})) == {
        ("rbac-wildcard", "ClusterRole/operator", "rules[1].apiGroups[0]")
    }
    # A declaration for another object does not cover this one.
    assert validate([role], rbac_wildcards={"Role/operator": "x"}) != []


def test_cluster_admin_binding(validate, where):
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "op-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "demo-ns"}],
    }
    assert where(validate([binding])) == {("rbac-wildcard", "ClusterRoleBinding/op-admin", "roleRef.name")}


def daemonset(privileged: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "hostPID": True,
                    "containers": [
                        {
                            "name": "probe",
                            "image": "agent:0.1.0",
                            "securityContext": {"privileged": privileged},
                            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                            "volumeMounts": [{"name": "kmsg", "mountPath": "/dev/kmsg"}],
                        }
                    ],
                    "volumes": [{"name": "kmsg", "hostPath": {"path": "/dev/kmsg"}}],
                },
            },
        },
    }


def test_privileged_pod_undeclared(validate, where):
    found = validate([daemonset()], pod_security={"demo-ns": "privileged"})
    assert where(found) == {
        ("privileged-undeclared", "DaemonSet/demo-ns/agent", f"{POD}.hostPID"),
        ("privileged-undeclared", "DaemonSet/demo-ns/agent", f"{POD}.volumes[0].hostPath"),
        (
            "privileged-undeclared",
            "DaemonSet/demo-ns/agent",
            f"{POD}.containers[0].securityContext.privileged",
        ),
    }
    assert "does not declare why DaemonSet/agent needs host access" in found[0].message


def test_privileged_pod_declared(validate, where):
    declared = {"DaemonSet/agent": "reads the kernel log and resets GPUs"}
    assert validate([daemonset()], privileged=declared, pod_security={"demo-ns": "privileged"}) == []
    # Declared, but the namespace still enforces baseline: Pod Security reports it.
    found = validate([daemonset()], privileged=declared)
    assert where(found) == {
        ("pod-security/host-namespaces", "DaemonSet/demo-ns/agent", f"{POD}.hostPID"),
        ("pod-security/hostPath-volumes", "DaemonSet/demo-ns/agent", f"{POD}.volumes[0].hostPath"),
        (
            "pod-security/privileged",
            "DaemonSet/demo-ns/agent",
            f"{POD}.containers[0].securityContext.privileged",
        ),
    }
    blank = validate(
        [daemonset()], privileged={"DaemonSet/agent": ""}, pod_security={"demo-ns": "privileged"}
    )
    assert where(blank) == {("privileged-unjustified", "DaemonSet/demo-ns/agent", "")}
