"""dra-driver-nvidia-gpu chart (written here for the kubernetes-sigs driver's pinned 0.5.0 image):
the kubelet plugin runs the release's binary with its verbosity flag and its settings from the
environment, the sharing mode turns on the driver's own switches for it, the DeviceClasses select
the driver's GPUs and partitions (whole GPUs backing nvidia.com/gpu), every ci scenario renders, the
bundle's sim values are the chart's sim scenario, the schema refuses what the driver would not
take, and gpu-queueing 0.3.0 upgrades 0.2.0's release in place (same names, same selectors)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.catalog import loader, render
from gpucatalog.clusters.sim import drapublisher
from gpucatalog.validators.static import upgrade_rules
from tests.conftest import CHARTS, RenderChart

pytestmark = pytest.mark.toolchain
CHART = "dra-driver-nvidia-gpu"
REPO = Path(__file__).resolve().parents[2]
IMAGE = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.5.0"


def _one(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (ds,) = _one(docs, "DaemonSet")
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return dict(c)


def _env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in c["env"]}


def test_daemonset_runs_the_pinned_release_binary(render_chart: RenderChart) -> None:
    docs = render_chart(CHART)
    (ds,) = _one(docs, "DaemonSet")
    assert ds["metadata"]["name"] == "dra-driver-nvidia-gpu-kubelet-plugin"
    c = _container(docs)
    assert c["image"] == IMAGE and c["command"] == ["gpu-kubelet-plugin"]
    # the release's klog verbosity is a flag, fed from the environment like every other setting
    assert c["args"] == ["-v", "$(LOG_VERBOSITY)"] and _env(c)["LOG_VERBOSITY"] == "4"
    env = _env(c)
    # from 0.4.0 NVIDIA_DRIVER_ROOT is the host's path; the plugin reads it where it is mounted
    assert env["NVIDIA_DRIVER_ROOT"] == "/" and env["NVIDIA_VISIBLE_DEVICES"] == "void"
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["driver-root"]["mountPath"] == "/driver-root" and mounts["driver-root"]["readOnly"]
    assert mounts["plugins"].get("mountPropagation") == "Bidirectional"
    volumes = {v["name"]: v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert volumes == {"driver-root": "/", "plugins-registry": "/var/lib/kubelet/plugins_registry",
                       "plugins": "/var/lib/kubelet/plugins", "cdi": "/var/run/cdi"}
    assert "nvcr.io" not in yaml.safe_dump_all(docs)  # the Kubernetes project's registry only


def test_driver_root_is_the_hosts_path(render_chart: RenderChart) -> None:
    docs = render_chart(CHART, {"kubeletPlugin": {"driverRoot": "/run/nvidia/driver"}})
    (ds,) = _one(docs, "DaemonSet")
    assert _env(_container(docs))["NVIDIA_DRIVER_ROOT"] == "/run/nvidia/driver"
    volumes = {v["name"]: v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert volumes["driver-root"] == "/run/nvidia/driver"


@pytest.mark.parametrize(("mode", "gates", "shares"), [
    ("exclusive", None, None),
    ("shared", "ConsumableShares=true", "memory"),
    ("partitioned", "DynamicMIG=true", None),
    ("mixed", "ConsumableShares=true,DynamicMIG=true", "memory"),
])
def test_sharing_mode_turns_on_the_drivers_own_switches(render_chart: RenderChart, mode: str, gates: str | None,
                                                        shares: str | None) -> None:
    """From 0.5.0 the driver itself publishes memory shares (ConsumableShares) and MIG partitions
    as partitionable devices (DynamicMIG), both off by default: the mode must turn them on, or the
    real driver would publish whole GPUs only while the sim stand-in published shares."""
    env = _env(_container(render_chart(CHART, {"gpuSharing": {"mode": mode}})))
    assert env.get("FEATURE_GATES") == gates and env.get("CONSUMABLE_SHARES") == shares
    assert env["GPU_SHARING_MODE"] == mode


def test_users_feature_gates_are_kept_beside_the_modes(render_chart: RenderChart) -> None:
    env = _env(_container(render_chart(CHART, {"gpuSharing": {"mode": "shared"},
                                               "featureGates": {"NVMLDeviceHealthCheck": True, "MPSSupport": False}})))
    assert env["FEATURE_GATES"] == "ConsumableShares=true,MPSSupport=false,NVMLDeviceHealthCheck=true"


def test_kubelet_plugin_is_probed_and_unreachable(render_chart: RenderChart) -> None:
    docs = render_chart(CHART, {"kubeletPlugin": {"healthcheckPort": 50000}})
    c = _container(docs)
    assert _env(c)["HEALTHCHECK_PORT"] == "50000"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["grpc"] == {"port": 50000, "service": "liveness"}
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 600
    (netpol,) = _one(docs, "NetworkPolicy")
    assert netpol["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in netpol["spec"]
    (ds,) = _one(docs, "DaemonSet")
    assert netpol["spec"]["podSelector"]["matchLabels"] == ds["spec"]["selector"]["matchLabels"]


def test_rbac_reads_pods_and_claims_and_writes_only_slices(render_chart: RenderChart) -> None:
    (role,) = _one(render_chart(CHART), "ClusterRole")
    rules = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in role["rules"]}
    assert rules[("", "pods")] == rules[("", "nodes")] == rules[("resource.k8s.io", "resourceclaims")] \
        == {"get", "list", "watch"}
    assert {"create", "update", "delete"} <= rules[("resource.k8s.io", "resourceslices")]


def test_device_classes_select_gpus_and_partitions(render_chart: RenderChart) -> None:
    classes = {d["metadata"]["name"]: d["spec"] for d in _one(render_chart(CHART), "DeviceClass")}
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com"}
    assert '.type == "gpu"' in classes["gpu.nvidia.com"]["selectors"][0]["cel"]["expression"]
    assert '.type == "mig"' in classes["mig.nvidia.com"]["selectors"][0]["cel"]["expression"]
    # new in 0.5.0's chart: whole GPUs back the extended resource; partitions do not
    assert classes["gpu.nvidia.com"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "extendedResourceName" not in classes["mig.nvidia.com"]
    (gpu,) = _one(render_chart(CHART, {"gpuExtendedResourceName": "", "deviceClasses": ["gpu"]}), "DeviceClass")
    assert "extendedResourceName" not in gpu["spec"]


@pytest.mark.parametrize("scenario", sorted(p.name for p in (CHARTS / CHART / "ci").glob("*-values.yaml")))
def test_every_ci_scenario_renders(render_chart: RenderChart, scenario: str) -> None:
    values = yaml.safe_load((CHARTS / CHART / "ci" / scenario).read_text()) or {}
    assert _one(render_chart(CHART, values), "DaemonSet")


def test_bundle_sim_values_are_the_charts_sim_scenario() -> None:
    bundle = yaml.safe_load((REPO / "catalog/bundles/gpu-queueing/0.3.0.yaml").read_text())
    sim = bundle["spec"]["profiles"]["sim"]["values"]["nvidia-dra-driver"]
    assert sim == yaml.safe_load((CHARTS / CHART / "ci" / "sim-values.yaml").read_text())


@pytest.mark.parametrize(("values", "field"), [
    ({"gpuSharing": {"mode": "timesliced"}}, "mode"),
    ({"featureGates": {"DynamicMIG": "yes"}}, "featureGates"),
    ({"nameOverride": "Not_A_Name"}, "nameOverride"),
    ({"image": {"repository": "r", "tag": "latest"}}, "tag"),
])
def test_schema_refuses_what_the_driver_would_not_take(render_error: Callable[..., str], values: dict[str, Any],
                                                      field: str) -> None:
    assert field in render_error(CHART, values)


def test_the_sim_stand_in_takes_the_release_binarys_verbosity_flag(capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart passes ``-v N``; the stand-in must take it (and still insist on its node name)."""
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(SystemExit) as exc:
        drapublisher.main(["-v", "4"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--node-name" in err and "unrecognized" not in err


def test_gpu_queueing_0_3_0_upgrades_the_0_2_0_release_in_place() -> None:
    """The same Helm release (nvidia-dra-driver) moves to the new chart: every object 0.2.0
    rendered for it keeps its name (nameOverride), so the DaemonSet is updated rather than a second
    one started beside it, its selector does not change, and nothing makes the upgrade refused."""
    cat = loader.load_catalog(REPO / "catalog")
    old = render.render_bundle(cat, "gpu-queueing@0.2.0", "sim")
    new = render.render_bundle(cat, "gpu-queueing@0.3.0", "sim")
    objs = {rb.ref: {upgrade_rules.key(o): o for c in rb.components if c.name == "nvidia-dra-driver" for o in c.objects}
            for rb in (old, new)}
    assert set(objs[old.ref]) == set(objs[new.ref])
    ds = "DaemonSet nvidia-dra-driver/nvidia-dra-driver-kubelet-plugin"
    assert objs[old.ref][ds]["spec"]["selector"] == objs[new.ref][ds]["spec"]["selector"]
    assert objs[new.ref][ds]["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    assert upgrade_rules.refusals(old, new) == [] and upgrade_rules.immutable(old, new) == []
