"""Probes against a simulated node folder (the layout of a real node under the host root)."""

from __future__ import annotations

from gpucatalog.gpuhealth import conditions, probes
from gpucatalog.gpuhealth.findings import Expectations

from .conftest import SimNode, fixture_text

H200 = Expectations(gpu_count=8, pcie_gen=5, pcie_width=16, nvlinks_per_gpu=18, ib_rate_gbps=400, ib_ports=8)


def cfg(node: SimNode) -> probes.ProbeConfig:
    return probes.ProbeConfig.under_host_root(node.root, H200, nvidia_smi=(str(node.smi),))


def statuses(node: SimNode) -> dict[str, str]:
    conds, _ = conditions.build(probes.observe(cfg(node)))
    return {c.type: c.status for c in conds}


def test_healthy_node_reports_all_false(sim_node: SimNode) -> None:
    obs = probes.observe(cfg(sim_node))
    assert obs.findings == [] and obs.probe_errors == {}
    assert set(statuses(sim_node).values()) == {"False"}


def test_injected_xid79_reaches_the_condition(sim_node: SimNode) -> None:
    sim_node.kmsg("4,9001,99000001,-;NVRM: Xid (PCI:0000:3a:00): 79, pid=1234, name=python3, GPU has fallen off the bus.")
    conds, _ = conditions.build(probes.observe(cfg(sim_node)))
    xid = next(c for c in conds if c.type == "GpuXidError")
    assert xid.status == "True" and xid.reason == "Xid79"
    assert xid.message.startswith("action=REBOOT; GPU 2 (PCI 0000:3a:00, GPU-0e4f7a9c")


def test_ib_half_rate_detected(sim_node: SimNode) -> None:
    sim_node.ib_port("mlx5_3", 1, "4: ACTIVE", "200 Gb/sec (4X HDR)")
    conds, _ = conditions.build(probes.observe(cfg(sim_node)))
    ib = next(c for c in conds if c.type == "InfinibandDegraded")
    assert ib.status == "True" and ib.reason == "InfinibandRateDegraded" and "mlx5_3 port 1" in ib.message


def test_garbage_nvidia_smi_is_a_probe_error_other_probes_still_run(sim_node: SimNode) -> None:
    xml = fixture_text("nvsmi_h200x8_healthy.xml")
    sim_node.set_smi_xml(xml[:5000])
    sim_node.kmsg("NVRM: Xid (PCI:0000:3a:00): 79, pid=1, name=x, GPU has fallen off the bus.")
    st = statuses(sim_node)
    assert st["GpuHealthProbeError"] == "True"
    assert st["GpuMemoryError"] == st["GpuPcieDegraded"] == st["GpuCountMismatch"] == "Unknown"
    assert st["GpuXidError"] == "True"  # kmsg probe still ran


def test_nvidia_smi_missing_or_failing(sim_node: SimNode) -> None:
    missing = probes.ProbeConfig.under_host_root(sim_node.root, H200, nvidia_smi=(str(sim_node.root / "nope"),))
    assert "executable not found" in probes.observe(missing).probe_errors["nvidia-smi"]
    sim_node.set_smi_xml("")
    (sim_node.root / "var" / "sim" / "smi-exit").write_text("9")
    assert "exit 9" in probes.observe(cfg(sim_node)).probe_errors["nvidia-smi"]


def test_missing_kmsg_and_bad_ib_files_are_probe_errors(sim_node: SimNode) -> None:
    (sim_node.root / "dev" / "kmsg").unlink()
    (sim_node.root / "sys/class/infiniband/mlx5_0/ports/1/rate").write_text("fast\n")
    errs = probes.observe(cfg(sim_node)).probe_errors
    assert "cannot read" in errs["kmsg"] and "unexpected port rate" in errs["infiniband"]


def test_read_kmsg_char_device_drains_without_blocking() -> None:
    # /dev/null is a character device that reads EOF at once: the non-blocking path ends cleanly
    from pathlib import Path

    assert probes.read_kmsg(Path("/dev/null")) == ""


def test_gpu_fallen_off_the_bus_is_still_named_from_earlier_cycles(sim_node: SimNode) -> None:
    known: dict[str, tuple[int, str]] = {}
    assert probes.observe(cfg(sim_node), known).findings == []
    xml = fixture_text("nvsmi_h200x8_healthy.xml")
    start = xml.index('<gpu id="00000000:3A:00.0">')
    sim_node.set_smi_xml(xml[:start] + xml[xml.index("</gpu>", start) + len("</gpu>"):])  # GPU 2 gone
    sim_node.kmsg("NVRM: Xid (PCI:0000:3a:00): 79, pid=1, name=x, GPU has fallen off the bus.")
    found = {f.reason: f for f in probes.observe(cfg(sim_node), known).findings}
    assert found["Xid79"].subject == "GPU 2 (PCI 0000:3a:00, GPU-0e4f7a9c-2d3b-4a1e-8f6c-9b7d5e3c1a20)"
    assert found["GpuMissing"].detail == "nvidia-smi lists 7 GPUs, the node shape expects 8"
