"""Parsers on realistic driver output: kernel log XIDs, nvidia-smi XML, NVLink status, IB sysfs."""

from __future__ import annotations

import pytest

from gpucatalog.gpuhealth import parse_ib, parse_kmsg, parse_nvlink, parse_nvsmi, pci
from gpucatalog.gpuhealth.errors import ProbeError

from .conftest import fixture_text


def test_pci_ids_from_kernel_and_nvidia_smi_compare_equal() -> None:
    assert pci.normalize("0000:3b:00") == pci.normalize("00000000:3B:00.0") == "0000:3b:00"
    assert pci.normalize("0000:3b:00.0") == "0000:3b:00"
    assert pci.normalize("not a bdf") == "not a bdf"


def test_kmsg_xid_lines_all_shapes() -> None:
    scan = parse_kmsg.parse(fixture_text("kmsg_mixed.txt"))
    by_line = {(e.pci, e.xid): e for e in scan.xids}
    assert [e.xid for e in scan.xids] == [13, 13, 43, 79, 13, 94, 999, 154]
    e79 = by_line[("0000:3a:00", 79)]
    assert (e79.pid, e79.process) == (1234, "nvidia-smi")
    assert e79.text.endswith("GPU has fallen off the bus.")
    assert e79.raw.startswith("kernel: [16450076.435595] NVRM: Xid")
    mig_after = by_line[("0000:5d:00", 13)]
    assert (mig_after.gpu_instance, mig_after.compute_instance, mig_after.pid) == (5, 0, 7194)
    mig_inside = by_line[("0000:9a:00", 94)]
    assert mig_inside.gpu_instance == 3 and mig_inside.process is None
    unknown = by_line[("0000:ab:00", 999)]
    assert unknown.pid is None and unknown.process == "<unknown>"
    assert scan.uuid_by_pci == {"0000:3a:00": "GPU-0e4f7a9c-2d3b-4a1e-8f6c-9b7d5e3c1a20"}
    assert scan.unparsed == ["NVRM: Xid (PCI:0000:db:00): garbage that looks like an xid"]


def test_kmsg_successful_reset_clears_earlier_xids_of_that_gpu_only() -> None:
    text = "\n".join([
        "NVRM: Xid (PCI:0000:3a:00): 48, pid=1, name=a, An uncorrectable double bit error",
        "NVRM: Xid (PCI:0000:18:00): 119, pid=2, name=b, Timeout after 6s of waiting for RPC response",
        "GPU reset executed: GPU-0e4f7a9c-2d3b-4a1e-8f6c-9b7d5e3c1a20, success: true",
        "GPU reset executed: GPU-5f2d1c3a-8e1b-4c55-9a0e-3b2f6d7c8a11, success: false",
    ])
    scan = parse_kmsg.parse(text)
    uuids = {"0000:3a:00": "GPU-0e4f7a9c-2d3b-4a1e-8f6c-9b7d5e3c1a20",
             "0000:18:00": "GPU-5f2d1c3a-8e1b-4c55-9a0e-3b2f6d7c8a11"}
    assert [e.xid for e in parse_kmsg.active_xids(scan, uuids)] == [119]
    # an XID after the reset is active again
    scan2 = parse_kmsg.parse(text + "\nNVRM: Xid (PCI:0000:3a:00): 48, pid=3, name=c, again")
    assert [e.xid for e in parse_kmsg.active_xids(scan2, uuids)] == [119, 48]


@pytest.mark.parametrize("garbage", ["", "\x00\x01\x02", "NVRM: Xid (PCI:", "a" * 10000, "6,1,2,-;"])
def test_kmsg_garbage_never_raises(garbage: str) -> None:
    assert parse_kmsg.parse(garbage).xids == []


