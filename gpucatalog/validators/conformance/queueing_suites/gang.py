"""Conformance suite ``gang``: a group of N pods starts all N or none.

The cases, their end states and their evidence are the queueing contract's
(``queueing.contract``): ``gang_with_room_starts_together`` (time to admit the gang),
``gang_short_of_one_gpu_starts_none_then_all`` and ``job_with_batch_min_member``, on KAI
(explicit PodGroups, batch-min-member) or Kueue (a Job admitted whole) (:mod:`.adapters`).

Called through ``SUITES`` by the certify pipeline; talks only to the Kubernetes API.
"""

from __future__ import annotations

from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.queueing import contract as queueing_contract
from gpucatalog.validators.conformance.queueing_suites import adapters as queueing_adapters

NAME = "gang"


def run(ctx: base.SuiteContext) -> base.SuiteResult:
    adapter = queueing_adapters.adapter_for(ctx)
    return queueing_contract.run(NAME, ctx, adapter, queueing_contract.GANG_CASES)


# The cases (behind the contract's preflight), as conformance mappings name them.
CASE_NAMES = ("preflight", *queueing_contract.GANG_CASES)
