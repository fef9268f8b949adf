"""Which fault injector a certification hands its suites (``inject_fault``/``clear_fault``), and
what the evidence says about it (``cluster.faultInjection``: ``sim``, ``kind``, ``pod`` or ``none``).

* no ``--inject-faults``: the provider's own injector when it offers one (the sim cluster writes
  the readings the real probes read into its node folders), else none: the cases that need a
  fault are not run and their suite is incomplete, never passed;
* ``--inject-faults`` (``auto``): the same, except that a provider without an injector gets the
  pod injector (:mod:`gpucatalog.validators.conformance.kit.pod_injector`): synthetic XID lines
  written into the nodes' kernel logs by a privileged pod running the bundle's own gpu-health
  image;
* ``--inject-faults=pod``: the pod injector on any provider (the sim included, to test it).

Called by :mod:`.certify`: :func:`check` before any cluster starts (bad input exits 2),
:func:`choose` once the bundle is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from gpucatalog.catalog import render
from gpucatalog.clusters import provider as providers
from gpucatalog.core import errors
from gpucatalog.validators.conformance.kit import pod_injector

MODES = ("auto", "pod")

NOTES = {
    "sim": "simulated faults: the sim cluster wrote the readings the real probes read (nvidia-smi XML, "
           "kernel-log lines, sysfs) into the nodes' folders",
    "kind": "simulated faults: the kind provider wrote the readings the real probes read (nvidia-smi XML, "
            "kernel-log lines, sysfs) into the node folder each GPU worker container holds",
    "pod": "synthetic faults: a privileged pod per fault ran the bundle's gpu-health image (gpu-health inject-xid) "
           "and wrote an NVRM Xid line marked name=gpu-catalog-inject into the node's kernel log, read by the real "
           "agent; fault kinds other than XID were not run",
    "none": "no fault injection: cases that need a fault were not run (catalog certify --inject-faults opts in)",
}


@dataclass
class Choice:
    """The injector chosen for one run: the suites' params and what the evidence says."""

    mode: str  # sim | kind (the provider's own injector) | pod | none
    params: dict[str, Any] = field(default_factory=dict)
    injector: pod_injector.PodInjector | None = None

    def record(self, info: dict[str, Any]) -> None:
        """What the evidence's ``cluster`` says about the faults of this run."""
        info["faultInjection"] = self.mode
        info["faultInjectionNote"] = NOTES[self.mode]

    def finish(self, info: dict[str, Any], say: Callable[[str], None]) -> None:
        """Record every injector pod run (node, arguments, exit code, output) and clean up; a
        cleanup that fails is said, never raised (it must not hide the run's result)."""
        if self.injector is None:
            return
        info["faultInjectionPods"] = list(self.injector.runs)
        try:
            self.injector.close()
        except (errors.CatalogError, ApiException, urllib3.exceptions.HTTPError) as exc:
            say(f"could not remove the fault injector's ServiceAccount: {exc}")


def _uses_pod(prov: providers.ClusterProvider, mode: str | None) -> bool:
    return mode == "pod" or (mode == "auto" and not isinstance(prov, providers.InjectsFaults))


def check(rb: render.RenderedBundle, prov: providers.ClusterProvider, mode: str | None) -> pod_injector.AgentTemplate | None:
    """The agent template the pod injector will copy, when this run uses it (InputError when the
    mode is unknown or the bundle has no usable gpu-health agent)."""
    if mode is not None and mode not in MODES:
        raise errors.InputError(f"unknown fault injection {mode!r}", field="--inject-faults", expected=", ".join(MODES))
    if not _uses_pod(prov, mode):
        return None
    try:
        agent = pod_injector.agent_template([o for c in rb.components for o in c.objects])
    except ValueError as exc:
        raise errors.InputError(f"the pod injector cannot copy gpu-health's agent: {exc}", field="--inject-faults") from exc
    if agent is None:
        raise errors.InputError(f"the pod injector writes XID lines for gpu-health's agent, and bundle {rb.bundle} "
                                "installs no gpu-health agent DaemonSet", field="--inject-faults")
    return agent


def choose(prov: providers.ClusterProvider, mode: str | None, agent: pod_injector.AgentTemplate | None,
           kubeconfig: Path, provider_kind: str) -> Choice:
    """The injector for this run (``agent`` from :func:`check`); a provider's own injector is
    recorded under the provider's name (``sim`` or ``kind``, :data:`NOTES`)."""
    if agent is not None and _uses_pod(prov, mode):
        inj = pod_injector.PodInjector(kubeconfig, agent)
        return Choice("pod", {"inject_fault": inj.inject_fault, "clear_fault": inj.clear_fault}, inj)
    if isinstance(prov, providers.InjectsFaults):
        if provider_kind not in NOTES:
            raise errors.InputError(f"no fault-injection note for provider {provider_kind!r}", field="--cluster")
        return Choice(provider_kind, {"inject_fault": prov.inject_fault, "clear_fault": prov.clear_fault})
    return Choice("none")
