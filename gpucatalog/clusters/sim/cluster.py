"""``SimCluster``: the sim provider's Python API (up, wait_ready, status, down, faults, logs, and
the host services a bundle brings: ``start_services`` starts a real Slurm cluster for Slinky CRs).

Used by ``catalog cluster …``, by certification through ``providers.get("sim", name)`` and by
the pytest plugin. ``up`` builds (or finds cached) binaries, writes PKI, kubeconfigs and kwok's
config into the cluster's state folder, spawns the supervisor daemon, creates the nodes and
waits until they are Ready; any failure or Ctrl-C on the way tears everything down again.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gpucatalog
from gpucatalog.clusters import provider, shapes
from gpucatalog.clusters.sim import (
    egress,
    faults,
    imagemap,
    images,
    nodefs,
    nodes,
    parts,
    ports,
    procs,
    relay,
    services,
    stages,
)
from gpucatalog.clusters.sim import pki as pki_mod
from gpucatalog.clusters.sim.config import RESTART_POLICIES, ClusterConfig, lease_seconds
from gpucatalog.clusters.sim.layout import KIND_STATE_PREFIX, Layout, clusters_root
from gpucatalog.core import errors, executor, kubeapi
from gpucatalog.toolchain import build, releases

MAX_NODES = 10000
MAX_SOCKET_PATH = 107  # Linux: a unix socket's path, without its closing NUL byte
TOOLS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# kubelet: every node's kubelet API (the sim kubelet's exec, the rest relayed to kwok's server)
PORT_NAMES = ("etcd", "etcd_peer", "apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubelet")

Progress = Callable[[str], None]


def _quiet(_msg: str) -> None:
    return None


class SimCluster(
    provider.ClusterProvider,
    provider.AddsNodes,
    provider.StartsServices,
    provider.InjectsFaults,
    provider.OffersEndpoints,
    provider.DescribesParts,
    provider.RunsImageMaps,
    provider.RunsKubernetesReleases,
):
    """One named sim cluster; several with different names may run at once."""

    def __init__(self, name: str = "sim") -> None:
        self.layout = Layout.of(name)
        self.name = name
        # (file, validated overlay) named by use_image_map for the next up
        self._image_map: tuple[Path, list[imagemap.MappedBinary]] | None = None
        # the Kubernetes release use_kubernetes named for the next up (None: the toolchain's default)
        self._kubernetes: str | None = None

    # -- provider protocol --------------------------------------------------------------------
    def available(self) -> bool:
        return shutil.which("go") is not None or all(build.cached(t) for t in TOOLS)

    def up(
        self,
        nodes: int = 8,
        shape: str = "h100-80gb-x8",
        *,
        restart: str = "always",
        api_port: int | None = None,
        heartbeat_s: float = 300.0,
        timeout: float = 180.0,
        progress: Progress | None = None,
        image_map: Path | None = None,
        kubernetes: str | None = None,
    ) -> Path:
        """Start the cluster and return the admin kubeconfig path once ``nodes`` nodes are Ready.
        ``image_map``: an image-map overlay (else the one ``use_image_map`` named, else
        ``$GPU_CATALOG_IMAGE_MAP``), validated before anything starts. ``kubernetes``: a release
        (``1.35`` or ``v1.35.4``) the toolchain lists, else the one ``use_kubernetes`` named, else
        the toolchain's default; its control plane is built on first use."""
        say = progress or _quiet
        release = releases.resolve(kubernetes) if kubernetes is not None else self._kubernetes
        node_shape = shapes.get(shape)
        overlay = self._overlay(image_map)
        if not 1 <= nodes <= MAX_NODES:
            raise errors.InputError(f"node count {nodes} out of range", field="--nodes", expected=f"1-{MAX_NODES}")
        if restart not in RESTART_POLICIES:
            raise errors.InputError(f"unknown restart policy {restart!r}", field="restart",
                                    expected=", ".join(RESTART_POLICIES))
        with _starting(self.name):  # first: it also finds a cache folder that cannot be written
            if self.running():
                raise errors.ConflictError(f"cluster {self.name!r} is already running",
                                           field="--name", expected="another name, or `catalog cluster down` first")
            longest = max((egress.socket_path(self.layout), relay.control_path(self.layout)),
                          key=lambda p: len(bytes(p)))
            if len(bytes(longest)) > MAX_SOCKET_PATH:
                # the kernel's limit: a socket under a deeper folder cannot be bound
                raise errors.InputError(f"the cluster's folder is too deep for its unix socket {longest} "
                                        f"({len(bytes(longest))} bytes)", field="GPU_CATALOG_CACHE",
                                        expected=f"a folder whose cluster sockets stay within {MAX_SOCKET_PATH} bytes")
            if api_port is not None:
                ports.require_free(api_port, "--api-port")
            self._cleanup_stale()
            try:
                return self._up(nodes, node_shape, restart, api_port, heartbeat_s, timeout, say, overlay, release)
            except BaseException:
                # failed start or Ctrl-C: leave no process and no state behind
                self._teardown()
                raise

    def _up(self, count: int, shape: shapes.Shape, restart: str, api_port: int | None, heartbeat_s: float, timeout: float,
            say: Progress, overlay: list[imagemap.MappedBinary], release: str | None = None) -> Path:
        t0 = time.monotonic()
        lay = self.layout
        binaries = {}
        kube_tools = build.group_of("kube-apiserver").tools
        for tool in TOOLS:
            version = release if tool in kube_tools else None
            if build.cached(tool, version) is None:
                say(f"building {tool} {build.group_of(tool, version).version} (first use; cached afterwards)")
            binaries[tool] = str(build.ensure(tool, progress=say, version=version))
        lay.root.mkdir(parents=True, exist_ok=True)
        for d in (lay.logs, lay.pids, lay.nodes):
            d.mkdir(exist_ok=True)
        picked = dict(zip(PORT_NAMES, ports.free_ports(len(PORT_NAMES)), strict=True))
        if api_port is not None:
            picked["apiserver"] = api_port
        cfg = ClusterConfig(
            name=self.name, slot=self._free_slot(), ports=picked, binaries=binaries, restart=restart,
            python_path=_python_path(), versions={t: v for t, v in build.versions(release).items() if t in TOOLS},
            node_lease_s=lease_seconds(count),
        )
        pki = pki_mod.generate(lay.pki)
        server = cfg.api_url
        pki_mod.write_kubeconfig(lay.kubeconfig, pki_mod.kubeconfig_doc(
            server, pki.ca_crt, cert=pki.crt("admin"), key=pki.key("admin"), cluster=self.name))
        for who in ("kube-controller-manager", "kube-scheduler", "kwok", "sim-kubelet"):
            pki_mod.write_kubeconfig(lay.component_kubeconfig(who), pki_mod.kubeconfig_doc(
                server, pki.ca_crt, cert=pki.crt(who), key=pki.key(who), user=who, cluster=self.name))
        if overlay:
            imagemap.save(overlay, lay.image_map)
            for b in overlay:
                say(f"image {b.image} runs {b.executable} (reports {b.version})")
        images.refresh_base_images()  # agnhost may have been built since this process first asked
        stages.write(lay.kwok_config, heartbeat_s, images.merged(overlay), cfg.node_lease_s)
        (lay.root / "egress-selector.yaml").write_text(egress.egress_config(egress.socket_path(lay)))
        cfg.save(lay.config)
        say(f"starting control plane of {self.name!r} on {server}")
        launcher = executor.spawn(
            [sys.executable, "-m", "gpucatalog.clusters.sim.supervisor", "--state", str(lay.root),
             "--daemonize"],
            log_path=lay.logs / "supervisor.log", env={"PYTHONPATH": cfg.python_path},
        )
        launcher.wait()
        objs = [nodes.node_object(shape, i, *_kubelet(cfg)) for i in range(count)]
        nodefs.register(lay.nodes, {o["metadata"]["name"]: shape.name for o in objs})
        self._wait_phase(timeout)
        say(f"API server ready after {time.monotonic() - t0:.1f}s; creating {count} {shape.name} nodes")
        nodes.create(self.core(), objs)
        self.wait_ready(max(5.0, timeout - (time.monotonic() - t0)), expect=count)
        say(f"{count} nodes Ready after {time.monotonic() - t0:.1f}s")
        return lay.kubeconfig

    def wait_ready(self, timeout: float = 120.0, expect: int | None = None) -> None:
        """Block until the API server is ready and every node (at least ``expect``) is Ready."""
        api = self.api_client()
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            st = self._state()
            if st.get("phase") == "failed":
                raise errors.ToolError(["sim-supervisor"], 1, str(st.get("error")))
            try:
                ready, total = _ready_nodes(api)
            except _api_errors() as exc:
                last = f"API server not answering: {exc}"
                time.sleep(0.3)
                continue
            last = f"{ready}/{total} nodes Ready"
            if total and ready == total and (expect is None or ready >= expect):
                return
            # a list costs the API server in proportion to the nodes: poll a large cluster less often
            time.sleep(0.2 if total < 1000 else 1.0)
        raise errors.ToolError(["sim", "wait-ready"], 124, f"cluster {self.name} not ready after {timeout:.0f}s: {last}")

    def kubeconfig(self) -> Path:
        if not self.layout.kubeconfig.is_file():
            raise errors.NotFoundError(f"no sim cluster named {self.name!r}", field="--name")
        return self.layout.kubeconfig

    def collect_logs(self, dest: Path) -> Path:
        out = dest / f"sim-{self.name}-logs"
        out.mkdir(parents=True, exist_ok=True)
        for log in sorted(self.layout.logs.glob("*.log")):
            shutil.copy2(log, out / log.name)
        for log in sorted(self.layout.nodes.glob("*/pods/*/*.log")):
            target = out / "pods" / log.parent.name
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(log, target / log.name)
        if self.layout.state.is_file():
            shutil.copy2(self.layout.state, out / "state.json")
        slurm_logs = sorted((self.layout.slurm / "log").glob("*")) if (self.layout.slurm / "log").is_dir() else []
        for log in slurm_logs:
            if log.is_file():
                (out / "slurm").mkdir(exist_ok=True)
                shutil.copy2(log, out / "slurm" / log.name)
        if self.layout.slurm_conf.is_file():
            (out / "slurm").mkdir(exist_ok=True)
            shutil.copy2(self.layout.slurm_conf, out / "slurm" / "slurm.conf")
        return out

    def down(self) -> None:
        """Stop every process of the cluster and delete its state folder."""
        if not self.layout.root.exists():
            raise errors.NotFoundError(f"no sim cluster named {self.name!r}", field="--name",
                                       expected=", ".join(list_clusters()) or "a running cluster (none are)")
        self._teardown()

    # -- status and helpers ---------------------------------------------------------------------
    def running(self) -> bool:
        rec = procs.read(self.layout.pids / "supervisor.pid")
        return rec is not None and rec.alive()

    def status(self) -> dict[str, Any]:
        """Supervisor view plus a live probe of every process (a killed one shows as not alive)."""
        if not self.layout.root.exists():
            raise errors.NotFoundError(f"no sim cluster named {self.name!r}", field="--name")
        st = self._state()
        comps: dict[str, Any] = st.get("components", {})
        for name, c in comps.items():
            rec = procs.read(self.layout.pids / f"{name}.pid")
            c["alive"] = bool(rec and rec.alive())
        cfg = self.config()
        return {
            "name": self.name,
            "phase": st.get("phase", "unknown") if self.running() else "dead",
            "supervisor_alive": self.running(),
            "api_server": cfg.api_url if cfg else None,
            "kubeconfig": str(self.layout.kubeconfig),
            "components": comps,
            "healthy": self.running() and all(c.get("alive") for c in comps.values()),
        }

    def config(self) -> ClusterConfig | None:
        try:
            return ClusterConfig.load(self.layout.config)
        except (OSError, ValueError):
            return None

    def api_client(self) -> Any:
        return kubeapi.client_for(self.kubeconfig(), retries=0)

    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client())

    def add_nodes(self, count: int, shape: str, start: int | None = None) -> list[str]:
        """Add ``count`` nodes of ``shape`` (indices continue after existing nodes of that prefix)."""
        s = shapes.get(shape)
        cfg = ClusterConfig.load(self.layout.config)
        core = self.core()
        existing = {n.metadata.name for n in core.list_node().items}
        objs: list[dict[str, Any]] = []
        i = start or 0
        while len(objs) < count:
            if nodes.node_name(s, i) not in existing:
                objs.append(nodes.node_object(s, i, *_kubelet(cfg)))
            i += 1
        nodefs.register(self.layout.nodes, {o["metadata"]["name"]: s.name for o in objs})
        nodes.create(core, objs)
        self.wait_ready(60)
        return [o["metadata"]["name"] for o in objs]

    def node_dir(self, node: str) -> Path:
        """The folder holding ``node``'s simulated hardware readings (its hostPath root)."""
        d = nodefs.ensure(self.layout.nodes, node, self.name)
        if d is None:
            known = sorted(json.loads((self.layout.nodes / "index.json").read_text())) \
                if (self.layout.nodes / "index.json").is_file() else []
            raise errors.NotFoundError(f"no simulated node {node!r} in cluster {self.name!r}", field="NODE",
                                       expected=", ".join(known[:5]) + (" …" if len(known) > 5 else ""))
        return d

    def inject_fault(self, node: str, kind: str, **kw: Any) -> str:
        return faults.inject(self.node_dir(node), kind, **kw)

    def clear_fault(self, node: str) -> str:
        """Every injected fault of ``node`` undone (its hardware readings healthy again)."""
        return faults.inject(self.node_dir(node), "clear")

    # -- host services a bundle brings (a Slurm cluster: :mod:`.services`) -------------------
    def start_services(self, objects: Sequence[Mapping[str, Any]], progress: Progress | None = None,
                       timeout: float = 180.0) -> list[str]:
        """Start the host services the bundle's rendered ``objects`` call for; returns what started.

        Images the sim kubelet runs as a pinned toolchain binary (Kueue's manager): that binary,
        built now if it is not cached. Slinky ``Controller`` + ``NodeSet`` objects (the ``slurm``
        bundle): a real Slurm cluster configured from those objects (:mod:`.services`). Each Slurm node is named after the
        Kubernetes node its NodeSet replica lands on (:mod:`..slurm.placement`), so gpu-health
        drains the Slurm node of the Kubernetes node it quarantines. Pods started afterwards find
        it through ``SLURM_CONF`` (the sim kubelet exports it). ``down`` stops it, even after a
        crash. Call after ``up`` (the nodes must exist) and before installing the bundle.
        """
        started = []
        for tool in images.tools_for(images.pod_images(objects)):
            # pods of these images run as pinned toolchain binaries: build them now, not in the kubelet
            build.ensure(tool, progress)
            started.append(f"toolchain binary {tool} {build.versions()[tool]} for the sim kubelet")
        return started + services.start_slurm(self.layout, self.name, self.core(), objects, timeout)

    def update_services(self, objects: Sequence[Mapping[str, Any]]) -> list[str]:
        """After an upgrade's Helm releases: host services take the new rendered ``objects``
        (the running Slurm cluster is reconfigured, as Slinky's operator would); one line each."""
        return services.reconfigure_slurm(self.layout, self.core(), objects)

    def endpoints(self) -> dict[str, str]:
        """Non-Kubernetes endpoints for suites: ``slurm_conf`` while a Slurm cluster runs."""
        return services.endpoints(self.layout)

    def use_kubernetes(self, release: str | None) -> None:
        """Run ``release`` (``1.35`` or ``v1.35.4``; None: the default) with the next ``up``;
        an unlisted release is bad input now, before anything starts."""
        self._kubernetes = releases.resolve(release) if release is not None else None

    def kubernetes_releases(self) -> tuple[str, ...]:
        return releases.supported()

    # -- evidence (read by pipelines.cluster_facts) ---------------------------------------------
    def use_image_map(self, path: Path | None) -> None:
        """Run the images ``path`` (an image-map overlay) maps with the next ``up``; validated now."""
        self._image_map = (path, imagemap.load(path)) if path is not None else None

    def mapped_images(self) -> list[dict[str, Any]]:
        return parts.mapped_images(self.layout, self.core())

    def _overlay(self, given: Path | None) -> list[imagemap.MappedBinary]:
        if given is not None:
            return imagemap.load(given)
        if self._image_map is not None:
            return list(self._image_map[1])
        from_env = imagemap.from_env()
        return imagemap.load(from_env) if from_env is not None else []

    def live_parts(self) -> list[str]:
        return parts.live(self.layout, self.core())

    def simulated_parts(self) -> list[str]:
        return parts.simulated(self.layout, self.core())

    # -- internals --------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        try:
            st: dict[str, Any] = json.loads(self.layout.state.read_text())
            return st
        except (OSError, ValueError):
            return {}

    def _wait_phase(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        while time.monotonic() < deadline:
            phase = self._state().get("phase")
            if phase == "running":
                return
            gone = time.monotonic() - started > 2 and not self.running()
            if phase == "failed" or gone:
                err = self._state().get("error") or _tail(self.layout.logs / "supervisor.log")
                raise errors.ToolError(["sim-supervisor"], 1, f"cluster {self.name} failed to start: {err}")
            time.sleep(0.05)
        raise errors.ToolError(["sim-supervisor"], 124, f"control plane not up after {timeout:.0f}s")

    def _teardown(self) -> None:
        lay = self.layout
        sup = procs.read(lay.pids / "supervisor.pid")
        if sup is not None and sup.alive():
            procs.stop([sup], grace=25.0)  # the supervisor stops its children in order
        # whatever is left (supervisor killed, crashed test): every recorded process and pod
        leftovers = procs.read_all(lay.pids) + procs.read_all_pods(lay.nodes)
        procs.stop(leftovers, grace=3.0)
        services.stop(lay)  # a Slurm cluster of start_services, even after a crash
        shutil.rmtree(lay.root, ignore_errors=True)

    def _cleanup_stale(self) -> None:
        if self.layout.root.exists():
            self._teardown()

    def _free_slot(self) -> int:
        used = set()
        for d in clusters_root().glob("*/config.json"):
            try:
                used.add(ClusterConfig.load(d).slot)
            except (OSError, ValueError, TypeError):
                continue
        for slot in range(10, 250):
            if slot not in used:
                return slot
        raise errors.ConflictError("too many sim clusters", expected="at most 240 at once")


@contextmanager
def _starting(name: str) -> Iterator[None]:
    """One start per cluster name at a time: a second ``up`` of a name being started is refused
    (exit 2) before it looks at, cleans or starts anything (two starts each took the other's
    state for stale and removed it, orphaning both control planes). The lock lives beside the
    clusters' folders, since a failed start removes its own."""
    path = clusters_root().with_name("cluster-locks") / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise errors.ConflictError(f"cluster {name!r} is being started by another process", field="--name",
                                       expected="another name, or wait for that start to end") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def list_clusters() -> list[str]:
    """Sim clusters with state on this machine (the kind provider's state folders left out)."""
    root = clusters_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(KIND_STATE_PREFIX))


