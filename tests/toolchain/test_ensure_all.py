"""``catalog toolchain ensure`` (make setup): which groups it builds, how many at once, and where a
multi-tool group's binaries come from. No Go build here: the builder is replaced by a recorder."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from gpucatalog.toolchain import build

# taken at import: the unit tests' toolchain guard replaces the module's attributes per test
ENSURE_ALL = build.ensure_all


def test_kind_its_node_image_parts_agnhost_and_upstream_test_binaries_alone_are_built_on_demand() -> None:
    assert [g.name for g in build.load_manifest().values() if g.on_demand] == [
        "kind", "agnhost", "scheduler-perf-dra", "kueue-e2e", "kubernetes-node", "containerd", "runc", "cri-tools", "cni-plugins", "coredns"]
    # Kueue's suite is a test binary of the same Kueue release the bundles run
    groups = build.load_manifest()
    assert groups["kueue-e2e"].test_binary and not groups["kueue"].test_binary
    assert (groups["kueue-e2e"].module, groups["kueue-e2e"].version) == (groups["kueue"].module, groups["kueue"].version)
    # agnhost and kube-scheduler's DRA benchmarks come from the control plane's own module and
    # staging pins (its build cache is shared, and the benchmark measures the scheduler the sim runs)
    for name in ("agnhost", "scheduler-perf-dra"):
        assert (groups[name].module, groups[name].version, groups[name].staging) == (
            groups["kubernetes"].module, groups["kubernetes"].version, groups["kubernetes"].staging)
    assert groups["scheduler-perf-dra"].test_binary and not groups["scheduler-perf-dra"].trimpath
    assert [g.name for g in groups.values() if not g.trimpath] == ["scheduler-perf-dra"]
    # the kind node's kubelet and kubeadm: the control plane's release, built with cgo only for runc
    assert (groups["kubernetes-node"].version, groups["kubernetes-node"].staging) == (
        groups["kubernetes"].version, groups["kubernetes"].staging)
    assert [g.name for g in groups.values() if g.cgo] == ["runc"]


@pytest.mark.parametrize("pkg, name", [
    ("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
    ("go.etcd.io/etcd/server/v3", "server"),
    ("sigs.k8s.io/kind", "kind"),
    ("helm.sh/helm/v4/cmd/helm", "helm"),
])
def test_the_binary_go_build_writes_for_a_package(pkg: str, name: str) -> None:
    assert build._default_binary_name(pkg) == name


def test_missing_groups_build_side_by_side_and_on_demand_ones_not_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    running, most = 0, 0
    lock = threading.Lock()

    def fake_ensure(tool: str, progress: object = None, version: str | None = None) -> Path:
        nonlocal running, most
        if tool != "helm":  # helm is cached: nothing to build
            with lock:
                running += 1
                most = max(most, running)
            time.sleep(0.05)
            with lock:
                built.append(tool)
                running -= 1
        return Path("/cache") / tool

    monkeypatch.setattr(build, "ensure", fake_ensure)
    paths = ENSURE_ALL(None, jobs=2)
    assert "kind" not in paths and "kind" not in built
    assert {"helm", "kube-apiserver", "kubectl", "etcd", "kwok", "kueue"} <= set(paths)
    assert "helm" not in built
    assert most == 2
