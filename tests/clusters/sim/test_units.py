"""Unit tests of the sim provider's pure parts: shapes, nodes, image map, kwok selector, faults,
PKI, pid files, pod-root path resolution, CLI bad input. No cluster needed."""

from __future__ import annotations

import _thread
import json
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from gpucatalog import cli as cli_mod
from gpucatalog.clusters import provider, shapes
from gpucatalog.clusters.sim import config as sim_config
from gpucatalog.clusters.sim import (
    faults,
    images,
    nodeagent,
    nodefs,
    nodes,
    pki,
    podexec,
    procs,
    stages,
)
from gpucatalog.core import errors, executor
from gpucatalog.toolchain import build


def test_shape_catalogue_has_required_shapes() -> None:
    cat = shapes.catalogue()
    for name in ("h100-80gb-x8", "h200-141gb-x8", "a100-80gb-x8", "cpu"):
        assert name in cat
    h100 = cat["h100-80gb-x8"]
    assert h100.gpu is not None and h100.gpu.count == 8 and h100.gpu.memory_mib == 81559
    assert cat["cpu"].gpu is None
    with pytest.raises(errors.NotFoundError, match="unknown node shape"):
        shapes.get("h900")


def test_gpu_node_object_capacity_and_labels() -> None:
    obj = nodes.node_object(shapes.get("h200-141gb-x8"), 9)
    md, st = obj["metadata"], obj["status"]
    assert md["name"] == "h200-node-0009"
    assert st["capacity"]["nvidia.com/gpu"] == "8"
    assert md["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert md["labels"]["nvidia.com/gpu.memory"] == "143771"
    assert md["labels"]["network.topology.gpu-catalog.dev/block"] == "block-001"
    cpu = nodes.node_object(shapes.get("cpu"), 0)
    assert "nvidia.com/gpu" not in cpu["status"]["capacity"]
    # the labels the controller manager would otherwise patch onto every node
    assert md["labels"]["beta.kubernetes.io/arch"] == "amd64" and md["labels"]["beta.kubernetes.io/os"] == "linux"
    assert "conditions" not in st  # without a kubelet port: kwok's node-initialize stage makes it Ready


def test_a_node_given_its_kubelet_port_is_created_ready() -> None:
    st = nodes.node_object(shapes.get("h100-80gb-x8"), 0, 10250, "v0.8.0")["status"]
    conditions = {c["type"]: c["status"] for c in st["conditions"]}
    assert conditions == {"Ready": "True", "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False",
                          "NetworkUnavailable": "False"}
    assert st["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}} and st["phase"] == "Running"
    assert st["nodeInfo"]["kubeletVersion"] == "sim-kwok-v0.8.0"
    # kwok's stages leave a node alone that is already Ready (initialize matches Ready != True)
    stages = yaml.safe_load_all(resources.files("gpucatalog.clusters.sim").joinpath("data/kwok-stages.yaml").read_text())
    init = next(d for d in stages if d and d["metadata"]["name"] == "sim-node-initialize")
    (expr,) = init["spec"]["selector"]["matchExpressions"]
    assert expr["operator"] == "NotIn" and expr["values"] == ["True"] and 'type == "Ready"' in expr["key"]


@pytest.mark.parametrize(("count", "lease", "grace"), [(4, 40, 60), (1000, 40, 60), (2000, 80, 120),
                                                       (10000, 400, 600)])
def test_node_leases_grow_with_the_cluster_so_renewals_stay_bounded(count: int, lease: int, grace: int) -> None:
    assert sim_config.lease_seconds(count) == lease
    cfg = sim_config.ClusterConfig(name="x", slot=1, ports={}, binaries={}, node_lease_s=lease)
    assert cfg.node_monitor_grace_s == grace > lease
    assert count * 4 / lease <= max(sim_config.MAX_LEASE_RENEWALS_PER_S, 4 * 1000 / 40)


def test_image_map_argv_semantics() -> None:
    assert images.repository("ghcr.io/gpu-catalog/gpu-health:1.2@sha256:ab") == "ghcr.io/gpu-catalog/gpu-health"
    assert images.repository("localhost:5000/x") == "localhost:5000/x"
    argv = images.argv_for({"image": "ghcr.io/gpu-catalog/gpu-health:0.3", "args": ["agent", "--node", "n1"]})
    assert argv == ["python3", "-m", "gpucatalog.gpuhealth.main", "agent", "--node", "n1"]
    argv = images.argv_for({"image": "ghcr.io/gpu-catalog/gpu-health", "command": ["/usr/local/bin/gpu-health", "ctl"]})
    assert argv[-1] == "ctl" and argv[:3] == ["python3", "-m", "gpucatalog.gpuhealth.main"]
    with pytest.raises(errors.NotFoundError, match="not found in image"):
        images.argv_for({"image": "ghcr.io/gpu-catalog/podlister", "command": ["/bin/bash"]})
    assert images.lookup("nvcr.io/nvidia/cuda:12") is None


@pytest.mark.skipif(not Path("/usr/bin/jq").exists(), reason="jq not installed")
def test_kwok_exclusion_expression_selects_only_mapped_pods() -> None:
    expr = images.kwok_exclusion_jq()

    def run(pod: dict[str, object]) -> str:
        return executor.run(["jq", expr], input=json.dumps(pod)).stdout.strip()

    assert run({"spec": {"containers": [{"image": "ghcr.io/gpu-catalog/podlister:1"}]}}) == "true"
    assert run({"spec": {"containers": [{"image": "busybox"}, {"image": "ghcr.io/gpu-catalog/gpu-health@sha256:1"}]}}) == "true"
    assert run({"spec": {"containers": [{"image": "ghcr.io/gpu-catalog/gpu-health-extra:1"}]}}) == "false"
    assert run({"spec": {"containers": [{"image": "nvcr.io/nvidia/cuda:12"}]}}) == "false"


def test_kwok_config_renders_all_stages() -> None:
    import yaml

    docs = list(yaml.safe_load_all(stages.render(heartbeat_s=3)))
    assert docs[0]["kind"] == "KwokConfiguration"
    names = [d["metadata"]["name"] for d in docs[1:]]
    assert names == ["sim-node-initialize", "sim-node-heartbeat", "sim-pod-ready", "sim-pod-complete", "sim-pod-delete"]
    assert docs[2]["spec"]["delay"]["durationMilliseconds"] == 3000
    for d in docs[3:]:
        assert any("ghcr.io/gpu-catalog/podlister" in e["key"] for e in d["spec"]["selector"]["matchExpressions"])


@pytest.fixture()
def node_dir(tmp_path: Path) -> Path:
    d = tmp_path / "c1" / "nodes" / "h100-node-0000"
    nodefs.seed(d, shapes.get("h100-80gb-x8"), "c1")
    return d


def _gpus(node_dir: Path) -> list[ET.Element]:
    return ET.parse(node_dir / "sim" / "nvidia-smi-q-x.xml").getroot().findall("gpu")


def test_node_folder_seeded_healthy(node_dir: Path) -> None:
    gpus = _gpus(node_dir)
    assert len(gpus) == 8
    g0 = gpus[0]
    assert g0.findtext("product_name") == "NVIDIA H100 80GB HBM3"
    assert g0.findtext("pci/pci_gpu_link_info/link_widths/current_link_width") == "16x"
    assert g0.findtext("remapped_rows/remapped_row_pending") == "No"
    port = node_dir / "sys/class/infiniband/mlx5_0/ports/1"
    assert (port / "state").read_text() == "4: ACTIVE\n"
    assert (port / "rate").read_text() == "400 Gb/sec (4X NDR)\n"
    assert (node_dir / "dev/kmsg").read_text() == ""
    out = executor.run([node_dir / "usr/bin/nvidia-smi", "-q", "-x"]).stdout
    assert out == (node_dir / "sim/nvidia-smi-q-x.xml").read_text()
    assert "Link 17: 26.562 GB/s" in executor.run([node_dir / "usr/bin/nvidia-smi", "nvlink", "-s"]).stdout


def test_faults_change_what_probes_read(node_dir: Path) -> None:
    faults.inject(node_dir, "xid", code=79, gpu=2)
    line = (node_dir / "dev/kmsg").read_text().strip()
    assert line.startswith("4,1,") and "NVRM: Xid (PCI:0000:3a:00): 79, pid=" in line
    assert "GPU has fallen off the bus." in line
    assert len(_gpus(node_dir)) == 7  # the GPU is gone from nvidia-smi
    faults.inject(node_dir, "xid", code=13, gpu=1)
    faults.inject(node_dir, "xid", code=13, gpu=1)
    first, second = (node_dir / "dev/kmsg").read_text().splitlines()[1:]
    assert first.split(";", 1)[1] != second.split(";", 1)[1]  # a new line (new pid): a new Event on a kept cluster
    faults.inject(node_dir, "row-remap-pending", gpu=1)
    faults.inject(node_dir, "row-remap-failure", gpu=1)
    g1 = _gpus(node_dir)[1]
    assert g1.findtext("remapped_rows/remapped_row_pending") == "Yes"
    assert g1.findtext("remapped_rows/remapped_row_failure") == "Yes"
    faults.inject(node_dir, "pcie-downgrade", gpu=0)
    g0 = _gpus(node_dir)[0]  # held busy on a narrowed link: what gpu-health must judge
    assert g0.findtext("pci/pci_gpu_link_info/link_widths/current_link_width") == "8x"
    assert (g0.findtext("performance_state"), g0.findtext("pci/pci_gpu_link_info/pcie_gen/current_link_gen")) == ("P0", "5")
    faults.inject(node_dir, "nvlink-down", gpu=0, link=5)
    assert "\t Link 5: <inactive>" in (node_dir / "sim/nvlink-status.txt").read_text()
    faults.inject(node_dir, "ib-rate", device="mlx5_3")
    assert (node_dir / "sys/class/infiniband/mlx5_3/ports/1/rate").read_text() == "200 Gb/sec (2X NDR)\n"
    faults.inject(node_dir, "ib-down")
    assert (node_dir / "sys/class/infiniband/mlx5_0/ports/1/state").read_text() == "1: DOWN\n"
    faults.inject(node_dir, "clear")
    assert len(_gpus(node_dir)) == 8 and (node_dir / "dev/kmsg").read_text() == ""
    assert (node_dir / "sys/class/infiniband/mlx5_3/ports/1/rate").read_text() == "400 Gb/sec (4X NDR)\n"


def _link(g: ET.Element) -> tuple[str | None, str | None, str | None, str | None]:
    return (g.findtext("performance_state"), g.findtext("utilization/gpu_util"),
            g.findtext("pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
            g.findtext("pci/pci_gpu_link_info/link_widths/current_link_width"))


def test_gpus_read_idle_until_work_runs_on_them(node_dir: Path) -> None:
    """Like a real idle GPU (P8, link down-trained to gen 1), busy ones (P0) at their trained link."""
    assert {_link(g) for g in _gpus(node_dir)} == {("P8", "0 %", "1", "16x")}
    g0 = _gpus(node_dir)[0]
    assert g0.findtext("pci/pci_gpu_link_info/pcie_gen/max_link_gen") == "5"
    shape = shapes.get("h100-80gb-x8")
    assert nodefs.set_work_busy(node_dir, shape, {0, 1, 2}) is True
    assert nodefs.set_work_busy(node_dir, shape, {0, 1, 2}) is False  # unchanged: not rewritten
    assert [_link(g)[0] for g in _gpus(node_dir)] == ["P0"] * 3 + ["P8"] * 5
    assert _link(_gpus(node_dir)[0]) == ("P0", "93 %", "5", "16x")
    faults.inject(node_dir, "row-remap-pending", gpu=5)  # a fault keeps the work's load
    assert [_link(g)[0] for g in _gpus(node_dir)] == ["P0"] * 3 + ["P8"] * 5
    nodefs.set_work_busy(node_dir, shape, set())
    assert {_link(g)[0] for g in _gpus(node_dir)} == {"P8"}


def test_gpus_in_use_counts_whole_gpus_and_shares() -> None:
    def pod(node: str, gpus: int = 0, phase: str = "Running", ann: dict[str, str] | None = None,
            requests: bool = False, gone: bool = False) -> dict[str, Any]:
        res = {("requests" if requests else "limits"): {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        meta: dict[str, Any] = {"name": "p", "annotations": ann}
        if gone:
            meta["deletionTimestamp"] = "2026-12-05T00:00:00Z"
        return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c", "resources": res}]},
                "status": {"phase": phase}}

    pods = [pod("a", 2), pod("a", 4), pod("b", ann={"gpu-fraction": "0.5"}), pod("c"), pod("d", 8, "Pending"),
            pod("e", 1, requests=True), pod("f", 2, gone=True), {"metadata": {}, "spec": {}, "status": {}}]
    assert nodeagent.gpus_in_use(pods) == {"a": 6, "b": 1, "e": 1}


def test_fault_bad_input(node_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(errors.InputError, match="--code is required"):
        faults.inject(node_dir, "xid")
    with pytest.raises(errors.InputError, match="no GPU 8"):
        faults.inject(node_dir, "row-remap-pending", gpu=8)
    with pytest.raises(errors.InputError, match="unknown fault kind"):
        faults.inject(node_dir, "meltdown")
    cpu = tmp_path / "c1" / "nodes" / "cpu-node-0000"
    nodefs.seed(cpu, shapes.get("cpu"), "c1")
    with pytest.raises(errors.InputError, match="has no GPUs"):
        faults.inject(cpu, "xid", code=79)


class _Core:
    """create_node as the API takes it: recorded, optionally refused or blocked."""

    def __init__(self, refuse: str = "", block: threading.Event | None = None) -> None:
        self.made: list[str] = []
        self.refuse, self.block = refuse, block
        self.lock = threading.Lock()

    def create_node(self, obj: dict[str, object], _request_timeout: float = 0) -> None:
        if self.block is not None:
            self.block.wait(20)
        name = str(obj["metadata"]["name"])  # type: ignore[index]
        if name == self.refuse:
            raise RuntimeError(f"409 {name} exists")
        with self.lock:
            self.made.append(name)


def test_nodes_are_created_in_parallel_and_the_first_error_raised() -> None:
    objs = [nodes.node_object(shapes.get("h100-80gb-x8"), i) for i in range(40)]
    core = _Core()
    nodes.create(core, objs, workers=7)
    assert sorted(core.made) == sorted(o["metadata"]["name"] for o in objs)
    with pytest.raises(RuntimeError, match="409 h100-node-0005 exists"):
        nodes.create(_Core(refuse="h100-node-0005"), objs)


def test_ctrl_c_while_nodes_are_created_returns_at_once() -> None:
    """``up`` interrupted while API calls hang must reach its teardown: the main thread is not
    held by the calls still in flight (an executor's shutdown waited for all of them)."""
    release = threading.Event()
    objs = [nodes.node_object(shapes.get("h100-80gb-x8"), i) for i in range(20)]
    # Ctrl-C as a terminal delivers it: to Python's own handler (interrupt_main does nothing when
    # SIGINT is ignored or handled elsewhere, as it may be in a test worker that ran other code)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            nodes.create(_Core(block=release), objs)
        assert time.monotonic() - t0 < 5  # not the 20 s the calls hang for
    finally:
        release.set()
        timer.cancel()
        signal.signal(signal.SIGINT, previous)


def test_a_pods_sim_actuator_finds_its_cluster_in_any_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu-health's sim actuator runs SimCluster($GPU_CATALOG_SIM_NAME) in the pod: it must find
    the cluster wherever its cache is (a matrix run with its own cache never cleared a fault)."""
    from types import SimpleNamespace

    from gpucatalog.clusters.sim import podspec
    from gpucatalog.clusters.sim.layout import Layout

    monkeypatch.setenv("GPU_CATALOG_CACHE", str(tmp_path / "elsewhere"))
    lay = Layout.of("cell")
    (lay.root / "nodes").mkdir(parents=True)
    b = podspec.Builder.__new__(podspec.Builder)
    b.lay = lay
    b.cfg = SimpleNamespace(ports={"apiserver": 6443}, python_path=os.pathsep.join(sys.path), name="cell", slot=10)
    pod = SimpleNamespace(metadata=SimpleNamespace(name="agent", namespace="gpu-health"))
    container = SimpleNamespace(env_from=None, env=None)
    env = b.env(pod, container, podspec.PodPlace(node="n0", ip="10.0.0.2", dir=tmp_path), None)
    code = "import os; from gpucatalog.clusters.sim.cluster import SimCluster; print(SimCluster(os.environ['GPU_CATALOG_SIM_NAME']).layout.root)"
    # the pod's environment only: not the test's
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(lay.root)


def test_container_command_and_args_are_expanded_but_not_the_image_prefix() -> None:
    """A kubelet expands $(VAR) in a container's command and args (the DRA driver's 0.5.0 chart
    passes ``-v $(LOG_VERBOSITY)``); an unknown variable stays as written, $$ escapes, and the
    image map's prefix (the image's entrypoint) is left alone."""
    from types import SimpleNamespace

    from gpucatalog.clusters.sim import images, podspec

    env = {"LOG_VERBOSITY": "4", "NODE_NAME": "n0"}
    c = {"image": "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.5.0", "command": ["gpu-kubelet-plugin"],
         "args": ["-v", "$(LOG_VERBOSITY)", "--node=$(NODE_NAME)", "$(UNSET)", "$$(LOG_VERBOSITY)"]}
    argv = images.argv_for(c)
    own = SimpleNamespace(command=c["command"], args=c["args"])
    assert podspec.expand_own_args(argv, own, env)[-5:] == ["-v", "4", "--node=n0", "$(UNSET)", "$(LOG_VERBOSITY)"]
    prefix = ["python3", "-c", "print('$(LOG_VERBOSITY)')"]  # a prefix is never expanded
    assert podspec.expand_own_args([*prefix, "$(NODE_NAME)"], SimpleNamespace(command=None, args=["$(NODE_NAME)"]),
                                   env) == [*prefix, "n0"]
    assert podspec.expand_own_args(prefix, SimpleNamespace(command=None, args=None), env) == prefix


def test_pki_chain_and_sans(tmp_path: Path) -> None:
    p = pki.generate(tmp_path / "pki")
    ca = x509.load_pem_x509_certificate(p.ca_crt.read_bytes())
    srv = x509.load_pem_x509_certificate(p.crt("apiserver").read_bytes())
    srv.verify_directly_issued_by(ca)
    sans = srv.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    admin = x509.load_pem_x509_certificate(p.crt("admin").read_bytes())
    assert "O=system:masters" in admin.subject.rfc4514_string()
    assert oct(p.key("admin").stat().st_mode & 0o777) == "0o600"


def test_pid_records_stop_process_groups(tmp_path: Path) -> None:
    proc = executor.spawn([sys.executable, "-c", "import time; time.sleep(60)"], log_path=tmp_path / "x.log")
    rec = procs.record(tmp_path, "sleeper", proc.pid)
    assert rec is not None and rec.alive()
    stale = procs.PidRecord("sleeper", proc.pid, rec.ticks + 1)  # a recycled pid never matches
    assert not stale.alive()
    procs.stop([rec], grace=2)
    proc.wait(timeout=5)
    assert not rec.alive()


def test_pod_root_resolves_symlinks_inside_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    (root / "var").mkdir()
    os.symlink("/run", root / "var" / "run")
    assert podexec._in_root(str(root), "/var/run/secrets/x") == "run/secrets/x"
    assert podexec._in_root(str(root), "/var/../run/./a") == "run/a"


def test_second_mount_under_a_folder_the_host_lacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two hostPath mounts under a folder the host does not have (/var/lib/kubelet/plugins_registry
    and …/plugins on a host without a kubelet): the first makes the folder inside the pod root,
    the second must use it as it is, not try to mirror a host folder that does not exist."""
    mounts: list[tuple[object, ...]] = []
    monkeypatch.setattr(podexec, "_mount", lambda *a: mounts.append(a))
    absent = f"gpucatalog-absent-{os.getpid()}"
    assert not os.path.exists("/" + absent)
    root = tmp_path / "root"
    root.mkdir()
    first = podexec._mountpoint(str(root), f"/{absent}/plugins_registry", True)
    second = podexec._mountpoint(str(root), f"/{absent}/plugins", True)
    assert Path(first).is_dir() and Path(second).is_dir()
    assert mounts == []


def test_corrupt_cached_binary_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_CATALOG_CACHE", str(tmp_path))
    g = build.group_of("kwok")
    d = tmp_path / "toolchain" / "bin" / f"{g.name}-{g.version}"
    d.mkdir(parents=True)
    (d / "kwok").write_bytes(b"\x7fELF fake binary")
    (d / "kwok.sha256").write_text(build.sha256_file(d / "kwok") + "\n")
    assert build.cached("kwok") == d / "kwok"
    with open(d / "kwok", "ab") as fh:
        fh.write(b"truncated-or-corrupt")
    assert build.cached("kwok") is None  # ensure() rebuilds it


def _cli(*argv: str) -> int:
    code = (
        "import sys; from gpucatalog import cli; "
        "cli.COMMAND_MODULES = tuple(m for m in cli.COMMAND_MODULES if m in ('toolchain', 'cluster')) or ('cluster',); "
        "sys.exit(cli.main(sys.argv[1:]))"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, timeout=60).returncode


def test_cli_bad_input_exits_2(tmp_path: Path) -> None:
    os.environ["GPU_CATALOG_CACHE"] = str(tmp_path)
    try:
        assert _cli("cluster", "down", "--name", "no-such-cluster") == 2
        assert _cli("cluster", "up", "--name", "x", "--nodes", "0") == 2
        assert _cli("cluster", "up", "--name", "x", "--nodes", "100000") == 2
        assert _cli("cluster", "up", "--name", "x", "--shape", "h900") == 2
        assert _cli("cluster", "up", "--name", "Bad_Name") == 2
        assert _cli("cluster", "inject-fault", "n1", "--name", "x", "--kind", "xid", "--code", "79") == 2
    finally:
        del os.environ["GPU_CATALOG_CACHE"]
    assert not (tmp_path / "clusters" / "x").exists()


def test_provider_registry() -> None:
    p = provider.get("sim", "reg-test")
    assert isinstance(p, provider.ClusterProvider)
    with pytest.raises(errors.NotFoundError, match="unknown cluster provider"):
        provider.get("kind9")


def test_cli_module_registered() -> None:
    assert "cluster" in cli_mod.COMMAND_MODULES


def test_image_map_runs_kueue_as_its_toolchain_binary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    kueue = {"image": "registry.k8s.io/kueue/kueue:v0.17.0", "command": ["/manager"], "args": ["--config=/c.yaml"]}
    monkeypatch.setattr(build, "cached", lambda tool: None)
    with pytest.raises(errors.NotFoundError, match="runs as toolchain binary 'kueue', which is not built"):
        images.argv_for(kueue)
    monkeypatch.setattr(build, "cached", lambda tool: tmp_path / tool)
    assert images.argv_for(kueue) == [str(tmp_path / "kueue"), "--config=/c.yaml"]
    deployment = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [kueue]}}}}
    other = {"kind": "Pod", "spec": {"containers": [{"image": "ghcr.io/gpu-catalog/gpu-health:0.1.0"}]}}
    refs = images.pod_images([deployment, other, {"kind": "ConfigMap", "data": {}}])
    assert refs == ["ghcr.io/gpu-catalog/gpu-health:0.1.0", "registry.k8s.io/kueue/kueue:v0.17.0"]
    assert images.tools_for(refs) == ["kueue"]
