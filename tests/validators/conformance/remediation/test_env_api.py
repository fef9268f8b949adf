"""``fault_remediation``'s environment against a real API server: a kept cluster's flap history
(the faults of earlier runs) is forgotten for nodes back in service, so a second certification
on the same cluster is not sent to hardware repair by the first one's faults; a node still in
remediation keeps its history."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from gpucatalog.gpuhealth import engine
from gpucatalog.gpuhealth.xidpolicy import Action
from gpucatalog.validators.conformance.kit import base, kube_client
from gpucatalog.validators.conformance.remediation import contract as rc
from gpucatalog.validators.conformance.remediation import env as remediation_env
from gpucatalog.validators.conformance.remediation import fault_remediation

NOW = 1_800_000_000.0


def test_kept_cluster_fault_history_is_forgotten_only_for_nodes_in_service(kubeconfig: Path) -> None:
    tag = secrets.token_hex(3)
    kube = kube_client.Kube(str(kubeconfig))
    history = json.dumps([NOW - 60 * i for i in range(5)])  # five faults of earlier runs
    shapes = {"healthy-hist": ("healthy", False, history), "in-flight": ("quarantined", True, history),
              "healthy-clean": ("healthy", False, None), "healthy-hist2": ("healthy", False, history)}
    names = {}
    for short, (state, cordoned, hist) in shapes.items():
        name = names[short] = f"{short}-{tag}"
        annotations = {rc.FAULT_HISTORY: hist} if hist else {}
        kube.request("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"fr-test": tag, rc.STATE: state}, "annotations": annotations},
            "spec": {"unschedulable": cordoned}})
    try:
        env = remediation_env.Env(base.SuiteContext(kubeconfig=kubeconfig, params={
            "inject_fault": lambda *a, **k: None, "node_selector": f"fr-test={tag}"}))
        assert sorted(env.forget_fault_history()) == sorted([names["healthy-hist"], names["healthy-hist2"]])
        assert rc.FAULT_HISTORY not in rc.annots(env.node(names["healthy-hist"]))
        assert rc.annots(env.node(names["in-flight"]))[rc.FAULT_HISTORY] == history
        assert env.forget_fault_history() == []  # nothing left to forget
    finally:
        for name in names.values():
            kube.request("DELETE", f"/api/v1/nodes/{name}")
        kube.close()


def test_a_wait_that_times_out_names_where_the_node_was_left(kubeconfig: Path) -> None:
    tag = secrets.token_hex(3)
    kube = kube_client.Kube(str(kubeconfig))
    name = f"stuck-{tag}"
    kube.request("POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node", "spec": {"unschedulable": True},
        "metadata": {"name": name, "labels": {"fr-test": tag, rc.STATE: "escalated"},
                     "annotations": {rc.PREFIX + "escalation": "REBOOT failed", rc.FAULT_HISTORY: "[1]"}}})
    nodes = [f"n{i}-{tag}" for i in range(3)]
    for n in nodes:
        kube.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                               "metadata": {"name": n, "labels": {"fr-test": tag}}})
    try:
        env = remediation_env.Env(base.SuiteContext(kubeconfig=kubeconfig, params={"node_selector": f"fr-test={tag}"}))
        with pytest.raises(base.WaitTimeout) as exc:
            env.wait_node(name, "back in service", lambda n: rc.state(n) == "healthy", 0.5)
        assert str(exc.value).startswith(f"timed out after 0s waiting for {name}: back in service (last seen: "
                                         "state escalated, cordoned, annotations {'escalation': 'REBOOT failed'})")
    finally:
        for n in [name, *nodes]:
            kube.request("DELETE", f"/api/v1/nodes/{n}")
        kube.close()


def test_the_history_left_by_earlier_runs_is_what_sends_a_node_to_hardware_repair() -> None:
    """Why the suite forgets it: with recent faults on record the next one is a flapping node."""
    def action(annotations: dict[str, str]) -> Action:
        view = engine.NodeView("gpu-0", {}, annotations, False, Action.REBOOT, fault_summary="XID 79")
        return engine.choose_action(view, engine.Policy(), NOW)

    assert action({rc.FAULT_HISTORY: json.dumps([NOW - 60 * i for i in range(1, 6)])}) is Action.HARDWARE_REPAIR
    assert action({}) is Action.REBOOT


def test_a_fault_that_cannot_be_cleared_leaves_its_case_not_run(kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod injector on a real node: the synthetic XID stays until the node's repair. The case's
    cleanup records that and goes on (a later uncordon still runs); the case, whose checks held, is
    then not run. Nothing is cleared on a node nothing was injected on."""
    tag = secrets.token_hex(3)
    kube = kube_client.Kube(str(kubeconfig))
    names = [f"clr-{i}-{tag}" for i in range(4)]
    for name in names:
        kube.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                               "metadata": {"name": name, "labels": {"fr-test": tag}}})
    calls: list[tuple[str, str]] = []
    after: list[str] = []

    def inject(node: str, kind: str, **_kw: object) -> str:
        calls.append((node, kind))
        if kind == "clear":
            raise base.CaseNotRun(f"{node}: the synthetic XID cannot be cleared without the node's repair")
        return node

    def case(env: remediation_env.Env, _res: base.CaseResult) -> None:
        env.cleanup(env.nodes[1])  # nothing injected there: the injector is not asked
        try:
            env.inject(env.nodes[0], "xid", code=13, gpu=1)
        finally:
            env.cleanup(env.nodes[0])
            after.append("uncordoned")

    monkeypatch.setattr(fault_remediation, "CASES", [("application_xid", case)])
    try:
        result = fault_remediation.run(base.SuiteContext(kubeconfig=kubeconfig, params={
            "inject_fault": inject, "node_selector": f"fr-test={tag}"}))
    finally:
        for name in names:
            kube.request("DELETE", f"/api/v1/nodes/{name}")
        kube.close()
    assert calls == [(names[0], "xid"), (names[0], "clear")] and after == ["uncordoned"]
    (only,) = result.cases
    assert only.result == "skipped" and result.result == "incomplete"
    assert only.reason == (f"not run: a synthetic fault could not be cleared without the node's repair: {names[0]}: "
                           "the synthetic XID cannot be cleared without the node's repair")
