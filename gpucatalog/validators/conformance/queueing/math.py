"""Pure arithmetic behind the queueing contract, kept free of any cluster access so it can be
unit-tested: the fair-share split of spare GPUs between sibling queues (the split the contract
expects of either stack) and latency percentiles.

Called by ``queueing.contract``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Shares are fractions of GPUs in binary floats; compare with this slack.
EPSILON = 1e-6


@dataclass(frozen=True)
class QueueShare:
    """One queue's inputs to the fair-share split of a single resource."""

    quota: float
    weight: float
    request: float
    limit: float = -1.0  # -1: no limit


def fair_share(capacity: float, queues: Mapping[str, QueueShare]) -> dict[str, float]:
    """The split of ``capacity`` between sibling queues, as KAI's proportion plugin makes it (one
    level); the contract expects it of every stack.

    Phase 1 gives each queue ``min(quota, request)``; phase 2 hands out what is left in
    proportion to ``overQuotaWeight`` (water-filling: a queue that asks for less, or reaches its
    limit, returns the rest to the others). Queue priority buckets are not modelled (all equal).
    """
    share: dict[str, float] = {}
    for name, q in queues.items():
        cap = q.request if q.limit < 0 else min(q.request, q.limit)
        share[name] = max(0.0, min(q.quota, cap)) if q.quota >= 0 else cap
    left = capacity - sum(share.values())
    hungry = {n for n, q in queues.items() if _room(q, share[n]) > EPSILON and q.weight > 0}
    while left > EPSILON and hungry:
        total_w = sum(queues[n].weight for n in hungry)
        grant = {n: left * queues[n].weight / total_w for n in hungry}
        given = 0.0
        for n in sorted(hungry):
            g = min(grant[n], _room(queues[n], share[n]))
            share[n] += g
            given += g
        left -= given
        hungry = {n for n in hungry if _room(queues[n], share[n]) > EPSILON}
        if given <= EPSILON:
            break
    return share


def _room(q: QueueShare, have: float) -> float:
    cap = q.request if q.limit < 0 else min(q.request, q.limit)
    return max(0.0, cap - have)


def whole_units(share: Mapping[str, float]) -> dict[str, int]:
    """The whole pods (of one GPU each) a queue is sure to get out of a fractional fair share."""
    return {n: math.floor(v + EPSILON) for n, v in share.items()}


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (p in 0..100) of ``samples``; raises ValueError when empty."""
    if not samples:
        raise ValueError("no samples")
    if not 0 <= pct <= 100:
        raise ValueError(f"percentile {pct} outside 0..100")
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(samples: Sequence[float]) -> dict[str, float | int]:
    """p50/p95/max of latency samples in seconds, for the report."""
    return {"count": len(samples), "p50": round(percentile(samples, 50), 3),
            "p95": round(percentile(samples, 95), 3), "max": round(max(samples), 3)}
