"""XID code -> remediation action, from NVIDIA's catalog shipped as data plus an override layer.

The catalog's *immediate action* bucket (``RESTART_APP``, ``RESET_GPU``, ``RESTART_BM`` …) is
mapped onto gpu-health's four remediation classes (:class:`Action`). Application-level buckets
become ``NONE`` (an Event, no cordon); unknown codes and buckets with no automatic action get the
policy default (hardware repair unless overridden). Called by the agent's XID check.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any


class Action(enum.IntEnum):
    """Remediation classes, ordered by severity so ``max()`` picks the strongest."""

    NONE = 0
    RESET_GPU = 1
    REBOOT = 2
    HARDWARE_REPAIR = 3

    @classmethod
    def parse(cls, text: str) -> Action:
        try:
            return cls[text.strip().upper().replace("-", "_")]
        except KeyError as exc:
            raise ValueError(f"unknown action {text!r}; expected one of {[a.name for a in cls]}") from exc


# Catalog immediate-action buckets -> class. Buckets not listed map to the policy default
# (CONTACT_SUPPORT, CHECK_MECHANICALS, UPDATE_SWFW, WORKFLOW_NVLINK_ERR … need a person).
BUCKET_ACTIONS: dict[str, Action] = {
    "RESTART_APP": Action.NONE,
    "IGNORE": Action.NONE,
    "XID_154_EVAL": Action.NONE,
    "CHECK_UVM": Action.NONE,  # "If UVM/vGPU is being utilized, RESET_GPU; otherwise IGNORE"
    "RESET_GPU": Action.RESET_GPU,
    "WORKFLOW_XID_48": Action.RESET_GPU,  # "Solo: RESET_GPU"
    # XID 45 is logged whenever the driver tears down an aborted application (Ctrl-C, SIGKILL, a
    # GPU reset): "Not Solo: IGNORE (follow other Xid)"; solo it asks for a fabric-manager restart,
    # which is not a node repair. Real logs show it by the dozen after any crash (see
    # tests/gpuhealth/data/public_driver_output.yaml), so it is an Event, never a quarantine.
    "WORKFLOW_XID_45": Action.NONE,
    "RECOVER_FEATURE_RESET_GPU": Action.RESET_GPU,
    "RESTART_BM": Action.REBOOT,
    "RESTART_VM": Action.REBOOT,
    "WORKFLOW_XID_168": Action.REBOOT,
    "RESET_FABRIC": Action.REBOOT,
    "WORKFLOW_NVLINK5_ERR": Action.NONE,  # NONE unless a decode rule matches (not decoded here)
}

# XID 154 states the driver's own recovery verdict in its text.
_XID154 = re.compile(r"to 0x[0-9a-fA-F]+ \(([^)]*)\)")
_XID154_ACTIONS = {
    "none": Action.NONE,
    "drain p2p": Action.NONE,
    "gpu reset required": Action.RESET_GPU,
    "drain and reset": Action.RESET_GPU,
    "node reboot required": Action.REBOOT,
}


@dataclass(frozen=True)
class XidInfo:
    code: int
    mnemonic: str
    description: str
    bucket: str
    known: bool


@dataclass(frozen=True)
class XidPolicy:
    """Overrides beat the catalog; ``default`` covers unknown codes and unmapped buckets."""

    overrides: dict[int, Action] = field(default_factory=dict)
    default: Action = Action.HARDWARE_REPAIR

    def info(self, code: int) -> XidInfo:
        entry = _catalog().get(str(code))
        if entry is None:
            return XidInfo(code, "UNKNOWN", "not in NVIDIA's XID catalog", "", known=False)
        return XidInfo(code, entry["mnemonic"], entry["description"], entry["immediate"], known=True)

    def action(self, code: int, text: str = "") -> Action:
        if code in self.overrides:
            return self.overrides[code]
        info = self.info(code)
        if code == 154:
            m = _XID154.search(text)
            verdict = m.group(1).strip().lower() if m else ""
            return _XID154_ACTIONS.get(verdict, self.default)
        if not info.known or not info.bucket:
            return self.default
        return BUCKET_ACTIONS.get(info.bucket, self.default)

    @classmethod
    def from_config(cls, overrides: dict[str, str] | None, default: str | None) -> XidPolicy:
        parsed = {int(k): Action.parse(v) for k, v in (overrides or {}).items()}
        return cls(overrides=parsed, default=Action.parse(default) if default else Action.HARDWARE_REPAIR)


@lru_cache(maxsize=1)
def _catalog() -> dict[str, dict[str, Any]]:
    text = resources.files("gpucatalog.gpuhealth").joinpath("data/xid_catalog.json").read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    codes: dict[str, dict[str, Any]] = doc["codes"]
    return codes
