"""The pure parts of the KAI suites: placement accounting and oversubscription."""

from __future__ import annotations

from gpucatalog.validators.conformance.kai import math as kai_math
from gpucatalog.validators.conformance.kai.math import GpuUse, Placement


def test_devices_used_counts_whole_gpus_and_distinct_shared_gpus() -> None:
    placements = [Placement("w1", "n1", gpus=2), Placement("f1", "n1", "g1", 0.5),
                  Placement("f2", "n1", "g1", 0.5), Placement("f3", "n1", "g2", 0.3),
                  Placement("f4", "n2", "g1", 0.7)]
    assert kai_math.devices_used(placements) == {"n1": 4.0, "n2": 1.0}


def frac(pod: str, node: str, group: str, fraction: float) -> GpuUse:
    return GpuUse(pod, node, group=group, fraction=fraction)


def reservation(group: str, node: str, device: str = "") -> GpuUse:
    return GpuUse(f"kai-resource-reservation/r-{group}", node, gpus=1, group=group, device=device, reservation=True)


def test_no_oversubscription_when_fractions_fit() -> None:
    uses = [frac("a", "n1", "g1", 0.5), frac("b", "n1", "g1", 0.5), reservation("g1", "n1", "GPU-0"),
            frac("c", "n1", "g2", 0.7), reservation("g2", "n1", "GPU-1"), GpuUse("w", "n1", gpus=6)]
    assert kai_math.oversubscription(uses, {"n1": 8}) == []


def test_two_seventy_percent_fractions_on_one_gpu_are_oversubscription() -> None:
    uses = [frac("a", "n1", "g1", 0.7), frac("b", "n1", "g1", 0.7), reservation("g1", "n1")]
    assert kai_math.oversubscription(uses, {"n1": 1}) == ["GPU group g1 on n1 carries 1.4 of a device (a=0.7, b=0.7)"]


def test_another_tenants_share_of_the_same_gpu_counts() -> None:
    """The old check summed only the case's own pods per GPU group: 0.5 + 0.5 passed although
    another tenant's 0.5 pod sat in the same group."""
    case = [frac("case/a", "n1", "g1", 0.5), frac("case/b", "n1", "g1", 0.5)]
    other = [frac("team-x/c", "n1", "g1", 0.5), reservation("g1", "n1", "GPU-3")]
    assert kai_math.oversubscription(case + [reservation("g1", "n1", "GPU-3")], {"n1": 8}) == []
    assert kai_math.oversubscription(case + other, {"n1": 8}) == [
        "GPU GPU-3 on n1 carries 1.5 of a device (case/a=0.5, case/b=0.5, team-x/c=0.5)"]


def test_two_groups_on_one_physical_gpu_are_oversubscription() -> None:
    """Two GPU groups whose reservation pods report the same device: each group is within one
    device (the old per-group check passed), the physical GPU carries 1.4."""
    uses = [frac("a", "n1", "g1", 0.7), reservation("g1", "n1", "GPU-0"),
            frac("b", "n1", "g2", 0.7), reservation("g2", "n1", "GPU-0")]
    assert kai_math.oversubscription(uses, {"n1": 8}) == [
        "GPU GPU-0 on n1 is reserved by 2 GPU groups (g1, g2)",
        "GPU GPU-0 on n1 carries 1.4 of a device (a=0.7, b=0.7)"]


def test_reservation_pods_and_other_tenants_count_against_the_node() -> None:
    """The case's 1 whole GPU and one shared GPU fit 8 devices on their own; with another
    tenant's 7 whole GPUs the node holds 9."""
    case = [GpuUse("case/w", "n1", gpus=1), frac("case/f", "n1", "g9", 0.2), reservation("g9", "n1", "GPU-7")]
    assert kai_math.oversubscription(case, {"n1": 8}) == []
    assert kai_math.oversubscription(case + [GpuUse("team-x/big", "n1", gpus=7)], {"n1": 8}) == [
        "node n1 holds 9 GPUs (whole-GPU pods, reservation pods, shared GPUs) but has 8"]


def test_a_shared_group_without_reservation_still_takes_a_device() -> None:
    uses = [GpuUse("w", "n1", gpus=8), frac("f", "n1", "g9", 0.2)]
    assert kai_math.oversubscription(uses, {"n1": 8}) == [
        "node n1 holds 9 GPUs (whole-GPU pods, reservation pods, shared GPUs) but has 8"]


def test_same_group_name_on_two_nodes_is_two_devices_and_missing_group_is_reported() -> None:
    uses = [frac("a", "n1", "g", 0.6), frac("b", "n2", "g", 0.6), frac("c", "n2", "", 0.1)]
    assert kai_math.oversubscription(uses, {"n1": 1, "n2": 2}) == ["fraction pod c on n2 carries no GPU group"]


def test_fraction_sum_uses_float_slack() -> None:
    uses = [frac(str(i), "n", "g", 0.1) for i in range(10)]
    assert kai_math.oversubscription(uses, {"n": 1}) == []


def test_placement_to_dict_for_reports() -> None:
    assert Placement("p", "n", "g", 0.5).to_dict() == {"pod": "p", "node": "n", "gpu": "g", "fraction": 0.5, "gpus": None}
