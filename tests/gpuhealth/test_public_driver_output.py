"""The probes read real, published driver output: kernel XID lines of several driver generations
(with and without "PCI:", MIG instance forms, GSP and NVLink5 XIDs, the multi-line "fallen off
the bus" report), ``nvidia-smi nvlink -s`` of A100/V100/B200/GB200 and InfiniBand sysfs files.
The data and where each item was published: data/public_driver_output.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.gpuhealth import checks, parse_kmsg, parse_nvlink, probes
from gpucatalog.gpuhealth.findings import Expectations
from gpucatalog.gpuhealth.xidpolicy import Action, XidPolicy

DATA = yaml.safe_load((Path(__file__).parent / "data" / "public_driver_output.yaml").read_text())


def cite(entry: dict[str, Any]) -> str:
    return str(entry["source"])[:70]


@pytest.mark.parametrize("entry", DATA["xid"], ids=cite)
def test_published_xid_lines_parse_to_the_right_event_and_action(entry: dict[str, Any]) -> None:
    scan = parse_kmsg.parse(entry["text"])
    assert scan.unparsed == [], f"lines not understood: {scan.unparsed}"
    assert len(scan.xids) == len(entry["expect"])
    found = checks.check_xids(parse_kmsg.active_xids(scan), XidPolicy())
    for ev, finding, want in zip(scan.xids, found, entry["expect"], strict=True):
        assert (ev.xid, ev.pci) == (want["xid"], want["pci"])
        for key, attr in (("pid", "pid"), ("process", "process"), ("gpu_instance", "gpu_instance"),
                          ("compute_instance", "compute_instance")):
            if key in want:
                assert getattr(ev, attr) == want[key], key
        if "uuid" in want:
            assert scan.uuid_by_pci[ev.pci] == want["uuid"]
        assert finding.action is Action[want["action"]], (ev.xid, finding.detail)


def test_kernel_banner_lines_around_an_xid_are_neither_xids_nor_unparsed() -> None:
    entry = next(e for e in DATA["xid"] if "_kgspLogXid119" in e["text"])
    scan = parse_kmsg.parse(entry["text"])
    assert [e.xid for e in scan.xids] == [119] and scan.unparsed == []


def test_fallen_off_the_bus_without_xid_is_read_as_xid_79_also_from_dev_kmsg() -> None:
    # /dev/kmsg carries the same multi-line record with its newlines escaped as \x0a
    record = ("3,2210,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in "
              "this system has\\x0aNVRM: fallen off the bus and is not responding to commands.")
    scan = parse_kmsg.parse(record)
    assert [(e.xid, e.pci) for e in scan.xids] == [(79, "0000:b3:00")]
    assert "without an XID" in scan.xids[0].text
    # a GPU named far away from any "fallen off the bus" is not one
    far = "NVRM: The NVIDIA GPU 0000:b3:00.0\n" + "x\n" * 10 + "NVRM: fallen off the bus"
    assert parse_kmsg.parse(far).xids == []


def test_an_xid_line_in_an_unknown_shape_is_reported_not_dropped() -> None:
    scan = parse_kmsg.parse("NVRM: Xid (PCI:0000:db:00): garbage that looks like an xid")
    found = checks.check_unparsed_xids(scan.unparsed)
    assert [(f.reason, f.action) for f in found] == [("XidUnparsed", Action.NONE)]
    assert "garbage that looks like an xid" in found[0].detail


@pytest.mark.parametrize("entry", DATA["nvlink"], ids=cite)
def test_published_nvlink_status_parses_and_judges(entry: dict[str, Any]) -> None:
    gpus = parse_nvlink.parse(entry["text"])
    assert [(g.index, len(g.links_up), g.links_down) for g in gpus][: len(entry["expect"])] == [
        (w["gpu"], w["up"], w["down"]) for w in entry["expect"]]
    for g, w in zip(gpus, entry["expect"], strict=False):
        if "uuid" in w:
            assert g.uuid == w["uuid"]
    found = checks.check_nvlink(gpus, Expectations(nvlinks_per_gpu=entry["expect_links"]))
    degraded = [w["gpu"] for w in entry["expect"] if w["up"] < entry["expect_links"]]
    assert [f.subject.split(" (")[0] for f in found] == [f"GPU {i}" for i in degraded]


def _write_port(root: Path, dev: str, files: dict[str, str | None]) -> None:
    port = root / "class" / "infiniband" / dev / "ports" / "1"
    port.mkdir(parents=True)
    for name, value in files.items():
        if value is None:
            # a file the kernel refuses to read (EINVAL): any read error takes the same path
            (port / name).mkdir()
        else:
            (port / name).write_text(value + "\n")


@pytest.mark.parametrize("entry", DATA["infiniband"], ids=cite)
def test_published_infiniband_sysfs_files_read_and_judge(entry: dict[str, Any], tmp_path: Path) -> None:
    _write_port(tmp_path, "mlx5_0", entry["files"])
    (port,) = probes.read_ib(tmp_path)
    want = entry["expect"]
    assert port.state.name == want["state"]
    if want["gbps"] is None:
        assert port.rate is None
    else:
        assert port.rate is not None
        assert (port.rate.gbps, port.rate.width, port.rate.speed) == (want["gbps"], want["width"], want["speed"])
    expect = Expectations(ib_rate_gbps=want["gbps"] or 100.0, ib_ports=None)
    found = checks.check_ib([port], expect)
    if want.get("ethernet"):
        assert found == []  # RoCE ports are not InfiniBand fabric ports
    elif want["state"] in checks.UP_STATES:
        assert found == []
        assert [f.reason for f in checks.check_ib([port], Expectations(ib_rate_gbps=want["gbps"] * 2))] == [
            "InfinibandRateDegraded"]
    else:
        assert [f.reason for f in found] == ["InfinibandPortDown"]


def test_a_down_port_with_an_unreadable_rate_does_not_hide_the_other_ports(tmp_path: Path) -> None:
    files = {e["files"]["rate"]: e["files"] for e in DATA["infiniband"]}
    _write_port(tmp_path, "mlx5_0", files["100 Gb/sec (2X HDR)"])
    _write_port(tmp_path, "mlx5_1", files[None])
    ports = probes.read_ib(tmp_path)
    found = checks.check_ib(ports, Expectations(ib_rate_gbps=100, ib_ports=2))
    assert [(f.subject, f.reason) for f in found] == [("mlx5_1 port 1", "InfinibandPortDown")]


def test_an_active_port_whose_rate_cannot_be_read_is_a_probe_error(tmp_path: Path) -> None:
    _write_port(tmp_path, "mlx5_0", {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": None,
                                     "link_layer": "InfiniBand"})
    with pytest.raises(probes.ProbeError):
        probes.read_ib(tmp_path)
