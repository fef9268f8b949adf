"""Which components of a bundle may be installed side by side, and which must wait.

A component waits for every component it ``dependsOn`` (its CRDs, its API). It also waits for
every earlier component whose admission webhooks would intercept one of its objects, or the pods
its workloads start: such a webhook rejects (or, failing open, skips) requests until its server
is ready, so installing beside it would race it. And it waits for an earlier component in the same
namespace (Helm creates a missing namespace; two releases must not race to create it). Everything else is independent and goes at the
same time: on a cluster, most of an install is waiting for controllers to report ready.

Webhook scope is judged from the rules only (API groups and resources; ``namespaceSelector`` and
``objectSelector`` are not evaluated), which can only make a component wait when it need not.
Called by :mod:`.install`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gpucatalog.catalog import render

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# kinds whose controllers create pods: a pod webhook intercepts what they start
WORKLOAD_KINDS = ("Pod", "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "CronJob")


def plural(kind: str) -> str:
    """The resource name of ``kind`` as Kubernetes forms it for the kinds charts use."""
    low = kind.lower()
    if low.endswith("s") or low.endswith("x"):
        return low + "es"
    if low.endswith("y") and low[-2:-1] not in "aeiou":
        return low[:-1] + "ies"
    return low + "s"


def resources(objects: Iterable[dict[str, Any]]) -> set[tuple[str, str]]:
    """``(api group, resource)`` of each object, plus core ``pods`` when a workload starts pods."""
    out: set[tuple[str, str]] = set()
    for o in objects:
        kind = str(o.get("kind", ""))
        group = str(o.get("apiVersion", "")).rpartition("/")[0]
        out.add((group, plural(kind)))
        if kind in WORKLOAD_KINDS:
            out.add(("", "pods"))
    return out


def intercepted(objects: Iterable[dict[str, Any]]) -> list[tuple[set[str], set[str]]]:
    """The ``(api groups, resources)`` of every rule of every admission webhook in ``objects``."""
    rules = []
    for o in objects:
        if o.get("kind") not in WEBHOOK_KINDS:
            continue
        for hook in o.get("webhooks") or []:
            for rule in hook.get("rules") or []:
                # a subresource rule ("pods/status") is about the parent's subresource, not creation
                res = {str(r) for r in rule.get("resources") or [] if "/" not in str(r)}
                rules.append(({str(g) for g in rule.get("apiGroups") or []}, res))
    return rules


def _matches(rule: tuple[set[str], set[str]], res: set[tuple[str, str]]) -> bool:
    groups, names = rule
    return any(("*" in groups or g in groups) and ("*" in names or r in names) for g, r in res)


def waits_for(components: Sequence[render.RenderedComponent]) -> dict[str, tuple[str, ...]]:
    """For each component (in the bundle's order, which puts dependencies first), the earlier
    components it must wait for: its ``dependsOn``, the earlier webhooks that intercept it, and
    earlier components in its namespace."""
    out: dict[str, tuple[str, ...]] = {}
    earlier: list[tuple[str, str, list[tuple[set[str], set[str]]]]] = []
    for comp in components:
        mine = resources(comp.objects)
        need = [d for d in comp.depends_on if d in out]
        need += [name for name, ns, rules in earlier
                 if name not in need and (ns == comp.namespace or any(_matches(r, mine) for r in rules))]
        out[comp.name] = tuple(need)
        earlier.append((comp.name, comp.namespace, intercepted(comp.objects)))
    return out
