"""The kind provider: its generated cluster config and GPU setup (unit), its refusal where there
is no Docker engine (this project's machines), and a real 2-GPU-worker cluster where there is one
(``@pytest.mark.kind``, skipped with the provider's own reason elsewhere)."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog import cli
from gpucatalog.clusters import provider, shapes
from gpucatalog.clusters.kind import cluster, config, gpus
from gpucatalog.core import errors
from gpucatalog.toolchain import build

H100 = shapes.get("h100-80gb-x8")


@pytest.fixture
def no_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Docker engine answers: DOCKER_HOST names a socket nothing listens on (whether or not an
    engine runs on this machine)."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")


needs_no_engine = pytest.mark.usefixtures("no_engine")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cache root: state folders and the chart cache land in tmp_path."""
    monkeypatch.setenv("GPU_CATALOG_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CATALOG_CHART_CACHE", raising=False)
    return tmp_path / "cache"


# -- generated kind config -----------------------------------------------------------------------
def test_config_is_one_control_plane_and_n_workers_on_the_pinned_image() -> None:
    doc = yaml.safe_load(config.render(3, H100))
    assert (doc["kind"], doc["apiVersion"]) == ("Cluster", "kind.x-k8s.io/v1alpha4")
    assert [n["role"] for n in doc["nodes"]] == ["control-plane", "worker", "worker", "worker"]
    assert {n["image"] for n in doc["nodes"]} == {config.NODE_IMAGE}
    assert "labels" not in doc["nodes"][0]


def test_workers_carry_the_shape_and_fake_gpu_operator_labels() -> None:
    labels = config.kind_config(2, H100)["nodes"][1]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["run.ai/simulated-gpu-node-pool"] == "default"
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert labels["nvidia.com/gpu.deploy.dcgm-exporter"] == "true"
    assert labels[config.SHAPE_LABEL] == "h100-80gb-x8"
    # every label value is a string, as kind (and Kubernetes) require
    assert all(isinstance(v, str) for v in labels.values())


def test_cpu_shape_workers_get_no_gpu_labels() -> None:
    labels = config.kind_config(1, shapes.get("cpu"))["nodes"][1]["labels"]
    assert labels == {config.SHAPE_LABEL: "cpu"}


@pytest.mark.parametrize("workers", [0, -1, config.MAX_WORKERS + 1])
def test_worker_count_out_of_range_is_bad_input(workers: int) -> None:
    with pytest.raises(errors.InputError, match="out of range"):
        config.kind_config(workers, H100)


def test_node_image_is_digest_pinned_and_matches_the_toolchain_minor() -> None:
    ref, _, digest = config.NODE_IMAGE.partition("@sha256:")
    assert len(digest) == 64 and int(digest, 16) >= 0
    tag = ref.rsplit(":", 1)[1]
    k8s = build.load_manifest()["kubernetes"].version
    assert tag.split(".")[:2] == k8s.split(".")[:2], (tag, k8s)


def test_kind_binary_is_a_pinned_toolchain_tool() -> None:
    g = build.group_of("kind")
    assert (g.module, g.version, g.tools) == ("sigs.k8s.io/kind", "v0.33.0", {"kind": "sigs.k8s.io/kind"})
    assert build.versions()["kind"] == "v0.33.0"


@pytest.mark.parametrize("name", ["Certify", "a_b", "-x", "x-", "", "a" * 41])
def test_names_kind_cannot_use_are_bad_input(name: str) -> None:
    with pytest.raises(errors.InputError, match="cannot name a kind cluster"):
        provider.get("kind", name)


def test_registry_gives_a_prefixed_kind_provider(cache: Path) -> None:
    prov = provider.get("kind", "certify")
    assert isinstance(prov, cluster.KindCluster) and isinstance(prov, provider.ClusterProvider)
    assert prov.cluster == "gpucatalog-certify"
    assert prov.state == cache / "clusters" / "kind-certify"


# -- GPU capacity ----------------------------------------------------------------------------------
def test_fake_gpu_operator_values_come_from_the_shape() -> None:
    v = gpus.fgo_values(shapes.get("a100-80gb-x8"))
    assert v["topology"]["nodePoolLabelKey"] == config.POOL_LABEL
    assert v["topology"]["nodePools"] == {"default": {"gpuProduct": "NVIDIA-A100-SXM4-80GB", "gpuCount": 8,
                                                      "gpuMemory": 81920}}
    assert v["environment"]["resourceReservationNamespace"] == "kai-resource-reservation"
    with pytest.raises(errors.InputError):
        gpus.fgo_values(shapes.get("cpu"))


def test_without_a_pinned_chart_digest_gpus_are_patched(cache: Path) -> None:
    p = gpus.plan()
    assert (p.mode, p.chart) == ("node-patch", None)
    assert "no chart digest pinned" in p.why


