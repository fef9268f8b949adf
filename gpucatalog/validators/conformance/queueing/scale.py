"""The queueing contract at scale: the ``scale`` suite's cases, each measured against a threshold
the bundle sets (``suiteParams.scale.thresholds``), as Kueue's and KAI's own scale tests measure
themselves (docs/scale.md quotes their published figures).

A case works through the stack's adapter, as ``quota_reclaim`` and ``gang`` do (Kueue's Jobs,
ClusterQueues and Cohorts; KAI's pods, PodGroups and queues), but on every free GPU of the cluster
and without pinning units to nodes. It measures one figure; a figure above its threshold fails the
case, naming both. The figures, and for the fills how many units of each team ran over time
(``series``, for the report's plot), go into ``details``.

- ``fill_single_gpu_jobs``: ``jobs`` one-GPU units (default: one per free GPU) over ``teams``
  teams, each guaranteed its share: seconds from the first submit until all are scheduled
  (``fill_s``), with the submit time and the rate. First, the cluster's own **floor** for as many
  pods (:meth:`Scale.floor`): pods no scheduler sees, bound by the suite as they appear, so the
  case also states the stack's time above the floor (``over_floor_s``).
- ``fill_with_backlog``: ``backlog`` times as many units as free GPUs, the teams' quotas adding up
  to the GPUs: seconds until every GPU runs one (``fill_with_backlog_s``); at no sample do more
  units run than there are GPUs.
- ``reclaim_one_gpu_when_full``: team A (quota: half the GPUs) fills every GPU, borrowing idle
  B's half; B then submits one unit at a time, ``reclaim_samples`` times, each waited for: p50
  and p95 from submit to scheduled (``reclaim_one_gpu_p95_s``).
- ``reclaim_large_job``: A fills every GPU, borrowing B's quota of ``large_job_gpus``; B submits
  one all-or-nothing job of that many one-GPU pods: seconds until all run
  (``large_job_reclaim_s``).
- ``distributed_job_allocation``: one all-or-nothing job of ``distributed_pods`` one-GPU pods on
  the otherwise idle cluster, not pinned: seconds until all are scheduled (``distributed_job_s``).

With ``gpus`` set, each case runs on whole idle nodes holding that many GPUs, the other GPU nodes
cordoned for the case (:meth:`Scale.pool`): the control plane and scheduler still carry every
node, and "the cluster is full" costs that many units (on 2 cores, 4,000 Jobs take Kueue longer
than the suite's budget; docs/scale.md).

Called by ``queueing_suites.scale``; talks only to the Kubernetes API.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import urllib3

from gpucatalog.validators.conformance.kit import base, gpu_inventory, kube_client
from gpucatalog.validators.conformance.queueing import math as queueing_math
from gpucatalog.validators.conformance.queueing.contract import Adapter, Dept, Space, Team

# case -> the threshold (seconds, an upper bound) it is measured against
THRESHOLDS = {"fill_single_gpu_jobs": "fill_s", "fill_with_backlog": "fill_with_backlog_s",
              "reclaim_one_gpu_when_full": "reclaim_one_gpu_p95_s", "reclaim_large_job": "large_job_reclaim_s",
              "distributed_job_allocation": "distributed_job_s"}
CASES = tuple(THRESHOLDS)
# The floor's pods name a scheduler that does not exist: only the suite binds them.
FLOOR_SCHEDULER = "gpu-catalog-floor"
FLOOR_IMAGE = "registry.k8s.io/pause:3.10"
FLOOR_BINDERS = 8
# Only the names of pods bound to a node: a poll of thousands of pods stays cheap for the API server.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
SERIES_POINTS = 60


@dataclass(frozen=True)
class ScaleParams:
    """``suiteParams.scale`` of the bundle's profile. Sizes of 0 mean "from the cluster"."""

    thresholds: Mapping[str, float]
    gpus: int = 0  # the GPUs each case works on (0: every free one); see Scale.pool
    jobs: int = 0  # fill: units to submit (0: one per free GPU)
    teams: int = 4
    backlog: float = 2.0  # fill_with_backlog: units per free GPU
    reclaim_samples: int = 10
    large_job_gpus: int = 0  # 0: half the free GPUs
    distributed_pods: int = 0  # 0: an eighth of the free GPUs, at least 2
    wait_seconds: float = 900.0  # one wait (a fill, one reclaim), times the context's timeout scale
    poll_seconds: float = 1.0


