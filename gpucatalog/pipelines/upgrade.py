"""Upgrade certification: install OLD, start work, upgrade to NEW with work running, check that
nothing was lost, run NEW's suites, sign evidence that records both digests.

Called by ``catalog certify BUNDLE@NEW --upgrade-from OLD [--rollback]``. OLD is a version of the
same bundle or a channel (its newest version there); when OLD is in a channel its entry is
verified (``certified.verify``) before anything starts. Before any cluster starts, the two
renderings are compared (``upgrade_rules``): a refusal is bad input (exit 2), an immutable field
change fails the certification.

On the cluster, after OLD is installed as ``certify`` installs it: the workload set
(``upgrade.kueue``, ``upgrade.kai``, ``upgrade.slurm``) runs in the teams' queues, probes
measure the scheduling gap (``upgrade.probe``), NEW is applied (CRDs Helm would skip, server-side, then every release in
the bundle's order), and ``upgrade.state`` compares before and after. With ``--rollback`` OLD is
then applied again and the same checks run. Then the work is removed and the suites of the
version the cluster ends on run.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpucatalog.catalog import install, model, render, versions
from gpucatalog.clusters import provider as providers
from gpucatalog.core import errors
from gpucatalog.pipelines import (
    certified,
    certify,
    channels,
    cluster_facts,
    evidence,
    fault_injection,
    policy,
)
from gpucatalog.toolchain import build
from gpucatalog.validators import bundle_checks
from gpucatalog.validators.conformance import SUITES
from gpucatalog.validators.conformance.kai import params as kai_params
from gpucatalog.validators.conformance.kit import base, kube_client
from gpucatalog.validators.conformance.kueue import adapter as kueue_adapter
from gpucatalog.validators.conformance.slurm import cli as slurm_cli
from gpucatalog.validators.conformance.upgrade import kai as upgrade_kai
from gpucatalog.validators.conformance.upgrade import kueue as upgrade_kueue
from gpucatalog.validators.conformance.upgrade import probe as upgrade_probe
from gpucatalog.validators.conformance.upgrade import slurm as upgrade_slurm
from gpucatalog.validators.static import upgrade_rules

Say = Callable[[str], None]


@dataclass(frozen=True)
class From:
    """The version upgraded from, and what vouched for it."""

    version: str
    channel: str | None = None
    certificate: certified.Certificate | None = None

    def to_dict(self, rb: render.RenderedBundle) -> dict[str, Any]:
        out: dict[str, Any] = {"bundle": rb.bundle, "version": rb.version, "digest": rb.digest}
        if self.channel is not None:
            out["channel"] = self.channel
        if self.certificate is not None:
            out.update(certifiedIn=self.certificate.channel, evidenceDigest=self.certificate.evidence_digest)
        return out


def resolve_from(cat: model.Catalog, bundle: str, new_version: str, spec: str, profile: str,
                 old_digest: Callable[[str, str], str]) -> From:
    """OLD from ``--upgrade-from`` (a version or a channel); InputError when it is neither, or not
    older than NEW; CheckFailed when a channel's entry for it does not verify."""
    pol = policy.load(cat.root / "channels" / "policy.yaml")
    if spec in pol.channels:
        found = channels.versions_in(cat.root, spec, bundle)
        if not found:
            raise errors.InputError(f"channel {spec!r} has no version of {bundle}", field="--upgrade-from",
                                    expected="a channel holding the bundle, or a version: " + ", ".join(cat.bundle_versions(bundle)))
        version, chan = found[-1], spec
    elif (bundle, spec) in cat.bundles:
        version, chan = spec, None
    else:
        raise errors.NotFoundError(f"{bundle}@{spec} is neither a version of {bundle} nor a channel", field="--upgrade-from",
                                   expected="versions " + ", ".join(cat.bundle_versions(bundle)) + "; channels "
                                   + ", ".join(sorted(pol.channels)))
    if versions.sort_versions([version, new_version])[-1] != new_version or version == new_version:
        raise errors.InputError(f"{bundle}@{version} is not older than {bundle}@{new_version}", field="--upgrade-from")
    cert = None
    # a version that a channel holds is installed as that channel certified it
    for name in ([chan] if chan else sorted(pol.channels)):
        entry = channels.load(cat.root / "channels", name).find(bundle, version)
        if entry is not None and any(i["profile"] == profile for i in entry["evidence"]):
            cert = certified.verify(cat.root, name, bundle, version, profile, old_digest(version, profile))
            break
    return From(version, chan, cert)


