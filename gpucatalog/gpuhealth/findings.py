"""What the agent found: fault families (one Node condition type each), findings and the node
shape's expected values. Shared by the checks, the condition builder and the controller, which
reads the condition types and the ``action=`` token back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gpucatalog.gpuhealth.parse_kmsg import XidEvent
from gpucatalog.gpuhealth.parse_nvsmi import SmiReading
from gpucatalog.gpuhealth.xidpolicy import Action


class Family(enum.StrEnum):
    """Node condition types written by the agent, one per fault family."""

    XID = "GpuXidError"
    MEMORY = "GpuMemoryError"
    PCIE = "GpuPcieDegraded"
    NVLINK = "GpuNvlinkDown"
    INFINIBAND = "InfinibandDegraded"
    COUNT = "GpuCountMismatch"


PROBE_ERROR_CONDITION = "GpuHealthProbeError"
FAULT_CONDITIONS = tuple(f.value for f in Family)

# Which probe feeds which family: a failed probe makes its families Unknown, never False.
PROBE_FAMILIES: dict[str, tuple[Family, ...]] = {
    "kmsg": (Family.XID,),
    "nvidia-smi": (Family.MEMORY, Family.PCIE, Family.COUNT),
    "nvidia-smi nvlink": (Family.NVLINK,),
    "infiniband": (Family.INFINIBAND,),
}

# Default action per non-XID finding reason (XIDs use the catalog). Overridable by agent config.
DEFAULT_REASON_ACTIONS: dict[str, Action] = {
    "RowRemapPending": Action.RESET_GPU,  # "a reset will be required to actually remap the row"
    "RowRemapFailure": Action.HARDWARE_REPAIR,  # RMA path after field diagnostics
    "RowRemapUncorrectable": Action.NONE,  # remapped successfully; trend only
    "EccUncorrectableVolatile": Action.RESET_GPU,  # DCGM_FR_VOLATILE_DBE_DETECTED -> reset
    # judged only while busy and after consecutive readings (pcie.py), so a finding is a real
    # shortfall: DCGM_FR_PCIE_WIDTH / DCGM_FR_PCIE_GENERATION -> contact support
    "PcieWidthDegraded": Action.HARDWARE_REPAIR,
    "PcieGenDegraded": Action.HARDWARE_REPAIR,
    "NvlinkDown": Action.REBOOT,  # DCGM_FR_NVLINK_DOWN -> restart
    "InfinibandPortDown": Action.REBOOT,
    "InfinibandRateDegraded": Action.REBOOT,  # retrain first; a repeat escalates to hardware
    "InfinibandPortMissing": Action.HARDWARE_REPAIR,
    "GpuMissing": Action.REBOOT,  # like XID 79: the GPU is gone from the bus
    "XidUnparsed": Action.NONE,  # an "NVRM: Xid" line in an unknown shape: an Event for a person
}


@dataclass(frozen=True)
class Expectations:
    """The node shape's expected values; ``None`` means "do not check"."""

    gpu_count: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlinks_per_gpu: int | None = None
    ib_rate_gbps: float | None = None
    ib_ports: int | None = None


@dataclass(frozen=True)
class Finding:
    family: Family
    reason: str
    action: Action
    subject: str  # "GPU 3 (PCI 0000:3b:00, GPU-…)", "mlx5_0 port 1"
    detail: str
    xid: int | None = None
    raw: str = ""

    @property
    def fatal(self) -> bool:
        return self.action is not Action.NONE

    @property
    def key(self) -> str:
        """Stable identity for de-duplicating Events across agent cycles and restarts."""
        return f"{self.family.value}/{self.reason}/{self.subject}/{self.xid}/{self.raw}"

    def text(self) -> str:
        return f"{self.subject}: {self.detail}; action={self.action.name}"


@dataclass
class Observation:
    """One agent cycle: findings, the probes that failed (probe name -> error text), and notes:
    readings recorded but not judged (an idle GPU's reduced PCIe link), per family. ``smi`` and
    ``xids`` keep the cycle's nvidia-smi reading and active XIDs for the metrics endpoint."""

    findings: list[Finding] = field(default_factory=list)
    probe_errors: dict[str, str] = field(default_factory=dict)
    notes: dict[Family, list[str]] = field(default_factory=dict)
    smi: SmiReading | None = None
    xids: list[XidEvent] = field(default_factory=list)
