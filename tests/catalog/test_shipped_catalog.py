"""The catalog that ships: every bundle renders deterministically and validates clean, and a
seeded bad Queue field is caught naming the field (the issue's done-criteria)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucatalog.catalog import loader, render
from gpucatalog.cli import main
from gpucatalog.gpuhealth import main as gh_main
from gpucatalog.validators.conformance.queueing import scale

pytestmark = pytest.mark.toolchain  # renders with the pinned helm

REPO = Path(__file__).resolve().parents[2]


SHIPPED = loader.load_catalog(REPO / "catalog")


def test_the_shipped_bundles_are_there() -> None:
    assert {("gpu-scheduling", "0.1.0"), ("gpu-scheduling", "0.2.0"), ("gpu-scheduling", "0.2.1"), ("gpu-queueing", "0.2.0"),
            ("gpu-queueing", "0.3.0"), ("gpu-queueing", "0.4.0"), ("gpu-queueing", "0.4.1"),
            ("gpu-queueing", "0.4.2"), ("gpu-queueing", "0.4.3"), ("gpu-queueing", "0.4.4"),
            ("slurm", "0.2.0")} <= set(SHIPPED.bundles)
    assert SHIPPED.bundle_versions("gpu-queueing")[-1] == "0.4.4"  # what an unversioned certify takes


@pytest.mark.parametrize(("version", "profile"), [("0.3.0", "sim"), ("0.3.0", "kind"), ("0.3.0", "h100-8x"),
                                                  ("0.4.0", "sim"), ("0.4.0", "upstream-e2e"), ("0.4.0", "h100-8x"),
                                                  ("0.4.1", "sim"), ("0.4.1", "upstream-e2e"), ("0.4.1", "h100-8x"),
                                                  ("0.4.2", "sim"), ("0.4.2", "kind"), ("0.4.3", "kind"),
                                                  ("0.4.4", "kind"), ("0.4.4", "scale")])
def test_validate_gpu_queueing_is_clean(capsys: pytest.CaptureFixture[str], version: str, profile: str) -> None:
    assert main(["validate", f"gpu-queueing@{version}", "--profile", profile, "--no-lint"]) == 0
    assert "no findings" in capsys.readouterr().out


# one case per bundle version and profile: 18 renders twice did not fit one test's time budget
# on a loaded 2-core machine
@pytest.mark.parametrize("ref,profile", [(f"{n}@{v}", p) for (n, v), b in sorted(SHIPPED.bundles.items())
                                         for p in sorted(b.profiles)])
def test_every_shipped_bundle_renders_twice_identically(ref: str, profile: str) -> None:
    a = render.render_bundle(SHIPPED, ref, profile)
    again = render.render_bundle(SHIPPED, ref, profile)
    assert a.digest == again.digest


@pytest.mark.parametrize(("ref", "profile"), [("gpu-scheduling@0.1.0", "sim"), ("gpu-scheduling@0.2.0", "sim"),
                                              ("gpu-scheduling@0.2.1", "kind")])
def test_validate_gpu_scheduling_is_clean(capsys: pytest.CaptureFixture[str], ref: str, profile: str) -> None:
    assert main(["validate", ref, "--profile", profile]) == 0
    assert "no findings" in capsys.readouterr().out


# releases that change only their kind profile (0.4.4 also adds the scale profile): every other
# profile renders as the one before
KIND_ONLY = [("gpu-queueing@0.4.1", "gpu-queueing@0.4.2"), ("gpu-queueing@0.4.2", "gpu-queueing@0.4.3"),
             ("gpu-queueing@0.4.3", "gpu-queueing@0.4.4"), ("gpu-scheduling@0.2.0", "gpu-scheduling@0.2.1")]


@pytest.mark.parametrize(("old_ref", "new_ref", "profile"), [
    (old, new, p) for old, new in KIND_ONLY for p in sorted(SHIPPED.bundles[tuple(new.split("@"))].profiles)
    if p in SHIPPED.bundles[tuple(old.split("@"))].profiles and p != "kind"])
def test_a_kind_only_release_changes_nothing_but_the_kind_profile(old_ref: str, new_ref: str, profile: str) -> None:
    old = render.render_bundle(SHIPPED, old_ref, profile)
    new = render.render_bundle(SHIPPED, new_ref, profile)
    assert [c.objects for c in new.components] == [c.objects for c in old.components]
    assert (new.cluster, new.suite_params) == (old.cluster, old.suite_params)


def test_gpu_scheduling_0_2_1_kind_reads_the_simulated_node_and_repairs_in_a_pod_on_it() -> None:
    rb = render.render_bundle(SHIPPED, "gpu-scheduling@0.2.1", "kind")
    assert rb.cluster == {"provider": "kind", "nodes": 4, "shape": "h100-80gb-x8"}  # fault_remediation needs 4
    comps = {c.name: c for c in rb.components}
    (dep,) = [o for o in comps["gpu-health"].objects if o.get("kind") == "Deployment"]
    spec = dep["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert "repair-pod" in json.loads(env["GPU_HEALTH_ACTUATOR"])["commands"]["RESET_GPU"]
    (ds,) = [o for o in comps["gpu-health"].objects if o.get("kind") == "DaemonSet"]
    paths = {v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
    assert paths == {"/var/lib/gpu-catalog-node/dev/kmsg", "/var/lib/gpu-catalog-node/sys", "/var/lib/gpu-catalog-node"}
    # KAI as the sim profile runs it (smaller requests on 2 cores)
    sim = render.render_bundle(SHIPPED, "gpu-scheduling@0.2.1", "sim")
    assert [c.objects for c in rb.components if c.name == "kai-scheduler"] == [
        c.objects for c in sim.components if c.name == "kai-scheduler"]


def test_seeded_bad_queue_field_fails_validation_naming_it(
    repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = repo_copy / "bundles" / "gpu-scheduling" / "0.1.0.yaml"
    bundle.write_text(
        bundle.read_text()
        + """    broken:
      description: a Queue with a misspelt field, seeded through a kustomize overlay
      kustomize:
        team-queues:
          patches:
            - target: {kind: Queue, name: vision}
              patch: |
                - op: add
                  path: /spec/resources/gpu/quotaa
                  value: 4
