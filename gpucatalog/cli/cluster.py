"""``catalog cluster``: start, inspect, fault and stop the embedded sim cluster.

``up`` prints progress on stderr and, as its last stdout line, the kubeconfig path, so scripts
can do ``KUBECONFIG=$(catalog cluster up | tail -1)``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpucatalog.clusters import shapes
from gpucatalog.clusters.kind import cluster as kind_cluster
from gpucatalog.clusters.kind.cluster import KindCluster
from gpucatalog.clusters.sim import SimCluster, faults, list_clusters
from gpucatalog.core import errors
from gpucatalog.toolchain import releases

EPILOG = """examples:
  catalog cluster up --nodes 8 --shape h100-80gb-x8
  catalog cluster up --image-map kai-images.yaml      # run KAI's own binaries (docs/kai.md)
  catalog cluster up --kubernetes 1.35                # another listed minor (built on first use)
  KUBECONFIG=$(catalog cluster up --name ci | tail -1) kubectl get nodes
  catalog cluster status --name ci --json
  catalog cluster inject-fault h100-node-0003 --kind xid --code 79 --gpu 2
  catalog cluster inject-fault h100-node-0003 --kind clear
  catalog cluster down --name ci
  catalog cluster up --provider kind --nodes 2       # real kubelets in Docker (catalog engine up first)
  catalog cluster inject-fault gpucatalog-ci-worker --provider kind --name ci --kind xid --code 79
  catalog cluster down --provider kind
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "cluster",
        help="the embedded sim cluster (real control plane, simulated GPU nodes)",
        description="Start, inspect, fault and stop a sim cluster: etcd, kube-apiserver, controller "
        "manager and scheduler built from pinned releases, kwok GPU nodes, the sim kubelet.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    csub = p.add_subparsers(dest="cluster_command", metavar="ACTION", parser_class=type(p))

    up = csub.add_parser("up", help="start a cluster; prints its kubeconfig path last",
                         epilog="example:\n  catalog cluster up --nodes 100 --shape h200-141gb-x8",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    up.add_argument("--name", default="sim", help="cluster name (default: sim)")
    up.add_argument("--provider", choices=["sim", "kind"], default="sim",
                    help="sim (default) or kind: real kubelets in Docker containers (docs/kind.md); kind takes "
                         "--nodes (workers, 1-16), --shape and --timeout")
    up.add_argument("--nodes", type=int, default=8, help="number of simulated nodes, 1-10000 (default: 8)")
    up.add_argument("--shape", default="h100-80gb-x8", help=f"node shape: {', '.join(shapes.catalogue())}")
    up.add_argument("--api-port", type=int, help="API server port on 127.0.0.1 (default: a free one)")
    up.add_argument("--restart", default="always", choices=["always", "on-failure", "never"],
                    help="restart policy of the cluster's processes (default: always)")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for Ready nodes")
    up.add_argument("--image-map", type=Path, metavar="FILE",
                    help="image-map overlay: images to run as executables on this host (bring your own binaries); "
                         "default $GPU_CATALOG_IMAGE_MAP")
    up.add_argument("--kubernetes", metavar="MINOR",
                    help="Kubernetes release of the control plane: "
                         + ", ".join(releases.minor(r) for r in releases.supported())
                         + f" (default {releases.minor(releases.default())}); another minor is built on first use")
    up.set_defaults(func=_up)

    st = csub.add_parser("status", help="show the cluster's processes and their health",
                         epilog="example:\n  catalog cluster status --json",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    st.add_argument("--name", default="sim")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=_status)

    dn = csub.add_parser("down", help="stop every process and delete the cluster's state",
                         epilog="example:\n  catalog cluster down --name ci",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    dn.add_argument("--name", default="sim")
    dn.add_argument("--provider", choices=["sim", "kind"], default="sim")
    dn.set_defaults(func=_down)

    ls = csub.add_parser("list", help="list clusters with state on this machine")
    ls.set_defaults(func=_list)

    inj = csub.add_parser("inject-fault", help="write a GPU/NVLink/PCIe/IB fault into a node's folder",
                          epilog="examples:\n  catalog cluster inject-fault h100-node-0000 --kind xid --code 79\n"
                          "  catalog cluster inject-fault h100-node-0000 --kind ib-rate --rate '200 Gb/sec (2X NDR)'",
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    inj.add_argument("node", metavar="NODE")
    inj.add_argument("--name", default="sim")
    inj.add_argument("--provider", choices=["sim", "kind"], default="sim",
                     help="kind: into the node folder a kind GPU worker holds (docs/kind.md)")
    inj.add_argument("--kind", required=True, choices=faults.KINDS)
    inj.add_argument("--code", type=int, help="XID code (kind xid)")
    inj.add_argument("--gpu", type=int, default=0, help="GPU index (default 0)")
    inj.add_argument("--link", type=int, default=0, help="NVLink link (kind nvlink-down)")
    inj.add_argument("--width", type=int, help="PCIe lanes now (kind pcie-downgrade; default half)")
    inj.add_argument("--gen", type=int, help="PCIe generation now (kind pcie-downgrade)")
    inj.add_argument("--rate", help="IB rate line now (kind ib-rate; default half width)")
    inj.add_argument("--device", help="IB device (default the first, mlx5_0)")
    inj.set_defaults(func=_inject)

    nd = csub.add_parser("node-dir", help="print the folder holding a node's simulated hardware readings")
    nd.add_argument("node", metavar="NODE")
    nd.add_argument("--name", default="sim")
    nd.set_defaults(func=_node_dir)


def _up(args: argparse.Namespace) -> int:
    if args.provider == "kind":
        kind = KindCluster(args.name)
        path = kind.up(args.nodes, args.shape, timeout=max(args.timeout, 300.0),
                       progress=lambda m: print(m, file=sys.stderr, flush=True))
        kind.wait_ready(args.timeout)
        print(path)
        return 0
    kubeconfig = SimCluster(args.name).up(
        args.nodes, args.shape, restart=args.restart, api_port=args.api_port, timeout=args.timeout,
        progress=lambda m: print(m, file=sys.stderr, flush=True), image_map=args.image_map,
        kubernetes=args.kubernetes,
    )
    print(kubeconfig)
    return 0


def _status(args: argparse.Namespace) -> int:
    st = SimCluster(args.name).status()
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        print(f"cluster {st['name']}: {st['phase']}  api {st['api_server']}")
        for name, c in st["components"].items():
            state = "alive" if c.get("alive") else "DEAD"
            health = {True: "healthy", False: "unhealthy", None: "-"}[c.get("healthy")]
            print(f"  {name:24} {state:6} {health:10} restarts={c.get('restarts', 0)} pid={c.get('pid')}")
    return 0 if st["healthy"] else 1


def _down(args: argparse.Namespace) -> int:
    if args.provider == "kind":
        KindCluster(args.name).down()
    else:
        try:
            SimCluster(args.name).down()
        except errors.NotFoundError as exc:
            if args.name in kind_cluster.list_clusters():  # the provider's default is sim
                raise errors.NotFoundError(f"{exc.message}; a kind cluster has that name", field="--provider",
                                           expected=f"catalog cluster down --provider kind --name {args.name}") from exc
            raise
    print(f"cluster {args.name} stopped and removed", file=sys.stderr)
    return 0


def _list(args: argparse.Namespace) -> int:
    """One line per cluster: name, provider, running|dead (a kind cluster listed is running)."""
    for name in list_clusters():
        print(f"{name}\tsim\t{'running' if SimCluster(name).running() else 'dead'}")
    for name in kind_cluster.list_clusters():
        print(f"{name}\tkind\trunning")
    return 0


def _inject(args: argparse.Namespace) -> int:
    target = KindCluster(args.name) if args.provider == "kind" else SimCluster(args.name)
    print(target.inject_fault(
        args.node, args.kind, code=args.code, gpu=args.gpu, link=args.link, width=args.width, gen=args.gen,
        rate=args.rate, device=args.device,
    ))
    return 0


def _node_dir(args: argparse.Namespace) -> int:
    print(SimCluster(args.name).node_dir(args.node))
    return 0
