"""Certification: render -> static validation -> cluster -> install -> suites -> signed evidence.

Called by ``catalog certify``. Whatever fails, evidence is written (marked failed), diagnostics
are collected before teardown, and a cluster this run started is torn down unless kept.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpucatalog.catalog import install, model, render, resolve, versions
from gpucatalog.clusters import provider as providers
from gpucatalog.clusters.sim import imagemap
from gpucatalog.core import errors
from gpucatalog.pipelines import cluster_facts, evidence, fault_injection, keys, logscan
from gpucatalog.toolchain import build, releases
from gpucatalog.validators import bundle_checks
from gpucatalog.validators.conformance import SUITES
from gpucatalog.validators.conformance.kit import base

Say = Callable[[str], None]


@dataclass
class Options:
    bundle: str
    cluster: str = "sim"  # sim | kind | kubeconfig=PATH
    profile: str | None = None
    suites: tuple[str, ...] = ()
    evidence_dir: Path | None = None
    signing_key: Path | None = None
    cluster_name: str = "certify"
    keep_cluster: bool = False
    install_timeout_s: int = 300
    ready_timeout_s: int = 180  # for the cluster's API server and nodes, and for each component's readiness gate
    image_map: Path | None = None  # an image-map overlay for the sim (bring-your-own binaries)
    # None: the provider's own fault injector, if any; "auto": that, else the pod injector;
    # "pod": the pod injector everywhere (see pipelines.fault_injection)
    inject_faults: str | None = None
    kubernetes: str | None = None  # a listed release (``1.35``) to start the cluster at; None: the default
    outside_range: bool = False  # probe a release outside a component's range; the result is exploratory
    # map images the bundle does not declare user-supplied (--image-map); the result is exploratory
    exploratory: bool = False


@dataclass
class Outcome:
    rendered: render.RenderedBundle
    suites: list[base.SuiteResult]
    cluster: dict[str, Any]
    started: float
    finished: float
    paths: evidence.EvidencePaths | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def result(self) -> str:
        """passed, failed, or incomplete (a case was not run): only passed exits 0."""
        return evidence.overall_verdict([{"result": s.result} for s in self.suites])

    @property
    def passed(self) -> bool:
        return self.result == "passed"

    @property
    def exploratory(self) -> bool:
        """Run outside a component's declared Kubernetes range (``--outside-range``), or with
        images mapped that the bundle does not declare user-supplied (``--exploratory``)."""
        return bool(self.cluster.get("exploratory"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "bundle": self.rendered.bundle,
            "version": self.rendered.version,
            "profile": self.rendered.profile,
            "digest": self.rendered.digest,
            "result": self.result,
            "exploratory": self.exploratory,
            "cluster": self.cluster,
            "suites": [s.to_dict() for s in self.suites],
            "seconds": round(self.finished - self.started, 3),
            "evidence": str(self.paths.envelope) if self.paths else None,
            "report": str(self.paths.report) if self.paths else None,
        }


def parse_cluster(spec: str) -> tuple[str, Path | None]:
    if spec in ("sim", "kind"):
        return spec, None
    if spec.startswith("kubeconfig="):
        path = Path(spec.partition("=")[2]).expanduser()
        if not path.is_file():
            raise errors.NotFoundError(f"kubeconfig not found: {path}", field="--cluster")
        return "kubeconfig", path
    raise errors.InputError(f"bad --cluster {spec!r}", field="--cluster", expected="sim, kind or kubeconfig=PATH")


def default_profile(kind: str) -> str:
    return {"sim": "sim", "kind": "kind"}.get(kind, "")


def select_suites(bundle_suites: tuple[str, ...], wanted: tuple[str, ...],
                  other_profiles: Mapping[str, tuple[str, ...]] | None = None) -> list[str]:
    """The suites to run: ``wanted`` (all of ``bundle_suites`` when empty), each declared for
    this profile; a refusal names the profiles that do declare them (``other_profiles``)."""
    names = list(wanted or bundle_suites)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise errors.NotFoundError(
            f"unknown suite(s): {', '.join(unknown)}", field="--suite", expected=", ".join(sorted(SUITES))
        )
    not_in_bundle = [n for n in names if n not in bundle_suites]
    if not_in_bundle:
        hint = [f"--profile {p}" for p, suites in sorted((other_profiles or {}).items())
                if set(not_in_bundle) <= set(suites)]
        raise errors.InputError(
            f"suite(s) {', '.join(not_in_bundle)} are not declared by the bundle"
            + (f" for this profile; certify them with {' or '.join(hint)}" if hint else ""),
            field="--suite",
            expected=", ".join(bundle_suites),
        )
    return names


def _static_suite(findings: list[errors.Finding], seconds: float) -> base.SuiteResult:
    case = base.CaseResult(
        name="schemas-policy-lint",
        result="failed" if findings else "passed",
        reason="; ".join(str(f) for f in findings[:20]) + (f" (+{len(findings) - 20} more)" if len(findings) > 20 else ""),
        seconds=seconds,
        details={"findings": len(findings)},
    )
    return base.SuiteResult(name="static", cases=[case], seconds=seconds, started=time.time() - seconds)


def _failed_step(name: str, reason: str, seconds: float) -> base.SuiteResult:
    case = base.CaseResult(name=name, result="failed", reason=reason, seconds=seconds)
    return base.SuiteResult(name=name, cases=[case], seconds=seconds, started=time.time() - seconds)


def _use_image_map(prov: providers.ClusterProvider, kind: str, path: Path | None) -> None:
    """--image-map: validated by the provider before any cluster starts (exit 2 when bad, or
    when the provider cannot run host executables for images)."""
    if path is None:
        return
    if not isinstance(prov, providers.RunsImageMaps):
        raise providers.missing(providers.RunsImageMaps, kind=kind, needed_by="--image-map", field="--image-map")
    prov.use_image_map(path)


def _what_ran(prov: providers.ClusterProvider, info: dict[str, Any]) -> list[base.SuiteResult]:
    """Record in ``info`` what ran live and what was simulated, and each bring-your-own binary
    (sha256, reported version, the pods that really ran it); one that ran for an image tag naming
    another version fails the run."""
    info["live"], info["simulated"] = cluster_facts.live_and_simulated(prov)
    if not isinstance(prov, providers.RunsImageMaps):
        return []
    info["images"] = prov.mapped_images()
    wrong = [f"{m['image']} ran as tag {', '.join(m['tags'])} but {m['executable']} reports {m['version']}"
             for m in info["images"] if m["live"] and not m["version_matches"]]
    wrong += [why for m in info["images"] for why in m.get("refused") or []]
    return [_failed_step("image-map", "; ".join(wrong), 0.0)] if wrong else []


def _check_image_map(cat: model.Catalog, rb: render.RenderedBundle, kind: str, opts: Options,
                     info: dict[str, Any], also: render.RenderedBundle | None = None) -> None:
    """An image map stands in only for what the user must bring: mapping an image the bundle does
    not declare (``spec.userSuppliedImages``) is bad input (exit 2) before any cluster starts,
    unless the run is ``--exploratory``, whose evidence says so and never promotes. ``also``: the
    other bundle an upgrade run installs (an image either declares may be mapped)."""
    path = opts.image_map if opts.image_map is not None else (imagemap.from_env() if kind == "sim" else None)
    if path is None:
        return
    declared = tuple(dict.fromkeys(img for b in (rb, also) if b is not None
                                   for img in resolve.find_bundle(cat, b.ref).user_supplied_images))
    undeclared = imagemap.check_declared(path, declared)
    if not undeclared:
        return
    if not opts.exploratory:
        raise imagemap.undeclared_error(path, undeclared, declared, rb.ref)
    info["exploratory"] = True
    info["undeclaredImages"] = undeclared


def _add_node_groups(prov: providers.ClusterProvider, kind: str, groups: list[Any], say: Say) -> None:
    """The profile's ``cluster.extraNodes`` ([{nodes, shape}]): more nodes of other shapes."""
    if not groups:
        return
    if not isinstance(prov, providers.AddsNodes):
        raise providers.missing(providers.AddsNodes, kind=kind, needed_by="the profile's node groups",
                                field="cluster.extraNodes")
    for g in groups:
        say(f"adding {g['nodes']} x {g['shape']}")
        prov.add_nodes(int(g["nodes"]), str(g["shape"]))