def static_findings(old: render.RenderedBundle, new: render.RenderedBundle) -> list[errors.Finding]:
    """Refusals raise (exit 2, before any cluster); immutable changes are returned (a failed run)."""
    refused = upgrade_rules.refusals(old, new)
    if refused:
        raise errors.InputError(f"{old.ref} -> {new.ref} cannot be upgraded: " + "; ".join(str(f) for f in refused),
                                field="--upgrade-from")
    return upgrade_rules.immutable(old, new)


def _case(name: str, fn: Callable[[base.CaseResult], None]) -> base.CaseResult:
    res = base.CaseResult(name=name, result="passed")
    t0 = time.monotonic()
    try:
        fn(res)
    except base.CaseFailed as exc:
        res.result, res.reason = "failed", str(exc)
    res.seconds = time.monotonic() - t0
    return res


class Work(Protocol):
    """A stack's workload set (``upgrade_kueue.WorkloadSet``, ``upgrade_kai.KaiWork``,
    ``upgrade_slurm.SlurmWork``)."""

    def start(self) -> None: ...
    def describe(self) -> dict[str, Any]: ...
    def snapshot(self) -> Any: ...
    def compare(self, before: Any, after: Any, to_objects: list[dict[str, Any]], from_objects: list[dict[str, Any]],
                ref: str) -> tuple[list[str], list[str]]: ...
    def pending_admitted(self) -> bool: ...
    def release_running(self) -> None: ...
    def cleanup(self) -> None: ...


def _objects(rb: render.RenderedBundle) -> list[dict[str, Any]]:
    return [o for c in rb.components for o in c.objects]


def stack_of(rb: render.RenderedBundle) -> str:
    """``slurm`` (Slinky CRs), ``kueue`` (team ClusterQueues), ``kai`` (team Queues of KAI), or
    InputError: what work an upgrade run can carry through this bundle."""
    objs = _objects(rb)
    if upgrade_slurm.partitions(objs):
        return "slurm"
    if upgrade_kueue.teams(objs):
        return "kueue"
    if upgrade_kai.teams(objs):
        return "kai"
    raise errors.InputError(f"{rb.ref} has neither Kueue or KAI team queues nor Slurm partitions: upgrade "
                            "certification has no workload set for it (docs/upgrades.md)", field="--upgrade-from")


def check_plan(old: render.RenderedBundle, new: render.RenderedBundle) -> None:
    """InputError, before any cluster starts, when OLD lacks the teams its stack's workload set needs."""
    stack = stack_of(old)
    try:
        if stack == "kueue":
            upgrade_kueue.plan(_objects(old))
        elif stack == "kai":
            upgrade_kai.plan(_objects(old), _objects(new))
    except base.CaseFailed as exc:
        raise errors.InputError(f"{old.ref} cannot carry an upgrade's workload set: {exc}",
                                field="--upgrade-from") from exc


def make_work(old: render.RenderedBundle, new: render.RenderedBundle, kubeconfig: Path, endpoints: dict[str, str],
              kube: kube_client.Kube) -> tuple[Work, upgrade_probe.Prober]:
    objs, stack = _objects(old), stack_of(old)
    if stack == "kai":
        kai = kai_params.Params.from_ctx(base.SuiteContext(kubeconfig=kubeconfig))
        return (upgrade_kai.KaiWork(kube, upgrade_kai.plan(objs, _objects(new)), kai),
                upgrade_kai.KaiProber(kubeconfig, kai))
    if stack == "slurm":
        cli = slurm_cli.Slurm(endpoints.get("slurm_conf"))
        work = upgrade_slurm.SlurmWork(cli, objs)
        # the highest-priority partition: Slurm schedules it first, so the pending job of the
        # default partition does not hold the probes back until the next backfill pass (30 s)
        return work, upgrade_slurm.SlurmProber(cli, work.top, work.t2)
    params = kueue_adapter.params_from(base.SuiteContext(kubeconfig=kubeconfig))
    flavor = next(o["metadata"]["name"] for o in objs if o.get("kind") == "ResourceFlavor")
    return (upgrade_kueue.WorkloadSet(kube, upgrade_kueue.plan(objs), params),
            upgrade_probe.KueueProber(kubeconfig, flavor, params))


