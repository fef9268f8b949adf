"""Render a bundle: resolve -> chart + layered values -> ``helm template`` (+ optional kustomize
overlay) -> one folder per component and ``bundle.lock.json``.

Same inputs give byte-identical output and the same digest; the digest is the bundle's identity
for evidence and promotion. Called by ``catalog render/validate/diff/certify/install``.

``--out`` never deletes what it did not write: a render folder carries a marker file
(:data:`MARKER`) listing the digest of every file written; only such a folder is replaced, and
only when its files are still the ones listed (``force`` discards edits made since). The
filesystem root, the repository, the catalog, any folder holding the catalog, and a git work
tree are refused outright, whatever the marker says.

Rendering uses the helm binary directly (``helm template --kube-version``) because pyhelm3's
``template_resources`` cannot pass ``--kube-version``; installs go through pyhelm3.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpucatalog.catalog import charts, model, resolve, values
from gpucatalog.core import errors, executor
from gpucatalog.toolchain import build

LOCK_FILE = "bundle.lock.json"
# libyaml's parser where present: it reads the same objects as the pure-Python one, many times
# faster (Kueue's Workload CRD alone is 1.4 MB). Output keeps the pure-Python dumper, whose
# line wrapping the digests were made with.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MANIFESTS = "manifests.yaml"
MARKER = ".catalog-render.json"  # written last by ``_write``; lists every file it wrote


@dataclass
class RenderedComponent:
    name: str
    version: str
    namespace: str
    release: str
    chart_dir: str  # a chart folder or .tgz, as given to helm
    values: dict[str, Any]
    objects: list[dict[str, Any]]
    manifest_text: str
    declarations: model.Declarations = field(default_factory=model.Declarations)
    depends_on: tuple[str, ...] = ()  # the bundle's dependsOn (install order; not in the lock)


@dataclass
class RenderedBundle:
    bundle: str
    version: str
    profile: str
    kube_version: str
    digest: str
    lock: dict[str, Any]
    components: list[RenderedComponent]
    suites: tuple[str, ...] = ()
    cluster: dict[str, Any] = field(default_factory=dict)
    suite_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    out_dir: Path | None = None

    @property
    def ref(self) -> str:
        return f"{self.bundle}@{self.version}"

    def lock_component(self, name: str) -> dict[str, Any]:
        return next(c for c in self.lock["components"] if c["name"] == name)


def canonical_json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def certification_contract(b: model.Bundle, profile: model.Profile) -> dict[str, Any]:
    """What certification of ``b`` on ``profile`` depends on besides the rendered objects: the
    suites it runs, their parameters (an injected XID code, an observation window), the cluster
    shape and size, and the images a user may bring. Part of the lock, so of the digest: evidence
    made under other conditions does not prove the bundle as it is now."""
    return {
        "suites": list(profile.suites or b.suites),
        "suiteParams": profile.suite_params,
        "cluster": profile.cluster,
        "userSuppliedImages": sorted(b.user_supplied_images),
    }


def _kind_rank(obj: dict[str, Any]) -> int:
    # CRDs first, then namespaces, then everything in helm's (stable) order.
    return {"CustomResourceDefinition": 0, "Namespace": 1}.get(str(obj.get("kind")), 2)


def dump_objects(objs: list[dict[str, Any]]) -> str:
    return "".join("---\n" + yaml.safe_dump(o, sort_keys=True, default_flow_style=False) for o in objs)


def helm_template(
    release: str, chart_ref: str, namespace: str, kube_version: str, vals: dict[str, Any]
) -> list[dict[str, Any]]:
    helm = build.ensure("helm")
    proc = executor.run(
        [
            helm,
            "template",
            release,
            chart_ref,
            "--namespace",
            namespace,
            "--kube-version",
            kube_version,
            "--include-crds",
            "--values",
            "-",
        ],
        input=json.dumps(vals),
        check=False,
    )
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip()
        # A chart's own `fail` or values.schema.json rejection is the user's input, not a tool bug.
        raise errors.InputError(f"helm template of {release!r} failed: {msg}", field=f"values of {release}")
    return [o for o in yaml.load_all(proc.stdout, Loader=_LOADER) if isinstance(o, dict)]


def kustomize(objs: list[dict[str, Any]], patches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kubectl = build.ensure("kubectl")
    with tempfile.TemporaryDirectory(prefix="catalog-kustomize-") as tmp:
        d = Path(tmp)
        (d / MANIFESTS).write_text(dump_objects(objs))
        (d / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [MANIFESTS], "patches": patches}))
        proc = executor.run([kubectl, "kustomize", str(d)], check=False)
    if proc.returncode != 0:
        raise errors.InputError(f"kustomize overlay failed: {proc.stderr.strip()}", field="spec.profiles.kustomize")
    return [o for o in yaml.load_all(proc.stdout, Loader=_LOADER) if isinstance(o, dict)]


def render_bundle(
    cat: model.Catalog, ref: str, profile: str, out_dir: Path | None = None, *, force: bool = False
) -> RenderedBundle:
    """Render ``ref`` for ``profile``; when ``out_dir`` is given, write it atomically."""
    plan = resolve.plan(cat, ref, profile)
    b = plan.bundle
    if out_dir is not None:
        check_out_dir(out_dir, force, cat)
    comps: list[RenderedComponent] = []
    lock_comps: list[dict[str, Any]] = []
    for step in plan.steps:
        e, cv = step.entry, step.version
        chart = charts.resolve(cat, cv)
        prof_values = plan.profile.values.get(e.name, {})
        merged = values.merge(cv.values, e.values, prof_values)
        # Helm validates chart defaults + our layers; check the same, earlier, with a clearer message.
        values.check(
            values.merge(chart.default_values, merged), chart.values_schema, component=e.name, source=str(b.source_file)
        )
        objs = helm_template(e.release, chart.ref, e.namespace, b.kube_version, merged)
        overlay = plan.profile.kustomize.get(e.name)
        if overlay and overlay.get("patches"):
            objs = kustomize(objs, overlay["patches"])
        objs = sorted(objs, key=_kind_rank)  # sorted() is stable: helm's order is kept within a rank
        text = dump_objects(objs)
        comps.append(
            RenderedComponent(
                name=e.name,
                version=cv.version,
                namespace=e.namespace,
                release=e.release,
                chart_dir=chart.ref,
                values=merged,
                objects=objs,
                manifest_text=text,
                declarations=cv.declarations,
                depends_on=e.depends_on,
            )
        )
        lock_comps.append(
            {
                "name": e.name,
                "version": cv.version,
                "release": e.release,
                "namespace": e.namespace,
                "kubernetes": cv.kubernetes,
                "chart": {"source": chart.source, "version": chart.chart_version, "digest": chart.digest},
                "values": {"digest": sha256(canonical_json(merged))},
                "kustomize": {"digest": sha256(canonical_json(overlay))} if overlay else None,
                "images": [{"name": i.name, "ref": i.ref, "digest": i.digest} for i in cv.images],
                "output": {"digest": sha256(text.encode()), "objects": len(objs)},
                # the log lines that fail a run and the policy exceptions are part of what certification checked
                "declarations": {"digest": sha256(canonical_json(dataclasses.asdict(cv.declarations)))},
            }
        )
    tools = build.versions()
    lock: dict[str, Any] = {
        "apiVersion": model.API_VERSION,
        "kind": "BundleLock",
        "bundle": b.name,
        "version": b.version,
        "profile": profile,
        "kubernetesVersion": b.kube_version,
        "tools": {"helm": tools["helm"], "kubectl": tools["kubectl"]},
        "components": lock_comps,
        "certification": certification_contract(b, plan.profile),
    }
    digest = sha256(canonical_json(lock))
    lock["digest"] = digest
    rb = RenderedBundle(
        bundle=b.name,
        version=b.version,
        profile=profile,
        kube_version=b.kube_version,
        digest=digest,
        lock=lock,
        components=comps,
        suites=plan.profile.suites or b.suites,
        cluster=plan.profile.cluster,
        suite_params=plan.profile.suite_params,
    )
    if out_dir is not None:
        _write(rb, out_dir)
        rb.out_dir = out_dir
    return rb


def _refusal(real: Path, cat: model.Catalog) -> str:
    """Why ``real`` (a resolved --out path) may never be a render folder, or ''."""
    catalog_root, repo_root = cat.root.resolve(), cat.repo_root.resolve()
    if real == Path(real.anchor):
        return "is the filesystem root"
    if real == repo_root:
        return "is the repository root"
    if real == catalog_root or real in catalog_root.parents:
        return f"holds the catalog {catalog_root}"
    if catalog_root in real.parents:
        return f"is inside the catalog {catalog_root}"
    if (real / ".git").exists():
        return "is a git work tree"
    return ""


def _file_digests(folder: Path) -> dict[str, str]:
    """relative path -> sha256 of every file below ``folder`` (symlinks listed, never followed)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            p = Path(dirpath) / name
            rel = p.relative_to(folder).as_posix()
            out[rel] = "symlink" if p.is_symlink() else charts.sha256_file(p)
    return out