def _start_services(prov: providers.ClusterProvider, rb: render.RenderedBundle, say: Say) -> list[str]:
    if not isinstance(prov, providers.StartsServices):
        return []
    started: list[str] = list(prov.start_services([o for c in rb.components for o in c.objects], progress=say))
    for line in started:
        say(f"started {line}")
    return started


def _scan_logs(rb: render.RenderedBundle, kubeconfig: Path, opts: Options, results: list[base.SuiteResult],
               say: Say) -> None:
    """The ``logs`` suite: components' declared fatal log lines (KAI: ``forbidden``); the logs
    read are kept with the evidence."""
    keep = opts.evidence_dir / "logs" / "pods" if opts.evidence_dir is not None else None
    try:
        scanned = logscan.scan(rb, kubeconfig, keep, say)
    except (OSError, ApiException) as exc:
        results.append(_failed_step("logs", f"could not scan the components' logs: {exc}", 0.0))
        return
    if scanned is not None:
        results.append(scanned)


def outside_range(rb: render.RenderedBundle, release: str) -> list[str]:
    """Each component whose declared Kubernetes range excludes ``release``, with its range."""
    out = []
    for c in rb.components:
        rng = rb.lock_component(c.name).get("kubernetes")
        if rng and not versions.satisfies(release.lstrip("v"), rng):
            out.append(f"{c.name} {c.version} supports Kubernetes {rng}")
    return out