def _ready_nodes(api: Any) -> tuple[int, int]:
    """(Ready nodes, all nodes), read as the server-side table ``kubectl get nodes`` prints: a row
    of short cells per node instead of whole Node objects, which at thousands of nodes cost the
    API server and this process more than the cluster's start itself."""
    resp = api.call_api(*api.param_serialize(
        method="GET", resource_path="/api/v1/nodes", query_params=[("resourceVersion", "0")],
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}, auth_settings=["BearerToken"]),
        _request_timeout=60)
    table = json.loads(resp.read())
    column = [c["name"] for c in table.get("columnDefinitions") or []].index("Status")
    rows = table.get("rows") or []
    # "Ready", or "Ready,SchedulingDisabled" for a cordoned node; "NotReady" and "Unknown" are not
    ready = sum(1 for r in rows if str(r["cells"][column]).split(",")[0] == "Ready")
    return ready, len(rows)


def _kubelet(cfg: ClusterConfig) -> tuple[int, str]:
    """The port a node's kubelet API is served on (the sim kubelet's; kwok's own on a cluster made
    before it served one) and kwok's version, for a node created Ready."""
    return cfg.ports.get("kubelet", cfg.ports["kwok"]), cfg.versions.get("kwok", "")


def _api_errors() -> tuple[type[BaseException], ...]:
    import urllib3
    from kubernetes.client import ApiException

    return (ApiException, urllib3.exceptions.HTTPError, OSError)


def _python_path() -> str:
    root = str(Path(gpucatalog.__file__).resolve().parent.parent)
    extra = os.environ.get("PYTHONPATH", "")
    return root + (os.pathsep + extra if extra else "")


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
