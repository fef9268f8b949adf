"""Render a bundle: resolve -> chart + layered values -> ``helm template`` (+ optional kustomize
overlay) -> one folder per component and ``bundle.lock.json``.

Same inputs give byte-identical output and the same digest; the digest is the bundle's identity
for evidence and promotion. Called by ``catalog render/validate/diff/certify/install``.

Rendering uses the helm binary directly (``helm template --kube-version``) because pyhelm3's
``template_resources`` cannot pass ``--kube-version``; installs go through pyhelm3.
"""

from __future__ import annotations

import hashlib
import json
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
        _check_out_dir(out_dir, force)
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
        suites=b.suites,
        cluster=plan.profile.cluster,
        suite_params=plan.profile.suite_params,
    )
    if out_dir is not None:
        _write(rb, out_dir)
        rb.out_dir = out_dir
    return rb


def _check_out_dir(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise errors.ConflictError("output path exists and is not a folder", path=str(out_dir), field="--out")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / LOCK_FILE).is_file() and not force:
        raise errors.ConflictError(
            "output folder exists and is not a previous render; refusing to overwrite (use --force)",
            path=str(out_dir),
            field="--out",
        )


def _write(rb: RenderedBundle, out_dir: Path) -> None:
    """Write into a sibling temp folder, then swap it in: never a half-written render."""
    out_dir = out_dir.resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        for c in rb.components:
            (tmp / c.name).mkdir()
            (tmp / c.name / MANIFESTS).write_text(c.manifest_text)
        (tmp / LOCK_FILE).write_text(json.dumps(rb.lock, indent=2, sort_keys=True) + "\n")
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