def parse(raw: Mapping[str, Any]) -> ScaleParams:
    """The suite's parameters; ``CaseFailed`` naming the field when one is missing or not a
    positive number (every case needs its threshold: a figure without one proves nothing)."""
    where = "suiteParams.scale"
    thresholds = raw.get("thresholds")
    if not isinstance(thresholds, Mapping):
        raise base.CaseFailed(f"{where}.thresholds is missing: the bundle must set "
                              f"{', '.join(THRESHOLDS.values())} (seconds)")
    bad = [k for k in THRESHOLDS.values() if not _positive(thresholds.get(k))]
    unknown = sorted(set(thresholds) - set(THRESHOLDS.values()))
    if bad or unknown:
        raise base.CaseFailed(f"{where}.thresholds: " + "; ".join(
            ([f"{', '.join(bad)} must be positive numbers of seconds"] if bad else [])
            + ([f"unknown {', '.join(unknown)}"] if unknown else [])))
    sizes: dict[str, Any] = {}
    for name, kind in (("gpus", int), ("jobs", int), ("teams", int), ("backlog", float), ("reclaim_samples", int),
                       ("large_job_gpus", int), ("distributed_pods", int), ("wait_seconds", float),
                       ("poll_seconds", float)):
        if name in raw:
            value = raw[name]
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0 \
                    or (kind is int and value != int(value)):
                raise base.CaseFailed(f"{where}.{name}: expected a {'whole ' if kind is int else ''}number >= 0, "
                                      f"got {value!r}")
            sizes[name] = kind(value)
    if sizes.get("teams", 1) < 1 or sizes.get("backlog", 2.0) < 1 or sizes.get("reclaim_samples", 1) < 1:
        raise base.CaseFailed(f"{where}: teams and reclaim_samples must be at least 1, backlog at least 1")
    return ScaleParams(thresholds={k: float(thresholds[k]) for k in THRESHOLDS.values()}, **sizes)


