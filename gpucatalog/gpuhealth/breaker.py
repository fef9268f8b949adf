"""Circuit breaker: never quarantine more than ``max_share`` of the GPU nodes in a sliding window.

Counts unique nodes (a node re-quarantined inside the window counts once), together with the
nodes still in remediation. When one more quarantine would exceed the limit the breaker trips and
stays TRIPPED — across controller restarts, because its state is persisted in a ConfigMap — until
a person resets it (``gpu-health breaker-reset`` or editing ``data.status``). In-flight
remediations continue while tripped. Pure logic; persisted by :mod:`gpucatalog.gpuhealth.kube`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

CLOSED = "CLOSED"
TRIPPED = "TRIPPED"


@dataclass
class Breaker:
    max_share: float = 0.25
    window_s: float = 600.0
    status: str = CLOSED
    entries: dict[str, float] = field(default_factory=dict)  # node -> first quarantine in window
    tripped_at: float | None = None
    tripped_reason: str = ""
    changed: bool = False  # set when persisting is needed

    def limit(self, total_nodes: int) -> int:
        # at least one node may always be remediated, else tiny clusters could never heal
        return max(1, math.floor(total_nodes * self.max_share + 1e-9))

    def prune(self, now: float) -> None:
        old = [n for n, t in self.entries.items() if now - t > self.window_s]
        for n in old:
            del self.entries[n]
        if old:
            self.changed = True

    def admit(self, node: str, now: float, total_nodes: int, active: Iterable[str] = ()) -> bool:
        """May ``node`` be quarantined now? Records it when yes; trips when the limit is reached."""
        self.prune(now)
        members = set(self.entries) | set(active)
        if node in members:
            if node not in self.entries:
                self.entries[node] = now
                self.changed = True
            return True
        if self.status == TRIPPED:
            return False
        limit = self.limit(total_nodes)
        if len(members) + 1 > limit:
            self.status = TRIPPED
            self.tripped_at = now
            self.tripped_reason = (
                f"quarantining {node} would make {len(members) + 1} of {total_nodes} GPU nodes "
                f"(limit {limit} = {self.max_share:.0%} in {self.window_s:g}s)"
            )
            self.changed = True
            return False
        self.entries[node] = now
        self.changed = True
        return True

    def reset(self) -> None:
        self.status = CLOSED
        self.entries.clear()
        self.tripped_at = None
        self.tripped_reason = ""
        self.changed = True

    def to_data(self, total_nodes: int | None = None) -> dict[str, str]:
        data = {
            "status": self.status,
            "maxShare": f"{self.max_share:g}",
            "windowSeconds": f"{self.window_s:g}",
            "entries": json.dumps(self.entries, sort_keys=True),
            "trippedAt": "" if self.tripped_at is None else f"{self.tripped_at:.3f}",
            "trippedReason": self.tripped_reason,
        }
        if total_nodes is not None:
            data["limit"] = str(self.limit(total_nodes))
            data["gpuNodes"] = str(total_nodes)
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any] | None, max_share: float, window_s: float) -> Breaker:
        """Restore from a ConfigMap's data; configuration (share, window) always comes from flags."""
        b = cls(max_share=max_share, window_s=window_s)
        if not data:
            b.changed = True
            return b
        b.status = TRIPPED if str(data.get("status", CLOSED)).upper() == TRIPPED else CLOSED
        try:
            raw = json.loads(str(data.get("entries") or "{}"))
            b.entries = {str(k): float(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
        except (ValueError, TypeError):
            b.entries = {}
            b.changed = True
        try:
            b.tripped_at = float(data["trippedAt"]) if data.get("trippedAt") else None
        except ValueError:
            b.tripped_at = None
        b.tripped_reason = str(data.get("trippedReason") or "")
        if b.status == CLOSED and not data.get("entries") and b.tripped_at:
            # a person set status back to CLOSED: forget the old trip
            b.tripped_at, b.tripped_reason, b.changed = None, "", True
        return b
