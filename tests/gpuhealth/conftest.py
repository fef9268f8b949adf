"""Fixtures for gpu-health tests: realistic driver outputs and a simulated node folder.

The simulated node folder has the layout the agent reads on a real node (``dev/kmsg``,
``sys/class/infiniband``, an ``nvidia-smi`` executable). The executable is the only fake: it
prints fixture files, standing in for a GPU that cannot exist here.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@dataclass
class SimNode:
    root: Path

    @property
    def smi(self) -> Path:
        return self.root / "usr" / "bin" / "nvidia-smi"

    def set_smi_xml(self, text: str) -> None:
        (self.root / "var" / "sim" / "nvidia-smi.xml").write_text(text, encoding="utf-8")

    def set_nvlink(self, text: str) -> None:
        (self.root / "var" / "sim" / "nvlink.txt").write_text(text, encoding="utf-8")

    def kmsg(self, *lines: str) -> None:
        with (self.root / "dev" / "kmsg").open("a", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line + "\n")

    def ib_port(self, dev: str, port: int, state: str, rate: str) -> None:
        p = self.root / "sys" / "class" / "infiniband" / dev / "ports" / str(port)
        p.mkdir(parents=True, exist_ok=True)
        (p / "state").write_text(state + "\n")
        (p / "rate").write_text(rate + "\n")
        (p / "phys_state").write_text("5: LinkUp\n")
        (p / "link_layer").write_text("InfiniBand\n")


SMI_SCRIPT = """#!/bin/sh
# sim-only stand-in for the NVIDIA driver's nvidia-smi: prints what the test put in var/sim
here="$(dirname "$0")/../../var/sim"
if [ "$1" = "nvlink" ]; then cat "$here/nvlink.txt"; exit 0; fi
if [ -f "$here/smi-exit" ]; then cat "$here/nvidia-smi.xml"; exit "$(cat "$here/smi-exit")"; fi
cat "$here/nvidia-smi.xml"
"""


@pytest.fixture
def sim_node(tmp_path: Path) -> SimNode:
    root = tmp_path / "node"
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "kmsg").write_text(fixture_text("kmsg_boot.txt"), encoding="utf-8")
    (root / "var" / "sim").mkdir(parents=True)
    (root / "usr" / "bin").mkdir(parents=True)
    node = SimNode(root)
    node.smi.write_text(SMI_SCRIPT)
    node.smi.chmod(node.smi.stat().st_mode | stat.S_IXUSR)
    node.set_smi_xml(fixture_text("nvsmi_h200x8_healthy.xml"))
    node.set_nvlink(fixture_text("nvlink_h200x8_healthy.txt"))
    for i in range(8):
        node.ib_port(f"mlx5_{i}", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)")
    return node


@pytest.fixture
def edit_gpu() -> Callable[[str, int, str, str], str]:
    """Replace one element's text inside GPU ``index`` of an nvidia-smi XML dump."""

    def edit(xml: str, index: int, tag: str, value: str) -> str:
        start = xml.index(f"<minor_number>{index}</minor_number>")
        end = xml.index("</gpu>", start)
        block = xml[start:end]
        open_tag, close_tag = f"<{tag}>", f"</{tag}>"
        a = block.index(open_tag) + len(open_tag)
        b = block.index(close_tag, a)
        return xml[:start] + block[:a] + value + block[b:] + xml[end:]

    return edit


def executable(path: Path) -> bool:
    return os.access(path, os.X_OK)


# --- a sim cluster with gpu-health installed: one per test run, reset for each module ---------
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpu-health"
GPU_HEALTH_NAMESPACE = "gpu-health"
# What the session installs, as a certification tells the suite (its windows are gpu-health passes)
SIM_VALUES = CHART / "ci" / "sim-values.yaml"
BUNDLE_VALUES = {"gpu-health": yaml.safe_load(SIM_VALUES.read_text())}


@pytest.fixture(scope="session")
def _gpu_health_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sim = pytest.importorskip("gpucatalog.clusters.sim.cluster")
    from gpucatalog.core import executor
    from gpucatalog.toolchain.build import ensure

    name = os.environ.get("GPU_HEALTH_SIM_NAME", f"gh-{os.getpid()}")
    keep = os.environ.get("GPU_CATALOG_KEEP_CLUSTER", "") not in ("", "0")
    cluster = sim.SimCluster(name)
    if not (keep and cluster.running()):
        cluster.up(8, "h100-80gb-x8", heartbeat_s=3.0)
    values = yaml.safe_load(SIM_VALUES.read_text())
    vfile = tmp_path_factory.mktemp("values") / "values.yaml"
    vfile.write_text(yaml.safe_dump(values))
    executor.run([str(ensure("helm")), "upgrade", "--install", "gpu-health", str(CHART), "-n", GPU_HEALTH_NAMESPACE,
                  "--create-namespace", "-f", str(vfile), "--kubeconfig", str(cluster.kubeconfig()),
                  "--wait", "--timeout", "180s"], timeout=240)
    try:
        yield cluster
    finally:
        if not keep:
            cluster.down()


@pytest.fixture(scope="module")
def gpu_health_cluster(_gpu_health_session: Any) -> Any:
    """The run's gpu-health sim cluster, with the faults, parked nodes and fault history an earlier
    module (or a kept cluster's earlier run) left cleared, as a fresh cluster would start."""
    _reset_nodes(_gpu_health_session)
    return _gpu_health_session


def _reset_nodes(cluster: Any) -> None:
    """A kept cluster may hold earlier runs' faults and parked nodes: clear the faults, release
    parked nodes and forget fault history, as a fresh cluster would start."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    for node in core.list_node(label_selector="nvidia.com/gpu.present=true").items:
        cluster.inject_fault(node.metadata.name, "clear")
        ann = node.metadata.annotations or {}
        patch: dict[str, Any] = {"gpu-health.gpu-catalog.io/fault-history": None}
        if (node.metadata.labels or {}).get("gpu-health.gpu-catalog.io/state") in ("hardware-repair", "escalated"):
            patch["gpu-health.gpu-catalog.io/resolved"] = "true"
        if "gpu-health.gpu-catalog.io/fault-history" in ann or len(patch) > 1:
            core.patch_node(node.metadata.name, {"metadata": {"annotations": patch}})
