"""Which components install side by side: a component waits for its dependsOn, for an earlier
component whose admission webhooks intercept its objects or the pods its workloads start, and
for an earlier component in its namespace; all else goes at once. The shipped bundles' orders
are checked on their real renders."""

from __future__ import annotations

from typing import Any

import pytest

from gpucatalog.catalog import installorder, loader, render


def _comp(name: str, objects: list[dict[str, Any]], ns: str = "", deps: tuple[str, ...] = ()) -> render.RenderedComponent:
    return render.RenderedComponent(name=name, version="1.0.0", namespace=ns or name, release=name, chart_dir="",
                                    values={}, objects=objects, manifest_text="", depends_on=deps)


def _hook(groups: list[str], resources: list[str], kind: str = "ValidatingWebhookConfiguration",
          selector: dict[str, Any] | None = None) -> dict[str, Any]:
    hook: dict[str, Any] = {"name": "h.example.dev", "rules": [{"apiGroups": groups, "apiVersions": ["v1"],
                                                               "operations": ["CREATE"], "resources": resources}]}
    if selector is not None:
        hook["namespaceSelector"] = selector
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": "h"},
            "webhooks": [hook]}


DAEMONSET = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"}}
CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}
POLICY = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "np"}}


def test_a_job_webhook_lets_a_daemonset_install_beside_it() -> None:
    waits = installorder.waits_for([_comp("queue", [_hook(["batch"], ["jobs"])]), _comp("agent", [DAEMONSET])])
    assert waits == {"queue": (), "agent": ()}


@pytest.mark.parametrize("rule", [(["", "apps"], ["pods"]), (["*"], ["*"]), (["apps"], ["daemonsets"]),
                                  ([""], ["configmaps"])])
def test_a_webhook_that_intercepts_the_objects_or_their_pods_makes_later_components_wait(
        rule: tuple[list[str], list[str]]) -> None:
    waits = installorder.waits_for([_comp("sched", [_hook(*rule, kind="MutatingWebhookConfiguration")]),
                                    _comp("agent", [DAEMONSET, CONFIGMAP])])
    assert waits["agent"] == ("sched",)


def test_subresource_rules_and_unrelated_groups_do_not_make_anyone_wait() -> None:
    waits = installorder.waits_for([_comp("a", [_hook([""], ["pods/status"]), _hook(["kueue.x-k8s.io"], ["*"])]),
                                    _comp("b", [DAEMONSET, POLICY])])
    assert waits["b"] == ()


def test_depends_on_and_a_shared_namespace_are_waited_for() -> None:
    waits = installorder.waits_for([_comp("op", []), _comp("crs", [], deps=("op",)),
                                    _comp("side", [], ns="crs"), _comp("free", [])])
    assert waits == {"op": (), "crs": ("op",), "side": ("crs",), "free": ()}


def _not_in(*names: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(names)}]}


@pytest.mark.parametrize(("selector", "waits"), [
    (_not_in("kube-system", "agent"), False),  # Kueue's pod webhook leaving the agent's namespace out
    (_not_in("kube-system"), True),
    ({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["agent"]}]}, True),
    ({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["other"]}]}, False),
    ({"matchLabels": {"kubernetes.io/metadata.name": "other"}}, False),
    ({"matchLabels": {"kubernetes.io/metadata.name": "agent"}}, True),
    ({"matchLabels": {"team": "x"}}, True),  # another label: the namespace may carry it, so wait
    ({**_not_in("agent"), "matchLabels": {"team": "x"}}, True),
    ({}, True),
])
def test_a_namespace_selector_on_the_namespaces_name_is_judged(selector: dict[str, Any], waits: bool) -> None:
    order = installorder.waits_for([_comp("queue", [_hook([""], ["pods"], selector=selector)]),
                                    _comp("agent", [DAEMONSET])])
    assert order["agent"] == (("queue",) if waits else ())


def test_a_namespace_selector_never_frees_an_object_not_known_to_be_namespaced() -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}}
    order = installorder.waits_for([_comp("guard", [_hook(["*"], ["*"], selector=_not_in("agent"))]),
                                    _comp("agent", [role])])
    assert order["agent"] == ("guard",)


def test_resource_names_of_the_kinds_charts_use() -> None:
    assert [installorder.plural(k) for k in ("Deployment", "Ingress", "NetworkPolicy", "PriorityClass", "Gateway")] == [
        "deployments", "ingresses", "networkpolicies", "priorityclasses", "gateways"]


@pytest.mark.toolchain  # renders with the pinned helm
def test_shipped_bundles_install_order() -> None:
    cat = loader.load_catalog()
    queueing = installorder.waits_for(render.render_bundle(cat, "gpu-queueing@0.2.0", "sim").components)
    # Kueue's webhooks see only Jobs and Kueue's own kinds: gpu-health and the DRA driver go beside it
    assert queueing == {"kueue": (), "team-queues": ("kueue",), "gpu-health": (), "nvidia-dra-driver": ()}
    # 0.4.0's pod webhook sees every namespace but Kueue's and kube-system: the rest waits for it;
    # 0.4.1 leaves the platform's namespaces out, so they go beside Kueue again
    four = installorder.waits_for(render.render_bundle(cat, "gpu-queueing@0.4.0", "sim").components)
    assert four == {"kueue": (), "team-queues": ("kueue",), "gpu-health": ("kueue",), "nvidia-dra-driver": ("kueue",)}
    four_one = installorder.waits_for(render.render_bundle(cat, "gpu-queueing@0.4.1", "sim").components)
    assert four_one == {"kueue": (), "team-queues": ("kueue",), "gpu-health": (), "nvidia-dra-driver": ()}
    slurm = installorder.waits_for(render.render_bundle(cat, "slurm@0.2.0", "sim").components)
    assert slurm["slurm"] == ("slurm-operator",)