def test_nvsmi_healthy_h200_x8() -> None:
    r = parse_nvsmi.parse(fixture_text("nvsmi_h200x8_healthy.xml"))
    assert r.driver_version == "570.124.06" and r.attached_gpus == 8 and len(r.gpus) == 8
    g = r.gpus[2]
    assert (g.index, g.product, g.pci_bus_id) == (2, "NVIDIA H200", "0000:3a:00")
    assert g.uuid == "GPU-0e4f7a9c-2d3b-4a1e-8f6c-9b7d5e3c1a20"
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (5, 5, 16, 16)
    assert (g.remap_correctable, g.remap_uncorrectable, g.remap_pending, g.remap_failure) == (0, 0, False, False)
    assert g.ecc_volatile_uncorrectable == 0 and g.recovery_action == "None"


def test_nvsmi_fault_fields(edit_gpu) -> None:  # type: ignore[no-untyped-def]
    xml = fixture_text("nvsmi_h200x8_healthy.xml")
    xml = edit_gpu(xml, 1, "remapped_row_pending", "Yes")
    xml = edit_gpu(xml, 1, "remapped_row_unc", "2")
    xml = edit_gpu(xml, 4, "remapped_row_failure", "Yes")
    xml = edit_gpu(xml, 6, "current_link_width", "8x")
    xml = edit_gpu(xml, 7, "dram_uncorrectable", "3")
    xml = edit_gpu(xml, 0, "remapped_row_corr", "N/A")
    r = parse_nvsmi.parse(xml)
    assert (r.gpus[1].remap_pending, r.gpus[1].remap_uncorrectable) == (True, 2)
    assert r.gpus[4].remap_failure is True
    assert r.gpus[6].pcie_width_current == 8
    assert r.gpus[7].ecc_volatile_uncorrectable == 3
    assert r.gpus[0].remap_correctable is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty output"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "not valid XML"),
        ("<html><body>nope</body></html>", "expected <nvidia_smi_log>"),
    ],
)
def test_nvsmi_garbage_is_a_probe_error(text: str, needle: str) -> None:
    with pytest.raises(ProbeError) as exc:
        parse_nvsmi.parse(text)
    assert needle in str(exc.value) and exc.value.probe == "nvidia-smi"


def test_nvsmi_truncated_is_a_probe_error() -> None:
    xml = fixture_text("nvsmi_h200x8_healthy.xml")
    with pytest.raises(ProbeError, match="not valid XML"):
        parse_nvsmi.parse(xml[: len(xml) // 2])


def test_nvlink_status() -> None:
    gpus = parse_nvlink.parse(fixture_text("nvlink_h200x8_healthy.txt"))
    assert len(gpus) == 8 and all(len(g.links_up) == 18 for g in gpus)
    degraded = fixture_text("nvlink_h200x8_healthy.txt").replace(
        "GPU 3: NVIDIA H200 (UUID: GPU-7c3e9f12-5a4b-4d8e-b1c2-6f0e8d9a7b33)\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s",
        "GPU 3: NVIDIA H200 (UUID: GPU-7c3e9f12-5a4b-4d8e-b1c2-6f0e8d9a7b33)\n\t Link 0: <inactive>\n\t Link 1: 0 GB/s",
    )
    g3 = parse_nvlink.parse(degraded)[3]
    assert g3.uuid.startswith("GPU-7c3e") and g3.links_down == [0, 1] and len(g3.links_up) == 16
    with pytest.raises(ProbeError):
        parse_nvlink.parse("Failed to initialize NVML: Driver/library version mismatch")


def test_ib_sysfs_formats() -> None:
    assert parse_ib.parse_state("4: ACTIVE\n") == parse_ib.PortState(4, "ACTIVE")
    assert parse_ib.parse_state("1: DOWN") == parse_ib.PortState(1, "DOWN")
    assert parse_ib.parse_rate("400 Gb/sec (4X NDR)\n") == parse_ib.PortRate(400.0, 4, "NDR")
    assert parse_ib.parse_rate("2.5 Gb/sec (1X SDR)") == parse_ib.PortRate(2.5, 1, "SDR")
    assert parse_ib.parse_rate("200 Gb/sec") == parse_ib.PortRate(200.0, None, None)
    for bad in ("", "ACTIVE", "fast"):
        with pytest.raises(ProbeError):
            parse_ib.parse_state(bad)
        with pytest.raises(ProbeError):
            parse_ib.parse_rate(bad)
