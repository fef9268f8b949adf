"""Conformance suite ``quota_reclaim``: guaranteed quotas, borrowing idle quota, and reclaim.

The cases, their end states and their evidence are the queueing contract's
(``queueing.contract``): ``reclaim_borrowed_gpus`` (with the reclaim latency p50/p95),
``non_preemptible_stays_within_quota``, ``over_quota_weights_split_spare_gpus`` and
``hierarchical_reclaim_across_departments``, on KAI or Kueue (:mod:`.adapters`).

Called through ``SUITES`` by the certify pipeline; talks only to the Kubernetes API.
"""

from __future__ import annotations

from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.queueing import contract as queueing_contract
from gpucatalog.validators.conformance.queueing_suites import adapters as queueing_adapters

NAME = "quota_reclaim"


def run(ctx: base.SuiteContext) -> base.SuiteResult:
    adapter = queueing_adapters.adapter_for(ctx)
    return queueing_contract.run(NAME, ctx, adapter, queueing_contract.QUOTA_RECLAIM_CASES)


# The cases (behind the contract's preflight), as conformance mappings name them.
CASE_NAMES = ("preflight", *queueing_contract.QUOTA_RECLAIM_CASES)
