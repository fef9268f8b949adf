"""Entry point of the gpu-health image: ``python3 -m gpucatalog.gpuhealth.main agent|controller|
verify|breaker-reset|inject-xid [flags]`` (console script ``gpu-health``).

Precedence: flags > ``GPU_HEALTH_*`` / downward-API environment > node labels > defaults.
Exit codes: 0 ok, 1 ``verify`` found a fault, 2 bad flags or configuration.

Examples::

    gpu-health agent --node gpu-0 --host-root /host --expect-gpus 8 --expect-ib-rate 400
    gpu-health agent --node gpu-0 --host-root ./nodes/gpu-0 --nvidia-smi ./nodes/gpu-0/usr/bin/nvidia-smi --once
    gpu-health controller --namespace gpu-health --breaker-max-share 0.25 --dry-run
    gpu-health verify --host-root /host --expect-gpus 8
    gpu-health breaker-reset --namespace gpu-health
    gpu-health inject-xid --host-root /host --code 79 --gpu 2     (a synthetic XID, for tests)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from gpucatalog.gpuhealth import (
    actuator,
    agent,
    breaker,
    conditions,
    controller,
    engine,
    health,
    inject,
    kube,
    metrics,
    pcie,
    probes,
    repairpod,
    slurm,
)
from gpucatalog.gpuhealth.errors import ConfigError, GpuHealthError, ProbeError, RemediationError
from gpucatalog.gpuhealth.findings import DEFAULT_REASON_ACTIONS, Expectations
from gpucatalog.gpuhealth.xidpolicy import Action, XidPolicy


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def _opt_int(v: str | None) -> int | None:
    return int(v) if v not in (None, "") else None


def _opt_float(v: str | None) -> float | None:
    return float(v) if v not in (None, "") else None


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"{flag} {item!r}: expected KEY=ACTION")
        out[key.strip()] = value.strip()
    return out


def add_probe_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("probes (paths are read on the node through the host root)")
    g.add_argument("--node", default=_env("NODE_NAME"), help="this node's name (env NODE_NAME)")
    g.add_argument("--host-root", default=_env("GPU_HEALTH_HOST_ROOT", "/host"),
                   help="where the node's / is mounted (default /host; a sim node folder in sim)")
    g.add_argument("--kmsg-path", help="kernel log to scan (default HOST_ROOT/dev/kmsg)")
    g.add_argument("--sys-root", help="sysfs root (default HOST_ROOT/sys)")
    g.add_argument("--nvidia-smi", default=_env("GPU_HEALTH_NVIDIA_SMI", "nvidia-smi"),
                   help="nvidia-smi command (split like a shell would, never run by one)")
    g.add_argument("--expect-gpus", default=_env("GPU_HEALTH_EXPECT_GPUS"), help="GPUs the node shape has")
    g.add_argument("--expect-pcie-gen", default=_env("GPU_HEALTH_EXPECT_PCIE_GEN"))
    g.add_argument("--expect-pcie-width", default=_env("GPU_HEALTH_EXPECT_PCIE_WIDTH"))
    g.add_argument("--expect-nvlinks", default=_env("GPU_HEALTH_EXPECT_NVLINKS"), help="NVLink links up per GPU")
    g.add_argument("--expect-ib-rate", default=_env("GPU_HEALTH_EXPECT_IB_RATE"), help="IB port rate, Gb/sec")
    g.add_argument("--expect-ib-ports", default=_env("GPU_HEALTH_EXPECT_IB_PORTS"))
    g.add_argument("--pcie-busy-readings", type=int,
                   default=int(_env("GPU_HEALTH_PCIE_BUSY_READINGS", "3") or 3),
                   help="consecutive busy readings a PCIe link must be below the shape before it is a fault "
                        "(idle readings are never judged; see docs/gpu-health.md)")
    g.add_argument("--pcie-busy-util", type=int, default=int(_env("GPU_HEALTH_PCIE_BUSY_UTIL", "50") or 50),
                   help="GPU utilisation %% that counts as busy at any performance state (P0-P2 always do)")
    g.add_argument("--xid-action", action="append", default=[], metavar="XID=ACTION",
                   help="override the catalog, e.g. 94=RESET_GPU (NONE|RESET_GPU|REBOOT|HARDWARE_REPAIR)")
    g.add_argument("--xid-default-action", default="HARDWARE_REPAIR", help="for unknown XIDs")
    g.add_argument("--reason-action", action="append", default=[], metavar="REASON=ACTION",
                   help=f"override a finding's action; reasons: {', '.join(DEFAULT_REASON_ACTIONS)}")


def probe_config(a: argparse.Namespace) -> probes.ProbeConfig:
    try:
        expect = Expectations(
            gpu_count=_opt_int(a.expect_gpus), pcie_gen=_opt_int(a.expect_pcie_gen),
            pcie_width=_opt_int(a.expect_pcie_width), nvlinks_per_gpu=_opt_int(a.expect_nvlinks),
            ib_rate_gbps=_opt_float(a.expect_ib_rate), ib_ports=_opt_int(a.expect_ib_ports),
        )
        policy = XidPolicy.from_config(_pairs(a.xid_action, "--xid-action"), a.xid_default_action)
        reasons = dict(DEFAULT_REASON_ACTIONS)
        for k, v in _pairs(a.reason_action, "--reason-action").items():
            if k not in reasons:
                raise ConfigError(f"--reason-action {k}: unknown reason; expected one of {', '.join(reasons)}")
            reasons[k] = Action.parse(v)
    except ValueError as exc:
        raise ConfigError(f"bad probe flag: {exc}") from exc
    if a.pcie_busy_readings < 1:
        raise ConfigError("--pcie-busy-readings must be at least 1")
    if not 0 < a.pcie_busy_util <= 100:
        raise ConfigError("--pcie-busy-util must be in 1..100 (percent)")
    host = Path(a.host_root)
    return probes.ProbeConfig.under_host_root(
        host, expect,
        kmsg_path=Path(a.kmsg_path) if a.kmsg_path else None,
        sys_root=Path(a.sys_root) if a.sys_root else None,
        nvidia_smi=tuple(shlex.split(a.nvidia_smi)),
        xid_policy=policy, reason_actions=reasons,
        pcie_rules=pcie.PcieRules(busy_readings=a.pcie_busy_readings, busy_util_percent=a.pcie_busy_util),
    )


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def cmd_agent(a: argparse.Namespace) -> int:
    if not a.node:
        raise ConfigError("--node (or env NODE_NAME) is required")
    cfg = probe_config(a)
    exporter = metrics.Exporter(a.node) if a.metrics_addr and not a.once else None
    ag = agent.Agent(kube.Api(kube.load(a.kubeconfig)), a.node, cfg, a.event_namespace, logger=controller.log,
                     exporter=exporter)
    if a.once:
        conds = ag.cycle()
        print(json.dumps([c.__dict__ for c in conds], indent=1))
        return 0
    # one agent cycle may wait on nvidia-smi twice (command timeout 30 s each) and a few API calls
    probe = _health(a, default_stale_s=3 * a.interval + 120)
    if exporter is not None:
        metrics.serve(exporter, a.metrics_addr)
    controller.log("agent started", node=a.node, host_root=a.host_root, health=a.health_addr or "off",
                   metrics=a.metrics_addr or "off")
    ag.run(_stop_on_signals(), a.interval, probe)
    return 0


def _health(a: argparse.Namespace, default_stale_s: float) -> health.Health | None:
    """The probe state, served on ``--health-addr`` (nothing is served without one)."""
    if not a.health_addr:
        return None
    stale = a.health_stale_after if a.health_stale_after is not None else default_stale_s
    if stale <= 0:
        raise ConfigError("--health-stale-after must be positive (seconds)")
    probe = health.Health(stale)
    health.serve(probe, a.health_addr)
    return probe


def cmd_verify(a: argparse.Namespace) -> int:
    cfg = probe_config(a)
    if a.node and (os.environ.get("KUBERNETES_SERVICE_HOST") or a.kubeconfig or os.environ.get("KUBECONFIG")):
        try:
            node = kube.Api(kube.load(a.kubeconfig)).get(f"/api/v1/nodes/{a.node}")
            labels = (node.get("metadata") or {}).get("labels") or {}
            cfg = probes.ProbeConfig(**{**cfg.__dict__, "expect": agent.expectations_from_labels(cfg.expect, labels)})
        except (RemediationError, ConfigError) as exc:
            print(f"verify: node labels not read ({exc}); using flags only", file=sys.stderr)
    obs = probes.observe(cfg)
    conds, _ = conditions.build(obs)
    bad = [c for c in conds if c.status != "False"]
    print(json.dumps({"healthy": not bad, "conditions": [c.__dict__ for c in conds]}, indent=1))
    return 1 if bad else 0


def controller_config(a: argparse.Namespace) -> controller.ControllerConfig:
    if not a.namespace:
        raise ConfigError("--namespace (or env POD_NAMESPACE) is required")
    if not 0 < a.breaker_max_share <= 1:
        raise ConfigError("--breaker-max-share must be in (0, 1]")
    if a.verify_mode not in ("pod", "conditions"):
        raise ConfigError("--verify-mode must be pod or conditions")
    policy = engine.Policy(
        dry_run=a.dry_run, max_parallel_repairs=a.max_parallel_repairs, cooldown_s=a.cooldown,
        drain_timeout_s=a.drain_timeout, force_delete_after_drain_timeout=a.force_delete_after_drain_timeout,
        repair_timeout_s=a.repair_timeout, verify_timeout_s=a.verify_timeout,
        flap_threshold=a.flap_threshold, flap_window_s=a.flap_window, slurm_reason_prefix=a.slurm_reason_prefix,
    )
    return controller.ControllerConfig(
        namespace=a.namespace, policy=policy, node_selector=a.node_selector, interval_s=a.interval,
        breaker_share=a.breaker_max_share, breaker_window_s=a.breaker_window,
        breaker_configmap=a.breaker_configmap, verify_mode=a.verify_mode, verify_configmap=a.verify_configmap,
        event_namespace=a.event_namespace, leader_election=a.leader_election, lease_name=a.lease_name,
        identity=a.identity,
    )


def cmd_controller(a: argparse.Namespace) -> int:
    cfg = controller_config(a)
    try:
        act_cfg: Any = json.loads(a.actuator_config) if a.actuator_config else {}
    except ValueError as exc:
        raise ConfigError(f"--actuator-config is not JSON: {exc}") from exc
    act = actuator.from_config(act_cfg)
    hook: slurm.SlurmHook = (slurm.ScontrolSlurm(tuple(shlex.split(a.scontrol)), a.slurm_reason_prefix)
                             if a.slurm == "scontrol" else slurm.NoSlurm(a.slurm_reason_prefix))
    ctl = controller.Controller(kube.Api(kube.load(a.kubeconfig)), cfg, act, hook)
    if a.once:
        plans = ctl.reconcile_once()
        print(json.dumps([{"node": p.node, "from": p.state_from, "to": p.state_to,
                           "effects": [e.kind for e in p.effects]} for p in plans if not p.empty], indent=1))
        return 0
    # a pass over many nodes makes several API calls per node (15 s timeout each)
    probe = _health(a, default_stale_s=max(300.0, 10 * cfg.interval_s))
    controller.log("controller started", namespace=cfg.namespace, dry_run=cfg.policy.dry_run,
                   identity=cfg.identity, health=a.health_addr or "off")
    ctl.run(_stop_on_signals(), probe)
    return 0


def cmd_breaker_reset(a: argparse.Namespace) -> int:
    api = kube.Api(kube.load(a.kubeconfig))
    path = f"/api/v1/namespaces/{a.namespace}/configmaps/{a.breaker_configmap}"
    cm = api.get(path)
    b = breaker.Breaker.from_data(cm.get("data"), 1.0, 1.0)
    b.reset()
    data = dict(cm.get("data") or {})
    data.update({k: v for k, v in b.to_data().items() if k in ("status", "entries", "trippedAt", "trippedReason")})
    cm["data"] = data
    api.replace(path, cm)
    print(f"circuit breaker {a.namespace}/{a.breaker_configmap} reset to CLOSED")
    return 0


def cmd_inject_xid(a: argparse.Namespace) -> int:
    """One synthetic XID line into the kernel log (or, with --clear, the synthetic lines out)."""
    cfg = probe_config(a)
    if a.clear:
        try:
            uuids = {g.pci_bus_id: g.uuid for g in probes.read_smi(cfg).gpus}
        except ProbeError:
            uuids = {}  # nvidia-smi is only a help here: the kernel log's own lines name GPUs too
        try:
            print(inject.clear(cfg.kmsg_path, uuids))
        except inject.NotClearable as exc:
            print(f"gpu-health: {exc}", file=sys.stderr)
            return 2
        return 0
    if a.code is None or a.gpu is None:
        raise ConfigError("inject-xid needs --code and --gpu (or --clear)")
    if a.code <= 0:
        raise ConfigError(f"--code {a.code}: an XID is a positive number, e.g. 79")
    try:
        smi = probes.read_smi(cfg)
    except ProbeError as exc:
        raise ConfigError(f"cannot resolve --gpu {a.gpu} to its PCI bus id: {exc}") from exc
    bus_id = inject.gpu_bus_id(smi, a.gpu)
    if a.injection:
        if not re.fullmatch(r"[0-9a-z]{4,32}", a.injection):
            raise ConfigError(f"--injection {a.injection!r}: 4 to 32 lowercase letters or digits")
        seen = inject.already_written(cfg.kmsg_path, a.injection)
        if seen is not None:
            print(json.dumps({"kmsg": str(cfg.kmsg_path), "record": seen, "alreadyWritten": True}))
            return 0
    written = inject.write(cfg.kmsg_path, inject.message(bus_id, a.code, a.injection))
    print(json.dumps({"kmsg": str(written.path), "device": written.device, "record": written.record}))
    return 0


def add_health_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--health-addr", default=_env("GPU_HEALTH_HEALTH_ADDR", ""),
                   help="serve /healthz and /readyz on HOST:PORT (the chart: the pod IP); default: off")
    p.add_argument("--health-stale-after", type=float, default=None,
                   help="seconds without a finished loop iteration before /healthz fails (default: "
                        "agent 3 x interval + 120, controller max(300, 10 x interval))")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu-health", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", default=None, help="kubeconfig (default: in-cluster, else $KUBECONFIG)")
    sub = p.add_subparsers(dest="command", required=True)

    ag = sub.add_parser("agent", help="probe this node and publish conditions/events",
                        description="example: gpu-health agent --node gpu-0 --expect-gpus 8")
    add_probe_flags(ag)
    ag.add_argument("--interval", type=float, default=float(_env("GPU_HEALTH_INTERVAL", "10") or 10))
    ag.add_argument("--event-namespace", default="default")
    ag.add_argument("--once", action="store_true", help="one cycle, print the conditions, exit")
    ag.add_argument("--metrics-addr", default=_env("GPU_HEALTH_METRICS_ADDR", ""),
                    help="serve per-GPU Prometheus metrics on HOST:PORT/metrics (the chart: the pod IP, when "
                         "agent.metrics.enabled); default: off")
    add_health_flags(ag)
    ag.set_defaults(fn=cmd_agent)

    vf = sub.add_parser("verify", help="probe once; exit 0 when healthy (the verification workload)",
                        description="example: gpu-health verify --host-root /host --expect-gpus 8")
    add_probe_flags(vf)
    vf.set_defaults(fn=cmd_verify)

    ct = sub.add_parser("controller", help="run the remediation controller",
                        description="example: gpu-health controller --namespace gpu-health --dry-run")
    ct.add_argument("--namespace", default=_env("POD_NAMESPACE"))
    ct.add_argument("--node-selector", default="nvidia.com/gpu.present=true")
    ct.add_argument("--interval", type=float, default=2.0, help="seconds between passes")
    ct.add_argument("--dry-run", action="store_true", help="log plans, change nothing")
    ct.add_argument("--max-parallel-repairs", type=int, default=2)
    ct.add_argument("--cooldown", type=float, default=300.0, help="seconds between two repairs of a node")
    ct.add_argument("--drain-timeout", type=float, default=600.0)
    ct.add_argument("--force-delete-after-drain-timeout", action="store_true")
    ct.add_argument("--repair-timeout", type=float, default=1200.0)
    ct.add_argument("--verify-timeout", type=float, default=600.0)
    ct.add_argument("--flap-threshold", type=int, default=3, help="faults in the window -> hardware repair")
    ct.add_argument("--flap-window", type=float, default=86400.0)
    ct.add_argument("--breaker-max-share", type=float, default=0.25)
    ct.add_argument("--breaker-window", type=float, default=600.0)
    ct.add_argument("--breaker-configmap", default="gpu-health-breaker")
    ct.add_argument("--verify-mode", default="pod", help="pod (run the verify workload) or conditions")
    ct.add_argument("--verify-configmap", default="gpu-health-verify")
    ct.add_argument("--actuator-config", default=_env("GPU_HEALTH_ACTUATOR"), help="JSON, see actuator.py")
    ct.add_argument("--slurm", default="none", choices=["none", "scontrol"])
    ct.add_argument("--scontrol", default="scontrol")
    ct.add_argument("--slurm-reason-prefix", default=slurm.DEFAULT_PREFIX)
    ct.add_argument("--event-namespace", default="default")
    ct.add_argument("--leader-election", action=argparse.BooleanOptionalAction, default=True)
    ct.add_argument("--lease-name", default="gpu-health-controller")
    ct.add_argument("--identity", default=_env("POD_NAME", f"gpu-health-{os.getpid()}"))
    ct.add_argument("--once", action="store_true", help="one reconcile pass (no leader election), print plans")
    add_health_flags(ct)
    ct.set_defaults(fn=cmd_controller)

    br = sub.add_parser("breaker-reset", help="close a tripped circuit breaker (a deliberate human act)",
                        description="example: gpu-health breaker-reset --namespace gpu-health")
    br.add_argument("--namespace", default=_env("POD_NAMESPACE"), required=_env("POD_NAMESPACE") is None)
    br.add_argument("--breaker-configmap", default="gpu-health-breaker")
    br.set_defaults(fn=cmd_breaker_reset)

    ij = sub.add_parser("inject-xid", help="write one synthetic XID line into the node's kernel log (tests only)",
                        description="example: gpu-health inject-xid --host-root /host --code 79 --gpu 2\n"
                                    "The line names process gpu-catalog-inject and says it is synthetic; the GPU's "
                                    "PCI bus id comes from nvidia-smi, as the agent reads it. --clear removes "
                                    "such lines from a regular file (the sim); a real kernel log keeps them until "
                                    "the node's repair (exit 2 while one is active).")
    add_probe_flags(ij)
    ij.add_argument("--code", type=int, help="the XID number, e.g. 79")
    ij.add_argument("--gpu", type=int, help="the GPU index, as nvidia-smi lists it")
    ij.add_argument("--injection", metavar="ID",
                    help="this injection's id (default: random); a record with the same id already in the "
                         "kernel log is not written again, so a retried injection writes one line")
    ij.add_argument("--clear", action="store_true", help="take the synthetic XID lines back out")
    ij.set_defaults(fn=cmd_inject_xid)

    repairpod.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        rc: int = args.fn(args)
        return rc
    except ConfigError as exc:
        print(f"gpu-health: {exc}", file=sys.stderr)
        return 2
    except GpuHealthError as exc:
        print(f"gpu-health: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
