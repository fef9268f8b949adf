"""Conformance suite ``scale``: the queueing contract on every GPU of a large cluster, each case
measured against the bundle's thresholds (``suiteParams.scale``).

The cases are ``queueing.scale``'s: ``fill_single_gpu_jobs``, ``fill_with_backlog``,
``reclaim_one_gpu_when_full``, ``reclaim_large_job`` and ``distributed_job_allocation``, on KAI
or Kueue (:mod:`.adapters`). The preflight is the stack's own, plus the parameters: a profile
without thresholds fails it, naming the field.

Called through ``SUITES`` by the certify pipeline; talks only to the Kubernetes API.
"""

from __future__ import annotations

from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.queueing import contract as queueing_contract
from gpucatalog.validators.conformance.queueing import scale as queueing_scale
from gpucatalog.validators.conformance.queueing_suites import adapters as queueing_adapters

NAME = "scale"


def run(ctx: base.SuiteContext) -> base.SuiteResult:
    adapter = queueing_adapters.adapter_for(ctx)
    c = queueing_contract.Contract(ctx, adapter)
    holder: dict[str, queueing_scale.Scale] = {}

    def preflight(pctx: base.SuiteContext, res: base.CaseResult) -> None:
        params = queueing_scale.parse(ctx.params)
        res.details["thresholds"] = dict(params.thresholds)
        c.preflight(pctx, res)
        holder["scale"] = queueing_scale.Scale(ctx, adapter, params)

    def case(name: str) -> tuple[str, base.Case]:
        def run_case(res: base.CaseResult) -> None:
            holder["scale"].run(name, res)

        return c.case(name, run_case)

    cases = [case(n) for n in queueing_scale.CASES]
    try:
        return base.run_with_preflight(NAME, ctx, preflight, cases)
    finally:
        adapter.close()


# The cases (behind the preflight), as conformance mappings name them.
CASE_NAMES = ("preflight", *queueing_scale.CASES)
