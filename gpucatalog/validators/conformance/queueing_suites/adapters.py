"""Which scheduling stack a queueing suite runs against, and its adapter.

The stack is ``ctx.params["stack"]`` when given (``kai`` or ``kueue``), else the installed
bundle's: a bundle with a ``kueue`` component, or team queues rendered with ``stack: kueue``, is
certified through Kueue's adapter; anything else through KAI's. Called by ``quota_reclaim`` and
``gang``.
"""

from __future__ import annotations

from gpucatalog.core import errors
from gpucatalog.validators.conformance.kai import adapter as kai_adapter
from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.kueue import adapter as kueue_adapter
from gpucatalog.validators.conformance.queueing import contract as queueing_contract

STACKS = ("kai", "kueue")


def stack_of(ctx: base.SuiteContext) -> str:
    explicit = ctx.params.get("stack")
    if explicit is not None:
        if explicit not in STACKS:
            raise errors.InputError(f"unknown scheduling stack {explicit!r}", field="suiteParams.stack",
                                    expected=" or ".join(STACKS))
        return str(explicit)
    values = ctx.params.get("bundle_values") or {}
    if "kueue" in values or (values.get("team-queues") or {}).get("stack") == "kueue":
        return "kueue"
    return "kai"


def adapter_for(ctx: base.SuiteContext) -> queueing_contract.Adapter:
    if stack_of(ctx) == "kueue":
        return kueue_adapter.KueueAdapter(ctx)
    return kai_adapter.KaiAdapter(ctx)
