"""Conformance suite ``accelerator_metrics``: every GPU node serves per-GPU utilisation and memory
metrics in a standard machine-readable format (Prometheus text), one series per GPU its shape
declares, with values in range.

One case, ``per_gpu_series``. For each GPU node (``node_selector``, default
``nvidia.com/gpu.present=true``) it finds the metrics agent's running pod on that node (namespace
``metrics_namespace``, default ``gpu-health``; pods ``metrics_selector``; the container port named
``metrics_port_name``, default ``metrics``) and reads ``metrics_path`` (``/metrics``) through the
API server's ``pods/proxy`` subresource, so it needs nothing but the Kubernetes API (and RBAC to
``pods/proxy``). Then, per node:

* the GPUs the node declares (``status.capacity["nvidia.com/gpu"]``, else the label
  ``nvidia.com/gpu.count``) each have exactly one ``gpu_health_gpu_info`` series (distinct
  ``gpu`` index and ``uuid``, labelled with this node);
* each of them has utilisation in 0..1 and memory used/total with 0 <= used <= total > 0; its
  model name agrees with the node's ``nvidia.com/gpu.product`` label and its memory total with
  ``nvidia.com/gpu.memory`` (within 2 %) where the node has those labels; temperature (0..120 C)
  and power draw (0..1.5 x its limit) are checked where served;
* the last reading is at most ``metrics_max_age_s`` (default 120) seconds old (this host's clock).

The metric names are the gpu-health agent's, written down here on purpose instead of imported
(the suite talks to what a cluster serves). Called through ``SUITES`` by the certify pipeline.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from gpucatalog.validators.conformance.kit import base, kube_client
from gpucatalog.validators.conformance.metrics import prom_text

NAME = "accelerator_metrics"
INFO = "gpu_health_gpu_info"
UTIL = "gpu_health_gpu_utilization_ratio"
MEM_USED = "gpu_health_gpu_memory_used_bytes"
MEM_TOTAL = "gpu_health_gpu_memory_total_bytes"
TEMP = "gpu_health_gpu_temperature_celsius"
POWER = "gpu_health_gpu_power_draw_watts"
POWER_LIMIT = "gpu_health_gpu_power_limit_watts"
LAST_CYCLE = "gpu_health_last_cycle_timestamp_seconds"
MIB = 1024 * 1024
DEFAULTS: dict[str, Any] = {
    "metrics_namespace": "gpu-health",
    "metrics_selector": "app.kubernetes.io/name=gpu-health,app.kubernetes.io/component=agent",
    "metrics_port_name": "metrics",
    "metrics_path": "/metrics",
    "node_selector": "nvidia.com/gpu.present=true",
    "metrics_max_age_s": 120,
}


@dataclass
class NodeMetrics:
    """What one node's endpoint showed, for the case's details."""

    node: str
    gpus: int
    series: int
    with_temperature: int = 0
    with_power: int = 0
    example: dict[str, float] = field(default_factory=dict)


def _param(ctx: base.SuiteContext, key: str) -> Any:
    return ctx.params.get(key, DEFAULTS[key])


def declared_gpus(node: dict[str, Any]) -> int:
    """GPUs a node declares: its ``nvidia.com/gpu`` capacity, else GPU feature discovery's count label."""
    name = node["metadata"]["name"]
    raw = ((node.get("status") or {}).get("capacity") or {}).get("nvidia.com/gpu")
    if raw is None:
        raw = (node["metadata"].get("labels") or {}).get("nvidia.com/gpu.count")
    try:
        count = int(str(raw))
    except ValueError:
        count = 0
    if count <= 0:
        raise base.CaseFailed(f"node {name} is selected as a GPU node but declares no GPUs "
                              "(no nvidia.com/gpu capacity or nvidia.com/gpu.count label)")
    return count


def _one(samples: list[prom_text.Sample], who: str, metric: str) -> float | None:
    if len(samples) > 1:
        raise base.CaseFailed(f"{who}: {len(samples)} {metric} series, expected one")
    return samples[0].value if samples else None


