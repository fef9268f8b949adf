"""The compatibility matrix: certify each bundle on each listed Kubernetes release, one cell at a
time, and say per cell what its signed evidence proves.

Called by ``catalog matrix``. A cell is ``(rendered bundle digest, Kubernetes release)``; its
evidence folder is ``<out>/cells/<bundle>/<version>/<minor>/``. A cell whose folder already holds
evidence that verifies, for the same digest and release, is not run again (so a matrix run is
resumable: an interrupted one keeps every finished cell, and a half-written cell has no envelope,
which ``evidence.write_evidence`` writes last). Every status is read back from the verified
evidence, never from the run's own result object: a cell is never green without a signature that
verifies. Cells run sequentially: one sim cluster at a time is all a small host can carry.

Statuses: passed, failed (first failing case), incomplete (first case not run), outside-range
(a component's declared range excludes the release; ``--outside-range`` probes it, and the
probe's result is shown as exploratory), not-run (the toolchain build or the run could not start:
its error), unverified (evidence whose signature or shape does not verify).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519

from gpucatalog.catalog import model, render, versions
from gpucatalog.core import errors
from gpucatalog.pipelines import certify, evidence, judge, keys, matrix_files, trust
from gpucatalog.toolchain import build, releases

STATUSES = ("passed", "failed", "incomplete", "outside-range", "not-run", "unverified")
CLUSTER_NAME = "matrix"

Say = Callable[[str], None]
CertifyCell = Callable[[certify.Options], object]
EnsureRelease = Callable[[str], None]


@dataclass(frozen=True)
class Target:
    """One bundle rendered for the matrix's profile: what a cell's evidence must be about."""

    bundle: str
    version: str
    digest: str
    # (component label, declared Kubernetes range) for each component
    ranges: tuple[tuple[str, str], ...]
    suites: tuple[str, ...] = ()  # the bundle's suites: a cell is green only when all of them passed

    @property
    def ref(self) -> str:
        return f"{self.bundle}@{self.version}"

    def outside(self, release: str) -> list[str]:
        return [f"{label} supports Kubernetes {rng}" for label, rng in self.ranges
                if rng and not versions.satisfies(release.lstrip("v"), rng)]

    @classmethod
    def of(cls, rb: render.RenderedBundle) -> Target:
        return cls(rb.bundle, rb.version, rb.digest, tuple(
            (f"{c.name} {c.version}", str(rb.lock_component(c.name).get("kubernetes") or "")) for c in rb.components),
            tuple(rb.suites))


@dataclass
class Cell:
    bundle: str  # bundle@version
    kubernetes: str  # the release, v1.35.4
    status: str
    detail: str = ""
    evidence: str = ""  # the evidence folder, relative to the matrix folder ("" when none)
    digest: str = ""
    signer: str = ""
    seconds: float = 0.0
    cached: bool = False  # read from an earlier run's evidence, not run again
    exploratory: str = ""  # the verdict of an --outside-range probe

    @property
    def minor(self) -> str:
        return releases.minor(self.kubernetes)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "minor": self.minor}


@dataclass
class Options:
    bundles: list[str]
    kubernetes: list[str]  # listed releases, v1.35.4
    out_dir: Path
    profile: str = "sim"
    signing_key: Path | None = None
    outside_range: bool = False  # probe cells outside a component's range (exploratory)
    rerun: bool = False  # run every cell, even one with valid evidence
    run: bool = True  # False: only rebuild the matrix from the evidence present
    image_map: Path | None = None  # an image-map overlay for every cell (bring-your-own binaries)
    trusted: dict[str, ed25519.Ed25519PublicKey] = field(default_factory=dict)


def cell_dir(out_dir: Path, target: Target, release: str) -> Path:
    return out_dir / "cells" / target.bundle / target.version / releases.minor(release)


def trusted_keys(catalog_dir: Path, signing_key: Path) -> dict[str, ed25519.Ed25519PublicKey]:
    """The keys a cell's evidence may be signed by: the key this matrix signs with, and every key
    of the catalog's trust file."""
    pub = keys.load_private(signing_key).public_key()
    out = {keys.keyid(pub): pub}
    trust_path = catalog_dir / "trust.yaml"
    if trust_path.is_file():
        out.update({k.keyid: k.public_key for k in trust.load(trust_path).keys})
    return out


def _first(pred: Mapping[str, Any], wanted: Callable[[str], bool]) -> str:
    for s in pred.get("suites") or []:
        for c in (s.get("cases") or []) if isinstance(s, Mapping) else []:
            if isinstance(c, Mapping) and wanted(str(c.get("result"))):
                reason = " ".join(str(c.get("reason") or "").split())
                return f"{s.get('name')}/{c.get('name')}" + (f": {reason[:300]}" if reason else "")
    return ""


def _verdict(pred: Mapping[str, Any]) -> str:
    """Recomputed from the cases (a signed summary that disagrees with its cases is not trusted)."""
    suites = [s for s in pred.get("suites") or [] if isinstance(s, Mapping)]
    return evidence.overall_verdict([
        {"result": evidence.suite_verdict([c for c in s.get("cases") or [] if isinstance(c, Mapping)])}
        for s in suites])