def check_out_dir(out_dir: Path, force: bool, cat: model.Catalog) -> None:
    """Refuse ``out_dir`` unless it is new, empty, or a folder this command wrote and nobody changed
    since (``force``: changed since is fine). Also used by ``catalog render --format`` and
    ``install --gitops``."""
    real = out_dir.resolve()
    why = _refusal(real, cat)
    if why:
        raise errors.ConflictError(f"refusing to render into {real}: it {why}", path=str(out_dir), field="--out",
                                   expected="a new or empty folder, or a previous render")
    if not real.exists():
        return
    if not real.is_dir():
        raise errors.ConflictError("output path exists and is not a folder", path=str(out_dir), field="--out")
    if not any(real.iterdir()):
        return
    marker = real / MARKER
    try:
        written = json.loads(marker.read_text())["files"]
        if not isinstance(written, dict):
            raise TypeError("files is not a mapping")
    except (OSError, ValueError, KeyError, TypeError):
        raise errors.ConflictError(
            f"output folder is not empty and was not written by `catalog render` (no valid {MARKER}); "
            "refusing to replace it: choose a new or empty folder, or remove this one yourself",
            path=str(out_dir), field="--out") from None
    present = _file_digests(real)
    present.pop(MARKER, None)
    changed = sorted(k for k in present.keys() | written.keys() if present.get(k) != written.get(k))
    if changed and not force:
        raise errors.ConflictError(
            f"previous render was changed since it was written ({', '.join(changed[:5])}"
            + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            + "); refusing to replace it (use --force to discard those changes)",
            path=str(out_dir), field="--out")


def _write(rb: RenderedBundle, out_dir: Path) -> None:
    files = {f"{c.name}/{MANIFESTS}": c.manifest_text for c in rb.components}
    write_files(rb, out_dir, files)


def lock_text(rb: RenderedBundle) -> str:
    return json.dumps(rb.lock, indent=2, sort_keys=True) + "\n"


def write_files(rb: RenderedBundle, out_dir: Path, files: dict[str, str], fmt: str = "") -> None:
    """Write ``files`` (relative path -> text), the lock and the marker into a sibling temp folder,
    then swap it in: never a half-written render. ``fmt`` names a GitOps form in the marker."""
    out_dir = out_dir.resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        for rel, text in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
        (tmp / LOCK_FILE).write_text(lock_text(rb))
        marker: dict[str, Any] = {"writtenBy": "catalog render", "bundle": rb.ref, "profile": rb.profile,
                                  "digest": rb.digest, "files": _file_digests(tmp)}
        if fmt:
            marker["format"] = fmt
        (tmp / MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
        tmp.chmod(0o755)
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{tmp.name[-8:]}")
            out_dir.rename(old)
            tmp.rename(out_dir)
            shutil.rmtree(old)
        else:
            tmp.rename(out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
