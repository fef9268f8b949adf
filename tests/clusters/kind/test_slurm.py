"""Slurm on kind without a cluster: where the daemons go, what each node holds, the pods' specs.
The live run is ``test_kind_slurm_live.py``."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpucatalog.clusters.kind import cluster, images, slurm, slurmpod
from gpucatalog.clusters.kind.config import SHAPE_LABEL
from gpucatalog.core import errors
from tests.conftest import RenderChart


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPU_CATALOG_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


THREE = 'nodesets={"h100":{"enabled":true,"replicas":3,"shape":"h100-80gb-x8","gpu":{"type":"h100","count":8}}}'


def _node(name: str, addr: str | None, labels: dict[str, str]) -> Any:
    addresses = [SimpleNamespace(type="Hostname", address=name)]
    if addr:
        addresses.append(SimpleNamespace(type="InternalIP", address=addr))
    return SimpleNamespace(metadata=SimpleNamespace(name=name, labels=labels),
                           status=SimpleNamespace(addresses=addresses))


def _kind_nodes(workers: int = 3, shape: str = "h100-80gb-x8") -> list[Any]:
    nodes = [_node("gc-control-plane", "172.18.0.2", {slurm.CONTROL_PLANE: ""})]
    # kind names workers gc-worker, gc-worker2, …; listed out of order on purpose
    names = ["gc-worker"] + [f"gc-worker{i}" for i in range(2, workers + 1)]
    nodes += [_node(n, f"172.18.0.{10 + i}", {SHAPE_LABEL: shape}) for i, n in enumerate(reversed(names))]
    return nodes


def test_slurmctld_goes_to_the_control_plane_and_a_slurmd_to_each_gpu_worker(render_chart: RenderChart) -> None:
    objects = render_chart("slurm", set_json=[THREE])
    assert slurm.wanted(objects)
    p = slurm.plan(objects, _kind_nodes())
    spec, plane, net = p.spec, p.plane, p.net
    assert plane == "gc-control-plane" and p.nodes == ["gc-worker", "gc-worker2", "gc-worker3"]
    assert net.controller == ("gc-control-plane", "172.18.0.2")
    assert spec.nodesets[0].node_names() == ["gc-worker", "gc-worker2", "gc-worker3"]
    assert net.node("gc-worker") == ("gc-worker", "172.18.0.12") and net.node("gc-worker3") == ("gc-worker3", "172.18.0.10")


def test_a_nodeset_of_a_shape_kind_does_not_run_is_a_conflict(render_chart: RenderChart) -> None:
    objects = render_chart("slurm", set_json=[THREE])
    with pytest.raises(errors.ConflictError, match="NodeSet h100 wants 3 nodes"):
        slurm.plan(objects, _kind_nodes(shape="h200-141gb-x8"))
    with pytest.raises(errors.ConflictError, match="has 2 free matching nodes"):
        slurm.plan(objects, _kind_nodes(workers=2))


def test_a_node_without_an_address_or_a_cluster_without_a_control_plane_is_named(render_chart: RenderChart) -> None:
    objects = render_chart("slurm", set_json=[THREE])
    nodes = _kind_nodes()
    nodes[1] = _node(nodes[1].metadata.name, None, nodes[1].metadata.labels)
    with pytest.raises(errors.ToolError, match="gc-worker3 reports no InternalIP"):
        slurm.plan(objects, nodes)
    with pytest.raises(errors.ToolError, match="no control-plane node"):
        slurm.plan(objects, _kind_nodes()[1:])
    assert not slurm.wanted([o for o in objects if o.get("kind") != "Controller"])


def test_each_node_gets_the_configuration_readable_and_the_munge_key_root_only() -> None:
    data = slurm.node_files("SlurmctldHost=x\n", "NodeName=n Name=gpu\n", b"k" * 1024)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile(members["etc/gpu-catalog-slurm/slurm.conf"]).read() == b"SlurmctldHost=x\n"  # type: ignore[union-attr]
        assert tar.extractfile(members["run/gpu-catalog-slurm/munge.key"]).read() == b"k" * 1024  # type: ignore[union-attr]
    assert members["etc/gpu-catalog-slurm/slurm.conf"].mode == 0o644
    assert members["etc/gpu-catalog-slurm/gres.conf"].mode == 0o644
    assert members["run/gpu-catalog-slurm/munge.key"].mode == 0o400
    assert members["run/gpu-catalog-slurm"].isdir() and members["run/gpu-catalog-slurm"].mode == 0o755


def test_the_pods_run_each_daemon_on_its_node_host_network(render_chart: RenderChart) -> None:
    objects = render_chart("slurm", set_json=[THREE])
    p = slurm.plan(objects, _kind_nodes())
    spec = p.spec
    items = slurm.manifests(p, "gpu-catalog.local/slurm:1")
    assert items[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": slurm.NAMESPACE}}
    ctld = items[1]
    assert (ctld["kind"], ctld["metadata"]["name"]) == ("Pod", "slurmctld")
    ctl = ctld["spec"]
    assert ctl["nodeName"] == "gc-control-plane" and ctl["hostNetwork"] is True
    assert ctl["containers"][0]["command"][3:] == ["controller", "--host", "gc-control-plane", "--addr", "172.18.0.2",
                                                   "--cluster", spec.cluster_name, "--accounting"]
    # one StatefulSet per Slurm node, as Slinky's NodeSet keeps a slurmd per node: an evicted
    # slurmd comes back, and only once its node is schedulable (no toleration of the cordon)
    sets = {s["metadata"]["labels"][slurm.NODE_LABEL]: s for s in items[2:]}
    assert sorted(sets) == ["gc-worker", "gc-worker2", "gc-worker3"]
    assert {s["kind"] for s in sets.values()} == {"StatefulSet"}
    assert [s["metadata"]["name"] for s in items[2:]] == ["slurmd-h100-0", "slurmd-h100-1", "slurmd-h100-2"]
    one = sets["gc-worker2"]["spec"]
    assert one["replicas"] == 1 and one["selector"]["matchLabels"] == one["template"]["metadata"]["labels"]
    node = one["template"]["spec"]
    assert node["nodeSelector"] == {"kubernetes.io/hostname": "gc-worker2"} and "tolerations" not in node
    assert "nodeName" not in node and node["hostNetwork"] is True
    assert node["containers"][0]["command"][3:] == ["node", "gc-worker2", "--gpus", "8"]
    for pod in [ctl, *(s["spec"]["template"]["spec"] for s in sets.values())]:
        c = pod["containers"][0]
        assert c["image"] == "gpu-catalog.local/slurm:1" and c["imagePullPolicy"] == "IfNotPresent"
        assert "privileged" not in c["securityContext"] and c["securityContext"]["allowPrivilegeEscalation"] is False
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["conf"] == {"name": "conf", "mountPath": slurmpod.CONF_DIR, "readOnly": True}
        # munged's socket lands where slurm.conf's AuthInfo points inside every Slurm pod
        assert mounts["munge"]["mountPath"] == f"{slurmpod.ROOT}/munge"
        assert {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]} == {
            "conf": slurmpod.CONF_DIR, "munge": slurmpod.MUNGE_DIR}


def test_without_accounting_slurmctld_starts_no_database(render_chart: RenderChart) -> None:
    objects = render_chart("slurm", set_json=[THREE, 'accounting={"enabled":false}'])
    ctl = slurm.manifests(slurm.plan(objects, _kind_nodes()), "img")[1]
    assert "--accounting" not in ctl["spec"]["containers"][0]["command"]


@pytest.mark.toolchain  # renders the bundle with helm
def test_the_bundle_kind_profile_mounts_what_the_slurm_pods_share() -> None:
    """gpu-health's controller finds slurm.conf and munged's socket where the Slurm pods put them."""
    from gpucatalog.catalog import loader, render

    rb = render.render_bundle(loader.load_catalog(), "slurm@0.2.1", "kind")
    dep = next(o for c in rb.components for o in c.objects
               if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpu-health-controller")
    spec = dep["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    assert paths == {"slurm-conf": slurmpod.CONF_DIR, "slurm-munge": slurmpod.MUNGE_DIR}
    assert mounts["/etc/slurm"]["name"] == "slurm-conf" and mounts["/etc/slurm"]["readOnly"] is True
    assert mounts[f"{slurmpod.ROOT}/munge"]["name"] == "slurm-munge"
    assert spec["nodeSelector"] == {slurm.CONTROL_PLANE: ""}
    assert "--slurm=scontrol" in spec["containers"][0]["args"]


def test_the_slurm_image_is_buildable_and_gives_gpu_health_the_slurm_client(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    assert images.buildable(images.slurm_ref())
    bases: list[tuple[str, ...]] = []

    def rootfs(_say: Any, packages: tuple[str, ...] = ("base",)) -> Path:
        bases.append(packages)
        return tmp_path / "root.tar"

    monkeypatch.setattr(images.nodeimage, "rootfs", rootfs)
    monkeypatch.setattr(images, "_python_site", lambda *_a, **_k: tmp_path / "site.tar")
    monkeypatch.setattr(images.imagearchive, "write_layer", lambda path, _files: path)
    _image, src = images._gpu_health(images.GPU_HEALTH_REPO + ":0.1.0", tmp_path, print, slurm_client=True)
    assert bases == [images.SLURM_PACKAGES] and "Slurm 22.05" in src
    images._gpu_health(images.GPU_HEALTH_REPO + ":0.1.0", tmp_path, print, slurm_client=False)
    assert bases[-1] == ("base",)
    image, src = images._slurm(images.slurm_ref(), tmp_path, print)
    assert image.entrypoint == ("python3", "-m", "gpucatalog.clusters.kind.slurmpod")
    assert "slurmctld" in src and "this checkout" in src


def test_down_stops_the_host_munged_a_crash_left(cache: Path) -> None:
    """The host side (munged) is found from the state folder alone and removed with it."""
    prov = cluster.KindCluster("slurmleft")
    lay = slurm.host_layout(prov.state)
    lay.etc.mkdir(parents=True)
    lay.slurm_conf.write_text("ClusterName=kind\n")
    assert slurm.running(prov.state) and prov.endpoints() == {"slurm_conf": str(lay.slurm_conf)}
    slurm.stop(prov.state)
    assert not lay.root.exists() and prov.endpoints() == {}


def test_node_names_too_long_for_slurmstepd_sockets_are_refused_naming_the_cluster_name(render_chart: RenderChart) -> None:
    """A batch step's socket is <spool>/<node>_<job>.<step>: past 107 bytes every job fails to launch."""
    objects = render_chart("slurm", set_json=[THREE])
    long = "gpucatalog-" + "n" * 40 + "-worker"
    nodes = [_kind_nodes()[0]] + [_node(f"{long}{suffix}", f"172.18.0.{10 + i}", {SHAPE_LABEL: "h100-80gb-x8"})
                                  for i, suffix in enumerate(("", "2", "3"))]
    with pytest.raises(errors.InputError, match="too long for Slurm's socket paths") as exc:
        slurm.plan(objects, nodes)
    assert exc.value.field == "--cluster-name"
    assert slurm.plan(objects, _kind_nodes()).net.own_hosts


