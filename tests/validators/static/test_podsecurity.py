"""Policy: Pod Security Standards per namespace (baseline and restricted main rules)."""

from __future__ import annotations

from typing import Any

import pytest

from gpucatalog.core import errors
from gpucatalog.validators.static import ComponentObjects, PolicyConfig

POD = "spec.template.spec"
C0 = f"{POD}.containers[0]"
RESTRICTED_SC = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
    "capabilities": {"drop": ["ALL"]},
}


def restricted_ok(deployment: dict[str, Any]) -> dict[str, Any]:
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"] = dict(RESTRICTED_SC)
    return deployment


def test_plain_deployment_fails_restricted_on_each_rule(validate, deployment, where):
    found = validate([deployment], pod_security={"demo-ns": "restricted"})
    assert where(found) == {
        (
            "pod-security/allow-privilege-escalation",
            "Deployment/demo-ns/web",
            f"{C0}.securityContext.allowPrivilegeEscalation",
        ),
        ("pod-security/run-as-non-root", "Deployment/demo-ns/web", f"{C0}.securityContext.runAsNonRoot"),
        (
            "pod-security/seccomp_restricted",
            "Deployment/demo-ns/web",
            f"{C0}.securityContext.seccompProfile.type",
        ),
        (
            "pod-security/capabilities_restricted",
            "Deployment/demo-ns/web",
            f"{C0}.securityContext.capabilities.drop",
        ),
    }
    assert all("namespace demo-ns (Pod Security restricted)" in f.message for f in found)


def test_restricted_pod_passes(validate, deployment):
    assert validate([restricted_ok(deployment)], pod_security={"demo-ns": "restricted"}) == []


def test_pod_level_settings_count_for_containers(validate, deployment):
    spec = deployment["spec"]["template"]["spec"]
    spec["securityContext"] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    spec["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert validate([deployment], pod_security={"demo-ns": "restricted"}) == []


def test_restricted_specific_violations(validate, deployment, where):
    spec = restricted_ok(deployment)["spec"]["template"]["spec"]
    sc = spec["containers"][0]["securityContext"]
    sc["runAsUser"] = 0
    sc["capabilities"]["add"] = ["NET_BIND_SERVICE", "CHOWN"]
    spec["volumes"] = [
        {"name": "data", "nfs": {"server": "nfs.local", "path": "/x"}},
        {"name": "t", "emptyDir": {}},
    ]
    found = validate([deployment], pod_security={"demo-ns": "restricted"})
    assert where(found) == {
        ("pod-security/run-as-user", "Deployment/demo-ns/web", f"{C0}.securityContext.runAsUser"),
        (
            "pod-security/capabilities_restricted",
            "Deployment/demo-ns/web",
            f"{C0}.securityContext.capabilities.add[1]",
        ),
        ("pod-security/restricted-volumes", "Deployment/demo-ns/web", f"{POD}.volumes[0].nfs"),
    }


def test_baseline_rules(validate, deployment, where):
    spec = deployment["spec"]["template"]["spec"]
    c = spec["containers"][0]
    c["securityContext"] = {
        "capabilities": {"add": ["NET_ADMIN", "CHOWN"]},
        "procMount": "Unmasked",
        "seccompProfile": {"type": "Unconfined"},
        "seLinuxOptions": {"type": "spc_t"},
    }
    c["ports"][0]["hostPort"] = 8080
    spec["securityContext"] = {
        "sysctls": [
            {"name": "kernel.msgmax", "value": "1"},
            {"name": "net.ipv4.tcp_syncookies", "value": "1"},
        ]
    }
    deployment["spec"]["template"]["metadata"]["annotations"] = {
        "container.apparmor.security.beta.kubernetes.io/app": "unconfined"
    }
    obj = "Deployment/demo-ns/web"
    assert where(validate([deployment])) == {
        ("pod-security/capabilities_baseline", obj, f"{C0}.securityContext.capabilities.add[0]"),
        ("pod-security/proc-mount", obj, f"{C0}.securityContext.procMount"),
        ("pod-security/seccomp_baseline", obj, f"{C0}.securityContext.seccompProfile.type"),
        ("pod-security/selinux", obj, f"{C0}.securityContext.seLinuxOptions.type"),
        ("pod-security/host-ports", obj, f"{C0}.ports[0].hostPort"),
        ("pod-security/sysctls", obj, f"{POD}.securityContext.sysctls[0].name"),
        (
            "pod-security/apparmor",
            obj,
            'spec.template.metadata.annotations["container.apparmor.security.beta.kubernetes.io/app"]',
        ),
    }


def test_levels_come_from_declarations_namespaces_and_default(validate, deployment, where):
    ns = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "demo-ns", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }
    # The Namespace enforces restricted, stricter than the declared baseline: restricted wins.
    assert validate([ns, deployment], pod_security={"demo-ns": "baseline"}) != []
    # Another component declaring privileged does not loosen it.
    other = ComponentObjects("other", "demo-ns", [], pod_security={"demo-ns": "privileged"})
    assert {f.rule for f in validate([ns, deployment], extra=[other])} >= {"pod-security/run-as-non-root"}
    # Undeclared namespaces get the policy default.
    assert validate([deployment], policy=PolicyConfig(default_pod_security="restricted")) != []
    assert validate([deployment], policy=PolicyConfig(default_pod_security="baseline")) == []


def test_bare_pod_and_job_are_checked(validate, where):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "jobs"},
        "spec": {
            "hostIPC": True,
            "containers": [
                {"name": "c", "image": "x:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
            ],
        },
    }
    found = validate([pod], privileged={"Pod/p": "shares IPC with the GPU daemon"})
    assert where(found) == {("pod-security/host-namespaces", "Pod/jobs/p", "spec.hostIPC")}


def test_unknown_level_is_input_error(validate, deployment):
    with pytest.raises(errors.InputError, match="unknown Pod Security level 'strict'"):
        validate([deployment], pod_security={"demo-ns": "strict"})
