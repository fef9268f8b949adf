"""PCIe link judgement on the H200 fixture: busy vs idle, hysteresis, the link's maximum against
the node shape (or the GPU's own maximum), x8 platforms, and the agent flags that tune it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpucatalog.gpuhealth import main as gh_main
from gpucatalog.gpuhealth import parse_nvsmi, pcie
from gpucatalog.gpuhealth.errors import ConfigError
from gpucatalog.gpuhealth.findings import Expectations, Family
from gpucatalog.gpuhealth.xidpolicy import Action

from .conftest import fixture_text

H200 = Expectations(gpu_count=8, pcie_gen=5, pcie_width=16)
Edit = Callable[[str, int, str, str], str]


def reading(edit: Edit, **by_gpu: dict[str, str]) -> parse_nvsmi.SmiReading:
    xml = fixture_text("nvsmi_h200x8_healthy.xml")
    for gpu, fields in by_gpu.items():
        for tag, value in fields.items():
            xml = edit(xml, int(gpu.removeprefix("g")), tag, value)
    return parse_nvsmi.parse(xml)


def run(smi: parse_nvsmi.SmiReading, times: int, expect: Expectations = H200,
        rules: pcie.PcieRules | None = None) -> tuple[list[pcie.Finding], list[str]]:
    history = pcie.LinkHistory()
    out: tuple[list[pcie.Finding], list[str]] = ([], [])
    for _ in range(times):
        out = pcie.judge(smi, expect, rules or pcie.PcieRules(), history)
    return out


def test_busy_x8_on_a_x16_shape_is_a_fault_after_three_readings(edit_gpu: Edit) -> None:
    smi = reading(edit_gpu, g6={"current_link_width": "8x"})  # fixture GPUs are at P0
    assert run(smi, 2)[0] == []
    assert "busy reading 2 of 3" in run(smi, 2)[1][0]
    found = run(smi, 3)[0]
    assert [(f.family, f.reason, f.action, f.subject.split(" (")[0]) for f in found] == [
        (Family.PCIE, "PcieWidthDegraded", Action.HARDWARE_REPAIR, "GPU 6")]
    assert found[0].detail == ("PCIe link x8 while busy (P0) for 3 consecutive busy readings, "
                               "the node shape expects x16")


def test_idle_gen1_is_a_note_never_a_finding(edit_gpu: Edit) -> None:
    smi = reading(edit_gpu, g5={"performance_state": "P8", "current_link_gen": "1"})
    found, notes = run(smi, 10)
    assert found == []
    assert notes == ["GPU 5 (PCI 0000:ab:00, GPU-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c55): PCIe gen 1 at P8 (idle), "
                     "shape expects gen 5: not judged"]


def test_utilisation_counts_as_busy_at_any_performance_state(edit_gpu: Edit) -> None:
    smi = reading(edit_gpu, g1={"performance_state": "P8", "current_link_gen": "3"})
    assert run(smi, 5)[0] == []
    xml = fixture_text("nvsmi_h200x8_healthy.xml").replace(
        "<performance_state>P0</performance_state>",
        "<performance_state>P8</performance_state><utilization><gpu_util>80 %</gpu_util></utilization>", 2)
    xml = edit_gpu(xml, 1, "current_link_gen", "3")
    found = run(parse_nvsmi.parse(xml), 3)[0]
    assert [(f.reason, f.subject.split(" (")[0]) for f in found] == [("PcieGenDegraded", "GPU 1")]
    assert run(parse_nvsmi.parse(xml), 3, rules=pcie.PcieRules(busy_util_percent=90))[0] == []


def test_link_maximum_below_the_shape_is_a_fault_at_once_even_idle(edit_gpu: Edit) -> None:
    # a gen 4 host port: the link can never train to the shape's gen 5
    smi = reading(edit_gpu, g0={"performance_state": "P8", "current_link_gen": "1", "max_link_gen": "4",
                                "max_host_link_gen": "4"})
    found = run(smi, 1)[0]
    assert [(f.reason, f.action) for f in found] == [("PcieGenDegraded", Action.HARDWARE_REPAIR)]
    assert "can train to gen 4 at most" in found[0].detail and "node shape expects gen 5" in found[0].detail


def test_without_a_shape_only_the_link_maximum_against_the_gpus_own_is_judged(edit_gpu: Edit) -> None:
    none = Expectations()
    busy_narrow = reading(edit_gpu, g2={"current_link_width": "4x", "current_link_gen": "2"})
    assert run(busy_narrow, 5, none)[0] == []  # how the platform wires it is unknown
    host_limited = reading(edit_gpu, g2={"max_link_gen": "4", "max_host_link_gen": "4"})
    found = run(host_limited, 1, none)[0]
    assert [f.reason for f in found] == ["PcieGenDegraded"]
    assert "the GPU itself supports gen 5" in found[0].detail


def test_x8_platform_at_x8_is_not_degraded(edit_gpu: Edit) -> None:
    smi = reading(edit_gpu, **{f"g{i}": {"current_link_width": "8x"} for i in range(8)})
    assert run(smi, 5, Expectations(pcie_gen=5, pcie_width=8))[0] == []
    assert len(run(smi, 3)[0]) == 8  # the same readings on a x16 shape


def test_streaks_are_per_gpu_and_reset_by_a_healthy_busy_reading(edit_gpu: Edit) -> None:
    bad = reading(edit_gpu, g3={"current_link_width": "8x"})
    good = reading(edit_gpu)
    history = pcie.LinkHistory()
    for smi in (bad, bad, good, bad, bad):
        assert pcie.judge(smi, H200, pcie.PcieRules(), history)[0] == []
    assert len(pcie.judge(bad, H200, pcie.PcieRules(), history)[0]) == 1


def test_reason_action_override_applies(edit_gpu: Edit) -> None:
    smi = reading(edit_gpu, g4={"current_link_gen": "3"})
    history = pcie.LinkHistory()
    for _ in range(3):
        found, _ = pcie.judge(smi, H200, pcie.PcieRules(), history, {"PcieGenDegraded": Action.REBOOT})
    assert [f.action for f in found] == [Action.REBOOT]


@pytest.mark.parametrize(("flag", "needle"), [("--pcie-busy-readings=0", "at least 1"),
                                              ("--pcie-busy-util=0", "1..100")])
def test_bad_pcie_flags_are_config_errors(flag: str, needle: str) -> None:
    args = gh_main.parser().parse_args(["agent", "--node", "n", flag])
    with pytest.raises(ConfigError, match=needle):
        gh_main.probe_config(args)


def test_pcie_flags_reach_the_probe_config() -> None:
    args = gh_main.parser().parse_args(["verify", "--pcie-busy-readings=5", "--pcie-busy-util=30"])
    assert gh_main.probe_config(args).pcie_rules == pcie.PcieRules(busy_readings=5, busy_util_percent=30)