@dataclass
class _Run:
    kube: kube_client.Kube
    kubeconfig: Path
    prov: providers.ClusterProvider
    work: Work
    prober: upgrade_probe.Prober
    say: Say
    ready_timeout_s: int
    wait_s: float
    figures: dict[str, Any]
    install_timeout_s: int = 300

    def _pods(self, namespaces: list[str]) -> dict[str, str]:
        out = {}
        for ns in namespaces:
            for pod in self.kube.call(f"list pods of {ns}", self.kube.core.list_namespaced_pod, ns).items:
                out[f"{ns}/{pod.metadata.name}"] = str(pod.metadata.uid)
        return out

    def _apply(self, label: str, frm: render.RenderedBundle, to: render.RenderedBundle) -> dict[str, Any]:
        crds = install.apply_crds(to, self.kubeconfig, self.say)
        install.install(to, self.kubeconfig, timeout_s=self.install_timeout_s, progress=self.say, gates=True,
                        ready_timeout_s=self.ready_timeout_s, description=f"gpu-catalog: {label} from {frm.ref}")
        services: list[str] = []
        if isinstance(self.prov, providers.UpdatesServices):
            services = self.prov.update_services(_objects(to))
            for line in services:
                self.say(line)
        return {"crdsAppliedServerSide": crds, "servicesUpdated": services}

    def step(self, label: str, frm: render.RenderedBundle, to: render.RenderedBundle) -> list[base.CaseResult]:
        """Apply ``to`` over ``frm`` with work running; the checks of one direction."""
        cases: list[base.CaseResult] = []
        before = self.work.snapshot()
        control = sorted({c.namespace for c in to.components})
        pods_before = self._pods(control)
        self.prober.start()
        t0 = time.monotonic()
        self.say(f"{label}: {frm.ref} -> {to.ref}")
        failure = ""
        applied: dict[str, Any] = {}
        try:
            applied = self._apply(label, frm, to)
        except errors.CatalogError as exc:
            # still check what was lost: a release that cannot finish (a ClusterQueue whose
            # deletion Kueue's finalizer holds) is explained by the objects, not by Helm's timeout
            failure = f"{label} to {to.ref} failed: {str(exc)[:600]}"
        t1 = time.monotonic()
        self.prober.stop()
        gap, probes, lost = self.prober.gap((t0, t1))
        pods_after = self._pods(control)
        self.figures[label] = {"wallSeconds": round(t1 - t0, 2), "schedulingGapSeconds": round(gap, 2),
                               "probes": probes, "probesNeverScheduled": lost, **applied,
                               # the bundle's own pods the upgrade replaced (a new controller took over)
                               "controlPodsReplaced": sorted(k for k, uid in pods_before.items()
                                                             if pods_after.get(k) != uid)}
        cases.append(base.CaseResult(f"{label}-helm", "failed" if failure else "passed", failure, t1 - t0,
                                     details=self.figures[label]))

        def pending(res: base.CaseResult) -> None:
            try:
                base.wait_for(f"the pending work to be admitted by {to.ref}", self.work.pending_admitted,
                              self.wait_s, interval=1.0)
                res.details["admitted_with_work_running"] = True
            except base.WaitTimeout:
                res.details["admitted_with_work_running"] = False

        # Slurm has no room for the pending job while the old work runs: a short look is enough
        pend = _case(f"{label}-pending-admitted", pending) if not failure else base.CaseResult(
            f"{label}-pending-admitted", "skipped", f"not checked: {label} did not finish")
        after = self.work.snapshot()
        running, queues = self.work.compare(before, after, _objects(to), _objects(frm), to.ref)

        def fail_on(found: list[str], counted: str) -> Callable[[base.CaseResult], None]:
            def check(res: base.CaseResult) -> None:
                res.details["checked"] = counted
                if found:
                    raise base.CaseFailed("; ".join(found))
            return check

        cases.append(_case(f"{label}-running-work-kept", fail_on(running, "running work (see workload-started-on-old)")))
        cases.append(_case(f"{label}-queues-kept", fail_on(queues, "queue objects / partitions")))
        cases.append(pend)
        return cases


def _finish_pending(r: _Run, case: base.CaseResult, version: str) -> None:
    if case.details.get("admitted_with_work_running") is not False:
        return
    r.work.release_running()
    case.details["released_running_work"] = True
    try:
        base.wait_for(f"the pending work to be admitted by {version} once running work was removed",
                      r.work.pending_admitted, r.wait_s, interval=1.0)
    except base.WaitTimeout as exc:
        case.result, case.reason = "failed", str(exc)


