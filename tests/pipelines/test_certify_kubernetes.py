"""``certify --kubernetes``: a listed release inside every component's range runs; one outside is
refused (exit 2, naming the ranges) before any cluster starts unless ``--outside-range`` probes
it, and then the evidence says exploratory and promotion refuses it. No cluster needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpucatalog.catalog import loader, render
from gpucatalog.cli import main
from gpucatalog.core import errors
from gpucatalog.pipelines import certify, cluster_facts, evidence, promote


@pytest.fixture(scope="module")
def queueing() -> render.RenderedBundle:
    return render.render_bundle(loader.load_catalog(), "gpu-queueing", "sim")


@pytest.mark.toolchain
def test_ranges_name_each_component_that_excludes_the_release(queueing: render.RenderedBundle) -> None:
    assert certify.outside_range(queueing, "v1.35.4") == []
    assert certify.outside_range(queueing, "v1.34.4") == []
    out = certify.outside_range(queueing, "v1.37.2")
    assert "kueue v0.17.0+chart.0.2.0 supports Kubernetes >=1.29.0 <1.37.0" in out
    assert len(out) == len(queueing.components)  # every component stops before 1.37 today


@pytest.mark.toolchain
def test_outside_the_range_is_refused_unless_probed(queueing: render.RenderedBundle) -> None:
    info: dict[str, Any] = {}
    with pytest.raises(errors.InputError, match=r"kueue v0\.17\.0\+chart\.0\.2\.0 supports Kubernetes >=1\.29\.0 <1\.37\.0") as exc:
        certify._check_range(queueing, "v1.37.2", certify.Options(bundle="gpu-queueing", kubernetes="1.37"), info)
    assert exc.value.field == "--kubernetes" and "--outside-range" in str(exc.value.expected)
    probe = certify.Options(bundle="gpu-queueing", kubernetes="1.37", outside_range=True)
    certify._check_range(queueing, "v1.37.2", probe, info)
    assert info["exploratory"] is True and info["requestedKubernetes"] == "v1.37.2"
    inside: dict[str, Any] = {}
    certify._check_range(queueing, "v1.35.4", probe, inside)  # --outside-range on an in-range release: a normal run
    assert "exploratory" not in inside


@pytest.mark.toolchain
def test_cli_refuses_before_any_cluster(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["certify", "gpu-queueing", "--kubernetes", "1.37", "--cluster-name", "never"]) == 2
    err = capsys.readouterr().err
    assert "not declared for Kubernetes v1.37.2" in err and "<1.37.0" in err and "--outside-range" in err
    assert main(["certify", "gpu-queueing", "--kubernetes", "1.33"]) == 2
    err = capsys.readouterr().err
    assert "1.33" in err and "1.34 (v1.34.4)" in err and "1.37 (v1.37.2)" in err
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n")
    # an existing cluster runs whatever it runs: choosing a release needs a provider that starts one
    assert main(["certify", "gpu-queueing", "--kubernetes", "1.35", "--cluster", f"kubeconfig={kc}",
                 "--profile", "sim", "--suite", "gang"]) == 2
    err = capsys.readouterr().err
    assert "--kubernetes needs choosing the Kubernetes release (use_kubernetes)" in err and "sim" in err


def _info(version: str) -> dict[str, Any]:
    return {"kubernetesVersion": version, "nodes": [{"name": "n", "gpus": 8, "product": "", "gpuMemoryMiB": ""}]}


@pytest.mark.toolchain
def test_preflight_range_check_is_waived_only_for_a_probe(queueing: render.RenderedBundle) -> None:
    assert cluster_facts.preflight(_info("v1.35.4"), queueing) == []
    assert any("<1.37.0" in p for p in cluster_facts.preflight(_info("v1.37.2"), queueing))
    assert cluster_facts.preflight(_info("v1.37.2"), queueing, outside_range_ok=True) == []
    assert cluster_facts.release_of(_info("v1.35.4+k3s1")) == "1.35.4"


def test_exploratory_evidence_never_promotes() -> None:
    st = evidence.build_statement(
        bundle="b", version="1.0.0", profile="sim", digest="sha256:" + "a" * 64,
        cluster={"kubernetesVersion": "v1.37.2"}, tools={}, started=0.0, finished=1.0,
        suites=[{"name": "s", "cases": [{"name": "c", "result": "passed"}]}], exploratory=True)
    assert st["predicate"]["exploratory"] is True and st["predicate"]["result"] == "passed"
    plain = evidence.build_statement(
        bundle="b", version="1.0.0", profile="sim", digest="sha256:" + "a" * 64,
        cluster={}, tools={}, started=0.0, finished=1.0, suites=[])
    assert "exploratory" not in plain["predicate"]
    assert promote.kubernetes_of(st["predicate"]) == "1.37.2" and promote.minor_of("1.37.2") == "1.37"


def test_the_sim_chooses_a_listed_release_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    from gpucatalog.clusters import provider
    from gpucatalog.clusters.sim import SimCluster
    sim = SimCluster("never-started")
    assert isinstance(sim, provider.RunsKubernetesReleases)
    sim.use_kubernetes("1.35")
    assert sim._kubernetes == "v1.35.4" and sim.kubernetes_releases()[0] == "v1.34.4"
    with pytest.raises(errors.InputError, match="1.33"):
        sim.use_kubernetes("1.33")
    assert main(["cluster", "up", "--name", "never-started", "--kubernetes", "1.33"]) == 2
    assert "1.36 (v1.36.3)" in capsys.readouterr().err and not sim.running()