def judge(node: dict[str, Any], text: str, now: float, max_age_s: float) -> NodeMetrics:
    """Check one node's exposition against what the node declares; raise ``CaseFailed`` naming
    the node, the GPU and the metric on the first thing that is wrong."""
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels") or {}
    expected = declared_gpus(node)
    samples = prom_text.parse(text)
    others = sorted({s.labels.get("node", "") for s in samples if s.name.startswith("gpu_health_")} - {name})
    if others:
        raise base.CaseFailed(f"node {name}: its agent reports series of node(s) {others}")
    info = [s for s in samples if s.name == INFO]
    indices = sorted({s.labels.get("gpu", "") for s in info})
    uuids = {s.labels.get("uuid", "") for s in info}
    if len(info) != expected or len(indices) != expected or len(uuids) != expected or "" in uuids:
        raise base.CaseFailed(f"node {name}: {len(info)} {INFO} series (GPU indices {indices}, {len(uuids)} "
                              f"distinct UUIDs), the node declares {expected} GPUs")
    last = [s.value for s in samples if s.name == LAST_CYCLE]
    if not last:
        raise base.CaseFailed(f"node {name}: no {LAST_CYCLE}: the age of the readings is unknown")
    if not -60 <= now - last[0] <= max_age_s:
        raise base.CaseFailed(f"node {name}: the readings are from {now - last[0]:.0f}s ago (limit {max_age_s:g}s)")
    by_uuid: dict[str, dict[str, list[prom_text.Sample]]] = {}
    for s in samples:
        if "uuid" in s.labels:
            by_uuid.setdefault(s.labels["uuid"], {}).setdefault(s.name, []).append(s)
    out = NodeMetrics(node=name, gpus=expected, series=len(samples))
    product = labels.get("nvidia.com/gpu.product")
    memory_mib = labels.get("nvidia.com/gpu.memory")
    for gi in sorted(info, key=lambda s: s.labels.get("gpu", "")):
        uuid = gi.labels["uuid"]
        who = f"node {name} GPU {gi.labels.get('gpu')} ({uuid})"
        series = by_uuid.get(uuid, {})
        util = _one(series.get(UTIL, []), who, UTIL)
        used = _one(series.get(MEM_USED, []), who, MEM_USED)
        total = _one(series.get(MEM_TOTAL, []), who, MEM_TOTAL)
        if util is None or used is None or total is None:
            missing = [m for m, v in ((UTIL, util), (MEM_USED, used), (MEM_TOTAL, total)) if v is None]
            raise base.CaseFailed(f"{who}: no {' or '.join(missing)} sample")
        if not 0 <= util <= 1:
            raise base.CaseFailed(f"{who}: {UTIL} {util:g} is outside 0..1")
        if not 0 < total or not 0 <= used <= total:
            raise base.CaseFailed(f"{who}: memory used {used:g} B of total {total:g} B is out of range")
        model = gi.labels.get("model_name", "")
        if not model:
            raise base.CaseFailed(f"{who}: {INFO} has no model_name")
        if product and not product.startswith("-".join(model.split())):
            raise base.CaseFailed(f"{who}: model {model!r} does not match the node's nvidia.com/gpu.product {product!r}")
        if memory_mib and memory_mib.isdigit() and abs(total / MIB - int(memory_mib)) > 0.02 * int(memory_mib):
            raise base.CaseFailed(f"{who}: memory total {total / MIB:.0f} MiB, the node's nvidia.com/gpu.memory "
                                  f"says {memory_mib} MiB")
        temp = _one(series.get(TEMP, []), who, TEMP)
        if temp is not None:
            if not 0 <= temp <= 120:
                raise base.CaseFailed(f"{who}: {TEMP} {temp:g} is outside 0..120")
            out.with_temperature += 1
        power = _one(series.get(POWER, []), who, POWER)
        limit = _one(series.get(POWER_LIMIT, []), who, POWER_LIMIT)
        if power is not None:
            if power < 0 or (limit is not None and power > 1.5 * limit):
                raise base.CaseFailed(f"{who}: {POWER} {power:g} W is out of range (limit {limit} W)")
            out.with_power += 1
        if not out.example:
            out.example = {"utilization": util, "memory_used_gib": round(used / MIB / 1024, 2),
                           "memory_total_gib": round(total / MIB / 1024, 2),
                           **({"temperature_c": temp} if temp is not None else {}),
                           **({"power_w": power} if power is not None else {})}
    return out