def run_on_cluster(old: render.RenderedBundle, new: render.RenderedBundle, kubeconfig: Path, opts: certify.Options,
                   rollback: bool, figures: dict[str, Any], say: Say, prov: providers.ClusterProvider,
                   suite_params: dict[str, Any] | None = None,
                   endpoints: dict[str, str] | None = None) -> list[base.SuiteResult]:
    """Everything after OLD is installed and ready; returns the ``upgrade`` suite and the suites
    of the version the cluster ends on."""
    t0 = time.time()
    kube = kube_client.Kube(kubeconfig)
    cases: list[base.CaseResult] = []
    try:
        work, prober = make_work(old, new, kubeconfig, endpoints or {}, kube)
    except base.CaseFailed as exc:
        kube.close()
        return [base.SuiteResult("upgrade", [base.CaseResult("workload-started-on-old", "failed", str(exc))], 0.0, t0)]
    # Slurm cannot admit the pending job while the old work holds its nodes; Kueue should, with 0.2.0's room
    wait_s = 20.0 if stack_of(old) == "slurm" else 120.0
    r = _Run(kube, kubeconfig, prov, work, prober, say, opts.ready_timeout_s, wait_s, figures, opts.install_timeout_s)
    try:
        def start(res: base.CaseResult) -> None:
            prober.create_queue()
            work.start()
            res.details.update(work.describe())
            # measured with the work in place, so the gap compares like with like
            res.details["probe_baseline_seconds"] = figures["baselineSeconds"] = round(prober.baseline(), 2)

        cases.append(_case("workload-started-on-old", start))
        if cases[-1].result == "passed":
            cases += r.step("upgrade", old, new)
            if rollback:
                # also after a failed upgrade: getting back to OLD is what --rollback is for
                cases += r.step("rollback", new, old)
            for c in cases:
                if c.name.endswith("-pending-admitted"):
                    _finish_pending(r, c, (old if c.name.startswith("rollback") else new).ref)
    finally:
        work.cleanup()
        prober.cleanup()
        kube.close()
    results = [base.SuiteResult("upgrade", cases, time.time() - t0, t0)]
    if any(c.result == "failed" for c in cases):
        return results
    final = old if rollback else new
    names = certify.select_suites(final.suites, tuple(s for s in opts.suites if s in final.suites))
    for name in names:
        say(f"suite {name} on {final.ref}")
        suite = importlib.import_module(SUITES[name])
        ctx = base.SuiteContext(kubeconfig=kubeconfig, params={
            "bundle_values": {c.name: c.values for c in final.components}, **(suite_params or {}),
            **final.suite_params.get(name, {})}, endpoints=dict(endpoints or {}), log=say)
        results.append(suite.run(ctx))
    return results


def run(cat: model.Catalog, opts: certify.Options, upgrade_from: str, rollback: bool, say: Say) -> certify.Outcome:
    started = time.time()
    kind, kubeconfig_path = certify.parse_cluster(opts.cluster)
    profile = opts.profile or certify.default_profile(kind)
    if kind != "sim" and kind != "kubeconfig":
        raise errors.InputError(f"upgrade certification runs on sim or kubeconfig clusters, not {kind}", field="--cluster")
    key_path = certify._signing_key(opts, say) if opts.evidence_dir else None
    new = render.render_bundle(cat, opts.bundle, profile)
    frm = resolve_from(cat, new.bundle, new.version, upgrade_from, profile,
                       lambda v, p: render.render_bundle(cat, f"{new.bundle}@{v}", p).digest)
    old = render.render_bundle(cat, f"{new.bundle}@{frm.version}", profile)
    check_plan(old, new)
    say(f"static validation of {old.ref} -> {new.ref}")
    t0 = time.monotonic()
    findings = bundle_checks.check_rendered(new) + static_findings(old, new)
    results = [certify._static_suite(findings, time.monotonic() - t0)]
    figures: dict[str, Any] = {"mode": "rollback" if rollback else "upgrade"}
    info: dict[str, Any] = {"provider": kind, "profile": profile}
    certify._check_image_map(cat, new, kind, opts, info, also=old)
    if not findings:
        try:
            results += _on_cluster(old, new, kind, kubeconfig_path, opts, rollback, info, figures, say)
        except errors.InputError:
            raise
        except errors.CatalogError as exc:
            results.append(certify._failed_step("cluster", str(exc), 0.0))
    outcome = certify.Outcome(rendered=new, suites=results, cluster=info, started=started, finished=time.time())
    outcome.notes.append(f"upgrade from {old.ref}: {figures}")
    if opts.evidence_dir is not None and key_path is not None:
        statement = evidence.build_statement(
            bundle=new.bundle, version=new.version, profile=profile, digest=new.digest, cluster=info,
            tools=build.versions(), suites=ran_on(results, old if rollback else new), started=started, finished=outcome.finished,
            extra={"upgradeFrom": frm.to_dict(old), "upgrade": figures}, exploratory=bool(info.get("exploratory")))
        outcome.paths = evidence.write_evidence(opts.evidence_dir, statement, key_path)
        (opts.evidence_dir / "bundle.lock.json").write_text(render.canonical_json(new.lock).decode() + "\n")
        (opts.evidence_dir / "upgrade-from.lock.json").write_text(render.canonical_json(old.lock).decode() + "\n")
    return outcome


