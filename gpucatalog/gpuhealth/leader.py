"""Leader election on a ``coordination.k8s.io/v1`` Lease so two controller replicas never act
twice. :func:`next_spec` is the pure rule (take a free or expired lease, renew our own, leave a
live foreign one alone); :class:`Elector` does the GET/POST/PUT with optimistic concurrency
(a lost race is a 409 and simply means "not leader this round"). Called by the controller loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gpucatalog.gpuhealth import engine, kube
from gpucatalog.gpuhealth.errors import TemporaryError


def next_spec(spec: dict[str, Any] | None, me: str, now: float, duration_s: int) -> dict[str, Any] | None:
    """New Lease spec if ``me`` may hold the lease now, else ``None``."""
    spec = dict(spec or {})
    holder = spec.get("holderIdentity") or ""
    renew = engine.parse_ts(spec.get("renewTime")) or 0.0
    dur = int(spec.get("leaseDurationSeconds") or duration_s)
    if holder and holder != me and now - renew <= dur:
        return None
    out = {
        "holderIdentity": me,
        "leaseDurationSeconds": duration_s,
        "renewTime": engine.iso(now),
        "acquireTime": spec.get("acquireTime") if holder == me else engine.iso(now),
        "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if holder == me else 1),
    }
    return out


@dataclass
class Elector:
    api: kube.Api
    namespace: str
    name: str
    identity: str
    duration_s: int = 15

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"

    def try_acquire(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        try:
            lease = self.api.get(f"{self.path}/{self.name}")
        except kube.NotFound:
            spec = next_spec(None, self.identity, now, self.duration_s)
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
            try:
                self.api.create(self.path, body)
            except kube.Conflict:
                return False
            return True
        spec = next_spec(lease.get("spec"), self.identity, now, self.duration_s)
        if spec is None:
            return False
        lease["spec"] = spec
        try:
            self.api.replace(f"{self.path}/{self.name}", lease)  # carries resourceVersion
        except TemporaryError:
            return False
        return True

    def release(self) -> None:
        """Give the lease up on shutdown so another replica takes over at once instead of
        waiting for it to expire (a drained controller pod must not stall remediation)."""
        try:
            lease = self.api.get(f"{self.path}/{self.name}")
        except kube.NotFound:
            return
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            return
        lease["spec"] = {**spec, "holderIdentity": None, "leaseDurationSeconds": 1}
        try:
            self.api.replace(f"{self.path}/{self.name}", lease)
        except TemporaryError:
            return
