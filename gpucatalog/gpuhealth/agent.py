"""The node agent: every interval, run the probes on this node's host root, write one Node
condition per fault family (plus ``GpuHealthProbeError``) and an Event per non-fatal finding.

Expected values come from flags/env first, then from the node's labels
(``gpu-health.gpu-catalog.io/expect-*``, and ``nvidia.com/gpu.count`` for the GPU count), so one
DaemonSet serves nodes of different shapes. Events get deterministic names (node + finding), so
a restarted agent does not repeat them. With an exporter, each cycle's readings also feed the
``/metrics`` endpoint (:mod:`metrics`). Called by ``main agent``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpucatalog.gpuhealth import conditions, engine, health, kube, metrics, pcie, probes
from gpucatalog.gpuhealth.errors import RemediationError
from gpucatalog.gpuhealth.findings import Expectations

COMPONENT = "gpu-health-agent"
LABEL_EXPECT = {
    "gpu_count": engine.PREFIX + "expect-gpu-count",
    "pcie_gen": engine.PREFIX + "expect-pcie-gen",
    "pcie_width": engine.PREFIX + "expect-pcie-width",
    "nvlinks_per_gpu": engine.PREFIX + "expect-nvlinks",
    "ib_rate_gbps": engine.PREFIX + "expect-ib-rate-gbps",
    "ib_ports": engine.PREFIX + "expect-ib-ports",
}


def expectations_from_labels(base: Expectations, labels: Mapping[str, str]) -> Expectations:
    """Fill the values ``base`` leaves unset from node labels; unparsable labels are ignored."""
    values: dict[str, Any] = {}
    for attr, label in LABEL_EXPECT.items():
        if getattr(base, attr) is not None:
            continue
        raw = labels.get(label)
        if raw is None and attr == "gpu_count":
            raw = labels.get("nvidia.com/gpu.count")
        if raw is None:
            continue
        try:
            values[attr] = float(raw) if attr == "ib_rate_gbps" else int(raw)
        except ValueError:
            continue
    return dataclasses.replace(base, **values) if values else base


def event_name(node: str, key: str) -> str:
    return f"gpu-health.{node}.{hashlib.sha1(key.encode()).hexdigest()[:12]}"  # a name, not security


class Agent:
    def __init__(self, api: kube.Api, node: str, cfg: probes.ProbeConfig, event_namespace: str = "default",
                 logger: Callable[..., None] | None = None, exporter: metrics.Exporter | None = None) -> None:
        self.api = api
        self.node = node
        self.cfg = cfg
        self.event_namespace = event_namespace
        self.reported: set[str] = set()
        self.known_gpus: dict[str, tuple[int, str]] = {}  # PCI -> (index, UUID) seen so far
        self.links = pcie.LinkHistory()  # PCIe readings under load, across cycles
        self.log = logger or (lambda msg, **kv: None)
        self.exporter = exporter  # the /metrics endpoint's readings, when it is served

    def cycle(self, now: float | None = None) -> list[conditions.Condition]:
        now = time.time() if now is None else now
        node = self.api.get(f"/api/v1/nodes/{self.node}")
        labels = (node.get("metadata") or {}).get("labels") or {}
        cfg = dataclasses.replace(self.cfg, expect=expectations_from_labels(self.cfg.expect, labels))
        obs = probes.observe(cfg, self.known_gpus, self.links)
        if self.exporter is not None:
            # before the conditions are written: a failed write leaves the readings served current
            self.exporter.update(obs, time.time())
        conds, events = conditions.build(obs)
        previous = {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []}
        stamp = engine.iso(now)
        self.api.patch_node_conditions(self.node, [c.to_api(stamp, previous.get(c.type)) for c in conds])
        for ev in events:
            name = event_name(self.node, ev.key)
            if name in self.reported:
                continue
            self.api.create_event(self.event_namespace, self.node, ev.type, ev.reason, ev.message, COMPONENT,
                                  name=name, now_iso=stamp)
            self.reported.add(name)
        for probe, err in obs.probe_errors.items():
            self.log("probe failed", probe=probe, error=err)
        return conds

    def run(self, stop: threading.Event, interval_s: float, probe: health.Health | None = None) -> None:
        while not stop.is_set():
            try:
                self.cycle()
                ok, error = True, ""
            except RemediationError as exc:
                self.log("cycle failed; will retry", error=exc)
                ok, error = False, str(exc)
            if probe is not None:
                probe.beat(ok, error)
            stop.wait(interval_s)