def test_one_slurmd_per_pod_keeps_its_spool_without_the_node_name(render_chart: RenderChart) -> None:
    from gpucatalog.clusters.slurm import config
    from gpucatalog.clusters.slurm.layout import Layout

    objects = render_chart("slurm", set_json=[THREE])
    p = slurm.plan(objects, _kind_nodes())
    lines = config.slurm_conf(p.spec, Layout(Path(slurmpod.ROOT)), config.standard_ports(p.nodes), p.net).splitlines()
    assert f"SlurmdSpoolDir={slurmpod.ROOT}/spool" in lines and f"SlurmdPidFile={slurmpod.ROOT}/run/slurmd.pid" in lines


def test_a_host_munged_socket_path_too_long_is_refused_before_anything_starts(render_chart: RenderChart,
                                                                              tmp_path: Path) -> None:
    objects = render_chart("slurm", set_json=[THREE])
    state = tmp_path / ("d" * 90) / "kind-x"

    def never(*_a: Any, **_k: Any) -> None:
        raise AssertionError("nothing may run")

    core = SimpleNamespace(list_namespaced_pod=never)
    with pytest.raises(errors.InputError, match="more than a unix socket path holds") as exc:
        slurm.start(slurm.plan(objects, _kind_nodes()), core, Path("kubectl"), Path("kubeconfig"), state, "img", {})
    assert exc.value.field == "GPU_CATALOG_CACHE"
    assert not state.exists()
