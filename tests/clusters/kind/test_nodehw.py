"""Simulated node hardware on kind's workers, and what the evidence says about kind's stand-ins.

The node folder is copied into each node container with ``docker cp`` and ``docker exec``; here a
stand-in ``docker`` on PATH applies those commands to a folder per node (what a node's root
file system would hold), so the test reads what a pod on the node would read. The kernel log
must keep its inode through every fault and clear: a pod mounts that one file.
Against real nodes: tests/clusters/kind/test_kind_live.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpucatalog.clusters import shapes
from gpucatalog.clusters.kind import cluster, images, nodehw

SHAPE = shapes.get("h100-80gb-x8")
FAKE_DOCKER = '''#!{python}
"""docker cp SRC NODE:DEST, docker exec NODE tar -C ROOT -cf - … and docker exec -i NODE sh -c SCRIPT sh ROOT,
on <roots>/<NODE>/DEST."""
import os, shutil, sys
roots = {roots!r}
args = sys.argv[1:]
def host(spec):
    node, _, path = spec.partition(":")
    return os.path.join(roots, node, path.lstrip("/"))
if args[0] == "cp":
    src, dest = args[1], host(args[2])
    if os.path.isdir(dest):
        dest = os.path.join(dest, os.path.basename(src.rstrip("/")))
    shutil.copytree(src, dest, dirs_exist_ok=True)
elif args[0] == "exec" and args[2:4] == ["tar", "-C"]:  # tar -C ROOT -cf - PATHS…, run on the node's folder
    os.execvp("tar", ["tar", "-C", host(args[1] + ":" + args[4])] + args[5:])
elif args[:2] == ["exec", "-i"] and args[3:5] == ["sh", "-c"]:  # sh -c SCRIPT sh ROOT, on the node's folder
    os.execvp("sh", ["sh", "-c", args[5], args[6], host(args[2] + ":" + args[7])])
else:
    sys.exit("unexpected docker call: " + " ".join(args))
'''


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPU_CATALOG_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    roots = tmp_path / "roots"
    for node in ("gpucatalog-hw-worker", "gpucatalog-hw-worker2"):
        (roots / node / "var" / "lib").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER.format(python=sys.executable, roots=str(roots)))
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return roots


def _in_node(roots: Path, node: str, path: str) -> Path:
    return roots / node / nodehw.NODE_ROOT.lstrip("/") / path


def test_each_gpu_worker_gets_its_own_healthy_gpus_and_an_nvidia_smi_reading_them_in_place(
        tmp_path: Path, nodes: Path) -> None:
    state = tmp_path / "kind-hw"
    workers = ["gpucatalog-hw-worker", "gpucatalog-hw-worker2"]
    nodehw.seed(workers, SHAPE, state, {})
    uuids = []
    for node in workers:
        hw = json.loads(_in_node(nodes, node, "sim/hw.json").read_text())
        assert len(hw["gpus"]) == 8
        uuids.append({g["uuid"] for g in hw["gpus"]})
        smi = _in_node(nodes, node, "usr/bin/nvidia-smi").read_text()
        assert f"D='{nodehw.NODE_ROOT}/sim'" in smi  # the node's path, not the host's copy
        assert "<product_name>NVIDIA H100 80GB HBM3</product_name>" in _in_node(nodes, node, "sim/nvidia-smi-q-x.xml").read_text()
        assert _in_node(nodes, node, "dev/kmsg").read_text() == ""
        assert _in_node(nodes, node, "sys/class/infiniband").is_dir()
    assert not uuids[0] & uuids[1]  # distinct GPUs per node


def test_a_fault_reaches_the_node_and_the_kernel_log_keeps_its_inode(tmp_path: Path, nodes: Path) -> None:
    state = tmp_path / "kind-hw"
    node = "gpucatalog-hw-worker"
    nodehw.seed([node], SHAPE, state, {})
    kmsg = _in_node(nodes, node, "dev/kmsg")
    inode = kmsg.stat().st_ino
    said = nodehw.inject(node, "xid", state, {}, code=79, gpu=3)
    assert "79" in said
    assert "NVRM: Xid (PCI:" in kmsg.read_text() and "): 79, " in kmsg.read_text()
    nodehw.inject(node, "row-remap-failure", state, {}, gpu=0)
    hw = json.loads(_in_node(nodes, node, "sim/hw.json").read_text())
    assert hw["gpus"][0]["remap_failure"] is True
    assert "<remapped_row_failure>Yes" in _in_node(nodes, node, "sim/nvidia-smi-q-x.xml").read_text()
    nodehw.inject(node, "clear", state, {})
    assert kmsg.read_text() == "" and kmsg.stat().st_ino == inode
    assert not json.loads(_in_node(nodes, node, "sim/hw.json").read_text())["gpus"][0]["remap_failure"]


def test_a_repair_on_the_node_restores_its_readings_and_the_next_fault_starts_from_them(
        tmp_path: Path, nodes: Path) -> None:
    state = tmp_path / "kind-hw"
    node = "gpucatalog-hw-worker"
    nodehw.seed([node], SHAPE, state, {})
    healthy = _in_node(nodes, node, "sim/nvidia-smi-q-x.xml").read_text()
    kmsg = _in_node(nodes, node, "dev/kmsg")
    inode = kmsg.stat().st_ino
    nodehw.inject(node, "xid", state, {}, code=79, gpu=3)  # GPU 3 falls off the bus
    nodehw.inject(node, "ib-down", state, {})
    assert _in_node(nodes, node, "sim/nvidia-smi-q-x.xml").read_text() != healthy
    # the repair pod runs the node's script where the node folder is mounted; here, on the folder
    script = _in_node(nodes, node, nodehw.REPAIR)
    text = script.read_text().replace(f"D='{nodehw.NODE_ROOT}'", f"D='{_in_node(nodes, node, '')}'")
    out = subprocess.run(["sh", "-c", text], env={**os.environ, "NODE_NAME": node, "GPU_HEALTH_ACTION": "REBOOT"},
                         capture_output=True, text=True, check=True).stdout
    assert out == f"simulated repair of {node} (REBOOT): healthy readings restored\n"
    assert _in_node(nodes, node, "sim/nvidia-smi-q-x.xml").read_text() == healthy
    assert kmsg.read_text() == "" and kmsg.stat().st_ino == inode
    assert not list(_in_node(nodes, node, "sim").glob("*.repair-new"))
    # the host's copy still holds GPU 3's fault; the next fault must start from the node's state
    nodehw.inject(node, "row-remap-pending", state, {}, gpu=1)
    hw = json.loads(_in_node(nodes, node, "sim/hw.json").read_text())
    assert hw["gpus"][1]["remap_pending"] is True
    assert len(hw["gpus"]) == 8 and not any(g.get("fallen_off_bus") for g in hw["gpus"])
    assert "DOWN" not in json.dumps(hw["infiniband"])
    assert "): 79, " not in kmsg.read_text()


def test_stand_in_images_are_listed_as_simulated_and_real_builds_as_live(tmp_path: Path, cache: Path) -> None:
    assert images.buildable("registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.5.0")
    assert images.buildable("nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0")
    assert not images.buildable("registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu@sha256:" + "0" * 64)
    prov = cluster.KindCluster("parts")
    prov.state.mkdir(parents=True)
    (prov.state / "state.json").write_text(json.dumps({"workers": 2, "shape": SHAPE.name, "gpuMode": "node-patch",
                                                       "gpuWhy": "no digest", "image": "img", "imageLock": None}))
    stand_in = images.Built("registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.5.0", "sha256:" + "1" * 64,
                            f"{images.SIMULATED} stand-in for the DRA driver's kubelet plugin")
    kueue = images.Built("registry.k8s.io/kueue/kueue:v0.17.0", "sha256:" + "2" * 64, "sigs.k8s.io/kueue@v0.17.0")
    (prov.state / "images.json").write_text(json.dumps([stand_in.__dict__, kueue.__dict__]))
    live, simulated = prov.live_parts(), prov.simulated_parts()
    assert stand_in.line() in simulated and stand_in.line() not in live
    assert kueue.line() in live and kueue.line() not in simulated
    assert any(nodehw.NODE_ROOT in line and "faults written into it" in line for line in simulated)
