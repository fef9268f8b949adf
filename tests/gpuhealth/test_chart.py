"""charts/gpu-health renders and validates with real helm for every ci/ scenario, with
least-privilege RBAC, declared host access, pinned image, resource requests, and flags that the
real ``gpu-health`` argument parser accepts."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest
import yaml

from gpucatalog.core import executor
from gpucatalog.gpuhealth import main as gh_main
from tests.conftest import RenderChart

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpu-health"
SCENARIOS = sorted((CHART / "ci").glob("*-values.yaml"))
IMAGE = "ghcr.io/gpu-catalog/gpu-health:0.1.0"


def helm_run(helm: Path, *args: str) -> CompletedProcess[str]:
    return executor.run([helm, *args], check=False)


@pytest.fixture(scope="module")
def render(render_chart: RenderChart) -> Callable[[Path], list[dict[str, Any]]]:
    """The chart rendered with one ci/ scenario's values (each scenario rendered once)."""
    return cache(lambda values: render_chart("gpu-health", yaml.safe_load(values.read_text()) or {}))


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def pod_specs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("DaemonSet", "Deployment")]
    for cm in by_kind(docs, "ConfigMap"):
        if "pod.json" in cm.get("data", {}):
            specs.append(json.loads(cm["data"]["pod.json"])["spec"])
    return specs


def test_lint(helm: Path) -> None:
    res = helm_run(helm, "lint", str(CHART), "--strict")
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("values", SCENARIOS, ids=lambda p: p.name)
def test_scenario_renders_least_privilege(values: Path, render: Callable[[Path], list[dict[str, Any]]]) -> None:
    docs = render(values)
    for role in by_kind(docs, "ClusterRole") + by_kind(docs, "Role"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], f"wildcard in {role['metadata']['name']}: {rule}"
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    agent_roles = [r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"].endswith("agent")]
    for r in agent_roles:
        assert r["rules"] == [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        ]


@pytest.mark.parametrize("values", SCENARIOS, ids=lambda p: p.name)
def test_scenario_pods_pinned_requested_and_host_access_declared(values: Path, render: Callable[[Path], list[dict[str, Any]]]) -> None:
    docs = render(values)
    specs = pod_specs(docs)
    assert specs
    for spec in specs:
        for c in spec["containers"]:
            assert c["image"] == IMAGE
            assert {"cpu", "memory"} <= set(c["resources"]["requests"])
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"].get("privileged") in (None, False)
            for m in c.get("volumeMounts", []):
                assert m["readOnly"] is True
    for ds in by_kind(docs, "DaemonSet"):
        ann = ds["spec"]["template"]["metadata"]["annotations"]
        for vol in ds["spec"]["template"]["spec"]["volumes"]:
            key = "gpu-health.gpu-catalog.io/host-access." + vol["name"].removeprefix("host-")
            assert vol["hostPath"]["path"] in ann[key] and "read-only" in ann[key]


@pytest.mark.parametrize("values", SCENARIOS, ids=lambda p: p.name)
def test_scenario_flags_are_accepted_by_the_real_parser(values: Path, render: Callable[[Path], list[dict[str, Any]]]) -> None:
    docs = render(values)
    for d in by_kind(docs, "DaemonSet") + by_kind(docs, "Deployment"):
        c = d["spec"]["template"]["spec"]["containers"][0]
        args = gh_main.parser().parse_args(c["args"])
        if args.command == "agent":
            args.node = "gpu-0"
            gh_main.probe_config(args)
        else:
            args.namespace = "gpu-health"
            cfg = gh_main.controller_config(args)
            env = {e["name"]: e.get("value") for e in c["env"]}
            from gpucatalog.gpuhealth import actuator

            actuator.from_config(json.loads(env["GPU_HEALTH_ACTUATOR"]))
            assert cfg.breaker_share > 0
    for spec in pod_specs(docs):
        c = spec["containers"][0]
        if c["args"][0] == "verify":
            gh_main.probe_config(gh_main.parser().parse_args(c["args"]))


@pytest.mark.parametrize(
    ("flag", "needle"),
    [
        ("controller.breaker.maxShare=2", "maxShare"),
        ("image.tag=latest", "tag"),
        ("agent.xidDefaultAction=PANIC", "xidDefaultAction"),
        ("controller.actuator.kind=magic", "kind"),
        ("agent.metrics.port=70000", "port"),
        ("agent.metrics.path=/x", "path"),
    ],
)
def test_schema_rejects_bad_values(flag: str, needle: str, helm: Path) -> None:
    res = helm_run(helm, "template", "gh", str(CHART), "--set", flag)
    assert res.returncode != 0 and needle in res.stderr


def test_dockerfile_runs_the_entry_point() -> None:
    text = (ROOT / "Dockerfile.gpu-health").read_text()
    assert 'ENTRYPOINT ["python3", "-m", "gpucatalog.gpuhealth.main"]' in text
    assert "gpucatalog/catalog" not in text  # the image carries only gpuhealth


@pytest.mark.parametrize("values", SCENARIOS, ids=lambda p: p.name)
def test_scenario_probes_seccomp_and_users(values: Path, render: Callable[[Path], list[dict[str, Any]]]) -> None:
    """Agent and controller answer liveness and readiness probes on their pod IP, every pod runs
    under the runtime's default seccomp filter, the controller never runs as root unless it drives
    scontrol, and the agent is root only with CAP_SYSLOG alone."""
    docs = render(values)
    scenario = yaml.safe_load(values.read_text()) or {}
    for d in by_kind(docs, "DaemonSet") + by_kind(docs, "Deployment"):
        spec = d["spec"]["template"]["spec"]
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        c = spec["containers"][0]
        port = next(p for p in c["ports"] if p["name"] == "health")["containerPort"]
        env = [e["name"] for e in c["env"]]
        assert env.index("POD_IP") < env.index("GPU_HEALTH_HEALTH_ADDR")  # referenced after it is defined
        assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in c["env"]
        assert {"name": "GPU_HEALTH_HEALTH_ADDR", "value": f"$(POD_IP):{port}"} in c["env"]
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
        sc = {**spec["securityContext"], **c["securityContext"]}
        if d["kind"] == "Deployment":
            scontrol = (scenario.get("controller") or {}).get("slurm", {}).get("mode") == "scontrol"
            assert (sc.get("runAsUser") == 0) is scontrol, sc
            if not scontrol:
                assert sc["runAsNonRoot"] is True and sc["runAsUser"] >= 10000
        else:
            assert sc["runAsUser"] == 0 and c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}
    for spec in pod_specs(docs):
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (policy,) = [p for p in by_kind(docs, "NetworkPolicy") if p["metadata"]["name"] == "gpu-health"]
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "health", "protocol": "TCP"}]}]


