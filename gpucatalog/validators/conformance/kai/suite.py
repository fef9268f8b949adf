"""The frame every KAI suite is built on: its parameters and Kubernetes client from the suite
context, the preflight and the watchdog over the KAI components it needs, waits that go through
that watchdog with the suite's (scaled) timeouts, and running the cases behind the preflight with
the client closed afterwards.

Subclassed by the ``_Suite`` of ``fractional_gpu``, ``quota_reclaim`` and ``gang``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from gpucatalog.validators.conformance.kai import params as kai_params
from gpucatalog.validators.conformance.kai import pods as kai_pods
from gpucatalog.validators.conformance.kai import preflight as kai_preflight
from gpucatalog.validators.conformance.kai import workspace as kai_workspace
from gpucatalog.validators.conformance.kit import base, kube_client

T = TypeVar("T")


class KaiSuite:
    # The KAI components (``kai_preflight.DEPLOYMENTS`` keys) the suite needs running.
    components: ClassVar[list[str]] = []

    def __init__(self, ctx: base.SuiteContext) -> None:
        self.p = kai_params.Params.from_ctx(ctx)
        self.kube = kube_client.Kube(ctx.kubeconfig)
        self.dog: kai_preflight.Watchdog | None = None

    def watchdog(self) -> kai_preflight.Watchdog:
        """The watchdog, made once (at preflight); every case rebases it (``fresh_start``)."""
        if self.dog is None:
            self.dog = kai_preflight.Watchdog(self.kube, self.p, self.components)
        return self.dog

    def wait(self, what: str, probe: Callable[[], T | None]) -> T:
        """Wait up to ``wait_seconds`` for ``probe``, failing at once if a KAI component crashes."""
        return kai_preflight.wait(self.watchdog(), what, probe, self.p.wait_seconds)

    def stays(self, what: str, probe: Callable[[], bool]) -> None:
        """``probe`` holds for ``settle_seconds``, and no KAI component crashes meanwhile."""
        kai_preflight.stays(self.watchdog(), what, probe, self.p.settle_seconds)

    def settle(self, ws: kai_workspace.Workspace, group: str, total: int,
               what: str = "") -> tuple[list[Any], list[Any]]:
        """Wait until KAI decided on every pod of ``group``: scheduled or pending with a reason;
        returns (scheduled, pending)."""

        def decided() -> tuple[list[Any], list[Any]] | None:
            pods = ws.group_pods(group)
            done = [q for q in pods if kai_pods.is_scheduled(q)]
            pending = [q for q in pods if kai_pods.unschedulable_reason(q)]
            return (done, pending) if len(done) + len(pending) == total else None

        return self.wait(what or f"KAI to schedule or reject all {total} pods of {group}", decided)

    def preflight(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        """KAI's components, its Config, both PriorityClasses and 2 GPUs are there; the watchdog
        starts counting restarts from here."""
        res.details.update(kai_preflight.preflight(
            self.kube, self.p, self.components, min_gpus=2,
            priority_classes=(self.p.preemptible_class, self.p.non_preemptible_class)))
        self.watchdog()

    def fresh_start(self) -> None:
        """Start a case from a fresh baseline: wait (``wait_seconds``) until every component the
        suite needs has a ready pod again (one that crashed failed the case it crashed in), then
        count restarts from here."""
        kai_preflight.wait_ready(self.kube, self.p, self.components)
        self.watchdog().rebase()

    def guarded(self, fn: base.Case) -> base.Case:
        """``fn`` between a fresh start and a last watchdog check, so a crash after its last wait
        still fails it (and not the next case)."""

        def case(ctx: base.SuiteContext, res: base.CaseResult) -> None:
            self.fresh_start()
            fn(ctx, res)
            self.watchdog().check(force=True)

        return case

    def run(self, name: str, ctx: base.SuiteContext, cases: list[tuple[str, base.Case]]) -> base.SuiteResult:
        """The cases behind this suite's preflight, each guarded by the watchdog from its own
        baseline; the client is closed afterwards."""
        try:
            return base.run_with_preflight(name, ctx, self.preflight,
                                           [(n, self.guarded(fn)) for n, fn in cases])
        finally:
            self.kube.close()