def ran_on(results: list[base.SuiteResult], final: render.RenderedBundle) -> list[dict[str, Any]]:
    """The suites as evidence records them: those after the upgrade suite ran on ``final`` (OLD
    after ``--rollback``), so the evidence never says NEW passed suites that ran on OLD."""
    out, after = [], False
    for s in results:
        d = s.to_dict()
        if after and s.name in final.suites:
            d["ranOn"] = final.ref
        after = after or s.name == "upgrade"
        out.append(d)
    return out


def _on_cluster(old: render.RenderedBundle, new: render.RenderedBundle, kind: str, kubeconfig_path: Path | None,
                opts: certify.Options, rollback: bool, info: dict[str, Any], figures: dict[str, Any],
                say: Say) -> list[base.SuiteResult]:
    prov = providers.get(kind, opts.cluster_name, kubeconfig=kubeconfig_path)
    if not prov.available():
        raise errors.InputError(f"cluster provider {kind!r} cannot run here: {providers.unavailable_reason(prov)}",
                                field="--cluster")
    # fault cases run only with the provider's own injector here; without one they are not run
    fault_injection.check(old if rollback else new, prov, None)
    certify._use_image_map(prov, kind, opts.image_map)
    results: list[base.SuiteResult] = []
    started_cluster = False
    try:
        if kind == "kubeconfig":
            kubeconfig = prov.kubeconfig()
        else:
            say(f"starting {kind} cluster {opts.cluster_name!r}")
            kubeconfig = prov.up(int(old.cluster.get("nodes", 4)), str(old.cluster.get("shape", "h100-80gb-x8")))
            started_cluster = True
            certify._add_node_groups(prov, kind, old.cluster.get("extraNodes") or [], say)
        prov.wait_ready(opts.ready_timeout_s)
        info.update(cluster_facts.describe(kubeconfig, prov))
        certify._start_services(prov, old, say)
        t0 = time.monotonic()
        try:
            install.install(old, kubeconfig, timeout_s=opts.install_timeout_s, progress=say, gates=True,
                            ready_timeout_s=opts.ready_timeout_s, description=f"gpu-catalog: {old.ref} (upgrade base)")
        except errors.CatalogError as exc:
            return [certify._failed_step("install-old", f"{old.ref}: {exc}", time.monotonic() - t0)]
        # what ran for OLD, and (below) what ran at the end: NEW, or OLD again after --rollback;
        # a bring-your-own binary that ran for a tag naming another version fails the run
        results += certify._what_ran(prov, info)
        params: dict[str, Any] = {}
        if isinstance(prov, providers.InjectsFaults):
            params.update(inject_fault=prov.inject_fault, clear_fault=prov.clear_fault)
        results += run_on_cluster(old, new, kubeconfig, opts, rollback, figures, say, prov, params,
                                  cluster_facts.endpoints(prov))
        info["atEnd"] = {}
        results += certify._what_ran(prov, info["atEnd"])
        return results
    finally:
        if any(r.result == "failed" for r in results) and opts.evidence_dir is not None:
            try:
                prov.collect_logs(opts.evidence_dir / "logs")
            except errors.CatalogError as exc:
                say(f"could not collect logs: {exc}")
        if started_cluster and not opts.keep_cluster:
            say(f"tearing down cluster {opts.cluster_name!r}")
            prov.down()
