"""certify asks a provider for capabilities by protocol: a profile that needs one the provider
lacks is bad input (exit 2) named before any cluster is touched (a suite that needs faults runs
anywhere: its fault cases are not run without an injector, see test_fault_injection_choice). No
cluster needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.clusters import provider
from gpucatalog.core import errors
from gpucatalog.pipelines import certify


def _unreachable_kubeconfig(tmp_path: Path) -> Path:
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    return kc


def test_node_groups_on_a_provider_that_cannot_add_nodes_is_bad_input(tmp_path: Path) -> None:
    kc = provider.get("kubeconfig", kubeconfig=_unreachable_kubeconfig(tmp_path))
    certify._add_node_groups(kc, "kubeconfig", [], print)  # nothing asked, nothing needed
    with pytest.raises(errors.InputError, match="node groups needs adding node groups") as exc:
        certify._add_node_groups(kc, "kubeconfig", [{"nodes": 1, "shape": "cpu"}], print)
    assert exc.value.field == "cluster.extraNodes"


def test_services_and_fault_params_only_from_providers_that_offer_them(tmp_path: Path) -> None:
    kc = provider.get("kubeconfig", kubeconfig=_unreachable_kubeconfig(tmp_path))
    assert not isinstance(kc, provider.StartsServices)
    assert certify._start_services(kc, None, print) == []  # type: ignore[arg-type]


class _Byo:
    """A provider that ran bring-your-own binaries (the RunsImageMaps capability only)."""

    def __init__(self, images: list[dict[str, object]]) -> None:
        self.images = images

    def use_image_map(self, path: Path | None) -> None:
        return None

    def mapped_images(self) -> list[dict[str, object]]:
        return self.images


def test_mapped_images_are_recorded_and_a_version_mismatch_fails_the_run() -> None:
    ok = {"image": "ghcr.io/kai-scheduler/kai-scheduler/binder", "executable": "/opt/kai/binder", "sha256": "sha256:1",
          "version": "v0.16.8", "live": True, "ran": ["kai-scheduler/binder-0"], "tags": ["v0.16.8"],
          "version_matches": True}
    idle = {**ok, "image": "ghcr.io/kai-scheduler/kai-scheduler/admission", "live": False, "ran": [], "tags": [],
            "version": "v0.15.0", "version_matches": True}
    info: dict[str, object] = {}
    assert isinstance(_Byo([]), provider.RunsImageMaps)
    assert certify._what_ran(_Byo([ok, idle]), info) == []  # type: ignore[arg-type]
    assert info["images"] == [ok, idle]
    wrong = {**ok, "version": "v0.15.0", "version_matches": False}
    (step,) = certify._what_ran(_Byo([wrong]), {})  # type: ignore[arg-type]
    assert step.name == "image-map" and step.result == "failed"
    assert step.cases[0].reason == ("ghcr.io/kai-scheduler/kai-scheduler/binder ran as tag v0.16.8 but "
                                    "/opt/kai/binder reports v0.15.0")
