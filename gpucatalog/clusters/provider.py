"""What a cluster provider offers, as small protocols, and the registry certification picks one from.

Called by ``catalog certify --cluster sim|…`` and by tests: ``providers.get("sim", name)``
returns a :class:`ClusterProvider` (six methods: ``available``, ``up``, ``wait_ready``,
``kubeconfig``, ``collect_logs``, ``down``). What only some providers can do is a capability of
its own, a small protocol a provider class names among its bases (as kwok's runtimes declare the
interfaces they implement):

===============================  ===========================================  =====================
capability                       methods                                      who
===============================  ===========================================  =====================
:class:`ExplainsUnavailable`     ``reason()``                                 kind, kubeconfig
:class:`AddsNodes`               ``add_nodes(count, shape)``                  sim
:class:`StartsServices`          ``start_services(objects)``                  sim, kind (Slurm; kind: images)
:class:`InjectsFaults`           ``inject_fault``, ``clear_fault``            sim, kind
:class:`OffersEndpoints`         ``endpoints()``                              sim, kind
:class:`DescribesParts`          ``live_parts``, ``simulated_parts``          sim, kind
:class:`RunsImageMaps`           ``use_image_map``, ``mapped_images``         sim, kind
:class:`RunsKubernetesReleases`  ``use_kubernetes``, ``kubernetes_releases``  sim
===============================  ===========================================  =====================

Callers ask with ``isinstance(prov, provider.InjectsFaults)`` (the protocols are runtime
checkable) and raise :func:`missing`'s input error naming what is missing. A conformance suite
never sees a provider, only the kubeconfig and the callables certification hands it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gpucatalog.core import errors


@runtime_checkable
class ClusterProvider(Protocol):
    """What certification needs from a cluster, whatever runs it."""

    name: str

    def available(self) -> bool:
        """True when this provider can start a cluster on this machine."""
        ...

    def up(self, nodes: int, shape: str) -> Path:
        """Start the cluster with ``nodes`` nodes of ``shape``; returns the kubeconfig path."""
        ...

    def wait_ready(self, timeout: float) -> None:
        """Block until the API server answers and every node is Ready (WaitTimeout-like ToolError)."""
        ...

    def kubeconfig(self) -> Path:
        """Path of an admin kubeconfig for the running cluster."""
        ...

    def collect_logs(self, dest: Path) -> Path:
        """Copy every process log of the cluster into ``dest``; returns the folder written."""
        ...

    def down(self) -> None:
        """Stop every process and remove the cluster's state (NotFoundError if none)."""
        ...


@runtime_checkable
class ExplainsUnavailable(Protocol):
    """A provider that can say why ``available()`` is False."""

    def reason(self) -> str:
        """Why this machine cannot run the provider; empty when it can."""
        ...


@runtime_checkable
class AddsNodes(Protocol):
    """A provider that adds nodes of another shape to a running cluster (``cluster.extraNodes``)."""

    def add_nodes(self, count: int, shape: str) -> list[str]:
        """Add ``count`` nodes of ``shape``; returns their names once Ready."""
        ...


@runtime_checkable
class StartsServices(Protocol):
    """A provider that runs services a bundle calls for (Slurm for Slinky CRs: on the sim's host, in
    kind's pods)."""

    def start_services(self, objects: Sequence[Mapping[str, Any]],
                       progress: Callable[[str], None] | None = None) -> list[str]:
        """Start what the rendered ``objects`` call for, saying each long step (a build) to
        ``progress``; returns one line per service started."""
        ...


@runtime_checkable
class UpdatesServices(Protocol):
    """A provider whose host services follow a bundle's upgrade (the sim reconfigures Slurm)."""

    def update_services(self, objects: Sequence[Mapping[str, Any]]) -> list[str]:
        """Reconfigure what ``start_services`` started for the new rendered ``objects``."""
        ...


@runtime_checkable
class InjectsFaults(Protocol):
    """A provider that can break a node's (simulated) hardware and heal it again."""

    def inject_fault(self, node: str, kind: str, **kw: Any) -> str:
        """Inject a fault of ``kind`` on ``node``; returns what was done."""
        ...

    def clear_fault(self, node: str) -> str:
        """Undo every injected fault of ``node``; returns what was done."""
        ...


@runtime_checkable
class OffersEndpoints(Protocol):
    """A provider with non-Kubernetes endpoints for suites (e.g. a Slurm cluster's slurm.conf)."""

    def endpoints(self) -> dict[str, str]:
        """Endpoint name -> address or path."""
        ...


