"""Fault injection into a simulated node's folder (``catalog cluster inject-fault``).

Each kind edits ``sim/hw.json`` and re-renders the readings, or appends kernel-log records, so
the real probes of gpu-health read a faulty node exactly as they would read a real one:

====================  =================================================================
xid                   appends ``NVRM: Xid (PCI:0000:<bus>:00): <code>, …`` to dev/kmsg
                      (79 also drops the GPU from nvidia-smi: fallen off the bus)
row-remap-pending     remapped_row_pending Yes, one more uncorrectable remap
row-remap-failure     remapped_row_failure Yes
pcie-downgrade        the GPU busy (P0, as under work) on a link narrower (default x8) and/or
                      slower (``--gen``) than it trains to: an idle GPU's down-trained link is
                      no fault, so the fault holds the GPU busy
nvlink-down           one link (``--link``, default 0) of a GPU reads <inactive>
ib-rate               port rate below the shape's (default half width: 4X -> 2X)
ib-down               port state 1: DOWN, phys_state 3: Disabled
clear                 everything back to the healthy shape; kernel log emptied
====================  =================================================================
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from gpucatalog.clusters import shapes
from gpucatalog.clusters.sim import nodefs
from gpucatalog.core import errors

KINDS = ("xid", "row-remap-pending", "row-remap-failure", "pcie-downgrade", "nvlink-down", "ib-rate",
         "ib-down", "clear")

XID_TEXT = {
    13: "pid={pid}, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "pid={pid}, name=python3, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 "
        "faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "pid={pid}, name=python3, Ch 00000010",
    45: "pid={pid}, name=python3, Ch 00000010",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, "
        "subpartition 0.",
    63: "Row remapping pending. A GPU reset is required to remap the row.",
    64: "Row remapping failed. A GPU reset may help avoid further failures.",
    74: "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link {link}(0x0, 0x0, 0x10000, 0x0, "
        "0x0, 0x0, 0x0)",
    79: "pid={pid}, name=python3, GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "pid={pid}, name=python3, Contained: CE User Channel (0x9). RST: No, D-RST: No",
    95: "pid={pid}, name=python3, Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "pid={pid}, name=nvc:[driver], Timeout after 6s of waiting for RPC response from GPU{gpu} GSP! "
         "Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).",
    154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
}

_RATE = re.compile(r"^(?P<gbps>[\d.]+) Gb/sec \((?P<width>\d+)X (?P<speed>\w+)\)$")


def xid_line(bus_id: str, code: int, gpu: int, link: int = 0, pid: int = 4242) -> str:
    """The kernel message of an XID, as the NVIDIA driver prints it."""
    pci = bus_id[4:].rsplit(".", 1)[0].lower()  # 00000000:3B:00.0 -> 0000:3b:00 (kernel style)
    text = XID_TEXT.get(code, "pid={pid}, name=python3, Xid event")
    return f"NVRM: Xid (PCI:{pci}): {code}, " + text.format(pid=pid, gpu=gpu, link=link)


def append_kmsg(node_dir: Path, hw: dict[str, object], message: str, level: int = 4) -> None:
    """Append one ``/dev/kmsg`` record: ``<prio>,<seq>,<usec>,-;<message>``."""
    seq = int(str(hw.get("kmsg_seq", 0))) + 1
    hw["kmsg_seq"] = seq
    usec = int(time.monotonic() * 1_000_000)
    with open(node_dir / "dev" / "kmsg", "a") as fh:
        fh.write(f"{level},{seq},{usec},-;{message}\n")


def inject(
    node_dir: Path,
    kind: str,
    *,
    code: int | None = None,
    gpu: int = 0,
    link: int = 0,
    width: int | None = None,
    gen: int | None = None,
    rate: str | None = None,
    device: str | None = None,
) -> str:
    """Apply one fault to the node folder; returns a one-line description of what changed."""
    if kind not in KINDS:
        raise errors.InputError(f"unknown fault kind {kind!r}", field="--kind", expected=", ".join(KINDS))
    if not (node_dir / "sim" / "shape.json").is_file():
        raise errors.NotFoundError(f"no simulated node folder at {node_dir}", field="NODE")
    shape = shapes.get(json.loads((node_dir / "sim" / "shape.json").read_text())["name"])
    with nodefs.locked(node_dir):  # the sim node agent re-renders busy GPUs concurrently
        return _inject(node_dir, shape, kind, code=code, gpu=gpu, link=link, width=width, gen=gen, rate=rate,
                       device=device)


def _inject(node_dir: Path, shape: shapes.Shape, kind: str, *, code: int | None, gpu: int, link: int,
            width: int | None, gen: int | None, rate: str | None, device: str | None) -> str:
    hw = nodefs.load_hw(node_dir)
    if kind == "clear":
        hw = nodefs.healthy_hw(shape, _cluster_of(node_dir), node_dir.name)
        (node_dir / "dev" / "kmsg").write_text("")
        nodefs.save_hw(node_dir, hw)
        nodefs.render(node_dir, shape, hw)
        return f"{node_dir.name}: all faults cleared"
    if kind.startswith("ib-"):
        ports = hw["infiniband"]
        if not ports:
            raise errors.InputError(f"node {node_dir.name} (shape {shape.name}) has no InfiniBand", field="--kind")
        dev = device or next(iter(ports))
        if dev not in ports:
            raise errors.InputError(f"no InfiniBand device {dev!r}", field="--device", expected=", ".join(ports))
        if kind == "ib-down":
            ports[dev].update(state="1: DOWN", phys_state="3: Disabled")
            what = f"{dev} port 1 DOWN"
        else:
            new_rate = rate or _degraded_rate(ports[dev]["rate"])
            if not _RATE.match(new_rate):
                raise errors.InputError(f"bad rate {new_rate!r}", field="--rate", expected="e.g. '200 Gb/sec (2X NDR)'")
            ports[dev]["rate"] = new_rate
            what = f"{dev} port 1 rate {new_rate}"
    else:
        if not hw["gpus"]:
            raise errors.InputError(f"node {node_dir.name} (shape {shape.name}) has no GPUs", field="--kind")
        if not 0 <= gpu < len(hw["gpus"]):
            raise errors.InputError(f"no GPU {gpu}", field="--gpu", expected=f"0-{len(hw['gpus']) - 1}")
        g = hw["gpus"][gpu]
        assert shape.gpu is not None
        if kind == "xid":
            if code is None or code <= 0:
                raise errors.InputError("--code is required for --kind xid", field="--code", expected="an XID number, e.g. 79")
            # a new process each time, as a real fault's: the agent reports one Event per distinct
            # line, so the same XID injected again on a kept cluster is a new Event
            line = xid_line(g["bus_id"], code, gpu, link, pid=4242 + int(str(hw.get("kmsg_seq", 0))))
            append_kmsg(node_dir, hw, line)
            if code == 79:
                g["fallen_off_bus"] = True
            if code == 48:
                g["ecc_dram_uncorrectable"] += 1
            what = line
        elif kind == "row-remap-pending":
            g["remap_pending"] = True
            g["remapped_unc"] += 1
            what = f"GPU {gpu}: row remap pending"
        elif kind == "row-remap-failure":
            g["remap_failure"] = True
            what = f"GPU {gpu}: row remap failure"
        elif kind == "pcie-downgrade":
            new_width = width if width is not None else (shape.gpu.pcie_width // 2 if gen is None else g["pcie_width_current"])
            new_gen = gen if gen is not None else g["pcie_gen_current"]
            if new_width not in (1, 2, 4, 8, 16) or not 1 <= new_gen <= shape.gpu.pcie_gen:
                raise errors.InputError("bad PCIe link", field="--width/--gen",
                                        expected=f"width 1,2,4,8,16 and gen 1-{shape.gpu.pcie_gen}")
            g["pcie_width_current"], g["pcie_gen_current"] = new_width, new_gen
            g["busy_fault"] = True
            what = (f"GPU {gpu}: busy (P0) on PCIe gen {new_gen} x{new_width} "
                    f"(max gen {shape.gpu.pcie_gen} x{shape.gpu.pcie_width})")
        else:  # nvlink-down
            if not 0 <= link < shape.gpu.nvlink_links:
                raise errors.InputError(f"no NVLink {link}", field="--link", expected=f"0-{shape.gpu.nvlink_links - 1}")
            if link not in g["nvlink_down"]:
                g["nvlink_down"].append(link)
            what = f"GPU {gpu}: NVLink {link} inactive"
    nodefs.save_hw(node_dir, hw)
    nodefs.render(node_dir, shape, hw)
    return f"{node_dir.name}: {what}"


def _degraded_rate(rate: str) -> str:
    m = _RATE.match(rate)
    if not m:
        return "100 Gb/sec (4X EDR)"
    width = int(m["width"])
    new_width = max(1, width // 2)
    gbps = float(m["gbps"]) * new_width / width
    return f"{gbps:g} Gb/sec ({new_width}X {m['speed']})"


def _cluster_of(node_dir: Path) -> str:
    return node_dir.parent.parent.name  # <state>/nodes/<node>
