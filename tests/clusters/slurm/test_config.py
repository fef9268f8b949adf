"""slurm.conf / gres.conf are generated from the rendered slurm chart, not written twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.clusters import slurm
from gpucatalog.clusters.slurm import config
from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.core import errors
from tests.conftest import RenderChart

TWO_SHAPES = (
    'nodesets={"h100":{"enabled":true,"replicas":2,"shape":"h100-80gb-x8","gpu":{"type":"h100","count":8}},'
    '"a100":{"enabled":true,"replicas":3,"shape":"a100-80gb-x8","gpu":{"type":"a100","count":8}}}'
)


def _ports(spec: slurm.ClusterSpec) -> config.Ports:
    nodes = [n for ns in spec.nodesets for n in ns.node_names()]
    return config.Ports(slurmctld=7000, slurmdbd=7001, mysql=7002, slurmd={n: 7100 + i for i, n in enumerate(nodes)})


def test_spec_follows_rendered_nodesets_and_partitions(render_chart: RenderChart) -> None:
    spec = slurm.from_manifests(render_chart("slurm", set_json=[TWO_SHAPES, 'partitions={"batch":{"nodesets":["h100","a100"],"priorityTier":1,"default":true},"urgent":{"nodesets":["h100"],"priorityTier":9},"priority":null}']))
    assert {(ns.name, ns.replicas, ns.gpu_type, ns.gpus) for ns in spec.nodesets} == {("h100", 2, "h100", 8), ("a100", 3, "a100", 8)}
    assert spec.accounting is True  # the default chart references an Accounting CR
    tiers = {p.name: (p.priority_tier, p.nodes) for p in spec.partitions}
    assert tiers == {"batch": (1, ("h100", "a100")), "urgent": (9, ("h100",))}


def test_slurm_conf_carries_shipped_extra_conf_and_one_record_per_node(tmp_path: Path, render_chart: RenderChart) -> None:
    spec = slurm.from_manifests(render_chart("slurm", set_json=[TWO_SHAPES]))
    lay = Layout(tmp_path)
    text = config.slurm_conf(spec, lay, _ports(spec))
    lines = text.splitlines()
    # Shipped settings appear verbatim, once.
    for shipped in ("GresTypes=gpu", "PreemptType=preempt/partition_prio", "PreemptMode=REQUEUE", "AccountingStorageTRES=gres/gpu"):
        assert lines.count(shipped) == 1
    nodes = [ln for ln in lines if ln.startswith("NodeName=")]
    assert len(nodes) == 5
    assert "NodeName=a100-2 " in text and "Gres=gpu:a100:8" in text and "Port=7104" in text
    assert "NodeSet=h100 Feature=h100" in lines
    assert any(ln.startswith("PartitionName=batch Nodes=h100 ") for ln in lines)
    assert f"StateSaveLocation={tmp_path}/state" in lines
    assert "AccountingStoragePort=7001" in lines
    gres = config.gres_conf(spec, lay)
    assert f"NodeName=h100-0 Name=gpu Type=h100 File={tmp_path}/dev/nvidia[0-7]" in gres.splitlines()


def test_sim_owned_keys_in_extra_conf_are_left_out_and_named(render_chart: RenderChart) -> None:
    base = slurm.from_manifests(render_chart("slurm", set_json=[TWO_SHAPES]))
    spec = slurm.ClusterSpec(base.cluster_name, base.nodesets, base.extra_conf + ("SlurmctldPort=6817", "ProctrackType=proctrack/cgroup"), base.accounting)
    text = config.slurm_conf(spec, Layout(Path("/x")), _ports(spec))
    assert "SlurmctldPort=6817" not in text and "ProctrackType=proctrack/cgroup" not in text
    assert "left out: ProctrackType, SlurmctldPort" in text


def test_nodeset_without_gres_is_input_error(render_chart: RenderChart) -> None:
    docs = render_chart("slurm")
    for d in docs:
        if d["kind"] == "NodeSet":
            d["spec"]["extraConf"] = "Features=x"
    with pytest.raises(errors.InputError, match="Gres"):
        slurm.from_manifests(docs)


def test_missing_controller_is_input_error(render_chart: RenderChart) -> None:
    docs = [d for d in render_chart("slurm") if d["kind"] != "Controller"]
    with pytest.raises(errors.InputError, match="Controller"):
        slurm.from_manifests(docs)


def test_node_names_can_follow_the_sim_kubernetes_nodes(tmp_path: Path, render_chart: RenderChart) -> None:
    docs = render_chart("slurm")
    spec = slurm.from_manifests(docs, node_names={"h100": ["sim-gpu-0", "sim-gpu-1"]})
    text = config.slurm_conf(spec, Layout(tmp_path), _ports(spec))
    assert "NodeName=sim-gpu-1 " in text and "NodeName=h100-0 " not in text
    with pytest.raises(errors.InputError, match="replicas"):
        slurm.from_manifests(docs, node_names={"h100": ["only-one"]})


def test_daemons_on_other_hosts_listen_on_their_addresses_and_clients_name_their_own_munge(
        tmp_path: Path, render_chart: RenderChart) -> None:
    """kind: slurmctld and slurmdbd on the control-plane node's address, each slurmd on its node's;
    the host's clients use the same file with their own munged's socket."""
    spec = slurm.from_manifests(render_chart("slurm", set_json=[TWO_SHAPES]))
    lay = Layout(tmp_path / "pod")
    net = config.Network(controller=("kind-control-plane", "172.18.0.2"),
                         nodes={"h100-0": "172.18.0.3", "a100-2": "172.18.0.7"})
    lines = config.slurm_conf(spec, lay, _ports(spec), net).splitlines()
    assert "SlurmctldHost=kind-control-plane(172.18.0.2)" in lines
    assert "AccountingStorageHost=172.18.0.2" in lines
    assert f"AuthInfo=socket={lay.munge_socket},cred_expire=30" in lines
    assert any(ln.startswith("NodeName=h100-0 NodeHostname=h100-0 NodeAddr=172.18.0.3 ") for ln in lines)
    assert any(ln.startswith("NodeName=a100-2 NodeHostname=a100-2 NodeAddr=172.18.0.7 ") for ln in lines)
    # a node the network does not name stays on loopback (the sim's one host)
    assert any(ln.startswith("NodeName=h100-1 NodeHostname=localhost NodeAddr=127.0.0.1 ") for ln in lines)
    client = config.slurm_conf(spec, lay, _ports(spec), net, munge_socket=tmp_path / "host" / "munged.sock").splitlines()
    assert f"AuthInfo=socket={tmp_path}/host/munged.sock,cred_expire=30" in client
    assert f"AccountingStoragePass={tmp_path}/host/munged.sock" in client
    assert [ln for ln in client if "munged.sock" not in ln] == [ln for ln in lines if "munged.sock" not in ln]
    dbd = config.slurmdbd_conf(lay, _ports(spec), "slurm", "pw", net).splitlines()
    assert "DbdHost=kind-control-plane" in dbd and "DbdAddr=172.18.0.2" in dbd


def test_the_sim_keeps_loopback_by_default(tmp_path: Path, render_chart: RenderChart) -> None:
    spec = slurm.from_manifests(render_chart("slurm"))
    lines = config.slurm_conf(spec, Layout(tmp_path), _ports(spec)).splitlines()
    assert "SlurmctldHost=localhost(127.0.0.1)" in lines and "AccountingStorageHost=127.0.0.1" in lines
    assert all("NodeAddr=127.0.0.1 " in ln for ln in lines if ln.startswith("NodeName="))
