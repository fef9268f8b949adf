"""Kubernetes releases the sim can run: what ``--kubernetes`` accepts, and how another release's
build differs from the default's (its own cache folder, version ldflags and staging modules).
No build here: the default path must stay the one already cached."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.core import errors
from gpucatalog.toolchain import build, releases


def test_the_catalog_lists_one_release_per_minor_with_the_default_among_them() -> None:
    listed = releases.supported()
    assert listed == ("v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2")
    assert releases.default() == "v1.36.3"
    assert len({releases.minor(r) for r in listed}) == len(listed)


@pytest.mark.parametrize("spec", ["1.35", "v1.35", "1.35.4", "v1.35.4", " 1.35 "])
def test_a_minor_or_its_listed_patch_names_the_release(spec: str) -> None:
    assert releases.resolve(spec) == "v1.35.4"


@pytest.mark.parametrize("spec", ["1.33", "1.35.3", "1.38", "latest", ""])
def test_an_unlisted_release_is_bad_input_naming_the_listed_ones(spec: str) -> None:
    with pytest.raises(errors.InputError) as exc:
        releases.resolve(spec)
    assert exc.value.exit_code == 2
    assert exc.value.field == "--kubernetes"
    for r in ("1.34 (v1.34.4)", "1.35 (v1.35.4)", "1.36 (v1.36.3)", "1.37 (v1.37.2)"):
        assert r in str(exc.value.expected)


def test_a_list_keeps_order_and_drops_repeats() -> None:
    assert releases.resolve_list("1.37,1.34,1.34.4") == ["v1.37.2", "v1.34.4"]
    with pytest.raises(errors.InputError):
        releases.resolve_list(",")
    with pytest.raises(errors.InputError, match="1.32"):
        releases.resolve_list("1.34,1.32")


def test_the_default_group_is_unchanged() -> None:
    g = build.group_of("kube-apiserver")
    assert g is build.load_manifest()["kubernetes"] or g == build.load_manifest()["kubernetes"]
    assert g.version == "v1.36.3" and g.staging_version == "v0.36.3" and "cri-streaming" in g.staging
    assert "-X k8s.io/component-base/version.gitMinor=36" in g.ldflags
    assert build.group_of("kube-apiserver", "v1.36.3") == g  # naming the default is the default


def test_another_release_builds_its_own_variant() -> None:
    g = build.group_of("kube-scheduler", "v1.35.4")
    assert g.version == "v1.35.4" and g.staging_version == "v0.35.4"
    assert g.staging == ()  # read from v1.35.4's own go.mod at build time
    assert "-X k8s.io/component-base/version.gitMinor=35" in g.ldflags
    assert "-X k8s.io/client-go/pkg/version.gitVersion=v1.35.4" in g.ldflags
    assert not any("=36" in f or "v1.36" in f for f in g.ldflags)
    assert build._bin_dir(g).name == "kubernetes-v1.35.4"
    assert build._bin_dir(build.group_of("kube-scheduler")).name == "kubernetes-v1.36.3"
    assert build.versions("v1.35.4")["kubectl"] == "v1.35.4" and build.versions("v1.35.4")["helm"] == "v4.3.2"


def test_a_group_without_releases_refuses_another_version() -> None:
    with pytest.raises(errors.InputError, match="not a supported release"):
        build.group_of("helm", "v4.0.0")
    with pytest.raises(errors.InputError):
        build.group_of("kube-apiserver", "v1.33.0")


def test_staging_modules_come_from_the_release_go_mod() -> None:
    go_mod = """module k8s.io/kubernetes

go 1.25.0

require (
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/other => ../elsewhere/other
)
"""
    assert build.staging_modules(go_mod) == ("api", "client-go")


def test_a_missing_release_is_not_reported_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_CATALOG_CACHE", str(tmp_path))
    assert build.cached("kube-apiserver", "v1.34.4") is None
    d = build._bin_dir(build.group_of("kube-apiserver", "v1.34.4"))
    d.mkdir(parents=True)
    (d / "kube-apiserver").write_bytes(b"binary")
    (d / "kube-apiserver.sha256").write_text("0" * 64 + "\n")  # a stamp that does not match: rebuilt, not trusted
    assert build.cached("kube-apiserver", "v1.34.4") is None
    (d / "kube-apiserver.sha256").write_text(build.sha256_file(d / "kube-apiserver") + "\n")
    assert build.cached("kube-apiserver", "v1.34.4") == d / "kube-apiserver"
    assert build.cached("kube-apiserver") is None  # the default's folder is another one