def test_pinned_chart_is_used_only_from_the_cache_and_only_when_its_digest_matches(cache: Path) -> None:
    digest = "sha256:" + hashlib.sha256(b"chart bytes").hexdigest()
    assert gpus.plan(digest).mode == "node-patch"  # not in the cache
    tgz = gpus.fgo_archive()
    tgz.parent.mkdir(parents=True)
    tgz.write_bytes(b"chart bytes")
    assert gpus.plan(digest) == gpus.Plan("fake-gpu-operator", tgz, f"fake-gpu-operator {gpus.FGO_VERSION} {digest}")
    tgz.write_bytes(b"tampered chart")
    with pytest.raises(errors.InputError, match="digest mismatch"):
        gpus.plan(digest)


def test_capacity_patch_sets_capacity_and_allocatable() -> None:
    assert gpus.capacity_patch(shapes.get("h200-141gb-x8")) == {
        "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}


@pytest.mark.integration
def test_node_patch_advertises_gpus_through_a_real_api_server(k8s_client: Any) -> None:
    """The node-patch way against the sim's real kube-apiserver: a worker-like Node gets the
    shape's nvidia.com/gpu capacity (only nodes of that shape are selected), and re-running is harmless."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core: Any = client.CoreV1Api(k8s_client)
    node_api: Any = client.NodeV1Api(k8s_client)
    name = f"kind-worker-{uuid.uuid4().hex[:6]}"
    shape = shapes.get("a100-80gb-x8")
    had_runtime_class = True
    try:
        node_api.read_runtime_class("nvidia")
    except ApiException as exc:
        assert exc.status == 404
        had_runtime_class = False
    core.create_node({"metadata": {"name": name, "labels": config.worker_labels(shape)}})
    try:
        assert gpus.patch_nodes(k8s_client, shape) == [name]
        assert gpus.patch_nodes(k8s_client, shape) == [name]  # idempotent, RuntimeClass already there
        st = core.read_node_status(name).status
        assert (st.capacity["nvidia.com/gpu"], st.allocatable["nvidia.com/gpu"]) == ("8", "8")
        assert node_api.read_runtime_class("nvidia").handler == "runc"
    finally:
        core.delete_node(name)
        if not had_runtime_class:
            node_api.delete_runtime_class("nvidia")


# -- no Docker engine (this project's machines) ------------------------------------------------------
@needs_no_engine
def test_unavailable_without_a_docker_engine_says_so(cache: Path) -> None:
    prov = provider.get("kind", "t")
    assert prov.available() is False
    why = provider.unavailable_reason(prov)
    assert "Docker engine" in why, why


def test_without_a_docker_client_the_reason_names_it(cache: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker anywhere on PATH
    prov = cluster.KindCluster("t")
    assert not prov.available()
    assert prov.reason() == "kind needs a Docker engine: no docker client on PATH"


@needs_no_engine
def test_up_refuses_before_creating_anything(cache: Path) -> None:
    prov = cluster.KindCluster("t")
    with pytest.raises(errors.InputError, match="Docker engine"):
        prov.up(2, "h100-80gb-x8")
    assert not prov.state.exists()
    with pytest.raises(errors.InputError, match="out of range"):
        prov.up(0, "h100-80gb-x8")
    with pytest.raises(errors.NotFoundError, match="unknown node shape"):
        prov.up(1, "no-such-shape")


@needs_no_engine
def test_down_is_idempotent_and_removes_stale_state(cache: Path) -> None:
    prov = cluster.KindCluster("t")
    prov.down()
    prov.state.mkdir(parents=True)
    (prov.state / "kubeconfig").write_text("stale")
    prov.down()
    assert not prov.state.exists()
    with pytest.raises(errors.NotFoundError):
        prov.kubeconfig()


def test_down_without_provider_names_the_kind_cluster_of_that_name(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cluster, "list_clusters", lambda: ["sk1"])
    assert cli.main(["cluster", "down", "--name", "sk1"]) == 2
    err = capsys.readouterr().err
    assert "no sim cluster named 'sk1'; a kind cluster has that name" in err, err
    assert "catalog cluster down --provider kind --name sk1" in err, err
    assert cli.main(["cluster", "down", "--name", "other"]) == 2  # no cluster of that name at all: as before
    assert "a kind cluster" not in capsys.readouterr().err


@needs_no_engine
@pytest.mark.toolchain  # certify renders the bundle with the pinned helm first
def test_certify_on_kind_exits_2_naming_the_missing_docker_engine(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["certify", "gpu-scheduling", "--cluster", "kind"]) == 2
    err = capsys.readouterr().err
    assert "cluster provider 'kind' cannot run here" in err and "Docker engine" in err, err


def test_kind_state_folders_are_not_listed_as_sim_clusters_and_no_sim_cluster_takes_their_name(cache: Path) -> None:
    from gpucatalog.clusters.sim import layout
    from gpucatalog.clusters.sim.cluster import list_clusters

    (cache / "clusters" / "kind-ci").mkdir(parents=True)
    (cache / "clusters" / "ci").mkdir()
    assert list_clusters() == ["ci"]
    assert cluster.KindCluster("ci").state == cache / "clusters" / "kind-ci"
    with pytest.raises(errors.InputError, match="not starting with 'kind-'"):
        layout.check_name("kind-ci")
