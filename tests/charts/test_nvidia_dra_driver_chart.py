"""nvidia-dra-driver chart (written here for the driver's pinned image): the kubelet-plugin
DaemonSet takes its settings from the environment, the DeviceClasses select the driver's GPUs and
partitions, every ci scenario renders, the bundle's sim values are the chart's sim scenario, and
the values schema refuses a mode the publisher does not know."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import CHARTS, RenderChart

pytestmark = pytest.mark.toolchain
CHART = "nvidia-dra-driver"
REPO = Path(__file__).resolve().parents[2]


def _one(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_daemonset_runs_the_pinned_image_with_env_settings_only(render_chart: RenderChart) -> None:
    docs = render_chart(CHART, {"gpuSharing": {"mode": "mixed"}})
    (ds,) = _one(docs, "DaemonSet")
    c = ds["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0" and c["command"] == ["gpu-kubelet-plugin"]
    assert "args" not in c  # the driver's binary would refuse flags it does not know
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["GPU_SHARING_MODE"] == "mixed" and env["NVIDIA_DRIVER_ROOT"] == "/driver-root"
    volumes = {v["name"]: v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert volumes == {"driver-root": "/", "plugins-registry": "/var/lib/kubelet/plugins_registry",
                       "plugins": "/var/lib/kubelet/plugins", "cdi": "/var/run/cdi"}


def test_kubelet_plugin_registers_with_the_kubelet_and_is_probed(render_chart: RenderChart) -> None:
    """What the driver's binary needs on a real node: the kubelet's registration and plugin
    folders (the latter with bidirectional propagation), the CDI folder, and its gRPC health port;
    nothing may reach it over the network."""
    docs = render_chart(CHART, {"kubeletPlugin": {"healthcheckPort": 50000}})
    (ds,) = _one(docs, "DaemonSet")
    c = ds["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["plugins"].get("mountPropagation") == "Bidirectional" and mounts["driver-root"]["readOnly"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HEALTHCHECK_PORT"] == "50000" and env["CDI_ROOT"] == "/var/run/cdi"
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["grpc"] == {"port": 50000, "service": "liveness"}
    (netpol,) = _one(docs, "NetworkPolicy")
    assert netpol["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in netpol["spec"]
    assert netpol["spec"]["podSelector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def test_device_classes_select_gpus_and_partitions(render_chart: RenderChart) -> None:
    classes = {d["metadata"]["name"]: d["spec"]["selectors"][0]["cel"]["expression"]
               for d in _one(render_chart(CHART), "DeviceClass")}
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com"}
    assert '.type == "gpu"' in classes["gpu.nvidia.com"] and '.type == "mig"' in classes["mig.nvidia.com"]
    assert [d["metadata"]["name"] for d in _one(render_chart(CHART, {"deviceClasses": ["mig"]}), "DeviceClass")] \
        == ["mig.nvidia.com"]


@pytest.mark.parametrize("scenario", sorted(p.name for p in (CHARTS / CHART / "ci").glob("*-values.yaml")))
def test_every_ci_scenario_renders(render_chart: RenderChart, scenario: str) -> None:
    values = yaml.safe_load((CHARTS / CHART / "ci" / scenario).read_text()) or {}
    assert _one(render_chart(CHART, values), "DaemonSet")


def test_bundle_sim_values_are_the_charts_sim_scenario() -> None:
    bundle = yaml.safe_load((REPO / "catalog/bundles/gpu-queueing/0.2.0.yaml").read_text())
    sim = bundle["spec"]["profiles"]["sim"]["values"][CHART]
    assert sim == yaml.safe_load((CHARTS / CHART / "ci" / "sim-values.yaml").read_text())


def test_schema_refuses_an_unknown_mode(render_error: Callable[..., str]) -> None:
    err = render_error(CHART, {"gpuSharing": {"mode": "timesliced"}})
    assert "gpuSharing" in err and "mode" in err