def _check_range(rb: render.RenderedBundle, release: str, opts: Options, info: dict[str, Any]) -> None:
    """Refuse (exit 2) a release outside a component's range unless --outside-range probes it;
    a probe is recorded as exploratory in the evidence."""
    info["requestedKubernetes"] = release
    outside = outside_range(rb, release)
    if not outside:
        return
    if not opts.outside_range:
        raise errors.InputError(
            f"{rb.ref} is not declared for Kubernetes {release}: {'; '.join(outside)}", field="--kubernetes",
            expected="a release inside every component's range, or --outside-range to probe it (exploratory)")
    info["exploratory"] = True
    info["outsideRange"] = outside


def _signing_key(opts: Options, say: Say) -> Path:
    if opts.signing_key is not None:
        keys.load_private(opts.signing_key)  # permissions and format checked before any work
        return opts.signing_key
    return keys.local_key(say)


def run(cat: model.Catalog, opts: Options, say: Say) -> Outcome:
    started = time.time()
    kind, kubeconfig_path = parse_cluster(opts.cluster)
    profile = opts.profile or default_profile(kind)
    if not profile:
        raise errors.InputError("--profile is required with --cluster kubeconfig=PATH", field="--profile")
    if opts.evidence_dir is not None and opts.evidence_dir.exists() and not opts.evidence_dir.is_dir():
        # checked before any work: the evidence of a long run must have somewhere to go
        raise errors.InputError("evidence path exists and is not a folder", path=str(opts.evidence_dir),
                                field="--evidence", expected="a new or existing folder")
    key_path = _signing_key(opts, say) if opts.evidence_dir else None
    release = releases.resolve(opts.kubernetes) if opts.kubernetes is not None else None
    say(f"rendering {opts.bundle} for profile {profile}")
    rb = render.render_bundle(cat, opts.bundle, profile)
    declared = cat.bundles[(rb.bundle, rb.version)].profiles
    suite_names = select_suites(rb.suites, opts.suites,
                                {n: p.suites for n, p in declared.items() if p.suites and n != profile})
    cluster_info: dict[str, Any] = {"provider": kind, "profile": profile}
    if release is not None:
        _check_range(rb, release, opts, cluster_info)
    _check_image_map(cat, rb, kind, opts, cluster_info)
    results: list[base.SuiteResult] = []
    say("static validation")
    t0 = time.monotonic()
    findings = bundle_checks.check_rendered(rb)
    results.append(_static_suite(findings, time.monotonic() - t0))
    if not findings:
        t1 = time.monotonic()
        try:
            results += _on_cluster(rb, kind, kubeconfig_path, suite_names, opts, cluster_info, say)
        except errors.InputError:
            raise  # bad input (an unreachable kubeconfig, kind without Docker …): exit 2, no evidence
        except errors.CatalogError as exc:
            # A cluster or tool failure is a failed certification: it still gets signed evidence.
            results.append(_failed_step("cluster", str(exc), time.monotonic() - t1))
    outcome = Outcome(rendered=rb, suites=results, cluster=cluster_info, started=started, finished=time.time())
    if opts.evidence_dir is not None and key_path is not None:
        statement = evidence.build_statement(
            bundle=rb.bundle, version=rb.version, profile=profile, digest=rb.digest, cluster=cluster_info,
            tools=build.versions(release), suites=results, started=started, finished=outcome.finished,
            exploratory=bool(cluster_info.get("exploratory")),
        )
        outcome.paths = evidence.write_evidence(opts.evidence_dir, statement, key_path)
        (opts.evidence_dir / "bundle.lock.json").write_text(render.canonical_json(rb.lock).decode() + "\n")
    return outcome


