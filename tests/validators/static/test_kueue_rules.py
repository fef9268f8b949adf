"""Static Kueue rules: each bad input found, named by object and field; a good set is clean."""

from __future__ import annotations

from typing import Any

from gpucatalog.validators.static import kueue_rules

H100 = "NVIDIA-H100-80GB-HBM3"
PRODUCTS = [H100, "NVIDIA-H200"]
V = "kueue.x-k8s.io/v1beta2"


def flavor(name: str, product: str | None = H100) -> dict[str, Any]:
    spec = {"nodeLabels": {"nvidia.com/gpu.product": product}} if product else {}
    return {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cohort(name: str, parent: str = "", **quota: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"parentName": parent} if parent else {}
    if quota:
        spec["resourceGroups"] = [_group("h100", quota)]
    return {"apiVersion": V, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def _group(fl: str, quota: dict[str, Any], resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    return {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": fl, "resources": [{"name": resource, **quota}]}]}


def cq(name: str, cohort_name: str = "d", fl: str = "h100", resource: str = "nvidia.com/gpu", **quota: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceGroups": [_group(fl, quota or {"nominalQuota": 4}, resource)]}
    if cohort_name:
        spec["cohortName"] = cohort_name
    return {"apiVersion": V, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def lq(name: str, ns: str, target: str) -> dict[str, Any]:
    return {"apiVersion": V, "kind": "LocalQueue", "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterQueue": target}}


def good() -> list[dict[str, Any]]:
    return [flavor("h100"), cohort("root"), cohort("d", "root", nominalQuota=2, borrowingLimit=4),
            cq("a", nominalQuota=4, borrowingLimit=2), cq("b", nominalQuota="4", lendingLimit=1), lq("a", "a", "a")]


def found(objs: list[dict[str, Any]], shape: str | None = H100) -> list[tuple[str, str, str]]:
    return [(f.rule, f.obj, f.field) for f in kueue_rules.check(objs, PRODUCTS, shape, component="team-queues")]


def test_a_consistent_set_is_clean() -> None:
    assert found(good()) == []


def test_local_queue_pointing_at_a_missing_cluster_queue() -> None:
    (f,) = kueue_rules.check([*good(), lq("x", "team-x", "nope")], PRODUCTS, H100, component="team-queues")
    assert (f.rule, f.obj, f.field) == ("kueue-unknown-clusterqueue", "LocalQueue/team-x/x", "spec.clusterQueue")
    assert "'nope' is not a ClusterQueue of the bundle (known: a, b)" in f.message


def test_flavor_naming_a_gpu_product_no_node_shape_has() -> None:
    objs = [*good(), flavor("b200", "NVIDIA-B200")]
    assert found(objs) == [("kueue-flavor-gpu-product", "ResourceFlavor/b200", "spec.nodeLabels[nvidia.com/gpu.product]")]


def test_no_flavor_for_the_profile_gpu_product() -> None:
    assert found(good(), shape="NVIDIA-H200") == [("kueue-no-flavor-for-shape", "ClusterQueue/a", "spec.resourceGroups")]
    # a flavor without node labels fits any node
    assert found([*good(), flavor("any", None)], shape="NVIDIA-H200") == []


def test_unknown_cohort_parent_and_cycle() -> None:
    objs = [flavor("h100"), cohort("x", "y"), cohort("y", "x"), cohort("z", "gone"), cq("a", cohort_name="missing")]
    assert found(objs) == [
        ("kueue-unknown-cohort", "ClusterQueue/a", "spec.cohortName"),
        ("kueue-unknown-cohort", "Cohort/z", "spec.parentName"),
        ("kueue-cohort-cycle", "Cohort/x", "spec.parentName"),
    ]


def test_unknown_flavor_and_uncovered_resource() -> None:
    objs = [flavor("h100"), cohort("d"), cq("a", fl="h300"), cq("b", resource="cpu")]
    assert found(objs) == [
        ("kueue-unknown-flavor", "ClusterQueue/a", "spec.resourceGroups[0].flavors[0].name"),
        ("kueue-uncovered", "ClusterQueue/b", "spec.resourceGroups[0].flavors[0].resources[0].name"),
    ]


def test_limits_kueue_would_refuse() -> None:
    objs = [flavor("h100"), cohort("d"), cohort("top", borrowingLimit=2),
            cq("solo", cohort_name="", nominalQuota=4, lendingLimit=1),
            cq("a", nominalQuota=2, lendingLimit=3), cq("b", nominalQuota=-1)]
    where = "spec.resourceGroups[0].flavors[0].resources[0]"
    assert found(objs) == [
        ("kueue-limit", "ClusterQueue/a", f"{where}.lendingLimit"),
        ("kueue-limit", "ClusterQueue/b", f"{where}.nominalQuota"),
        ("kueue-limit", "ClusterQueue/solo", f"{where}.lendingLimit"),
        ("kueue-limit", "Cohort/top", f"{where}.borrowingLimit"),
    ]


def test_duplicates_and_foreign_objects() -> None:
    objs = [*good(), cq("a"), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
            {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "a"}}]
    assert found(objs) == [("kueue-duplicate", "ClusterQueue/a", "metadata.name")]


def test_quantities() -> None:
    assert kueue_rules.quantity("1500m") == 1.5
    assert kueue_rules.quantity("2Ki") == 2048
    assert kueue_rules.quantity(3) == 3.0
    assert kueue_rules.quantity("lots") is None and kueue_rules.quantity(True) is None
