"""Checks against the node shape and the XID catalog -> findings -> Node conditions and Events."""

from __future__ import annotations

from gpucatalog.gpuhealth import checks, conditions, parse_ib, parse_kmsg, parse_nvsmi
from gpucatalog.gpuhealth.findings import Expectations, Family, Observation
from gpucatalog.gpuhealth.xidpolicy import Action, XidPolicy

from .conftest import fixture_text

H200 = Expectations(gpu_count=8, pcie_gen=5, pcie_width=16, nvlinks_per_gpu=18, ib_rate_gbps=400, ib_ports=8)


def all_xid_findings() -> list[checks.Finding]:
    smi = parse_nvsmi.parse(fixture_text("nvsmi_h200x8_healthy.xml"))
    scan = parse_kmsg.parse(fixture_text("kmsg_mixed.txt"))
    return checks.check_xids(parse_kmsg.active_xids(scan), XidPolicy(), checks.gpu_map(smi))


def xid_findings() -> dict[int, checks.Finding]:
    return {f.xid: f for f in all_xid_findings() if f.xid is not None}


def test_xid_79_is_fatal_reboot_naming_gpu_pci_and_catalog_action() -> None:
    f = xid_findings()[79]
    assert f.family is Family.XID and f.action is Action.REBOOT and f.fatal
    assert f.subject == "GPU 2 (PCI 0000:3a:00, GPU-0e4f7a9c-2d3b-4a1e-8f6c-9b7d5e3c1a20)"
    assert "XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" in f.detail
    assert "catalog action RESTART_BM" in f.detail and f.text().endswith("action=REBOOT")


def test_application_xids_are_events_not_faults() -> None:
    found = xid_findings()
    assert found[13].action is Action.NONE and not found[13].fatal  # RESTART_APP
    assert found[43].action is Action.NONE  # IGNORE
    assert found[94].action is Action.NONE and "MIG GI 3" in found[94].subject


def test_unknown_xid_gets_policy_default_and_raw_line() -> None:
    f = xid_findings()[999]
    assert f.action is Action.HARDWARE_REPAIR
    assert "unknown to NVIDIA's catalog" in f.detail and "Something new from a future driver" in f.detail
    assert XidPolicy(default=Action.REBOOT).action(999) is Action.REBOOT


def test_xid_154_follows_the_drivers_recovery_verdict() -> None:
    assert xid_findings()[154].action is Action.RESET_GPU
    p = XidPolicy()
    assert p.action(154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)") is Action.REBOOT
    assert p.action(154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)") is Action.NONE


def test_catalog_buckets_map_to_actions_and_overrides_win() -> None:
    p = XidPolicy()
    assert p.action(48) is Action.RESET_GPU  # WORKFLOW_XID_48: solo -> reset
    assert p.action(64) is Action.RESET_GPU
    assert p.action(119) is Action.RESET_GPU
    assert p.action(74) is Action.HARDWARE_REPAIR  # WORKFLOW_NVLINK_ERR needs a person
    assert p.action(151) is Action.REBOOT  # RESTART_VM
    assert p.action(63) is Action.NONE
    assert XidPolicy.from_config({"94": "reset_gpu"}, None).action(94) is Action.RESET_GPU


def test_healthy_h200_has_no_findings() -> None:
    smi = parse_nvsmi.parse(fixture_text("nvsmi_h200x8_healthy.xml"))
    assert checks.check_smi(smi, H200) == []


def test_memory_findings_and_pcie_left_to_the_link_judge(edit_gpu) -> None:  # type: ignore[no-untyped-def]
    xml = fixture_text("nvsmi_h200x8_healthy.xml")
    xml = edit_gpu(xml, 1, "remapped_row_pending", "Yes")
    xml = edit_gpu(xml, 4, "remapped_row_failure", "Yes")
    xml = edit_gpu(xml, 6, "current_link_width", "8x")  # judged by pcie.judge, under load only
    found = {(f.reason, f.subject.split(" (")[0]): f for f in checks.check_smi(parse_nvsmi.parse(xml), H200)}
    assert found[("RowRemapPending", "GPU 1")].action is Action.RESET_GPU
    assert found[("RowRemapFailure", "GPU 4")].action is Action.HARDWARE_REPAIR
    assert set(found) == {("RowRemapPending", "GPU 1"), ("RowRemapFailure", "GPU 4")}