def _agent_pod(pods: list[dict[str, Any]], node: str, port_name: str) -> tuple[str, int] | None:
    """(pod name, port number) of the running metrics pod on ``node``; ``None`` while there is none.
    A running pod that declares no port of that name serves no metrics: that fails at once."""
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") != node or (pod.get("status") or {}).get("phase") != "Running":
            continue
        for c in pod["spec"].get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("name") == port_name:
                    return pod["metadata"]["name"], int(p["containerPort"])
        raise base.CaseFailed(f"agent pod {pod['metadata']['name']} on {node} declares no container port named "
                              f"{port_name!r}: it serves no metrics (gpu-health: agent.metrics.enabled)")
    return None


def per_gpu_series(ctx: base.SuiteContext, res: base.CaseResult) -> None:
    kube = kube_client.Kube(ctx.kubeconfig)
    ns, port_name, path = (_param(ctx, k) for k in ("metrics_namespace", "metrics_port_name", "metrics_path"))
    nodes = kube.request("GET", "/api/v1/nodes", query={"labelSelector": _param(ctx, "node_selector")})["items"]
    if not nodes:
        raise base.CaseFailed(f"no GPU nodes ({_param(ctx, 'node_selector')})")
    seen: list[NodeMetrics] = []
    scrape_ms: list[float] = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]

        def pod_on_node(name: str = name) -> tuple[str, int] | None:
            pods = kube.request("GET", f"/api/v1/namespaces/{ns}/pods",
                                query={"labelSelector": _param(ctx, "metrics_selector")})["items"]
            return _agent_pod(pods, name, port_name)

        pod, port = base.wait_for(f"a running metrics agent pod on {name} (namespace {ns})", pod_on_node,
                                  ctx.scaled(60), 1.0)
        url = f"/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy{path}"
        last: list[str] = []

        def scrape(url: str = url, last: list[str] = last) -> str | None:
            t0 = time.monotonic()
            status, text = kube.get_text(url)
            if status == 200:
                scrape_ms.append((time.monotonic() - t0) * 1000)
                return text
            last[:] = [f"HTTP {status}: {text.strip()[:200]}"]
            return None

        try:
            text = base.wait_for(f"GET {url} to answer 200", scrape, ctx.scaled(60), 1.0)
        except base.WaitTimeout as exc:
            raise base.CaseFailed(f"{exc}; last answer: {last[0] if last else 'none'}") from exc
        seen.append(judge(node, text, time.time(), float(_param(ctx, "metrics_max_age_s"))))
    res.details.update({
        "nodes": len(seen), "gpus": sum(n.gpus for n in seen), "series": sum(n.series for n in seen),
        "gpus_with_temperature": sum(n.with_temperature for n in seen),
        "gpus_with_power": sum(n.with_power for n in seen),
        "scrape_ms_p50": round(statistics.median(scrape_ms), 1), "scrape_ms_max": round(max(scrape_ms), 1),
        "via": "pods/proxy", "example": {"node": seen[0].node, **seen[0].example},
    })


CASES: list[tuple[str, base.Case]] = [("per_gpu_series", per_gpu_series)]
# The cases, in run order, as conformance mappings name them.
CASE_NAMES = tuple(name for name, _fn in CASES)


def run(ctx: base.SuiteContext) -> base.SuiteResult:
    return base.run_cases(NAME, ctx, CASES)
