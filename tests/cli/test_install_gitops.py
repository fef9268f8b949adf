"""``catalog install --channel C --gitops DIR`` (issue 28, item 2): the GitOps form of what install
would apply, written only after install's own checks (channel, digest, evidence, signer), applying
nothing; bad input or a failed check leaves no output and never touches a folder it did not write."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gpucatalog.catalog import loader, render
from gpucatalog.cli import main
from gpucatalog.pipelines import channels, keys, promote, trust

pytestmark = pytest.mark.toolchain  # renders with the pinned helm

MakeEvidence = Callable[..., Path]
REGISTRY = "oci://127.0.0.1:5000/catalog"


@pytest.fixture
def promoted(repo_copy: Path, make_evidence: MakeEvidence, ci_key: keys.GeneratedKey) -> Path:
    """gpu-queueing 0.1.0 in candidate, certified at the digest it renders to."""
    trust.add_key(repo_copy / "trust.yaml", "ci", keys.load_public(ci_key.public_path), ["candidate", "stable"])
    digest = render.render_bundle(loader.load_catalog(repo_copy), "gpu-queueing@0.1.0", "sim").digest
    ev = make_evidence(bundle="gpu-queueing", version="0.1.0", digest=digest)
    promote.promote("gpu-queueing", "0.1.0", "candidate", [ev], lambda _p: digest, catalog_dir=repo_copy,
                    bundle_suites=(), promoted_by="test@host")
    return repo_copy


def _install(catalog: Path, out: Path, *extra: str) -> int:
    return main(["--catalog-dir", str(catalog), "install", "gpu-queueing", "--channel", "candidate",
                 "--profile", "sim", "--gitops", str(out), "--registry", REGISTRY, *extra])


def test_writes_the_certified_bundle_and_applies_nothing(
    promoted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "apps"
    assert _install(promoted, out) == 0  # no --kubeconfig: nothing is applied, no cluster asked
    captured = capsys.readouterr()
    assert "certified: gpu-catalog: gpu-queueing@0.1.0 certified in channel candidate" in captured.err
    lock = json.loads((out / render.LOCK_FILE).read_text())
    entry = channels.load(promoted / "channels", "candidate").find("gpu-queueing", "0.1.0")
    assert entry is not None and lock["digest"] == entry["digest"]
    apps = [yaml.safe_load(p.read_text()) for p in sorted(out.glob("0*.yaml"))]
    assert {a["kind"] for a in apps} == {"Application"}  # argocd is the default
    assert {a["metadata"]["annotations"]["gpu-catalog.dev/bundle-digest"] for a in apps} == {lock["digest"]}
    assert _install(promoted, tmp_path / "flux", "--format", "flux") == 0
    assert (tmp_path / "flux" / "kueue.yaml").is_file()


def test_a_failed_check_or_bad_folder_leaves_nothing(
    promoted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = channels.load(promoted / "channels", "candidate").find("gpu-queueing", "0.1.0")
    assert entry is not None
    stored = channels.stored_evidence(promoted / "channels", entry["evidenceDigest"])
    good = stored.read_bytes()
    stored.write_bytes(good.replace(b'"payload"', b'"payload" ', 1))
    out = tmp_path / "apps"
    assert _install(promoted, out) == 1
    assert "does not match the entry's digest" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".apps*"))
    stored.write_bytes(good)

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert _install(promoted, mine) == 2
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert _install(promoted, out, "--dry-run") == 2
    assert main(["--catalog-dir", str(promoted), "install", "gpu-queueing", "--channel", "candidate",
                 "--profile", "sim", "--gitops", str(out)]) == 2  # local charts need --registry
    assert not out.exists()
    capsys.readouterr()
