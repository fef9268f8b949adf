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
    ],
)
def test_schema_rejects_bad_values(flag: str, needle: str, helm: Path) -> None:
    res = helm_run(helm, "template", "gh", str(CHART), "--set", flag)
    assert res.returncode != 0 and needle in res.stderr


def test_dockerfile_runs_the_entry_point() -> None:
    text = (ROOT / "Dockerfile.gpu-health").read_text()
    assert 'ENTRYPOINT ["python3", "-m", "gpucatalog.gpuhealth.main"]' in text
    assert "gpucatalog/catalog" not in text  # the image carries only gpuhealth
