"""Publish a rendered bundle to an OCI registry: each component's chart (``helm package`` +
``helm push``) and the bundle lock as an OCI artifact that also indexes the charts by digest.

Called by ``catalog publish``; ``mirror`` reads what this writes. Layout under
``oci://HOST/PATH``:

- ``PATH/<chart>:<chart version>`` — the Helm chart, as ``helm push`` stores it;
- ``PATH/bundles/<bundle>:<version>_<profile>`` — an OCI image manifest with ``artifactType``
  ``application/vnd.gpu-catalog.bundle.v1``, the empty config, and two layers:
  ``bundle.lock.json`` and ``charts.json`` (name, version, manifest digest and archive digest of
  every chart), annotated with the rendered bundle digest.

After each push the registry's manifest is read back and the chart archive's digest compared
with the file that was pushed, so a registry that stored something else is caught at once.
"""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from gpucatalog.core import errors, executor
from gpucatalog.pipelines import oci

ARTIFACT_TYPE = "application/vnd.gpu-catalog.bundle.v1"
LOCK_MEDIA = "application/vnd.gpu-catalog.bundle.lock.v1+json"
CHARTS_MEDIA = "application/vnd.gpu-catalog.bundle.charts.v1+json"
HELM_CHART_MEDIA = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
DIGEST_ANNOTATION = "dev.gpu-catalog.bundle.digest"


class ComponentLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def chart_dir(self) -> str | Path: ...  # a chart folder, or a packaged chart (.tgz)


class RenderedLike(Protocol):
    @property
    def bundle(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def profile(self) -> str: ...
    @property
    def digest(self) -> str: ...
    @property
    def lock(self) -> dict[str, Any]: ...
    @property
    def components(self) -> Sequence[ComponentLike]: ...


@dataclass(frozen=True)
class PublishedChart:
    name: str
    version: str
    repository: str  # repository path inside the registry, e.g. "charts/team-queues"
    manifestDigest: str  # JSON field name
    chartDigest: str  # sha256 of the chart archive (.tgz)


@dataclass(frozen=True)
class Published:
    registry: str
    bundle_repository: str
    tag: str
    manifest_digest: str
    charts: tuple[PublishedChart, ...]


def bundle_repo(ref: oci.Ref, bundle: str) -> str:
    return ref.repo(f"bundles/{bundle}")


def bundle_tag(version: str, profile: str) -> str:
    # "_" cannot occur in a semantic version, so the split back is unambiguous.
    return f"{version}_{profile}"


def helm_env(home: Path) -> dict[str, str]:
    """Keep helm's registry login, cache and config inside ``home``: nothing in the user's $HOME."""
    return {"HELM_CONFIG_HOME": str(home / "config"), "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"), "HELM_REGISTRY_CONFIG": str(home / "registry.json")}