def _on_cluster(
    rb: render.RenderedBundle,
    kind: str,
    kubeconfig_path: Path | None,
    suite_names: list[str],
    opts: Options,
    info: dict[str, Any],
    say: Say,
) -> list[base.SuiteResult]:
    prov = providers.get(kind, opts.cluster_name, kubeconfig=kubeconfig_path)
    if not prov.available():
        raise errors.InputError(f"cluster provider {kind!r} cannot run here: {providers.unavailable_reason(prov)}", field="--cluster")
    # Suites that need faults run on any provider: without an injector (the provider's own, or the
    # pod injector opted into with --inject-faults) their fault cases are not run (incomplete).
    agent = fault_injection.check(rb, prov, opts.inject_faults)
    _use_image_map(prov, kind, opts.image_map)
    release = info.get("requestedKubernetes")
    if release is not None:
        if not isinstance(prov, providers.RunsKubernetesReleases):
            raise providers.missing(providers.RunsKubernetesReleases, kind=kind, needed_by="--kubernetes",
                                    field="--kubernetes")
        prov.use_kubernetes(str(release))
    if kubeconfig_path is not None:
        # as `catalog install` does: a server that does not answer is bad input (exit 2) now,
        # after the checks that need no network, not after a wait of --ready-timeout seconds
        install.target(kubeconfig_path, field="--cluster")
    results: list[base.SuiteResult] = []
    started_cluster = installing = False
    faults = fault_injection.Choice("none")
    t0 = time.monotonic()
    try:
        if kind == "kubeconfig":
            kubeconfig = prov.kubeconfig()
        else:
            shape = str(rb.cluster.get("shape", "h100-80gb-x8"))
            nodes = int(rb.cluster.get("nodes", 4))
            say(f"starting {kind} cluster {opts.cluster_name!r}: {nodes} x {shape}")
            kubeconfig = prov.up(nodes, shape)  # a failed up cleans up after itself
            started_cluster = True
            _add_node_groups(prov, kind, rb.cluster.get("extraNodes") or [], say)
        prov.wait_ready(opts.ready_timeout_s)
        info.update(cluster_facts.describe(kubeconfig, prov))
        problems = cluster_facts.preflight(info, rb, outside_range_ok=bool(info.get("exploratory")))
        if release is not None and cluster_facts.release_of(info) != str(release).lstrip("v"):
            problems.append(f"asked for Kubernetes {release}, the API server reports {info['kubernetesVersion']}")
        if problems:
            results.append(_failed_step("preflight", "; ".join(problems), time.monotonic() - t0))
            return results
        t1 = time.monotonic()
        try:
            # Provider hook: host services the bundle calls for (the sim runs Slurm for Slinky CRs),
            # before install so the bundle's pods start with them reachable.
            info["services"] = _start_services(prov, rb, say)
        except errors.CatalogError as exc:
            results.append(_failed_step("services", str(exc), time.monotonic() - t1))
            return results
        not_ready: list[str] = []
        installing = True
        try:
            # Each component's readiness gate, in order, before any suite (KAI's webhooks must serve
            # before team-queues' Queues arrive). A gate that times out fails the run, naming what
            # is not ready, and the suites still run: their preflights say what they miss.
            done = install.install(rb, kubeconfig, timeout_s=opts.install_timeout_s, progress=say, gates=True,
                                   ready_timeout_s=opts.ready_timeout_s, not_ready=lambda e: not_ready.append(str(e)))
        except errors.CatalogError as exc:
            results.append(_failed_step("install", str(exc), time.monotonic() - t1))
            return results
        info["readiness"] = {d.component: d.readiness for d in done}
        if not_ready:
            results.append(_failed_step("readiness", "; ".join(not_ready), time.monotonic() - t1))
        results += _what_ran(prov, info)
        params: dict[str, Any] = {"bundle_values": {c.name: c.values for c in rb.components}}
        faults = fault_injection.choose(prov, opts.inject_faults, agent, kubeconfig, kind)
        faults.record(info)
        params.update(faults.params)
        endpoints = cluster_facts.endpoints(prov)
        for name in suite_names:
            say(f"suite {name}")
            suite = importlib.import_module(SUITES[name])
            # the profile's suiteParams tune a suite to this target (fault kind, timeouts)
            ctx = base.SuiteContext(kubeconfig=kubeconfig, params={**params, **rb.suite_params.get(name, {})},
                                    endpoints=dict(endpoints), log=say)
            results.append(suite.run(ctx))
        return results
    finally:
        faults.finish(info, say)
        if installing:
            _scan_logs(rb, kubeconfig, opts, results, say)
        failed = any(r.result == "failed" for r in results)
        if failed and opts.evidence_dir is not None:
            try:
                prov.collect_logs(opts.evidence_dir / "logs")
            except errors.CatalogError as exc:
                say(f"could not collect logs: {exc}")
        if started_cluster and not opts.keep_cluster:
            say(f"tearing down cluster {opts.cluster_name!r}")
            prov.down()
