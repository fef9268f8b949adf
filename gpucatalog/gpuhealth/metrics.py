"""Per-GPU metrics of the node agent in the Prometheus text exposition format (version 0.0.4),
served on ``GET /metrics`` when ``--metrics-addr`` is given (the chart: ``agent.metrics``).

Nothing is measured here: every value is what the agent's last cycle read (``nvidia-smi -q -x``
and the kernel log, :mod:`probes`) or judged (its findings), so a scrape costs no probe and
never runs a command. Each GPU's series carry the labels ``node``, ``gpu`` (index), ``uuid``,
``model_name`` and ``pci_bus_id``; a reading the driver does not give (``N/A``: utilisation of a
MIG-enabled GPU, power of an old board) has no sample rather than a made-up one. When the
nvidia-smi probe failed in the last cycle there is no per-GPU series and no
``gpu_health_node_gpus`` (``gpu_health_probe_failures`` counts the failure): a stale reading is
never served as current. Before the first cycle the endpoint answers 503.

The names carry their unit (``_ratio``, ``_bytes``, ``_celsius``, ``_watts``); the utilisation
and memory gauges correspond to OpenTelemetry's ``hw.gpu.utilization``, ``hw.gpu.memory.usage``
and ``hw.gpu.memory.limit`` (docs/gpu-health.md lists the mapping). Called by the agent after
each cycle (:meth:`Exporter.update`) and by ``main agent`` (:func:`serve`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpucatalog.gpuhealth import httpd
from gpucatalog.gpuhealth.findings import Finding, Observation
from gpucatalog.gpuhealth.parse_nvsmi import GpuReading

PATH = "/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "gpu_health_"
MIB = 1024 * 1024


@dataclass
class _Family:
    name: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _gpu_findings(g: GpuReading, findings: Iterable[Finding]) -> list[Finding]:
    """The fatal findings about GPU ``g``: every check names a GPU by its UUID when it knows it
    (``GPU 3 (PCI …, GPU-…)``), else by index; node-wide findings (IB, GPU count) name no GPU."""
    by_index = f"GPU {g.index} ("
    return [f for f in findings if f.fatal and ((g.uuid and g.uuid in f.subject) or f.subject.startswith(by_index))]


def families(node: str, obs: Observation, at: float) -> list[_Family]:
    """The metric families of one cycle's observation, in a fixed order."""
    fams: dict[str, _Family] = {}

    def put(name: str, help_text: str, labels: Mapping[str, str], value: float | int | bool | None) -> None:
        fam = fams.setdefault(name, _Family(PREFIX + name, help_text))
        if value is not None:
            fam.samples.append((dict(labels), float(value)))

    put("last_cycle_timestamp_seconds", "Unix time the agent's last probe cycle finished", {"node": node}, at)
    put("probe_failures", "Probes that failed in the last cycle (the GpuHealthProbeError condition names them)",
        {"node": node}, len(obs.probe_errors))
    put("node_healthy", "1 when the last cycle found no fault on the node (no fault condition True)",
        {"node": node}, not any(f.fatal for f in obs.findings))
    if obs.smi is None:
        return [f for f in fams.values() if f.samples]
    put("node_gpus", "GPUs nvidia-smi lists on the node", {"node": node}, len(obs.smi.gpus))
    xids: dict[str, int] = {}
    for ev in obs.xids:
        xids[ev.pci] = xids.get(ev.pci, 0) + 1
    for g in sorted(obs.smi.gpus, key=lambda g: g.index):
        lab = {"node": node, "gpu": str(g.index), "uuid": g.uuid, "model_name": g.product, "pci_bus_id": g.pci_bus_id}
        put("gpu_info", "One series per GPU nvidia-smi lists; value always 1 (labels: driver version)",
            {**lab, "driver_version": obs.smi.driver_version}, 1)
        util = None if g.gpu_util_percent is None else g.gpu_util_percent / 100
        put("gpu_utilization_ratio", "GPU utilisation over the driver's last sample period, 0..1", lab, util)
        used = None if g.memory_used_mib is None else g.memory_used_mib * MIB
        total = None if g.memory_total_mib is None else g.memory_total_mib * MIB
        put("gpu_memory_used_bytes", "Frame-buffer memory in use", lab, used)
        put("gpu_memory_total_bytes", "Frame-buffer memory of the GPU", lab, total)
        put("gpu_temperature_celsius", "GPU die temperature", lab, g.temperature_c)
        put("gpu_power_draw_watts", "Board power draw", lab, g.power_draw_w)
        put("gpu_power_limit_watts", "Board power limit in force", lab, g.power_limit_w)
        put("gpu_pcie_link_gen", "Current PCIe link generation (lower while idle: not a fault by itself)",
            lab, g.pcie_gen_current)
        put("gpu_pcie_link_width", "Current PCIe link width in lanes", lab, g.pcie_width_current)
        put("gpu_ecc_volatile_uncorrectable_errors", "Uncorrectable ECC errors since the driver loaded",
            lab, g.ecc_volatile_uncorrectable)
        for cause, n in (("correctable", g.remap_correctable), ("uncorrectable", g.remap_uncorrectable)):
            put("gpu_remapped_rows", "Memory rows remapped, by the error that caused it", {**lab, "cause": cause}, n)
        put("gpu_row_remap_pending", "1 when a row remap waits for a GPU reset", lab, g.remap_pending)
        put("gpu_row_remap_failure", "1 when a row remap failed", lab, g.remap_failure)
        put("gpu_xid_errors", "XID lines naming this GPU in the kernel log since its last successful reset",
            lab, xids.get(g.pci_bus_id, 0))
        put("gpu_healthy", "1 when the last cycle found no fault naming this GPU", lab,
            not _gpu_findings(g, obs.findings))
    return [f for f in fams.values() if f.samples]


def render(node: str, obs: Observation, at: float) -> str:
    """The exposition text: ``# HELP`` and ``# TYPE`` (all gauges) then the samples of each family."""
    lines: list[str] = []
    for fam in families(node, obs, at):
        lines.append(f"# HELP {fam.name} {fam.help}")
        lines.append(f"# TYPE {fam.name} gauge")
        for labels, value in fam.samples:
            inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
            lines.append(f"{fam.name}{{{inner}}} {_number(value)}")
    return "\n".join(lines) + "\n"


class Exporter:
    """The latest rendered exposition, replaced after each cycle; read by the HTTP server thread."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._text: bytes | None = None
        self._lock = threading.Lock()

    def update(self, obs: Observation, at: float) -> None:
        body = render(self.node, obs, at).encode()
        with self._lock:
            self._text = body

    def answer(self) -> httpd.Answer:
        with self._lock:
            body = self._text
        if body is None:
            return httpd.text(503, "no probe cycle has finished yet\n")
        return 200, CONTENT_TYPE, body


def serve(exporter: Exporter, addr: str) -> httpd.Server:
    """Serve ``GET /metrics`` on ``addr`` (``--metrics-addr``) in a daemon thread."""
    return httpd.serve(addr, "--metrics-addr", {PATH: exporter.answer}, name="metrics")
