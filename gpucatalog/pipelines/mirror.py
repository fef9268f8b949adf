"""Copy a published bundle (its charts and lock artifact) from one OCI registry into another,
e.g. a private registry for an air-gapped cluster, verifying every digest on the way.

Called by ``catalog mirror``. Reads the lock artifact ``publish`` wrote, then for each chart it
lists: the chart's tag must still point at the manifest digest recorded at publish time, the
manifest and every blob must hash to their digests, and the chart archive must be the one
recorded; and the lock's digest must be the one a channel certified for the bundle (the channel
entry and its evidence judged by :mod:`.judge`, through ``certified.channel_digest``), so only
certified bundles travel. Everything is fetched and checked *before* anything is pushed, so a
mismatch leaves the target registry untouched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpucatalog.core import errors
from gpucatalog.pipelines import oci, publish


@dataclass(frozen=True)
class _Artifact:
    repo: str  # repository path below the registry's PATH prefix
    tag: str
    manifest: bytes
    digest: str
    blobs: dict[str, bytes]


def _fetch(client: oci.Client, repo: str, tag: str, expect_digest: str | None) -> tuple[bytes, dict[str, Any], str, dict[str, bytes]]:
    raw, man, digest = client.get_manifest(repo, tag)
    if expect_digest is not None and digest != expect_digest:
        raise oci.DigestMismatch(f"{repo}:{tag} (tag moved since publish)", expect_digest, digest)
    blobs = {}
    for desc in [man.get("config", {}), *man.get("layers", [])]:
        d = desc.get("digest")
        if not isinstance(d, str):
            raise oci.RegistryError(f"{repo}:{tag} has a descriptor without digest")
        blobs[d] = client.get_blob(repo, d)  # verifies sha256
    return raw, man, digest, blobs


def _lock_digest(man: dict[str, Any], blobs: dict[str, bytes], where: str) -> str:
    """The bundle digest the artifact says it carries: its annotation and its lock must agree."""
    noted = str((man.get("annotations") or {}).get(publish.DIGEST_ANNOTATION, ""))
    desc = next((la for la in man.get("layers", []) if la.get("mediaType") == publish.LOCK_MEDIA), None)
    try:
        lock = json.loads(blobs[desc["digest"]]) if desc is not None else {}
    except (ValueError, RecursionError) as exc:
        raise oci.RegistryError(f"{where}: the bundle lock is not JSON") from exc
    locked = str(lock.get("digest", "")) if isinstance(lock, dict) else ""
    if noted != locked:
        raise oci.DigestMismatch(f"{where}: the lock's digest and the artifact's annotation", noted, locked)
    return locked


def mirror(bundle: str, version: str, profile: str, source: str, target: str, certified_digest: str,
           *, plain_http: bool | None = None) -> publish.Published:
    """Copy ``bundle@version`` (``profile``'s lock) from ``source`` to ``target``, only when the
    published lock is the rendering a channel certified (``certified_digest``, see
    ``certified.certified_digest``): a consistent but different bundle is refused (exit 1)."""
    src_ref, dst_ref = oci.parse_ref(source), oci.parse_ref(target)
    src, dst = oci.Client(src_ref, plain_http=plain_http), oci.Client(dst_ref, plain_http=plain_http)
    tag = publish.bundle_tag(version, profile)
    lock_repo = publish.bundle_repo(src_ref, bundle)
    raw, man, digest, blobs = _fetch(src, lock_repo, tag, None)
    if man.get("artifactType") != publish.ARTIFACT_TYPE:
        raise errors.InputError(f"{lock_repo}:{tag} is not a gpu-catalog bundle artifact",
                                expected=publish.ARTIFACT_TYPE)
    published = _lock_digest(man, blobs, f"{lock_repo}:{tag}")
    if published != certified_digest:
        raise errors.CheckFailed(f"{lock_repo}:{tag} is not what was certified; nothing mirrored", [errors.Finding(
            "digest", f"the published lock is {published or '(no digest)'}, the channel certified {certified_digest} "
            f"for {bundle}@{version} ({profile})", obj=f"{lock_repo}:{tag}")])
    index_desc = next((la for la in man.get("layers", []) if la.get("mediaType") == publish.CHARTS_MEDIA), None)
    if index_desc is None:
        raise oci.RegistryError(f"{lock_repo}:{tag} has no charts index layer")
    index = json.loads(blobs[index_desc["digest"]])
    if (index.get("bundle"), index.get("version")) != (bundle, version):
        raise oci.RegistryError(f"{lock_repo}:{tag} indexes {index.get('bundle')}@{index.get('version')}")
    prefix = src_ref.path + "/" if src_ref.path else ""
    artifacts = [_Artifact(lock_repo[len(prefix):], tag, raw, digest, blobs)]
    for chart in index.get("charts", []):
        repo = str(chart["repository"])
        c_raw, c_man, c_digest, c_blobs = _fetch(src, repo, str(chart["version"]), str(chart["manifestDigest"]))
        layers = [la.get("digest") for la in c_man.get("layers", []) if la.get("mediaType") == publish.HELM_CHART_MEDIA]
        if layers != [chart["chartDigest"]]:
            raise oci.DigestMismatch(f"chart archive of {repo}:{chart['version']}", str(chart["chartDigest"]), str(layers))
        if not repo.startswith(prefix):
            raise oci.RegistryError(f"chart repository {repo} is outside {src_ref.url}")
        artifacts.append(_Artifact(repo[len(prefix):], str(chart["version"]), c_raw, c_digest, c_blobs))
    # Everything verified: now write. Blobs before manifests, as registries require.
    dst.ping()
    pushed: list[publish.PublishedChart] = []
    for art in artifacts:
        repo = dst_ref.repo(art.repo)
        for data in art.blobs.values():
            dst.push_blob(repo, data)
        got = dst.put_manifest(repo, art.tag, art.manifest)
        if got != art.digest:
            raise oci.DigestMismatch(f"{repo}:{art.tag} in the target", art.digest, got)
    for chart in index.get("charts", []):
        rel = str(chart["repository"])[len(prefix):]
        pushed.append(publish.PublishedChart(str(chart["name"]), str(chart["version"]), dst_ref.repo(rel),
                                             str(chart["manifestDigest"]), str(chart["chartDigest"])))
    return publish.Published(dst_ref.url, dst_ref.repo(artifacts[0].repo), tag, digest, tuple(pushed))
