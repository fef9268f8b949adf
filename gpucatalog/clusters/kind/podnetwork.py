"""The pod network of a kind cluster whose node image was built here.

kind's default CNI, kindnetd, cannot be built here (no registry serves its source), so the
provider wires the network kindnetd would: each node gets a CNI config for the reference
``ptp`` and ``host-local`` plugins on its own pod CIDR (the controller manager assigns them), and
a route to every other node's pod CIDR through that node's address on kind's bridge. Nodes are
fixed for a cluster's life, so routes written once at start stay right; pods on different nodes
reach each other directly, with no overlay and no NAT.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from gpucatalog.core import errors, executor

CONFLIST = "/etc/cni/net.d/10-gpu-catalog.conflist"


@dataclass(frozen=True)
class NodeNet:
    name: str  # kind's node name is its container's name
    pod_cidr: str
    address: str


def conflist(pod_cidr: str) -> str:
    """The CNI configuration of one node: ptp veths, addresses from its pod CIDR, host ports."""
    doc = {"cniVersion": "1.0.0", "name": "gpu-catalog", "plugins": [
        {"type": "ptp", "ipMasq": False, "mtu": 1500,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": True}}]}
    return json.dumps(doc, indent=1) + "\n"


def routes(nodes: list[NodeNet]) -> dict[str, list[tuple[str, str]]]:
    """Per node, (pod CIDR, via) for every other node."""
    return {n.name: [(o.pod_cidr, o.address) for o in nodes if o.name != n.name] for n in nodes}


def _node_nets(core: Any) -> list[NodeNet]:
    out = []
    for n in core.list_node(_request_timeout=10).items:
        ip = next((a.address for a in n.status.addresses or [] if a.type == "InternalIP"), "")
        out.append(NodeNet(n.metadata.name, n.spec.pod_cidr or "", ip))
    return out


def wire(core: Any, expected: int, env: dict[str, str], timeout: float = 120.0) -> list[NodeNet]:
    """Wait until ``expected`` nodes have a pod CIDR and an address, then write each node's CNI
    config and routes; returns the nodes."""
    deadline = time.monotonic() + timeout
    nodes: list[NodeNet] = []
    while True:
        nodes = _node_nets(core)
        if len(nodes) == expected and all(n.pod_cidr and n.address for n in nodes):
            break
        if time.monotonic() > deadline:
            raise errors.ToolError(["kind", "pod-network"], 124,
                                   f"{sum(1 for n in nodes if n.pod_cidr)}/{expected} nodes have a pod CIDR "
                                   f"after {timeout:.0f} s")
        time.sleep(0.5)
    table = routes(nodes)
    for n in nodes:
        for cidr, via in table[n.name]:
            executor.run(["docker", "exec", n.name, "ip", "route", "replace", cidr, "via", via], env=env, timeout=30)
        executor.run(["docker", "exec", "-i", n.name, "tee", CONFLIST], input=conflist(n.pod_cidr), env=env,
                     timeout=30)
    return nodes