def _epoch(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _positive(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


def within(res: base.CaseResult, case: str, figure: float, p: ScaleParams) -> None:
    """Record the figure and its threshold; fail the case when the figure is above it."""
    key = THRESHOLDS[case]
    limit = p.thresholds[key]
    res.details["figure"] = {"name": key, "seconds": round(figure, 3), "threshold": limit}
    if figure > limit:
        raise base.CaseFailed(f"{key} {figure:.1f}s is above the bundle's threshold of {limit:g}s")


def _floor_pod(name: str, scheduler: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False,
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "main", "image": FLOOR_IMAGE, "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {gpu_inventory.GPU: "1"}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {base.SUITE_LABEL: "floor"}},
            "spec": spec}


def shares(total: int, k: int) -> list[int]:
    """``total`` split over ``k`` parts as evenly as whole numbers allow (the first get one more)."""
    return [total // k + (1 if i < total % k else 0) for i in range(k)]


def series(bound_at: Mapping[str, list[float]], t0: float, points: int = SERIES_POINTS) -> dict[str, list[list[float]]]:
    """Per team, ``[seconds since t0, units running]`` at up to ``points`` evenly spaced times
    (the last one when the last unit of any team was bound): what the report plots."""
    ends = [t for times in bound_at.values() for t in times]
    if not ends:
        return {}
    span = max(0.0, max(ends) - t0)
    steps = [span * i / (points - 1) for i in range(points)] if span > 0 else [0.0]
    out: dict[str, list[list[float]]] = {}
    for team, times in bound_at.items():
        rel = sorted(t - t0 for t in times)
        out[team] = [[round(s, 1), sum(1 for r in rel if r <= s)] for s in steps]
    return out


class Scale:
    """The scale cases, run through one adapter."""

    def __init__(self, ctx: base.SuiteContext, adapter: Adapter, p: ScaleParams) -> None:
        self.a, self.p, self.kube = adapter, p, adapter.kube
        self.wait_s = ctx.scaled(p.wait_seconds)

    @contextlib.contextmanager
    def pool(self, res: base.CaseResult) -> Iterator[None]:
        """The case's cluster: with ``gpus`` below the free GPUs, whole idle nodes holding up to
        ``gpus`` stay schedulable and every other GPU node is cordoned for the case (and
        uncordoned after; a node someone else cordoned stays so). Every stack honours a cordon,
        so "every GPU is busy" needs that many units, not the whole cluster's, while the
        scheduler still sees every node. Without ``gpus``: the whole cluster, nothing cordoned."""
        free = gpu_inventory.free_gpus(self.kube)
        if not self.p.gpus or self.p.gpus >= sum(free.values()):
            yield
            return
        capacity = gpu_inventory.gpu_capacity(self.kube)
        idle = {n: c for n, c in free.items() if c and c == capacity.get(n)}
        keep, kept = gpu_inventory.whole_nodes(idle, self.p.gpus)
        others = sorted(set(free) - set(keep))
        res.details["pool"] = {"gpus": kept, "nodes": len(keep), "cordoned_nodes": len(others)}
        done: list[str] = []
        try:
            for name in others:
                self._cordon(name, True)
                done.append(name)
            yield
        finally:
            for name in done:
                self._cordon(name, False)

    def run(self, name: str, res: base.CaseResult) -> None:
        """Case ``name`` on its pool of GPUs."""
        with self.pool(res):
            getattr(self, name)(res)

    def _cordon(self, node: str, on: bool) -> None:
        self.kube.request("PATCH", f"/api/v1/nodes/{node}", {"spec": {"unschedulable": on or None}},
                          content_type="application/merge-patch+json")

    # -- reading the cluster ----------------------------------------------------------------------
    def free(self) -> int:
        return sum(gpu_inventory.free_gpus(self.kube).values())

    def bound(self, sp: Space, group: str) -> int:
        """Units of ``group`` bound to a node and not terminating (names only, from the server)."""
        found = self.kube.request("GET", f"/api/v1/namespaces/{sp.ns}/pods", accept=METADATA_ONLY, query={
            "labelSelector": f"{base.SUITE_LABEL}={group}", "fieldSelector": "spec.nodeName!="})
        return sum(1 for x in found.get("items") or [] if not (x.get("metadata") or {}).get("deletionTimestamp"))

    def bound_times(self, sp: Space, group: str) -> list[float]:
        """When each bound pod of ``group`` was scheduled (its PodScheduled condition, whole seconds)."""
        found = self.kube.request("GET", f"/api/v1/namespaces/{sp.ns}/pods", query={
            "labelSelector": f"{base.SUITE_LABEL}={group}", "fieldSelector": "spec.nodeName!="})
        out = []
        for x in found.get("items") or []:
            for c in (x.get("status") or {}).get("conditions") or []:
                if c.get("type") == "PodScheduled" and c.get("status") == "True" and c.get("lastTransitionTime"):
                    out.append(_epoch(c["lastTransitionTime"]))
        return out

    def wait_bound(self, sp: Space, groups: Mapping[str, int], what: str,
                   watch: Callable[[int], None] | None = None) -> float:
        """Wait until every group has at least its count bound; seconds waited. ``watch`` sees
        the total bound at every poll (e.g. to fail when more run than fit)."""
        t0 = time.monotonic()

        def done() -> bool | None:
            counts = {g: self.bound(sp, g) for g in groups}
            if watch is not None:
                watch(sum(counts.values()))
            return all(counts[g] >= n for g, n in groups.items()) or None

        base.wait_for(what, done, self.wait_s, interval=self.p.poll_seconds, guard=self.a.guard)
        return time.monotonic() - t0

    def floor(self, sp: Space, n: int, scheduler: str | None = FLOOR_SCHEDULER) -> float:
        """Seconds to place ``n`` one-GPU ``pause`` pods in the space, created one after the other
        as a fill submits, each bound as soon as it exists to the next free GPU of a schedulable
        node (the Binding API, a scheduler's last step, from ``FLOOR_BINDERS`` threads): the API
        server, etcd, admission and the nodes with no scheduling decision at all. With
        ``scheduler`` None the default scheduler places them instead (the bench's comparison).
        The pods are gone again when this returns."""
        # free_gpus counts schedulable nodes only: a node the pool cordoned gets no floor pod
        slots = [node for node, free in sorted(gpu_inventory.free_gpus(self.kube).items()) for _ in range(free)]
        if len(slots) < n:
            raise base.CaseFailed(f"the floor needs {n} free GPUs on schedulable nodes, found {len(slots)}")
        kube_client.default_service_account(self.kube, sp.ns)
        path = f"/api/v1/namespaces/{sp.ns}/pods"
        created: list[str] = []
        errors: list[str] = []
        stop = threading.Event()

        def bind(name: str, node: str) -> None:
            try:
                self.kube.request("POST", f"{path}/{name}/binding", {
                    "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
            except (base.CaseFailed, urllib3.exceptions.HTTPError) as exc:  # the wait below reports it
                errors.append(f"{name} to {node}: {exc}")

        def binder(pool: ThreadPoolExecutor) -> None:
            handed = 0
            while handed < n and not stop.is_set():
                for name in created[handed:]:  # appended to by the submitting thread
                    pool.submit(bind, name, slots[handed])
                    handed += 1
                stop.wait(0.02)

        def all_bound() -> bool | None:
            if errors:
                raise base.CaseFailed(f"the floor: binding failed: {errors[0]}")
            return self.bound(sp, "floor") >= n or None

        try:
            with ThreadPoolExecutor(FLOOR_BINDERS) as pool:
                loop = threading.Thread(target=binder, args=(pool,), daemon=True)
                t0 = time.monotonic()
                if scheduler:
                    loop.start()
                try:
                    for i in range(n):
                        self.kube.request("POST", path, _floor_pod(f"floor-{i}", scheduler))
                        created.append(f"floor-{i}")
                    base.wait_for(f"all {n} floor pods bound", all_bound, self.wait_s,
                                  interval=self.p.poll_seconds, guard=self.a.guard)
                    took = time.monotonic() - t0
                finally:
                    stop.set()
                    if scheduler:
                        loop.join()
        finally:
            self.kube.request("DELETE", path, query={"labelSelector": f"{base.SUITE_LABEL}=floor",
                                                     "gracePeriodSeconds": "0"})
            base.wait_for("the floor's pods to be gone", lambda: not self.kube.request(
                "GET", path, accept=METADATA_ONLY, query={"labelSelector": f"{base.SUITE_LABEL}=floor"}
            ).get("items") or None, self.wait_s, interval=self.p.poll_seconds)
        return took

    # -- the cases --------------------------------------------------------------------------------
    def fill_single_gpu_jobs(self, res: base.CaseResult) -> None:
        free = self.free()
        n = min(self.p.jobs or free, free)
        if n < 1:
            raise base.CaseFailed("no free GPU to fill")
        with self.a.space("scale-floor", res) as sp:
            floor_s = self.floor(sp, n)
        res.details["floor"] = {"pods": n, "seconds": round(floor_s, 2), "units_per_s": round(n / floor_s, 1),
                                "how": "pause pods bound by the suite through the Binding API as they "
                                       "appear, no scheduler"}
        self.fill(res, "fill_single_gpu_jobs", n, n, "all {n} units to be scheduled", floor_s)

    def fill_with_backlog(self, res: base.CaseResult) -> None:
        g = self.free()
        if g < 1:
            raise base.CaseFailed("no free GPU to fill")
        self.fill(res, "fill_with_backlog", math.ceil(self.p.backlog * g), g, "every one of the {n} free GPUs to run a unit")

    def fill(self, res: base.CaseResult, case: str, units: int, gpus: int, what: str,
             floor_s: float | None = None) -> None:
        """``units`` one-GPU units over the teams, whose quotas add up to ``gpus``; the case's
        figure is the time until ``gpus`` of them run (with a backlog, the rest stay held)."""
        k = max(1, min(self.p.teams, gpus))
        teams = [f"t{i}" for i in range(k)]
        quota = dict(zip(teams, shares(gpus, k), strict=True))
        per_team = dict(zip(teams, shares(units, k), strict=True))
        res.details.update({"units": units, "gpus": gpus, "teams": k})
        peak = [0]

        def never_over(running: int) -> None:
            peak[0] = max(peak[0], running)
            if running > gpus:
                raise base.CaseFailed(f"{running} units run on {gpus} free GPUs")

        with self.a.space("scale", res) as sp:
            sp.build(Dept("root", gpus, tuple(Team(t, quota[t]) for t in teams)))
            t_wall, t0 = time.time(), time.monotonic()
            for i in range(max(per_team.values())):  # interleaved: no team gets a head start
                for t in teams:
                    if i < per_team[t]:
                        sp.submit(t, f"fill-{t}", 1, [], start=i)
            submit_s = time.monotonic() - t0
            # with a backlog, each team's share of the GPUs is its quota; without, all it submitted
            want = {f"fill-{t}": quota[t] if units > gpus else per_team[t] for t in teams}
            self.wait_bound(sp, want, what.format(n=gpus), watch=never_over)
            fill_s = time.monotonic() - t0
            res.details.update({"submit_s": round(submit_s, 2), "fill_s": round(fill_s, 2),
                                "units_per_s": round(gpus / fill_s, 1) if fill_s else None,
                                "peak_running": peak[0]})
            if floor_s is not None:
                res.details["over_floor_s"] = round(fill_s - floor_s, 2)
            res.details["series"] = series({t: self.bound_times(sp, f"fill-{t}") for t in teams}, t_wall)
            within(res, case, fill_s, self.p)

    def borrowed_full(self, sp: Space, res: base.CaseResult, b_quota: int) -> int:
        """Team A, guaranteed every free GPU but B's ``b_quota`` (0: half), runs a unit on every
        free GPU, borrowing B's idle quota: no GPU is left idle, so B's work can only start by
        reclaiming. Returns B's quota."""
        g = self.free()
        b = b_quota or g // 2
        if b < 1 or b > g - 1:
            raise base.CaseFailed(f"needs at least 2 free GPUs and room for B's {b}, found {g}")
        sp.build(Dept("root", g, (Team("a", g - b), Team("b", b))))
        t0 = time.monotonic()
        sp.submit("a", "a", g, [])
        self.wait_bound(sp, {"a": g}, f"team A to run a unit on each of {g} GPUs, {b} of them borrowed from B")
        res.details.update({"gpus": g, "quota_a": g - b, "quota_b": b, "a_fill_s": round(time.monotonic() - t0, 2)})
        return b

    def reclaim_one_gpu_when_full(self, res: base.CaseResult) -> None:
        with self.a.space("scale", res) as sp:
            b = self.borrowed_full(sp, res, 0)
            samples = min(self.p.reclaim_samples, b)
            latencies: list[float] = []
            for i in range(samples):
                t0 = time.monotonic()
                sp.submit("b", "b", 1, [], start=i)
                self.wait_bound(sp, {"b": i + 1}, f"B's unit {i + 1} of {samples} to run by reclaiming a GPU from A")
                latencies.append(time.monotonic() - t0)
            summary = queueing_math.latency_summary(latencies)
            res.details.update({"samples": samples, "latency": summary})
            within(res, "reclaim_one_gpu_when_full", float(summary["p95"]), self.p)

    def reclaim_large_job(self, res: base.CaseResult) -> None:
        free = self.free()
        m = min(self.p.large_job_gpus or free // 2, free // 2)
        if m < 1:
            raise base.CaseFailed(f"needs at least 2 free GPUs, found {free}")
        with self.a.space("scale", res) as sp:
            self.borrowed_full(sp, res, m)
            t0 = time.monotonic()
            sp.gang("b", "big", m, "")
            self.wait_bound(sp, {"big": m}, f"all {m} pods of B's job to run by reclaiming from A")
            took = time.monotonic() - t0
            res.details.update({"job_pods": m, "large_job_reclaim_s": round(took, 2), "a_left": self.bound(sp, "a")})
            within(res, "reclaim_large_job", took, self.p)

    def distributed_job_allocation(self, res: base.CaseResult) -> None:
        free = self.free()
        m = min(self.p.distributed_pods or max(2, free // 8), free)
        if m < 2:
            raise base.CaseFailed(f"needs at least 2 free GPUs, found {free}")
        with self.a.space("scale", res) as sp:
            sp.build(Dept("root", m, (Team("q", m),)))
            t0 = time.monotonic()
            sp.gang("q", "dist", m, "")
            self.wait_bound(sp, {"dist": m}, f"all {m} pods of the distributed job to be scheduled")
            took = time.monotonic() - t0
            nodes = {x.spec.node_name for x in sp.scheduled("dist")}
            res.details.update({"job_pods": m, "nodes": len(nodes), "distributed_job_s": round(took, 2)})
            within(res, "distributed_job_allocation", took, self.p)