def read_cell(folder: Path, out_dir: Path, target: Target, release: str,
              trusted: Mapping[str, ed25519.Ed25519PublicKey]) -> Cell | None:
    """The cell its evidence in ``folder`` proves, or None when there is none for this digest
    and release (absent, half-written, or about another rendering or release: run it)."""
    if not evidence.envelope_path(folder).is_file():
        return None
    rel = folder.relative_to(out_dir).as_posix()
    try:
        v = judge.judge(folder, judge.Claim(target.bundle, target.version, trusted, lambda _p: target.digest,
                                            suites=target.suites, allow_exploratory=True))
    except errors.CatalogError as exc:
        return Cell(target.ref, release, "unverified", f"evidence does not verify: {exc}", rel)
    if v.statement is None:
        return Cell(target.ref, release, "unverified", f"evidence does not verify: {v.summary()}", rel)
    if any(f.rule in ("subject", "digest") for f in v.reasons) or v.kubernetes != release.lstrip("v"):
        return None  # another rendering or release: stale for this cell
    pred = v.predicate
    verdict = _verdict(pred)
    detail = {"failed": _first(pred, lambda r: r == "failed"),
              "incomplete": _first(pred, lambda r: r not in ("passed", "failed"))}.get(verdict, "")
    if verdict == "passed" and v.reasons:  # e.g. run with --suite: a subset proves no cell
        verdict, detail = "incomplete", v.summary()
    cell = Cell(target.ref, release, verdict, detail, rel, v.digest, v.signer[:16], _seconds(pred))
    if v.exploratory:
        cluster = pred.get("cluster") or {}
        cell.status, cell.exploratory = "outside-range", verdict
        cell.detail = "; ".join(str(x) for x in cluster.get("outsideRange") or []) + (
            f"; probed: {verdict}" + (f" ({detail})" if detail else ""))
    return cell


def _seconds(pred: Mapping[str, Any]) -> float:
    return round(sum(float(s.get("seconds") or 0.0) for s in pred.get("suites") or [] if isinstance(s, Mapping)), 1)


def ensure_release(release: str, say: Say) -> None:
    """Build (or find cached) the control plane of ``release`` and the sim's other tools."""
    for tool in build.group_of("kube-apiserver", release).tools:
        build.ensure(tool, say, version=release)


def run_cell(target: Target, release: str, opts: Options, say: Say, certify_cell: CertifyCell,
             ensure: EnsureRelease) -> Cell:
    folder = cell_dir(opts.out_dir, target, release)
    outside = target.outside(release)
    if not opts.rerun:
        found = read_cell(folder, opts.out_dir, target, release, opts.trusted)
        if found is not None and found.status != "unverified" and (not outside or opts.outside_range
                                                                    or found.exploratory):
            found.cached = True
            return found
    if outside and not opts.outside_range:
        return Cell(target.ref, release, "outside-range", "; ".join(outside))
    if not opts.run:
        return Cell(target.ref, release, "not-run", "no evidence for this digest and release (run without --no-run)")
    t0 = time.monotonic()
    try:
        ensure(release)
    except errors.CatalogError as exc:
        return Cell(target.ref, release, "not-run", f"toolchain build of Kubernetes {release} failed: {exc}",
                    seconds=round(time.monotonic() - t0, 1))
    shutil.rmtree(folder, ignore_errors=True)  # stale evidence of another rendering or release
    say(f"cell {target.ref} x Kubernetes {release}")
    try:
        certify_cell(certify.Options(
            bundle=target.ref, cluster="sim", profile=opts.profile, evidence_dir=folder,
            signing_key=opts.signing_key, cluster_name=CLUSTER_NAME, kubernetes=release,
            outside_range=bool(outside), image_map=opts.image_map))
    except errors.CatalogError as exc:
        # a run that could not start (its cluster name taken, bad input for this cell): not run,
        # the other cells go on
        cell = read_cell(folder, opts.out_dir, target, release, opts.trusted)
        return cell or Cell(target.ref, release, "not-run", f"certify did not run: {exc}",
                            seconds=round(time.monotonic() - t0, 1))
    cell = read_cell(folder, opts.out_dir, target, release, opts.trusted)
    if cell is None:
        return Cell(target.ref, release, "not-run", "certify wrote no evidence for this digest and release",
                    seconds=round(time.monotonic() - t0, 1))
    cell.seconds = round(time.monotonic() - t0, 1)
    return cell


def run_targets(targets: Sequence[Target], opts: Options, say: Say, *, certify_cell: CertifyCell,
                ensure: EnsureRelease) -> list[Cell]:
    """Every cell, bundle by bundle; the matrix files are rewritten after each cell."""
    cells: list[Cell] = []
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    for target in targets:
        for release in opts.kubernetes:
            cells.append(run_cell(target, release, opts, say, certify_cell, ensure))
            say(f"{target.ref} x {release}: {cells[-1].status}" + (" (cached)" if cells[-1].cached else ""))
            matrix_files.write(opts.out_dir, [t.ref for t in targets], opts.kubernetes, cells)
    return cells


def run(cat: model.Catalog, opts: Options, say: Say) -> list[Cell]:
    """Render every bundle, then run (or read) each cell with the real certification."""
    key = opts.signing_key or keys.local_key(say)
    opts.signing_key = key
    opts.trusted = opts.trusted or trusted_keys(cat.root, key)
    targets = [Target.of(render.render_bundle(cat, ref, opts.profile)) for ref in opts.bundles]

    def certify_cell(o: certify.Options) -> object:
        return certify.run(cat, o, say)

    return run_targets(targets, opts, say, certify_cell=certify_cell,
                       ensure=lambda release: ensure_release(release, say))
