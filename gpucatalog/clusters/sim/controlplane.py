"""Command lines of the sim cluster's processes, in start order.

Called by the supervisor. etcd, kube-apiserver, kube-controller-manager and kube-scheduler are
the pinned upstream binaries with RBAC, ServiceAccount tokens and admission on, all bound to
127.0.0.1. kwok manages the simulated nodes and fakes ordinary pods; the sim kubelet runs the
pods whose image it knows; the node agent does the sim-only driver work.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from gpucatalog.clusters.sim import imagemap
from gpucatalog.clusters.sim import pki as pki_mod
from gpucatalog.clusters.sim.config import ClusterConfig
from gpucatalog.clusters.sim.layout import Layout

POD_CIDR = "10.244.0.0/16"  # kwok-faked pods; sim-kubelet pods get 127.<slot>.x.y
SERVICE_CIDR = "10.96.0.0/16"


@dataclass(frozen=True)
class Component:
    name: str
    argv: list[str]
    # health probe: "https://…" or "http://…" URL (any HTTP answer means serving, 200 healthy),
    # or "" for liveness only.
    health: str
    # the phase it belongs to: "storage" starts first, "api" once etcd answers, "rest" once the
    # API server is ready.
    phase: str
    env: dict[str, str] = field(default_factory=dict)


def components(cfg: ClusterConfig, lay: Layout) -> list[Component]:
    p = cfg.ports
    b = cfg.binaries
    pki = pki_mod.Pki(lay.pki)
    etcd_url = f"http://127.0.0.1:{p['etcd']}"
    peer_url = f"http://127.0.0.1:{p['etcd_peer']}"
    py_env = {"PYTHONPATH": cfg.python_path, "PYTHONUNBUFFERED": "1"}
    return [
        Component(
            "egress-proxy",
            [sys.executable, "-m", "gpucatalog.clusters.sim.egress", "--state", str(lay.root)],
            "",
            "storage",
            py_env,
        ),
        Component(
            "etcd",
            [
                b["etcd"], "--name=sim", f"--data-dir={lay.etcd_data}",
                f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=sim={peer_url}", "--initial-cluster-state=new",
                # a throw-away test store: durability buys nothing, fsync costs seconds
                "--unsafe-no-fsync=true", "--auto-compaction-mode=periodic",
                "--auto-compaction-retention=5m", "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
            f"{etcd_url}/health",
            "storage",
        ),
        Component(
            "kube-apiserver",
            [
                b["kube-apiserver"], f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={p['apiserver']}",
                f"--tls-cert-file={pki.crt('apiserver')}", f"--tls-private-key-file={pki.key('apiserver')}",
                f"--client-ca-file={pki.ca_crt}",
                "--authorization-mode=Node,RBAC", "--anonymous-auth=false",
                f"--service-account-key-file={pki.sa_pub}", f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
                # webhooks and aggregated APIs are called on a Service's endpoint addresses
                # (the pod IPs) rather than its ClusterIP, which nothing here routes.
                "--enable-aggregator-routing=true",
                # ... and reaches those pod IPs through the sim's egress proxy (see egress.py)
                f"--egress-selector-config-file={lay.root / 'egress-selector.yaml'}",
                # Endpoints may not hold loopback addresses, and the API server's address is one.
                "--endpoint-reconciler-type=none",
                f"--requestheader-client-ca-file={pki.ca_crt}", "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.crt('front-proxy-client')}",
                f"--proxy-client-key-file={pki.key('front-proxy-client')}",
                # kubectl logs/exec reach a node's kubelet API (the sim kubelet's) at its InternalIP
                # 127.0.0.1, not at its name, which nothing resolves; with the one client
                # certificate that API accepts
                "--kubelet-preferred-address-types=InternalIP",
                *([f"--kubelet-client-certificate={pki.crt('apiserver-kubelet-client')}",
                   f"--kubelet-client-key={pki.key('apiserver-kubelet-client')}"]
                  if pki.crt("apiserver-kubelet-client").is_file() else []),
                "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
                # Sim nodes are created Ready (nodes.node_object): the not-ready taint this plugin
                # puts on every new node would only cost the controller manager a PATCH per node to
                # take it off again. A node that turns NotReady later is still tainted, by the
                # node lifecycle controller.
                "--disable-admission-plugins=TaintNodesByCondition",
                "--profiling=false", "--event-ttl=30m",
            ],
            f"https://127.0.0.1:{p['apiserver']}/readyz",
            "api",
        ),
        Component(
            "kube-controller-manager",
            [
                b["kube-controller-manager"], f"--kubeconfig={lay.component_kubeconfig('kube-controller-manager')}",
                f"--authentication-kubeconfig={lay.component_kubeconfig('kube-controller-manager')}",
                f"--authorization-kubeconfig={lay.component_kubeconfig('kube-controller-manager')}",
                "--bind-address=127.0.0.1", f"--secure-port={p['kube-controller-manager']}",
                "--leader-elect=false", "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}", f"--root-ca-file={pki.ca_crt}",
                f"--cluster-signing-cert-file={pki.ca_crt}", f"--cluster-signing-key-file={pki.ca_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--node-monitor-grace-period={cfg.node_monitor_grace_s}s", "--kube-api-qps=500", "--kube-api-burst=1000",
                "--controllers=*,-cloud-node-lifecycle-controller,-node-route-controller,-service-lb-controller",
                # 5 by default: each pod create waits on Kueue's pod webhook, so hundreds of Jobs
                # unsuspended at once got their pods at 3 a second (the scale suite)
                "--concurrent-job-syncs=50",
            ],
            f"https://127.0.0.1:{p['kube-controller-manager']}/healthz",
            "rest",
        ),
        Component(
            "kube-scheduler",
            [
                b["kube-scheduler"], f"--kubeconfig={lay.component_kubeconfig('kube-scheduler')}",
                f"--authentication-kubeconfig={lay.component_kubeconfig('kube-scheduler')}",
                f"--authorization-kubeconfig={lay.component_kubeconfig('kube-scheduler')}",
                "--bind-address=127.0.0.1", f"--secure-port={p['kube-scheduler']}", "--leader-elect=false",
                "--kube-api-qps=500", "--kube-api-burst=1000",
            ],
            f"https://127.0.0.1:{p['kube-scheduler']}/healthz",
            "rest",
        ),
        Component(
            "kwok",
            [
                b["kwok"], f"--kubeconfig={lay.component_kubeconfig('kwok')}", f"--config={lay.kwok_config}",
                "--manage-all-nodes=true", f"--cidr={POD_CIDR}", "--node-ip=127.0.0.1",
                f"--server-address=127.0.0.1:{p['kwok']}",
                # nodes advertise the sim kubelet's API (kubeletapi), which serves exec into its
                # pods and relays the rest here: container logs of sim-kubelet pods from their
                # Logs objects (a cluster made before that API advertises kwok's port itself)
                f"--node-port={p.get('kubelet', p['kwok'])}", "--enable-crds=Logs",
                f"--tls-cert-file={pki.crt('kubelet-server')}", f"--tls-private-key-file={pki.key('kubelet-server')}",
            ],
            f"http://127.0.0.1:{p['kwok']}/healthz",
            "rest",
        ),
        Component(
            "sim-kubelet",
            [sys.executable, "-m", "gpucatalog.clusters.sim.kubelet", "--state", str(lay.root)],
            "",
            "rest",
            # the cluster's own image map, whatever the environment of whoever started it says
            {**py_env, imagemap.CLUSTER_ENV: str(lay.image_map)},
        ),
        Component(
            "node-agent",
            [sys.executable, "-m", "gpucatalog.clusters.sim.nodeagent", "--state", str(lay.root)],
            "",
            "rest",
            py_env,
        ),
    ]
