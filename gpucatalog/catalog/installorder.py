"""Which components of a bundle may be installed side by side, and which must wait.

A component waits for every component it ``dependsOn`` (its CRDs, its API). It also waits for
every earlier component whose admission webhooks would intercept one of its objects, or the pods
its workloads start: such a webhook rejects (or, failing open, skips) requests until its server
is ready, so installing beside it would race it. And it waits for an earlier component in the same
namespace (Helm creates a missing namespace; two releases must not race to create it). Everything else is independent and goes at the
same time: on a cluster, most of an install is waiting for controllers to report ready.

Webhook scope is judged from the rules (API groups and resources) and from a ``namespaceSelector``
that names namespaces by the label the API server puts on every namespace
(``kubernetes.io/metadata.name``), for objects of kinds known to be namespaced. A selector on any
other label, and ``objectSelector``, are taken to match: that can only make a component wait when
it need not. Called by :mod:`.install`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gpucatalog.catalog import render

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# kinds whose controllers create pods: a pod webhook intercepts what they start
WORKLOAD_KINDS = ("Pod", "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "CronJob")
# kinds charts use that are always namespaced, so a namespaceSelector applies to them
NAMESPACED_KINDS = WORKLOAD_KINDS + ("ConfigMap", "Secret", "Service", "ServiceAccount", "Role", "RoleBinding",
                                     "PodDisruptionBudget", "NetworkPolicy", "Lease")
NAME_LABEL = "kubernetes.io/metadata.name"

Rule = tuple[set[str], set[str], dict[str, Any]]  # api groups, resources, namespaceSelector


def plural(kind: str) -> str:
    """The resource name of ``kind`` as Kubernetes forms it for the kinds charts use."""
    low = kind.lower()
    if low.endswith("s") or low.endswith("x"):
        return low + "es"
    if low.endswith("y") and low[-2:-1] not in "aeiou":
        return low[:-1] + "ies"
    return low + "s"


def resources(objects: Iterable[dict[str, Any]], namespace: str = "") -> set[tuple[str, str, str]]:
    """``(api group, resource, namespace)`` of each object, plus core ``pods`` when a workload
    starts pods; the namespace (the object's own, else ``namespace``, the release's) only for
    kinds known to be namespaced, ``""`` otherwise."""
    out: set[tuple[str, str, str]] = set()
    for o in objects:
        kind = str(o.get("kind", ""))
        group = str(o.get("apiVersion", "")).rpartition("/")[0]
        ns = str((o.get("metadata") or {}).get("namespace") or namespace) if kind in NAMESPACED_KINDS else ""
        out.add((group, plural(kind), ns))
        if kind in WORKLOAD_KINDS:
            out.add(("", "pods", ns))
    return out


def intercepted(objects: Iterable[dict[str, Any]]) -> list[Rule]:
    """The ``(api groups, resources, namespaceSelector)`` of every rule of every admission webhook
    in ``objects``."""
    rules = []
    for o in objects:
        if o.get("kind") not in WEBHOOK_KINDS:
            continue
        for hook in o.get("webhooks") or []:
            selector = hook.get("namespaceSelector") or {}
            for rule in hook.get("rules") or []:
                # a subresource rule ("pods/status") is about the parent's subresource, not creation
                res = {str(r) for r in rule.get("resources") or [] if "/" not in str(r)}
                rules.append(({str(g) for g in rule.get("apiGroups") or []}, res, selector))
    return rules


def selects(selector: dict[str, Any], namespace: str) -> bool:
    """Whether a webhook's ``namespaceSelector`` may select ``namespace`` (``""``: unknown, or
    not namespaced). Judged exactly when it names namespaces by ``kubernetes.io/metadata.name``
    only; a selector on any other label may match, since the namespace's labels are not known."""
    labels = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not namespace or any(k != NAME_LABEL for k in labels) or any(e.get("key") != NAME_LABEL for e in exprs):
        return True
    if any(v != namespace for v in labels.values()):
        return False
    for e in exprs:
        op, values = e.get("operator"), e.get("values") or []
        if (op == "In" and namespace not in values) or (op == "NotIn" and namespace in values) or op == "DoesNotExist":
            return False
    return True


def _matches(rule: Rule, res: set[tuple[str, str, str]]) -> bool:
    groups, names, selector = rule
    return any(("*" in groups or g in groups) and ("*" in names or r in names) and selects(selector, ns)
               for g, r, ns in res)


def waits_for(components: Sequence[render.RenderedComponent]) -> dict[str, tuple[str, ...]]:
    """For each component (in the bundle's order, which puts dependencies first), the earlier
    components it must wait for: its ``dependsOn``, the earlier webhooks that intercept it, and
    earlier components in its namespace."""
    out: dict[str, tuple[str, ...]] = {}
    earlier: list[tuple[str, str, list[Rule]]] = []
    for comp in components:
        mine = resources(comp.objects, comp.namespace)
        need = [d for d in comp.depends_on if d in out]
        need += [name for name, ns, rules in earlier
                 if name not in need and (ns == comp.namespace or any(_matches(r, mine) for r in rules))]
        out[comp.name] = tuple(need)
        earlier.append((comp.name, comp.namespace, intercepted(comp.objects)))
    return out
