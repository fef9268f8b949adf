"""The node-shape catalogue (``data/shapes.yaml``) loaded into frozen dataclasses.

Used by ``nodes`` (Node capacity and labels), ``nodefs`` (the healthy hardware readings of a
node folder) and the CLI (``--shape`` choices). An unknown shape is bad input (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from gpucatalog.core import errors


@dataclass(frozen=True)
class GpuSpec:
    count: int
    product: str  # the nvidia.com/gpu.product label value (GPU feature discovery style)
    name: str  # the product name nvidia-smi prints
    memory_mib: int
    family: str
    compute_major: int
    compute_minor: int
    pci_device_id: str
    bus_ids: tuple[str, ...]  # PCI bus number per GPU index, hex
    pcie_gen: int
    pcie_width: int
    nvlink_links: int
    nvlink_speed_gbps: float
    row_remapper_banks: int
    driver_version: str
    cuda_version: str
    power_limit_w: float | None = None  # the board's power limit (nvidia-smi current_power_limit)

    def bus_id(self, index: int) -> str:
        """Full PCI address as nvidia-smi prints it, e.g. 00000000:18:00.0."""
        return f"00000000:{self.bus_ids[index]}:00.0"


@dataclass(frozen=True)
class IbSpec:
    devices: tuple[str, ...]
    rate: str  # sysfs rate line, e.g. "400 Gb/sec (4X NDR)"


@dataclass(frozen=True)
class Shape:
    name: str
    description: str
    cpu: str
    memory: str
    pods: int
    ephemeral_storage: str
    gpu: GpuSpec | None
    infiniband: IbSpec | None


def _shape(name: str, d: dict[str, Any]) -> Shape:
    gpu = None
    if g := d.get("gpu"):
        gpu = GpuSpec(
            count=int(g["count"]),
            product=str(g["product"]),
            name=str(g["name"]),
            memory_mib=int(g["memory_mib"]),
            family=str(g["family"]),
            compute_major=int(g["compute_major"]),
            compute_minor=int(g["compute_minor"]),
            pci_device_id=str(g["pci_device_id"]),
            bus_ids=tuple(str(b) for b in g["bus_ids"]),
            pcie_gen=int(g["pcie"]["gen"]),
            pcie_width=int(g["pcie"]["width"]),
            nvlink_links=int(g["nvlink"]["links"]),
            nvlink_speed_gbps=float(g["nvlink"]["speed_gbps"]),
            row_remapper_banks=int(g["row_remapper_banks"]),
            driver_version=str(g["driver_version"]),
            cuda_version=str(g["cuda_version"]),
            power_limit_w=float(g["power_limit_w"]) if g.get("power_limit_w") is not None else None,
        )
        if len(gpu.bus_ids) != gpu.count:
            raise errors.SchemaError(f"shape {name}: {len(gpu.bus_ids)} bus_ids for {gpu.count} GPUs",
                                     path="shapes.yaml", field=f"shapes.{name}.gpu.bus_ids")
    ib = None
    if i := d.get("infiniband"):
        ib = IbSpec(devices=tuple(i["devices"]), rate=str(i["rate"]))
    return Shape(
        name=name,
        description=str(d.get("description", "")),
        cpu=str(d["cpu"]),
        memory=str(d["memory"]),
        pods=int(d["pods"]),
        ephemeral_storage=str(d.get("ephemeral_storage", "100Gi")),
        gpu=gpu,
        infiniband=ib,
    )


@cache
def catalogue() -> dict[str, Shape]:
    text = resources.files("gpucatalog.clusters").joinpath("data/shapes.yaml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    return {name: _shape(name, d) for name, d in doc["shapes"].items()}


def get(name: str) -> Shape:
    shapes = catalogue()
    if name not in shapes:
        raise errors.NotFoundError(f"unknown node shape {name!r}", field="--shape", expected=", ".join(shapes))
    return shapes[name]