@runtime_checkable
class DescribesParts(Protocol):
    """A provider that tells the evidence which parts ran for real and which were simulated."""

    def live_parts(self) -> list[str]:
        """One line per part that ran as the real thing."""
        ...

    def simulated_parts(self) -> list[str]:
        """One line per part that was simulated."""
        ...


@runtime_checkable
class RunsImageMaps(Protocol):
    """A provider that runs container images as host executables from an image-map overlay
    (bring-your-own binaries) and says which of them really ran."""

    def use_image_map(self, path: Path | None) -> None:
        """Run the images the overlay at ``path`` maps with the next ``up``; InputError (exit 2)
        for a bad overlay, before anything starts."""
        ...

    def mapped_images(self) -> list[dict[str, Any]]:
        """Per overlay image: executable, sha256, reported version, the pods that ran it, live."""
        ...


@runtime_checkable
class RunsKubernetesReleases(Protocol):
    """A provider that starts its cluster at a Kubernetes release chosen per run (``--kubernetes``)."""

    def use_kubernetes(self, release: str | None) -> None:
        """Run ``release`` (``1.35`` or ``v1.35.4``) with the next ``up``; InputError if unlisted."""
        ...

    def kubernetes_releases(self) -> tuple[str, ...]:
        """Every release it can run, oldest first."""
        ...


# How each capability is named in an error message.
CAPABILITY_NAMES: dict[type, str] = {
    ExplainsUnavailable: "explaining unavailability (reason)",
    AddsNodes: "adding node groups (add_nodes)",
    StartsServices: "starting host services (start_services)",
    InjectsFaults: "fault injection (inject_fault, clear_fault)",
    OffersEndpoints: "suite endpoints (endpoints)",
    DescribesParts: "describing live and simulated parts (live_parts, simulated_parts)",
    RunsImageMaps: "an image-map overlay (use_image_map, mapped_images)",
    RunsKubernetesReleases: "choosing the Kubernetes release (use_kubernetes)",
}

# provider kind -> "module:Class"; the class is built as Class(cluster_name).
REGISTRY: dict[str, str] = {
    "sim": "gpucatalog.clusters.sim.cluster:SimCluster",
    "kind": "gpucatalog.clusters.kind.cluster:KindCluster",
    "kubeconfig": "gpucatalog.clusters.kubeconfig:KubeconfigCluster",
}


def _provider_class(kind: str) -> type:
    target = REGISTRY.get(kind)
    if target is None:
        raise errors.NotFoundError(
            f"unknown cluster provider {kind!r}", field="cluster", expected=", ".join(sorted(REGISTRY))
        )
    module_name, _, cls_name = target.partition(":")
    cls: type = vars(importlib.import_module(module_name))[cls_name]
    return cls


def get(kind: str, cluster_name: str = "sim", kubeconfig: Path | None = None) -> ClusterProvider:
    """The provider ``kind`` for the cluster called ``cluster_name`` (``kubeconfig``: the file of
    an existing cluster, for the ``kubeconfig`` provider)."""
    cls = _provider_class(kind)
    provider = cls(kubeconfig) if kind == "kubeconfig" else cls(cluster_name)
    if not isinstance(provider, ClusterProvider):
        raise TypeError(f"{REGISTRY[kind]} does not implement ClusterProvider")  # a registry bug, not input
    return provider


def offering(capability: type) -> list[str]:
    """The registered provider kinds whose class declares ``capability``."""
    return [kind for kind in sorted(REGISTRY) if issubclass(_provider_class(kind), capability)]


def unavailable_reason(provider: ClusterProvider) -> str:
    """Why ``provider`` cannot run here (its own words when it :class:`ExplainsUnavailable`)."""
    if isinstance(provider, ExplainsUnavailable):
        return provider.reason()
    return "not available on this machine"


def missing(capability: type, *, kind: str, needed_by: str, field: str) -> errors.InputError:
    """The error (exit 2) for a ``kind`` provider that lacks ``capability`` which ``needed_by``
    needs; callers check ``isinstance(prov, capability)`` first and raise this when it is not."""
    return errors.InputError(
        f"{needed_by} needs {CAPABILITY_NAMES.get(capability, capability.__name__)}, "
        f"which the {kind!r} cluster provider does not offer",
        field=field,
        expected="a cluster provider that offers it: " + (", ".join(offering(capability)) or "none is registered"),
    )
