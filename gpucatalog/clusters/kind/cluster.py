"""``KindCluster``: the kind provider (``providers.get("kind", name)``, ``catalog certify --cluster kind``).

Drives the pinned kind binary (toolchain group ``kind``) through the executor: ``up`` writes the
multi-node config, runs ``kind create cluster`` with the kubeconfig written under
``$GPU_CATALOG_CACHE/clusters/kind-<name>/`` (never ``~/.kube/config``), then gives the GPU
workers their capacity (:mod:`.gpus`) and simulated node hardware (:mod:`.nodehw`, which also
takes injected faults); any failure or Ctrl-C on the way deletes the cluster
again. ``collect_logs`` is ``kind export logs`` plus kubectl dumps of nodes, pods and events;
``down`` is ``kind delete cluster`` and does nothing when there is no cluster.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpucatalog.clusters import provider, shapes
from gpucatalog.clusters.kind import (
    config,
    engine,
    gpuagent,
    gpus,
    images,
    nodehw,
    nodeimage,
    podnetwork,
    slurm,
    usermaps,
)
from gpucatalog.clusters.sim import imagemap
from gpucatalog.core import errors, executor, kubeapi
from gpucatalog.toolchain import build

Progress = Callable[[str], None]


def _quiet(_msg: str) -> None:
    return None


def _last_line(text: str) -> str:
    """The line of a tool's stderr that usually says what went wrong."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