def chart_meta(chart: Path) -> tuple[str, str]:
    """(name, version) from a chart folder's or a packaged chart's Chart.yaml."""
    where = str(chart / "Chart.yaml") if chart.is_dir() else f"{chart}:Chart.yaml"
    try:
        if chart.is_dir():
            text = (chart / "Chart.yaml").read_text()
        else:
            with tarfile.open(chart, "r:gz") as tar:
                member = next((m for m in tar.getmembers() if m.name.count("/") == 1
                               and m.name.endswith("/Chart.yaml")), None)
                fh = tar.extractfile(member) if member is not None else None
                if fh is None:
                    raise FileNotFoundError(where)
                text = fh.read().decode()
        meta = yaml.safe_load(text)
    except FileNotFoundError as exc:
        raise errors.NotFoundError("chart has no Chart.yaml", path=str(chart)) from exc
    except (tarfile.TarError, OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise errors.InputError(f"unreadable chart ({exc})", path=str(chart)) from exc
    if not isinstance(meta, dict) or not meta.get("name") or not meta.get("version"):
        raise errors.SchemaError("Chart.yaml lacks name or version", path=where)
    return str(meta["name"]), str(meta["version"])


def push_chart(helm: Path, chart_dir: Path, ref: oci.Ref, client: oci.Client, work: Path) -> PublishedChart:
    name, version = chart_meta(chart_dir)
    env = helm_env(work / "helm")
    if chart_dir.is_dir():
        pkg_dir = work / "packages"
        pkg_dir.mkdir(parents=True, exist_ok=True)
        executor.run([helm, "package", chart_dir, "--destination", pkg_dir], env=env)
        tgz = pkg_dir / f"{name}-{version}.tgz"
    else:
        tgz = chart_dir  # already packaged (a pinned remote chart from the chart cache): push as is
    data = tgz.read_bytes()
    argv: list[str | os.PathLike[str]] = [helm, "push", tgz, ref.url]
    if client.base.startswith("http://"):
        argv.append("--plain-http")
    executor.run(argv, env=env)
    repo = ref.repo(name)
    _, manifest, digest = client.get_manifest(repo, version)
    layers = [la for la in manifest.get("layers", []) if la.get("mediaType") == HELM_CHART_MEDIA]
    want = oci.sha256(data)
    if len(layers) != 1 or layers[0].get("digest") != want:
        raise oci.DigestMismatch(f"chart {repo}:{version} after push", want, str([la.get("digest") for la in layers]))
    return PublishedChart(name, version, repo, digest, want)


def _descriptor(media_type: str, data: bytes, title: str | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"mediaType": media_type, "digest": oci.sha256(data), "size": len(data)}
    if title:
        d["annotations"] = {"org.opencontainers.image.title": title}
    return d


def push_lock(rendered: RenderedLike, ref: oci.Ref, client: oci.Client, charts: Sequence[PublishedChart]) -> Published:
    repo = bundle_repo(ref, rendered.bundle)
    tag = bundle_tag(rendered.version, rendered.profile)
    lock = (json.dumps(rendered.lock, indent=2, sort_keys=True) + "\n").encode()
    index = (json.dumps({
        "bundle": rendered.bundle, "version": rendered.version, "profile": rendered.profile,
        "digest": rendered.digest, "charts": [asdict(c) for c in charts],
    }, indent=2, sort_keys=True) + "\n").encode()
    for blob in (oci.EMPTY_JSON, lock, index):
        client.push_blob(repo, blob)
    manifest = {
        "schemaVersion": 2,
        "mediaType": oci.MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": _descriptor(oci.EMPTY_CONFIG, oci.EMPTY_JSON),
        "layers": [_descriptor(LOCK_MEDIA, lock, "bundle.lock.json"), _descriptor(CHARTS_MEDIA, index, "charts.json")],
        "annotations": {
            DIGEST_ANNOTATION: rendered.digest,
            "org.opencontainers.image.title": f"{rendered.bundle}@{rendered.version}",
            "org.opencontainers.image.version": rendered.version,
        },
    }
    raw = json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()
    digest = client.put_manifest(repo, tag, raw)
    return Published(ref.url, repo, tag, digest, tuple(charts))


def publish(rendered: RenderedLike, registry: str, helm: Path, *, plain_http: bool | None = None) -> Published:
    """Push every component chart (each chart once) and the lock artifact; returns what was pushed."""
    ref = oci.parse_ref(registry)
    client = oci.Client(ref, plain_http=plain_http)
    client.ping()
    charts: list[PublishedChart] = []
    seen: set[Path] = set()
    with tempfile.TemporaryDirectory(prefix="gpu-catalog-publish-") as tmp:
        for comp in rendered.components:
            chart_dir = Path(comp.chart_dir).resolve()
            if chart_dir in seen:
                continue
            seen.add(chart_dir)
            charts.append(push_chart(helm, chart_dir, ref, client, Path(tmp)))
    return push_lock(rendered, ref, client, charts)