"""
    )
    rc = main(["--catalog-dir", str(repo_copy), "validate", "gpu-scheduling@0.1.0", "--profile", "broken", "--no-lint"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "crd-schema" in err and "Queue/vision" in err and "spec.resources.gpu" in err and "quotaa" in err


def test_kubernetes_version_outside_a_component_range_is_a_finding(
    repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = repo_copy / "components" / "team-queues" / "0.1.0.yaml"
    f.write_text(f.read_text().replace('">=1.28.0 <1.37.0"', '">=1.28.0 <1.36.0"'))
    rc = main(["--catalog-dir", str(repo_copy), "validate", "gpu-scheduling@0.1.0", "--profile", "sim", "--no-lint"])
    assert rc == 1
    assert "[kubernetes-range] team-queues" in capsys.readouterr().err


def test_sim_profile_uses_the_charts_sim_scenarios() -> None:
    """Drift check: the bundle's sim values are the charts' own tested sim scenarios."""
    import yaml

    bundle = yaml.safe_load((REPO / "catalog" / "bundles" / "gpu-scheduling" / "0.1.0.yaml").read_text())
    sim = bundle["spec"]["profiles"]["sim"]["values"]
    assert sim["gpu-health"] == yaml.safe_load((REPO / "charts" / "gpu-health" / "ci" / "sim-values.yaml").read_text())


@pytest.mark.parametrize("profile", ["sim", "upstream-e2e", "kind", "h100-8x"])
def test_0_4_1_kueue_webhooks_leave_the_platform_namespaces_out(profile: str) -> None:
    """0.4.0's pod webhook admitted gpu-health's pods: while Kueue's manager was replaced, the pod
    that verifies a repaired node could not be made. 0.4.1's webhooks skip those namespaces."""
    rb = render.render_bundle(SHIPPED, "gpu-queueing@0.4.1", profile)
    kueue = next(c for c in rb.components if c.name == "kueue")
    hooks = [h for o in kueue.objects if o.get("kind", "").endswith("WebhookConfiguration") for h in o["webhooks"]]
    pod_hooks = [h for h in hooks if any("pods" in r["resources"] for r in h["rules"])]
    assert pod_hooks
    for hook in hooks:
        if "namespaceSelector" not in hook:  # Kueue's own kinds: cluster-scoped or its namespace's
            continue
        (expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn"
        assert {"gpu-health", "nvidia-dra-driver", "kube-system", "kueue-system"} <= set(expr["values"]), hook["name"]
    assert all("namespaceSelector" in h for h in pod_hooks)


def test_0_4_1_sim_keeps_the_controllers_on_a_cpu_node() -> None:
    rb = render.render_bundle(SHIPPED, "gpu-queueing@0.4.1", "sim")
    assert rb.cluster["extraNodes"] == [{"nodes": 1, "shape": "cpu"}]
    comps = {c.name: c for c in rb.components}
    selectors = {name: o["spec"]["template"]["spec"].get("nodeSelector")
                 for name, comp in comps.items() for o in comp.objects if o.get("kind") == "Deployment"}
    cpu = {"node.kubernetes.io/instance-type": "cpu"}
    assert selectors == {"kueue": cpu, "gpu-health": cpu}
    # the upstream-e2e profile installs Kueue alone on the GPU nodes Kueue's own suite expects
    e2e = render.render_bundle(SHIPPED, "gpu-queueing@0.4.1", "upstream-e2e")
    assert "extraNodes" not in e2e.cluster
    (dep,) = [o for c in e2e.components if c.name == "kueue" for o in c.objects if o.get("kind") == "Deployment"]
    assert not dep["spec"]["template"]["spec"].get("nodeSelector")


@pytest.mark.parametrize(("version", "timeout"), [("0.4.3", 60), ("0.4.4", 120)])
def test_kind_runs_4_gpu_workers_and_repairs_in_a_pod_on_the_node(version: str, timeout: int) -> None:
    rb = render.render_bundle(SHIPPED, f"gpu-queueing@{version}", "kind")
    assert rb.cluster == {"provider": "kind", "nodes": 4, "shape": "h100-80gb-x8"}  # fault_remediation needs 4
    (dep,) = [o for c in rb.components if c.name == "gpu-health" for o in c.objects if o.get("kind") == "Deployment"]
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    act = json.loads(env["GPU_HEALTH_ACTUATOR"])
    assert act["kind"] == "command" and set(act["commands"]) == {"RESET_GPU", "REBOOT"}
    # gpu-health's repair-pod hook, running the node folder's SIMULATED repair on the node
    (argv,) = {tuple(a) for a in act["commands"].values()}
    assert argv[:4] == ("python3", "-m", "gpucatalog.gpuhealth.main", "repair-pod")
    hook = gh_main.parser().parse_args([a.format(node="w", action="REBOOT", reason="r") for a in argv[3:]])
    assert hook.argv == ["/var/lib/gpu-catalog-node/usr/sbin/gpu-catalog-sim-repair"]
    assert (hook.host_path, hook.run_as_user, hook.privileged) == (["/var/lib/gpu-catalog-node"], 0, False)
    assert hook.timeout < act["timeoutSeconds"] == timeout  # the hook gives up before the actuator kills it
    # everything else of the profile is 0.4.2's
    old = render.render_bundle(SHIPPED, "gpu-queueing@0.4.2", "kind")
    assert [c.name for c in rb.components] == [c.name for c in old.components]
    for new_c, old_c in zip(rb.components, old.components, strict=True):
        if new_c.name != "gpu-health":
            assert new_c.objects == old_c.objects, new_c.name


def test_0_4_4_scale_profile_certifies_only_the_scale_suite_on_500_nodes_without_per_node_agents() -> None:
    rb = render.render_bundle(SHIPPED, "gpu-queueing@0.4.4", "scale")
    assert rb.suites == ("scale",) and rb.lock["certification"]["suites"] == ["scale"]
    assert rb.cluster["nodes"] == 500
    assert set(rb.suite_params["scale"]["thresholds"]) == set(scale.THRESHOLDS.values())
    scale.parse(rb.suite_params["scale"])  # valid as the suite reads it
    daemonsets = [o for c in rb.components for o in c.objects if o.get("kind") == "DaemonSet"]
    (ds,) = daemonsets  # the DRA plugin's, on no node: the selector's label is on none
    assert ds["spec"]["template"]["spec"]["nodeSelector"]["gpu-catalog.dev/dra-plugin"] == "off"
    # every other profile keeps the bundle's suites
    assert render.render_bundle(SHIPPED, "gpu-queueing@0.4.4", "sim").suites == SHIPPED.bundles[
        ("gpu-queueing", "0.4.4")].suites


def test_0_4_2_kind_runs_the_dra_driver_shared_and_one_kueue_manager() -> None:
    rb = render.render_bundle(SHIPPED, "gpu-queueing@0.4.2", "kind")
    assert rb.cluster == {"provider": "kind", "nodes": 2, "shape": "h100-80gb-x8"}
    assert rb.suite_params == render.render_bundle(SHIPPED, "gpu-queueing@0.4.2", "sim").suite_params
    comps = {c.name: c for c in rb.components}
    (ds,) = [o for o in comps["nvidia-dra-driver"].objects if o.get("kind") == "DaemonSet"]
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPU_SHARING_MODE"] == "mixed" and env["CONSUMABLE_SHARES"] == "memory"
    (dep,) = [o for o in comps["kueue"].objects if o.get("kind") == "Deployment"]
    assert dep["spec"]["replicas"] == 1
    # the controllers off the GPU workers a quarantine drains: on the control plane, tolerating it
    deployments = [o["spec"]["template"]["spec"] for c in ("kueue", "gpu-health") for o in comps[c].objects
                   if o.get("kind") == "Deployment"]
    assert len(deployments) == 2
    for spec in deployments:
        assert spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
        assert {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    (cfg,) = [o for o in comps["kueue"].objects if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == "kueue-manager-config"]
    assert "leaderElect: false" in "".join(cfg["data"].values())
