"""An image map is for what the user must bring: ``certify --image-map`` (or
``$GPU_CATALOG_IMAGE_MAP``) mapping an image the bundle does not declare in
``spec.userSuppliedImages`` (gpu-health's, the DRA driver's, Kueue's) is bad input, exit 2 naming
the overlay, the image and the bundle's list, before any cluster starts; ``--exploratory`` lets
it run with the evidence marked exploratory. A mapped executable changed after load fails the
run's image-map step."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog import cli
from gpucatalog.catalog import loader
from gpucatalog.clusters.sim import cluster as sim_cluster
from gpucatalog.clusters.sim import images
from gpucatalog.pipelines import certify
from tests.clusters.sim.test_imagemap import launcher, overlay

KAI = "ghcr.io/kai-scheduler/kai-scheduler"


class _Started(Exception):
    """Raised where a cluster would start: the refusal must come before."""


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    def up(*_a: object, **_k: object) -> Path:
        raise _Started

    monkeypatch.setattr(sim_cluster.SimCluster, "up", up)


def test_gpu_scheduling_declares_kais_images_user_supplied() -> None:
    cat = loader.load_catalog()
    for version in ("0.1.0", "0.2.0"):
        declared = cat.bundles[("gpu-scheduling", version)].user_supplied_images
        assert f"{KAI}/scheduler" in declared and f"{KAI}/operator" in declared
        assert f"{KAI}/resourcereservation" not in declared  # stays simulated
    assert cat.bundles[("gpu-queueing", "0.1.0")].user_supplied_images == ()


@pytest.mark.toolchain  # renders the bundle first
@pytest.mark.parametrize("image", ["ghcr.io/gpu-catalog/gpu-health", "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.3.0"])
def test_mapping_a_shipped_or_simulated_image_is_refused_before_any_cluster(
        tmp_path: Path, image: str, no_cluster: None, capsys: pytest.CaptureFixture[str]) -> None:
    f = overlay(tmp_path, f"  - image: {image}\n    executable: {launcher(tmp_path)}\n    entrypoint: /a\n"
                          f"  - image: {KAI}/scheduler\n    executable: {launcher(tmp_path)}\n    entrypoint: /a\n")
    rc = cli.main(["certify", "gpu-scheduling", "--cluster", "sim", "--cluster-name", "scope", "--image-map", str(f)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert str(f) in err and image in err and "does not declare user-supplied" in err
    assert f"{KAI}/queuecontroller" in err  # the bundle's list, so the user sees what may be mapped
    assert f"{KAI}/scheduler," not in err.split("maps ", 1)[1].split("which")[0]  # the declared one is not named


@pytest.mark.toolchain
def test_an_upgrade_run_is_held_to_the_same_rule(tmp_path: Path, no_cluster: None,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``--upgrade-from`` installs two bundles: an image either declares may be mapped, no other."""
    f = overlay(tmp_path, f"  - image: ghcr.io/gpu-catalog/gpu-health\n    executable: {launcher(tmp_path)}\n"
                          "    entrypoint: /a\n")
    rc = cli.main(["certify", "gpu-scheduling@0.2.0", "--upgrade-from", "0.1.0", "--cluster", "sim",
                   "--cluster-name", "scope", "--image-map", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "does not declare user-supplied" in err, err


@pytest.mark.toolchain
def test_the_environment_overlay_is_held_to_the_same_rule(tmp_path: Path, no_cluster: None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    f = overlay(tmp_path, f"  - image: registry.k8s.io/kueue/kueue\n    executable: {launcher(tmp_path)}\n"
                          "    entrypoint: /manager\n")
    monkeypatch.setenv("GPU_CATALOG_IMAGE_MAP", str(f))
    assert cli.main(["certify", "gpu-queueing", "--cluster", "sim", "--cluster-name", "scope"]) == 2


def test_declared_images_pass_and_exploratory_runs_are_marked(tmp_path: Path) -> None:
    cat = loader.load_catalog()

    class _Rb:  # what _check_image_map reads of a rendered bundle
        ref = "gpu-scheduling@0.2.0"

    exe = launcher(tmp_path)
    kai = overlay(tmp_path, f"  - image: {KAI}/scheduler:v0.17.0\n    executable: {exe}\n    entrypoint: /a\n")
    info: dict[str, object] = {}
    certify._check_image_map(cat, _Rb(), "sim", certify.Options("gpu-scheduling", image_map=kai), info)  # type: ignore[arg-type]
    assert info == {}
    wide = overlay(tmp_path, f"  - image: ghcr.io/gpu-catalog/gpu-health\n    executable: {exe}\n    entrypoint: /a\n")
    opts = certify.Options("gpu-scheduling", image_map=wide, exploratory=True)
    certify._check_image_map(cat, _Rb(), "sim", opts, info)  # type: ignore[arg-type]
    assert info == {"exploratory": True, "undeclaredImages": ["ghcr.io/gpu-catalog/gpu-health"]}


class _Byo:
    def __init__(self, images: list[dict[str, object]]) -> None:
        self.images = images

    def use_image_map(self, path: Path | None) -> None:
        return None

    def mapped_images(self) -> list[dict[str, object]]:
        return self.images


def test_a_start_refused_because_the_file_changed_fails_the_image_map_step() -> None:
    m = {"image": f"{KAI}/binder", "executable": "/opt/kai/binder", "sha256": "sha256:1", "version": "v0.16.8",
         "live": False, "ran": [], "tags": [], "version_matches": True, "userSupplied": True,
         "refused": ["/opt/kai/binder (for binder) changed after the image map was loaded: recorded sha256:1, now sha256:2"]}
    (step,) = certify._what_ran(_Byo([m]), {})  # type: ignore[arg-type]
    assert step.name == "image-map" and step.result == "failed" and "changed after the image map was loaded" in step.cases[0].reason


def test_a_mapped_file_changed_after_load_is_refused_at_start(tmp_path: Path) -> None:
    from gpucatalog.clusters.sim import imagemap

    exe = launcher(tmp_path)
    (b,) = imagemap.load(overlay(tmp_path, f"  - image: {KAI}/binder\n    executable: {exe}\n    entrypoint: /a\n"))
    table = images.merged([b])
    assert images.changed(f"{KAI}/binder:v0.16.8", table) == (b, "")
    exe.write_text("#!/bin/sh\necho v0.16.8\n")  # a wrapper printing the expected version
    binary, why = images.changed(f"{KAI}/binder:v0.16.8", table)
    assert binary == b and "changed after the image map was loaded" in why and b.sha256 in why
    assert images.changed("ghcr.io/gpu-catalog/gpu-health", table) == (None, "")  # the project's own: not hashed
