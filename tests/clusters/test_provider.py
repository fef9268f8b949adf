"""The provider protocols: each registered provider declares its capabilities, callers pick by
isinstance, and a missing capability is named in an input error (exit 2). No cluster needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.clusters import provider
from gpucatalog.clusters.kind.cluster import KindCluster
from gpucatalog.clusters.kubeconfig import KubeconfigCluster
from gpucatalog.clusters.sim.cluster import SimCluster
from gpucatalog.core import errors

CAPABILITIES = (
    provider.ExplainsUnavailable,
    provider.AddsNodes,
    provider.StartsServices,
    provider.InjectsFaults,
    provider.OffersEndpoints,
    provider.DescribesParts,
)


class BareProvider:
    """Only the core protocol, declared by shape (no base class): what a minimal provider is."""

    name = "bare"

    def available(self) -> bool:
        return True

    def up(self, nodes: int, shape: str) -> Path:
        return Path("kubeconfig")

    def wait_ready(self, timeout: float) -> None:
        return None

    def kubeconfig(self) -> Path:
        return Path("kubeconfig")

    def collect_logs(self, dest: Path) -> Path:
        return dest

    def down(self) -> None:
        return None


@pytest.mark.parametrize(("cls", "declared"), [
    (SimCluster, {provider.AddsNodes, provider.StartsServices, provider.InjectsFaults, provider.OffersEndpoints,
                  provider.DescribesParts}),
    (KindCluster, {provider.ExplainsUnavailable, provider.DescribesParts, provider.StartsServices,
                   provider.InjectsFaults, provider.OffersEndpoints}),
    (KubeconfigCluster, {provider.ExplainsUnavailable}),
])
def test_each_provider_declares_exactly_its_capabilities(cls: type, declared: set[type]) -> None:
    assert provider.ClusterProvider in cls.__mro__  # declared by name, not only matched by shape
    assert {c for c in CAPABILITIES if c in cls.__mro__} == declared
    assert {c for c in CAPABILITIES if issubclass(cls, c)} == declared  # what isinstance will answer


def test_registry_instances_answer_isinstance(tmp_path: Path) -> None:
    sim = provider.get("sim", "caps-test")
    kc = provider.get("kubeconfig", kubeconfig=tmp_path / "kc")
    assert isinstance(sim, provider.InjectsFaults) and not isinstance(kc, provider.InjectsFaults)
    assert isinstance(kc, provider.ExplainsUnavailable) and not isinstance(sim, provider.ExplainsUnavailable)


def test_a_provider_matching_only_the_core_protocol_has_no_capability() -> None:
    bare = BareProvider()
    assert isinstance(bare, provider.ClusterProvider)
    assert not any(isinstance(bare, c) for c in CAPABILITIES)
    assert provider.unavailable_reason(bare) == "not available on this machine"


def test_unavailable_reason_uses_the_providers_own_words(tmp_path: Path) -> None:
    kc = provider.get("kubeconfig", kubeconfig=tmp_path / "missing")
    assert provider.unavailable_reason(kc) == f"kubeconfig {tmp_path / 'missing'} does not exist"


def test_offering_lists_the_registered_kinds_with_a_capability() -> None:
    assert provider.offering(provider.InjectsFaults) == ["kind", "sim"]
    assert provider.offering(provider.ExplainsUnavailable) == ["kind", "kubeconfig"]
    assert provider.offering(provider.DescribesParts) == ["kind", "sim"]


def test_missing_names_the_need_the_capability_and_who_offers_it() -> None:
    err = provider.missing(provider.InjectsFaults, kind="kubeconfig", needed_by="suite 'fault_remediation'",
                           field="--suite")
    assert isinstance(err, errors.InputError) and err.exit_code == 2
    assert str(err) == ("--suite: suite 'fault_remediation' needs fault injection (inject_fault, clear_fault), "
                        "which the 'kubeconfig' cluster provider does not offer "
                        "(expected a cluster provider that offers it: kind, sim)")


def test_a_provider_missing_a_core_method_is_not_a_provider() -> None:
    class NoDown(BareProvider):
        down = None  # type: ignore[assignment]

    assert not isinstance(NoDown(), provider.ClusterProvider)
