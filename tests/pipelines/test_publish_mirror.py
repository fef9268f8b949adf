"""Publishing to and mirroring between real local OCI registries (docker-registry on loopback),
with real helm package/push."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.core import errors, executor
from gpucatalog.pipelines import mirror, oci, publish

pytestmark = pytest.mark.registry


@dataclass
class FakeComponent:
    name: str
    chart_dir: str | Path


@dataclass
class FakeRendered:
    """The shape of catalog.render.RenderedBundle that publish reads."""

    bundle: str
    version: str
    profile: str
    digest: str
    lock: dict[str, Any]
    components: list[FakeComponent] = field(default_factory=list)


def _chart(root: Path, name: str, version: str, data: str = "x") -> Path:
    d = root / name
    (d / "templates").mkdir(parents=True)
    (d / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\nversion: {version}\ntype: application\n")
    (d / "values.yaml").write_text(f"data: {data}\n")
    (d / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  v: {{ .Values.data | quote }}\n")
    return d


@pytest.fixture
def rendered(tmp_path: Path, helm: Path) -> FakeRendered:
    charts = tmp_path / "charts"
    # A pinned remote chart arrives from the chart cache already packaged (.tgz).
    executor.run([helm, "package", _chart(tmp_path / "remote", "kai-scheduler", "v0.13.0"), "-d", tmp_path / "cache"],
                 env=publish.helm_env(tmp_path / "helm"))
    return FakeRendered(
        "gpu-scheduling", "0.1.0", "sim", "sha256:" + "a1" * 32,
        {"bundle": "gpu-scheduling", "version": "0.1.0", "components": {"team-queues": "0.1.0"}, "digest": "sha256:" + "a1" * 32},
        [FakeComponent("kai-scheduler", str(tmp_path / "cache" / "kai-scheduler-v0.13.0.tgz")),
         FakeComponent("team-queues", _chart(charts, "team-queues", "0.1.0")),
         FakeComponent("gpu-health", _chart(charts, "gpu-health", "0.2.0"))],
    )


CERTIFIED = "sha256:" + "a1" * 32  # what the channel certified for gpu-scheduling@0.1.0 in these tests
Start = Callable[[str], Any]  # tests.plugins.pipelines.start_registry -> LocalRegistry


def test_publish_pushes_charts_and_lock_artifact(start_registry: Start, helm: Path, rendered: FakeRendered) -> None:
    reg = start_registry("a")
    pub = publish.publish(rendered, f"{reg.oci}/catalog", helm)
    assert [c.name for c in pub.charts] == ["kai-scheduler", "team-queues", "gpu-health"]
    assert sorted(reg.catalog()) == ["catalog/bundles/gpu-scheduling", "catalog/gpu-health", "catalog/kai-scheduler",
                                     "catalog/team-queues"]
    # A packaged chart is pushed byte for byte: same digest as the cached archive.
    assert pub.charts[0].chartDigest == oci.sha256(Path(rendered.components[0].chart_dir).read_bytes())
    client = oci.Client(oci.parse_ref(reg.oci))
    _, man, digest = client.get_manifest("catalog/bundles/gpu-scheduling", "0.1.0_sim")
    assert digest == pub.manifest_digest
    assert man["artifactType"] == publish.ARTIFACT_TYPE
    assert man["annotations"][publish.DIGEST_ANNOTATION] == rendered.digest
    lock_desc = next(la for la in man["layers"] if la["mediaType"] == publish.LOCK_MEDIA)
    assert json.loads(client.get_blob("catalog/bundles/gpu-scheduling", lock_desc["digest"])) == rendered.lock
    # The chart in the registry is the archive helm packaged: helm can pull it back.
    tgz = client.get_blob("catalog/team-queues", pub.charts[1].chartDigest)
    assert tgz[:2] == b"\x1f\x8b"


def test_mirror_copies_with_identical_digests(start_registry: Start, helm: Path, rendered: FakeRendered) -> None:
    src, dst = start_registry("src"), start_registry("dst")
    pub = publish.publish(rendered, f"{src.oci}/catalog", helm)
    out = mirror.mirror("gpu-scheduling", "0.1.0", "sim", f"{src.oci}/catalog", f"{dst.oci}/private/gpu", CERTIFIED)
    assert out.manifest_digest == pub.manifest_digest
    assert sorted(dst.catalog()) == ["private/gpu/bundles/gpu-scheduling", "private/gpu/gpu-health",
                                     "private/gpu/kai-scheduler", "private/gpu/team-queues"]
    client = oci.Client(oci.parse_ref(dst.oci))
    for c in pub.charts:
        _, _, d = client.get_manifest(f"private/gpu/{c.name}", c.version)
        assert d == c.manifestDigest


def test_mirror_refuses_a_consistent_bundle_that_was_never_certified(
    start_registry: Start, helm: Path, rendered: FakeRendered
) -> None:
    """Issue 25 attack 6: a published lock whose digest differs from the channel's certified one
    (every blob intact, just another rendering) was mirrored with exit 0."""
    src, dst = start_registry("src"), start_registry("dst")
    publish.publish(rendered, f"{src.oci}/catalog", helm)
    with pytest.raises(errors.CheckFailed, match="not what was certified") as exc:
        mirror.mirror("gpu-scheduling", "0.1.0", "sim", f"{src.oci}/catalog", f"{dst.oci}/private", "sha256:" + "b2" * 32)
    assert exc.value.exit_code == 1 and "the channel certified sha256:b2" in str(exc.value.findings[0])
    assert dst.catalog() == []


def test_mirror_rejects_a_tampered_blob(start_registry: Start, helm: Path, rendered: FakeRendered) -> None:
    src, dst = start_registry("src"), start_registry("dst")
    pub = publish.publish(rendered, f"{src.oci}/catalog", helm)
    blob = src.blob_file(pub.charts[1].chartDigest)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF  # storage corrupted or tampered with
    blob.write_bytes(bytes(data))
    with pytest.raises(oci.DigestMismatch, match="digest mismatch"):
        mirror.mirror("gpu-scheduling", "0.1.0", "sim", f"{src.oci}/catalog", f"{dst.oci}/private", CERTIFIED)
    assert dst.catalog() == []  # verified before anything was pushed


def test_mirror_rejects_a_chart_tag_moved_after_publish(
    start_registry: Start, helm: Path, rendered: FakeRendered, tmp_path: Path
) -> None:
    src, dst = start_registry("src"), start_registry("dst")
    publish.publish(rendered, f"{src.oci}/catalog", helm)
    # Someone pushes a different chart under the same name and version.
    other = _chart(tmp_path / "evil", "team-queues", "0.1.0", data="evil")
    ref = oci.parse_ref(f"{src.oci}/catalog")
    publish.push_chart(helm, other, ref, oci.Client(ref), tmp_path / "work")
    with pytest.raises(oci.DigestMismatch, match="tag moved since publish"):
        mirror.mirror("gpu-scheduling", "0.1.0", "sim", f"{src.oci}/catalog", f"{dst.oci}/private", CERTIFIED)
    assert dst.catalog() == []


def test_unknown_bundle_and_unreachable_registry(start_registry: Start) -> None:
    src = start_registry("src")
    with pytest.raises(errors.NotFoundError, match="not found"):
        mirror.mirror("nope", "0.1.0", "sim", f"{src.oci}/catalog", f"{src.oci}/x", CERTIFIED)
    with pytest.raises(oci.RegistryError, match="cannot reach"):
        oci.Client(oci.parse_ref("oci://127.0.0.1:1/x")).ping()


@pytest.mark.parametrize("bad", ["127.0.0.1:5000/x", "oci://", "oci://host/UPPER", "https://h/x"])
def test_bad_registry_reference(bad: str) -> None:
    with pytest.raises(errors.InputError):
        oci.parse_ref(bad)