def test_missing_gpu_is_a_count_fault() -> None:
    xml = fixture_text("nvsmi_h200x8_healthy.xml")
    start = xml.index('<gpu id="00000000:DB:00.0">')
    xml = xml[:start] + xml[xml.index("</gpu>", start) + len("</gpu>"):]
    found = checks.check_smi(parse_nvsmi.parse(xml), H200)
    assert [(f.family, f.reason, f.action) for f in found] == [(Family.COUNT, "GpuMissing", Action.REBOOT)]


def test_ib_port_at_half_rate_and_down() -> None:
    ok = parse_ib.PortRate(400, 4, "NDR")
    ports = [
        checks.IbPort("mlx5_0", "1", parse_ib.PortState(4, "ACTIVE"), ok),
        checks.IbPort("mlx5_1", "1", parse_ib.PortState(4, "ACTIVE"), parse_ib.parse_rate("200 Gb/sec (4X HDR)")),
        checks.IbPort("mlx5_2", "1", parse_ib.PortState(1, "DOWN"), ok),
        checks.IbPort("eth0", "1", parse_ib.PortState(1, "DOWN"), ok, link_layer="Ethernet"),
    ]
    found = checks.check_ib(ports, Expectations(ib_rate_gbps=400, ib_ports=3))
    assert [(f.subject, f.reason) for f in found] == [
        ("mlx5_1 port 1", "InfinibandRateDegraded"), ("mlx5_2 port 1", "InfinibandPortDown")]
    assert found[0].detail == "port rate 200 Gb/sec (4X HDR), expected 400 Gb/sec"


def test_conditions_one_per_family_with_action_token_and_events() -> None:
    found = all_xid_findings()
    conds, events = conditions.build(Observation(findings=found))
    by_type = {c.type: c for c in conds}
    assert set(by_type) == {f.value for f in Family} | {"GpuHealthProbeError"}
    xid = by_type["GpuXidError"]
    assert xid.status == "True" and xid.reason == "MultipleFaults"
    assert xid.message.startswith("action=HARDWARE_REPAIR; ")  # strongest of 79 (REBOOT), 999, 154
    assert "XID 79" in xid.message and "GPU 2 (PCI 0000:3a:00" in xid.message
    assert conditions.action_of(xid.to_api("2026-12-02T10:00:00.000000Z")) is Action.HARDWARE_REPAIR
    assert by_type["GpuPcieDegraded"].status == "False"
    assert sorted(e.reason for e in events) == ["Xid13", "Xid13", "Xid13", "Xid43", "Xid94"]
    assert all(e.type == "Warning" for e in events)


def test_probe_error_makes_its_families_unknown() -> None:
    conds, _ = conditions.build(Observation(probe_errors={"nvidia-smi": "output is not valid XML"}))
    by_type = {c.type: c for c in conds}
    assert by_type["GpuMemoryError"].status == "Unknown"
    assert by_type["GpuXidError"].status == "False"
    assert by_type["GpuHealthProbeError"].status == "True"
    assert "nvidia-smi: output is not valid XML" in by_type["GpuHealthProbeError"].message
    assert conditions.action_of(by_type["GpuMemoryError"].to_api("t")) is None


def test_condition_transition_time_only_moves_on_status_change() -> None:
    c = conditions.Condition("GpuXidError", "False", "NoFault", "x")
    prev = {"status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    assert c.to_api("2026-12-02T00:00:00Z", prev)["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert c.to_api("2026-12-02T00:00:00Z", {"status": "True"})["lastTransitionTime"] == "2026-12-02T00:00:00Z"


def test_long_messages_are_truncated_keeping_the_action() -> None:
    many = [checks.Finding(Family.XID, "Xid79", Action.REBOOT, f"GPU {i}", "x" * 200, xid=79) for i in range(20)]
    conds, _ = conditions.build(Observation(findings=many))
    msg = next(c for c in conds if c.type == "GpuXidError").message
    assert len(msg) <= conditions.MAX_MESSAGE and msg.startswith("action=REBOOT; ") and "more)" in msg