def test_metrics_are_off_by_default(render_chart: RenderChart) -> None:
    docs = render_chart("gpu-health", {})
    (ds,) = by_kind(docs, "DaemonSet")
    c = ds["spec"]["template"]["spec"]["containers"][0]
    assert [p["name"] for p in c["ports"]] == ["health"]
    assert "GPU_HEALTH_METRICS_ADDR" not in {e["name"] for e in c["env"]}
    assert [p["metadata"]["name"] for p in by_kind(docs, "NetworkPolicy")] == ["gpu-health"]


def test_metrics_port_env_and_network_policy_when_enabled(render_chart: RenderChart) -> None:
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    docs = render_chart("gpu-health", {"agent": {"metrics": {"enabled": True, "port": 9500, "from": peers}}})
    (ds,) = by_kind(docs, "DaemonSet")
    c = ds["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "metrics", "containerPort": 9500, "protocol": "TCP"} in c["ports"]
    env = [e["name"] for e in c["env"]]
    assert env.index("POD_IP") < env.index("GPU_HEALTH_METRICS_ADDR")  # referenced after it is defined
    assert {"name": "GPU_HEALTH_METRICS_ADDR", "value": "$(POD_IP):9500"} in c["env"]
    (dep,) = by_kind(docs, "Deployment")  # the controller serves no metrics
    assert [p["name"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]] == ["health"]
    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind(docs, "NetworkPolicy")}
    assert policies["gpu-health"]["ingress"] == [{"ports": [{"port": "health", "protocol": "TCP"}]}]
    metrics = policies["gpu-health-agent-metrics"]
    assert metrics["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "agent"
    assert metrics["policyTypes"] == ["Ingress"]
    assert metrics["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}], "from": peers}]
    open_docs = render_chart("gpu-health", {"agent": {"metrics": {"enabled": True}}})
    (open_policy,) = [p for p in by_kind(open_docs, "NetworkPolicy") if p["metadata"]["name"] != "gpu-health"]
    assert open_policy["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]
    no_policy = render_chart("gpu-health", {"agent": {"metrics": {"enabled": True}}, "networkPolicy": {"enabled": False}})
    assert by_kind(no_policy, "NetworkPolicy") == []


def test_agent_runs_non_root_without_capabilities_when_the_host_allows(render_chart: RenderChart) -> None:
    docs = render_chart("gpu-health", {"agent": {"runAsUser": 65532}})
    (ds,) = by_kind(docs, "DaemonSet")
    sc = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert sc["runAsUser"] == 65532 and sc["runAsNonRoot"] is True and sc["capabilities"] == {"drop": ["ALL"]}


def test_scontrol_controller_can_run_as_the_slurm_user(render_chart: RenderChart) -> None:
    docs = render_chart("gpu-health", {"controller": {"slurm": {"mode": "scontrol", "runAsUser": 64030}}})
    (dep,) = by_kind(docs, "Deployment")
    sc = dep["spec"]["template"]["spec"]["securityContext"]
    assert sc["runAsUser"] == 64030 and sc["runAsNonRoot"] is True


SLURM_PATHS = {"conf": {"path": "/etc/site-slurm", "type": "Directory", "mountPath": "/etc/slurm",
                        "why": "the node's slurm.conf"},
               "munge": {"path": "/run/munge", "type": "Directory", "mountPath": "/run/munge",
                         "why": "munged's socket for scontrol"}}


def test_scontrol_controller_mounts_the_slurm_host_paths_read_only(render_chart: RenderChart) -> None:
    docs = render_chart("gpu-health", {"controller": {"slurm": {"mode": "scontrol", "hostPaths": SLURM_PATHS}}})
    (dep,) = by_kind(docs, "Deployment")
    pod = dep["spec"]["template"]
    vols = {v["name"]: v["hostPath"] for v in pod["spec"]["volumes"]}
    assert vols == {"slurm-conf": {"path": "/etc/site-slurm", "type": "Directory"},
                    "slurm-munge": {"path": "/run/munge", "type": "Directory"}}
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert mounts == [{"name": "slurm-conf", "mountPath": "/etc/slurm", "readOnly": True},
                      {"name": "slurm-munge", "mountPath": "/run/munge", "readOnly": True}]
    notes = pod["metadata"]["annotations"]
    assert notes["gpu-health.gpu-catalog.io/host-access.slurm-conf"] == "/etc/site-slurm (read-only): the node's slurm.conf"


def test_slurm_host_paths_are_not_mounted_without_the_scontrol_hook(render_chart: RenderChart) -> None:
    """Host access follows the hook: a values file that keeps the paths but turns Slurm off mounts nothing."""
    docs = render_chart("gpu-health", {"controller": {"slurm": {"mode": "none", "hostPaths": SLURM_PATHS}}})
    (dep,) = by_kind(docs, "Deployment")
    pod = dep["spec"]["template"]
    assert "volumes" not in pod["spec"] and "volumeMounts" not in pod["spec"]["containers"][0]
    assert not [k for k in pod["metadata"]["annotations"] if "host-access" in k]


def test_slurm_host_paths_must_be_absolute_and_explained(helm: Path) -> None:
    for flag, needle in (("controller.slurm.hostPaths.conf.mountPath=etc/slurm", "mountPath"),
                         ("controller.slurm.hostPaths.conf.why=short", "why")):
        base = ["--set", "controller.slurm.hostPaths.conf.path=/etc/slurm", "--set", "controller.slurm.hostPaths.conf.type=Directory",
                "--set", "controller.slurm.hostPaths.conf.mountPath=/etc/slurm",
                "--set", "controller.slurm.hostPaths.conf.why=the node's slurm.conf"]
        res = helm_run(helm, "template", "gh", str(CHART), *base, "--set", flag)
        assert res.returncode != 0 and needle in res.stderr, res.stderr
