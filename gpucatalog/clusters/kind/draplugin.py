"""SIMULATED: a stand-in for the kubelet plugin of NVIDIA's DRA driver, for clusters whose kubelets
are real but whose nodes have no GPU (kind).

On the sim the kubelet is the project's own, and :mod:`gpucatalog.clusters.sim.drapublisher`
only publishes ResourceSlices. A real kubelet asks more of a DRA driver, and this module answers
it as the driver's binary does, over the kubelet's own gRPC APIs:

- **registration**: a socket in the kubelet's plugin registry folder serving
  ``pluginregistration.Registration`` (type ``DRAPlugin``, driver ``gpu.nvidia.com``, service
  ``v1.DRAPlugin`` at the DRA socket);
- **DRA v1** (``NodePrepareResources``/``NodeUnprepareResources``): for each claim, the devices
  kube-scheduler allocated from this node's pool, each with a CDI device whose spec this plugin
  writes to the CDI folder. The container runtime applies it: the container gets one environment
  variable per device (``GPU_CATALOG_SIM_GPU_<claim>_<n>=<pool>/<device>[ share <id>]``) and no
  device node, since there is no GPU. Unprepare removes the spec;
- **gRPC health** on the charts' health port (service ``liveness``): serving once the kubelet
  has confirmed the registration, as the charts' probes expect.

The slices themselves are published by the same loop as on the sim (``drapublisher``), from the
node's simulated hardware at ``<driver-root>/sim/hw.json``, which the kind provider writes into
each GPU worker. The image the driver's chart names is built from this checkout for kind
(:mod:`.images`), and the evidence lists the driver as simulated.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucatalog.clusters.kind import protowire as pw
from gpucatalog.clusters.sim import dra, drapublisher

REGISTRATION_SERVICE = "pluginregistration.Registration"
DRA_SERVICE = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
HEALTH_SERVICE = "grpc.health.v1.Health"
PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin",)
HEALTH_NAMES = ("", "liveness")  # the whole server, and the service the charts' probes name
SERVING, NOT_SERVING = 1, 2
CDI_KIND = "k8s.gpu-catalog.dev/sim-gpu"
CDI_VERSION = "0.6.0"
ReadClaim = Callable[[str, str], Mapping[str, Any]]  # (namespace, name) -> the ResourceClaim


@dataclass(frozen=True)
class Claim:
    namespace: str
    uid: str
    name: str


class PrepareError(Exception):
    """A claim this plugin cannot prepare; the kubelet gets the message and retries."""


def plugin_info(endpoint: str) -> bytes:
    return pw.encode([(1, PLUGIN_TYPE), (2, dra.DRIVER), (3, endpoint), *((4, v) for v in SUPPORTED_VERSIONS)])


def parse_claims(request: bytes) -> list[Claim]:
    """The claims of a NodePrepareResourcesRequest or NodeUnprepareResourcesRequest."""
    return [Claim(pw.string(c, 1), pw.string(c, 2), pw.string(c, 3)) for c in pw.messages(pw.decode(request), 1)]


def cdi_name(claim_uid: str, index: int) -> str:
    return f"{claim_uid}-{index}"


def env_name(claim_uid: str, index: int) -> str:
    return f"GPU_CATALOG_SIM_GPU_{re.sub(r'[^A-Za-z0-9]', '', claim_uid)}_{index}"


class Preparer:
    """Prepares and unprepares claims for ``node``: reads each claim's allocation, writes and
    removes its CDI spec in ``cdi_root``."""

    def __init__(self, node: str, cdi_root: Path, read_claim: ReadClaim) -> None:
        self.node = node
        self.cdi_root = cdi_root
        self.read_claim = read_claim

    def spec_path(self, claim_uid: str) -> Path:
        return self.cdi_root / f"gpu-catalog-sim-{claim_uid}.json"

    def _results(self, claim: Claim) -> list[Mapping[str, Any]]:
        obj = self.read_claim(claim.namespace, claim.name)
        uid = obj.get("metadata", {}).get("uid")
        if uid != claim.uid:
            raise PrepareError(f"ResourceClaim {claim.namespace}/{claim.name} has UID {uid}, the kubelet asked for {claim.uid}")
        allocation = (obj.get("status") or {}).get("allocation")
        if not allocation:
            raise PrepareError(f"ResourceClaim {claim.namespace}/{claim.name} is not allocated")
        ours = [r for r in (allocation.get("devices") or {}).get("results") or [] if r.get("driver") == dra.DRIVER]
        foreign = sorted({r.get("pool", "") for r in ours} - {self.node})
        if foreign:
            raise PrepareError(f"ResourceClaim {claim.namespace}/{claim.name} holds devices of pool(s) {foreign}; "
                               f"this plugin serves node {self.node}")
        return ours

    def prepare(self, claim: Claim) -> bytes:
        """A NodePrepareResourceResponse for ``claim``: its devices, or the error."""
        try:
            results = self._results(claim)
            spec = {"cdiVersion": CDI_VERSION, "kind": CDI_KIND, "devices": [
                {"name": cdi_name(claim.uid, i), "containerEdits": {"env": [
                    f"{env_name(claim.uid, i)}={r['pool']}/{r['device']}"
                    + (f" share {r['shareID']}" if r.get("shareID") else "")]}}
                for i, r in enumerate(results)]}
            self.cdi_root.mkdir(parents=True, exist_ok=True)
            path = self.spec_path(claim.uid)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(json.dumps(spec, indent=1) + "\n")
            os.replace(tmp, path)  # the runtime never reads half a spec
        except (PrepareError, OSError, KeyError) as exc:
            return pw.encode([(2, str(exc) or type(exc).__name__)])
        except Exception as exc:  # noqa: BLE001 - an API error is the claim's error, reported to the kubelet
            return pw.encode([(2, f"reading ResourceClaim {claim.namespace}/{claim.name}: {exc}")])
        devices = [pw.encode([(1, r.get("request", "")), (2, r["pool"]), (3, r["device"]),
                              (4, f"{CDI_KIND}={cdi_name(claim.uid, i)}")])
                   for i, r in enumerate(results)]
        return pw.encode([(1, d) for d in devices])

    def unprepare(self, claim: Claim) -> bytes:
        try:
            self.spec_path(claim.uid).unlink(missing_ok=True)
        except OSError as exc:
            return pw.encode([(1, str(exc))])
        return b""

    def prepare_all(self, request: bytes) -> bytes:
        return pw.encode(pw.encode_map(1, {c.uid: self.prepare(c) for c in parse_claims(request)}))

    def unprepare_all(self, request: bytes) -> bytes:
        return pw.encode(pw.encode_map(1, {c.uid: self.unprepare(c) for c in parse_claims(request)}))


class Servers:
    """The registration and DRA services on unix sockets, and gRPC health on ``health_address``."""

    def __init__(self, preparer: Preparer, registrar_dir: Path, plugins_dir: Path, health_address: str,
                 log: Callable[[str], None] = print) -> None:
        import grpc

        self.log = log
        self.preparer = preparer
        self.registered = threading.Event()
        self.reg_socket = registrar_dir / f"{dra.DRIVER}-reg.sock"
        self.dra_socket = plugins_dir / dra.DRIVER / "dra.sock"
        for sock in (self.reg_socket, self.dra_socket):
            sock.parent.mkdir(parents=True, exist_ok=True)
            sock.unlink(missing_ok=True)  # left by an earlier run of this pod

        def unary(fn: Callable[[bytes], bytes]) -> Any:
            return grpc.unary_unary_rpc_method_handler(lambda req, _ctx: fn(req),
                                                       request_deserializer=bytes, response_serializer=bytes)

        def check(req: bytes, ctx: Any) -> bytes:
            service = pw.string(pw.decode(req), 1)
            if service not in HEALTH_NAMES:
                ctx.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {service!r}")
            return pw.encode([(1, SERVING if self.registered.is_set() else NOT_SERVING)])

        # The DRA socket is served before the registration socket appears: the kubelet connects
        # to the endpoint as soon as it has read the registration.
        self.plugin = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.plugin.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(DRA_SERVICE, {
            "NodePrepareResources": unary(preparer.prepare_all),
            "NodeUnprepareResources": unary(preparer.unprepare_all)})])
        self.plugin.add_insecure_port(f"unix://{self.dra_socket}")
        self.registration = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.registration.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(REGISTRATION_SERVICE, {
            "GetInfo": unary(lambda _req: plugin_info(str(self.dra_socket))),
            "NotifyRegistrationStatus": unary(self._notified)})])
        self.registration.add_insecure_port(f"unix://{self.reg_socket}")
        self.health = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.health.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(HEALTH_SERVICE, {
            "Check": grpc.unary_unary_rpc_method_handler(check, request_deserializer=bytes,
                                                         response_serializer=bytes)})])
        self.health_port = self.health.add_insecure_port(health_address)

    def _notified(self, req: bytes) -> bytes:
        status = pw.decode(req)
        if pw.integer(status, 1):
            self.registered.set()
            self.log(f"registered with the kubelet as {dra.DRIVER}")
        else:
            self.registered.clear()
            self.log(f"the kubelet refused the registration: {pw.string(status, 2)}")
        return b""

    def start(self) -> None:
        self.health.start()
        self.plugin.start()
        self.registration.start()

    def stop(self) -> None:
        for server in (self.registration, self.plugin, self.health):
            server.stop(None)
        for sock in (self.reg_socket, self.dra_socket):
            sock.unlink(missing_ok=True)


def _api_client() -> Any:
    """In a pod, its service account; elsewhere (tests), ``$KUBECONFIG``."""
    from kubernetes import client, config

    from gpucatalog.core import kubeapi

    if os.environ.get("KUBECONFIG") or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return kubeapi.client_for(None)
    load: Any = config.load_incluster_config  # untyped in the kubernetes package
    load()
    return client.ApiClient()


def main(argv: list[str] | None = None) -> int:
    from kubernetes import client

    ap = drapublisher.arguments("gpu-kubelet-plugin (kind stand-in)")
    ap.add_argument("--cdi-root", type=Path, default=Path(os.environ.get("CDI_ROOT", "/var/run/cdi")))
    ap.add_argument("--registrar-dir", type=Path,
                    default=Path(os.environ.get("KUBELET_REGISTRAR_DIRECTORY_PATH", "/var/lib/kubelet/plugins_registry")))
    ap.add_argument("--plugins-dir", type=Path,
                    default=Path(os.environ.get("KUBELET_PLUGINS_DIRECTORY_PATH", "/var/lib/kubelet/plugins")))
    # Every address of the pod's own network namespace: the kubelet probes the pod's IP.
    ap.add_argument("--health-address", default=f"0.0.0.0:{os.environ.get('HEALTHCHECK_PORT', '51516')}")
    args = ap.parse_args(argv)
    if not args.node_name:
        ap.error("--node-name (or $NODE_NAME) is required")
    api_client = _api_client()
    custom: Any = client.CustomObjectsApi(api_client)

    def read_claim(namespace: str, name: str) -> Mapping[str, Any]:
        obj: Mapping[str, Any] = custom.get_namespaced_custom_object("resource.k8s.io", "v1", namespace,
                                                                      "resourceclaims", name)
        return obj

    def say(msg: str) -> None:
        print(msg, flush=True)

    servers = Servers(Preparer(args.node_name, args.cdi_root, read_claim), args.registrar_dir, args.plugins_dir,
                      args.health_address, log=say)
    servers.start()
    # the kubelet stops the pod with SIGTERM: leave by the finally below, removing the sockets
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    say(f"SIMULATED DRA kubelet plugin for {args.node_name} up (mode {args.mode}, registration "
        f"{servers.reg_socket}, DRA {servers.dra_socket}, health port {servers.health_port}, pid {os.getpid()})")
    try:
        drapublisher.publish_forever(api_client, args)
    finally:
        servers.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