class KindCluster(provider.ClusterProvider, provider.ExplainsUnavailable, provider.DescribesParts,
                  provider.StartsServices, provider.InjectsFaults, provider.RunsImageMaps,
                  provider.OffersEndpoints):
    """One named kind cluster (kind name ``gpucatalog-<name>``)."""

    kind = "kind"

    def __init__(self, name: str = "kind") -> None:
        self.name = name
        self.cluster = config.cluster_name(name)
        self.state = build.cache_root() / "clusters" / f"kind-{name}"
        self._image_map: list[imagemap.MappedBinary] = []

    # -- availability -----------------------------------------------------------------------------
    def reason(self) -> str:
        """Why this machine cannot run kind clusters; empty when it can."""
        if shutil.which("docker") is None:
            return "kind needs a Docker engine: no docker client on PATH"
        try:
            executor.run(["docker", "info", "--format", "{{.ServerVersion}}"], env=engine.env(), timeout=20)
        except errors.ToolError as exc:
            return (f"kind needs a Docker engine: none is running (`docker info`: {_last_line(exc.stderr)}); "
                    "`catalog engine up` starts one")
        if build.cached("kind") is None and shutil.which("go") is None:
            return "the pinned kind binary is not built and there is no Go toolchain to build it"
        return ""

    def available(self) -> bool:
        return self.reason() == ""

    # -- provider protocol --------------------------------------------------------------------
    def up(self, nodes: int, shape: str, *, timeout: float = 600.0, progress: Progress | None = None) -> Path:
        """Create the cluster (a control plane and ``nodes`` workers of ``shape``) with GPU capacity;
        returns its kubeconfig. Nothing is left behind when it fails."""
        say = progress or _quiet
        node_shape = shapes.get(shape)
        config.render(nodes, node_shape)  # validates the node count before anything starts
        why = self.reason()
        if why:
            raise errors.InputError(f"kind provider unavailable: {why}", field="--cluster")
        kind_bin = build.ensure("kind", say)
        if self.exists():
            raise errors.ConflictError(f"kind cluster {self.cluster!r} already exists", field="--cluster-name",
                                       expected="another name, or `kind delete cluster` / down() first")
        gpu_plan = gpus.plan() if node_shape.gpu is not None else gpus.Plan("none", None, "CPU-only shape")
        helm = build.ensure("helm", say) if gpu_plan.chart is not None else None
        image, lock = self._node_image(say)
        local = nodeimage.local_images() if lock is not None else None
        cfg_text = config.render(nodes, node_shape, image, local=local, cgroup_v1=_cgroup_v1())
        cfg = self.state / "kind-config.yaml"
        kubeconfig = self.state / "kubeconfig"
        try:
            slurm.stop(self.state)  # a host munged a crashed run left
            shutil.rmtree(self.state, ignore_errors=True)
            self.state.mkdir(parents=True)
            cfg.write_text(cfg_text)
            say(f"kind create cluster {self.cluster}: 1 control plane + {nodes} x {shape}")
            env = engine.env()
            started = time.monotonic()
            if local is None:
                executor.run([kind_bin, "create", "cluster", "--name", self.cluster, "--config", cfg,
                              "--kubeconfig", kubeconfig, "--wait", f"{int(timeout)}s"], env=env, timeout=timeout + 120)
            else:
                # no CNI until the provider wires one, so kind's --wait (for Ready) would never end
                executor.run([kind_bin, "create", "cluster", "--name", self.cluster, "--config", cfg,
                              "--kubeconfig", kubeconfig], env=env, timeout=timeout + 120)
                podnetwork.wire(self._core(), nodes + 1, env, timeout=timeout)
            say(f"kind cluster {self.cluster} created in {time.monotonic() - started:.0f} s")
            say(f"GPU capacity: {gpu_plan.mode} ({gpu_plan.why})")
            if gpu_plan.chart is not None and helm is not None:
                gpus.install_fgo(helm, kubeconfig, gpu_plan.chart, node_shape, self.state)
            elif node_shape.gpu is not None:
                patched = gpus.patch_nodes(self._api(), node_shape)
                if len(patched) != nodes:
                    raise errors.ToolError(["kind", "patch-gpus"], 1, f"patched {len(patched)} of {nodes} workers")
            if node_shape.gpu is not None:
                workers = [n.metadata.name for n in self._core().list_node(
                    label_selector=f"{config.SHAPE_LABEL}={shape}").items]
                nodehw.seed(workers, node_shape, self.state, env)
            self._write_state({"workers": nodes, "shape": shape, "gpuMode": gpu_plan.mode, "gpuWhy": gpu_plan.why,
                               "image": image, "imageLock": lock})
        except BaseException:
            # failed start or Ctrl-C: no half-created cluster, no stale state
            try:
                self._delete(kind_bin)
            except errors.CatalogError as exc:
                say(f"could not delete the half-created cluster {self.cluster}: {exc}")
            raise
        return kubeconfig

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Every node Ready and every GPU worker advertising the shape's ``nvidia.com/gpu``."""
        st = self._read_state()
        node_shape = shapes.get(str(st["shape"]))
        want_nodes = 1 + int(st["workers"])
        want_gpus = str(node_shape.gpu.count) if node_shape.gpu is not None else None
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                items = self._core().list_node(_request_timeout=10).items
            except _api_errors() as exc:
                last = f"API server not answering: {exc}"
                time.sleep(2)
                continue
            ready = [n for n in items if _ready(n)]
            workers = [n for n in items if (n.metadata.labels or {}).get(config.SHAPE_LABEL) == node_shape.name]
            with_gpus = [n for n in workers if (n.status.allocatable or {}).get("nvidia.com/gpu") == want_gpus]
            last = f"{len(ready)}/{want_nodes} nodes Ready"
            if want_gpus is not None:
                last += f", {len(with_gpus)}/{want_nodes - 1} workers with {want_gpus} nvidia.com/gpu"
            if len(ready) == len(items) == want_nodes and (want_gpus is None or len(with_gpus) == want_nodes - 1):
                return
            time.sleep(2)
        raise errors.ToolError(["kind", "wait-ready"], 124, f"kind cluster {self.cluster} not ready after {timeout:.0f}s: {last}")

    def kubeconfig(self) -> Path:
        path = self.state / "kubeconfig"
        if not path.is_file():
            raise errors.NotFoundError(f"no kind cluster named {self.name!r}", field="--cluster-name")
        return path

    def collect_logs(self, dest: Path) -> Path:
        """``kind export logs`` (kubelet, containerd, pod logs of every node) and API dumps into ``dest``."""
        why = self.reason()
        if why:
            raise errors.InputError(f"kind provider unavailable: {why}", field="--cluster")
        kind_bin = build.ensure("kind")
        if not self.exists():
            raise errors.NotFoundError(f"no kind cluster named {self.name!r}", field="--cluster-name")
        out = dest / f"kind-{self.name}-logs"
        out.mkdir(parents=True, exist_ok=True)
        executor.run([kind_bin, "export", "logs", out, "--name", self.cluster], env=engine.env(), timeout=300)
        kubectl = build.ensure("kubectl")
        for what, args in (("nodes.yaml", ["get", "nodes", "-o", "yaml"]),
                           ("pods.txt", ["get", "pods", "-A", "-o", "wide"]),
                           ("events.txt", ["get", "events", "-A", "--sort-by=.lastTimestamp"])):
            try:
                proc = executor.run([kubectl, "--kubeconfig", self.kubeconfig(), *args], timeout=60)
                (out / what).write_text(proc.stdout)
            except errors.CatalogError as exc:
                # an unreachable API server is itself a finding; the node logs above still count
                (out / what).write_text(f"could not read: {exc}\n")
        if (self.state / "state.json").is_file():
            shutil.copy2(self.state / "state.json", out / "state.json")
        return out

    def down(self) -> None:
        """Delete the cluster and its state folder; nothing to do when neither exists."""
        if self.reason():
            # without a Docker engine no kind node can exist: only stale state is left to remove
            slurm.stop(self.state)
            shutil.rmtree(self.state, ignore_errors=True)
            return
        self._delete(build.ensure("kind"))

    # -- images and Slurm (before a bundle's install) -------------------------------------------
    def start_services(self, objects: Sequence[Mapping[str, Any]], progress: Progress | None = None) -> list[str]:
        """Build the images the bundle's pods name (and the suites' pause image) that can be built
        here from pinned sources, and load them into every node; one line per image. Images the
        engine can pull are left to it. Slinky CRs (the ``slurm`` bundle): the Slurm cluster
        they call for, in pods (:mod:`.slurm`)."""
        refs = [*images.images_of(objects), images.PAUSE_REF]
        # a NodeSet kind cannot place is refused before any build
        slurm_plan = slurm.plan(objects, self._core().list_node().items) if slurm.wanted(objects) else None
        if slurm_plan:
            refs.append(images.slurm_ref())
        # KAI's reservation pods need a GPU written on them: the SIMULATED GPU agent does it
        agent = any(images.split_ref(r)[0] == images.RESERVATION_REPO for r in refs)
        if agent:
            refs.append(images.gpu_agent_ref())
        refs = list(dict.fromkeys(refs))
        env = engine.env()
        # a user's binary is never replaced by a pulled image: the overlay is what they certify
        mapped = images.mapped_refs(refs, self._image_map)
        if self._image_map:
            imagemap.save(self._image_map, self.state / "image-map.json")
        local = [r for r in refs if r in mapped or (images.buildable(r) and executor.run(
            ["docker", "pull", r], env=env, check=False, timeout=300).returncode != 0)]
        built = images.load(build.ensure("kind"), self.cluster, local, env, self.state, progress or _quiet, mapped)
        if agent:
            executor.run([build.ensure("kubectl"), "--kubeconfig", self.kubeconfig(), "apply", "-f", "-"],
                         input=json.dumps({"apiVersion": "v1", "kind": "List",
                                           "items": gpuagent.manifests(images.gpu_agent_ref())}), timeout=120)
        lines = [b.line() for b in built]
        lines += [f"image {r}: pulled by the nodes (not built here)" for r in refs if r not in local]
        if slurm_plan:
            lines += slurm.start(slurm_plan, self._core(), build.ensure("kubectl"), self.kubeconfig(), self.state,
                                 images.slurm_ref(), env)
        return lines

    def endpoints(self) -> dict[str, str]:
        """``slurm_conf`` (the host clients' copy) while the cluster runs Slurm."""
        return slurm.endpoints(self.state)

    # -- a user's binaries (an image-map overlay), as images built here -------------------------
    def use_image_map(self, path: Path | None) -> None:
        """Build the images ``path`` (an image-map overlay) maps from its binaries when a bundle's
        images are loaded; validated now (exit 2 on a bad overlay)."""
        self._image_map = imagemap.load(path) if path is not None else []

    def mapped_images(self) -> list[dict[str, Any]]:
        binaries = imagemap.read(self.state / "image-map.json")
        if not binaries:
            return []
        return usermaps.mapped_images(binaries, self._built(), self._core().list_pod_for_all_namespaces().items)

    # -- evidence (read by pipelines.cluster_facts) ---------------------------------------------
    def live_parts(self) -> list[str]:
        st = self._read_state()
        parts = [f"kind nodes ({st['image']}): real kubelet, containerd and control plane in Docker containers"]
        if st.get("imageLock"):
            parts.append("node image built here from pinned sources (debootstrap Debian, containerd, runc, kubelet, "
                         "control-plane images); pod network: ptp CNI with routes between nodes")
        parts += [b.line() for b in self._built() if not b.simulated and not b.user_supplied]
        if slurm.running(self.state):
            parts.append("Slurm (Debian slurm-wlm) in pods on the nodes' host networks: slurmctld, and slurmdbd + "
                         "MariaDB when accounting is on, on the control-plane node; one slurmd per NodeSet replica on "
                         "its GPU worker, named after it; configured from the bundle's Slinky CRs")
        parts += usermaps.lines(self.mapped_images())[0]
        if st["gpuMode"] == "fake-gpu-operator":
            parts.append("fake-gpu-operator device plugin and status exporter (real pods)")
        return parts

    def _built(self) -> list[images.Built]:
        built = self.state / "images.json"
        return [images.Built(**b) for b in json.loads(built.read_text())] if built.is_file() else []

    def simulated_parts(self) -> list[str]:
        st = self._read_state()
        parts = []
        if st["gpuMode"] == "fake-gpu-operator":
            parts.append("GPU hardware: fake-gpu-operator devices (no GPU, no driver)")
        if st["gpuMode"] == "node-patch":
            parts.append(f"GPU hardware: nvidia.com/gpu capacity patched into node status ({st['gpuWhy']}); "
                         "no device plugin")
        if st["gpuMode"] != "none":
            parts.append(f"GPU node hardware: the sim's node folder in each GPU worker at {nodehw.NODE_ROOT} "
                         "(nvidia-smi printing simulated readings, a kernel log file, InfiniBand sysfs, the GPU "
                         "inventory the DRA stand-in publishes); read only where a bundle's kind profile points "
                         "gpu-health's agent and the DRA driver's driver root there; faults written into it; a "
                         f"repair is {nodehw.REPAIR} in the node folder, which puts back the seeded readings")
        parts += [b.line() for b in self._built() if b.simulated]
        if slurm.running(self.state):
            parts += ["Slinky operator reconciliation: not run; the kind provider creates the Slurm pods from the CRs "
                      "and writes each node's slurm.conf and munge key",
                      "GPUs of Slurm nodes: character devices made with mknod in each slurmd pod, one per GPU"]
        parts += usermaps.lines(self.mapped_images())[1]
        return parts

    # -- faults (the sim's kinds, in the node folder each GPU worker holds: :mod:`.nodehw`) --------
    def inject_fault(self, node: str, kind: str, **kw: Any) -> str:
        return nodehw.inject(node, kind, self.state, engine.env(), **kw)

    def clear_fault(self, node: str) -> str:
        """Every injected fault of ``node`` undone (its hardware readings healthy again)."""
        return nodehw.inject(node, "clear", self.state, engine.env())

    # -- helpers --------------------------------------------------------------------------------
    def exists(self) -> bool:
        """True when kind lists the cluster (asks the Docker engine)."""
        kind_bin = build.cached("kind")
        return kind_bin is not None and self.cluster in _kind_clusters(kind_bin, check=True)

    def _delete(self, kind_bin: Path) -> None:
        slurm.stop(self.state)  # the host's munged of the cluster's Slurm, if any
        # `kind delete cluster` succeeds when there is no such cluster, so this is idempotent
        executor.run([kind_bin, "delete", "cluster", "--name", self.cluster], env=engine.env(), timeout=300)
        shutil.rmtree(self.state, ignore_errors=True)

    def _node_image(self, say: Progress) -> tuple[str, dict[str, Any] | None]:
        """kind's published node image where the engine has it or can pull it; else one built here
        from pinned sources (:mod:`.nodeimage`), with its lock."""
        env = engine.env()
        if nodeimage.image_id(config.NODE_IMAGE) is not None:
            return config.NODE_IMAGE, None
        pulled = executor.run(["docker", "pull", config.NODE_IMAGE], env=env, check=False, timeout=600)
        if pulled.returncode == 0:
            return config.NODE_IMAGE, None
        say(f"cannot pull {config.NODE_IMAGE} ({_last_line(pulled.stderr)}): using a node image built here")
        return nodeimage.ensure(say)

    def _write_state(self, st: dict[str, Any]) -> None:
        (self.state / "state.json").write_text(json.dumps(st, indent=1) + "\n")

    def _read_state(self) -> dict[str, Any]:
        path = self.state / "state.json"
        if not path.is_file():
            raise errors.NotFoundError(f"no kind cluster named {self.name!r}", field="--cluster-name")
        st: dict[str, Any] = json.loads(path.read_text())
        return st

    def _api(self) -> Any:
        return kubeapi.client_for(self.kubeconfig())

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self._api())


def _cgroup_v1() -> bool:
    """True when the host (and so every kind node) runs cgroup v1."""
    return not Path("/sys/fs/cgroup/cgroup.controllers").is_file()


def _ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def _api_errors() -> tuple[type[BaseException], ...]:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    return (ApiException, HTTPError, OSError)


def list_clusters() -> list[str]:
    """Provider names of the kind clusters this project made that the engine runs (empty when kind
    is not built or no engine answers)."""
    kind_bin = build.cached("kind")
    names = _kind_clusters(kind_bin, check=False) if kind_bin is not None else []
    return sorted(n.removeprefix(config.NAME_PREFIX) for n in names if n.startswith(config.NAME_PREFIX))


def _kind_clusters(kind_bin: Path, *, check: bool) -> list[str]:
    """``kind get clusters`` on the engine; without ``check``, nothing when it fails."""
    proc = executor.run([kind_bin, "get", "clusters"], env=engine.env(), check=check, timeout=60)
    return proc.stdout.split() if proc.returncode == 0 else []
