"""Static checks of Kueue queueing objects (``kueue.x-k8s.io``): what Kueue would refuse, or
accept and silently mis-handle, found before anything is installed.

Called by ``catalog validate`` (through ``bundle_checks``) on all rendered objects of a bundle at
once, since a LocalQueue, its ClusterQueue and their flavors may come from different components.
``check(objs, gpu_products, shape_product)`` returns findings; objects are plain dicts as
rendered, anything that is not a Kueue ResourceFlavor, Cohort, ClusterQueue or LocalQueue is
ignored. The CRD schemas (types, required fields) are checked elsewhere; Kueue's CEL rules and
webhooks are not evaluated statically, so the rules below restate the ones that matter here.

Rules (the ``rule`` of each finding):

- ``kueue-duplicate``: the same kind and name twice.
- ``kueue-unknown-clusterqueue``: a LocalQueue's ``spec.clusterQueue`` names no ClusterQueue.
- ``kueue-unknown-cohort``: a ClusterQueue's ``spec.cohortName`` or a Cohort's
  ``spec.parentName`` names no Cohort (Kueue would make an empty implicit one: nothing to
  borrow from, nobody to lend to).
- ``kueue-cohort-cycle``: Cohort parents form a cycle.
- ``kueue-unknown-flavor``: a quota names no ResourceFlavor.
- ``kueue-flavor-gpu-product``: a ResourceFlavor selects ``nvidia.com/gpu.product`` values no
  node shape has; ``kueue-no-flavor-for-shape``: GPU quotas exist but no flavor selects the
  target profile's GPU product, so no GPU workload could ever be admitted.
- ``kueue-limit``: a borrowing or lending limit on a queue without a cohort (Kueue's webhook
  refuses it), a lending limit above the nominal quota, or a negative quantity.
- ``kueue-uncovered``: a quota for a resource its resource group does not cover.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpucatalog.core import errors

GROUP = "kueue.x-k8s.io"
KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")
GPU = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
_SUFFIX = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3, "Ti": 1024.0**4}


def quantity(value: Any) -> float | None:
    """A Kubernetes quantity as a number (the suffixes queue quotas use); None if unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            try:
                return float(text[: -len(suffix)]) * _SUFFIX[suffix]
            except ValueError:
                return None
    try:
        return float(text)
    except ValueError:
        return None


def _kueue(objs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [o for o in objs if str(o.get("apiVersion", "")).startswith(GROUP + "/") and o.get("kind") in KINDS]


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", "<unnamed>"))


def ref(obj: Mapping[str, Any]) -> str:
    ns = (obj.get("metadata") or {}).get("namespace")
    return f"{obj.get('kind')}/{ns}/{_name(obj)}" if ns else f"{obj.get('kind')}/{_name(obj)}"


class _Checker:
    def __init__(self, component: str) -> None:
        self.component = component
        self.findings: list[errors.Finding] = []

    def add(self, rule: str, obj: Mapping[str, Any], field: str, message: str) -> None:
        self.findings.append(errors.Finding(rule=rule, message=message, component=self.component,
                                            obj=ref(obj), field=field))


def check(objs: Iterable[Mapping[str, Any]], gpu_products: Sequence[str], shape_product: str | None = None,
          component: str = "") -> list[errors.Finding]:
    """Every finding for the Kueue objects among ``objs``.

    ``gpu_products`` are the ``nvidia.com/gpu.product`` values of the node shape catalogue;
    ``shape_product`` the one of the target profile's node shape, when the profile names one.
    """
    chk = _Checker(component)
    items = _kueue(objs)
    by_kind: dict[str, dict[str, Mapping[str, Any]]] = {k: {} for k in KINDS}
    for obj in items:
        kind = str(obj.get("kind"))
        key = ref(obj)
        if key in by_kind[kind]:
            chk.add("kueue-duplicate", obj, "metadata.name", f"{kind} {_name(obj)!r} is rendered twice")
            continue
        by_kind[kind][key] = obj
    flavors = {_name(o): o for o in by_kind["ResourceFlavor"].values()}
    cohorts = {_name(o): o for o in by_kind["Cohort"].values()}
    queues = {_name(o): o for o in by_kind["ClusterQueue"].values()}
    _check_flavors(chk, flavors, gpu_products)
    for lq in by_kind["LocalQueue"].values():
        target = str((lq.get("spec") or {}).get("clusterQueue", ""))
        if target not in queues:
            chk.add("kueue-unknown-clusterqueue", lq, "spec.clusterQueue",
                    f"{target!r} is not a ClusterQueue of the bundle (known: {', '.join(sorted(queues)) or 'none'}); "
                    "workloads sent to this LocalQueue would wait forever")
    for _, cq in sorted(queues.items()):
        spec = cq.get("spec") or {}
        cohort = str(spec.get("cohortName") or "")
        if cohort and cohort not in cohorts:
            chk.add("kueue-unknown-cohort", cq, "spec.cohortName", _unknown_cohort(cohort, cohorts))
        _check_groups(chk, cq, spec, flavors, in_cohort=bool(cohort))
    for _, co in sorted(cohorts.items()):
        spec = co.get("spec") or {}
        parent = str(spec.get("parentName") or "")
        if parent and parent not in cohorts:
            chk.add("kueue-unknown-cohort", co, "spec.parentName", _unknown_cohort(parent, cohorts))
        _check_groups(chk, co, spec, flavors, in_cohort=bool(parent))
    _check_cycles(chk, cohorts)
    if shape_product and _has_gpu_quota(queues.values()):
        selected = {str(((f.get("spec") or {}).get("nodeLabels") or {}).get(PRODUCT_LABEL, "")) for f in flavors.values()}
        if shape_product not in selected and not any(not s for s in selected):
            first = next(iter(queues.values()))
            chk.add("kueue-no-flavor-for-shape", first, "spec.resourceGroups",
                    f"no ResourceFlavor selects {PRODUCT_LABEL}={shape_product}, the GPU product of the target "
                    f"profile's nodes (flavors select: {', '.join(sorted(selected)) or 'nothing'}); "
                    "Kueue could admit no GPU workload")
    return chk.findings


def _unknown_cohort(name: str, cohorts: Mapping[str, Any]) -> str:
    return (f"{name!r} is not a Cohort of the bundle (known: {', '.join(sorted(cohorts)) or 'none'}); Kueue would "
            "make an empty implicit cohort")


def _check_flavors(chk: _Checker, flavors: Mapping[str, Mapping[str, Any]], gpu_products: Sequence[str]) -> None:
    for flavor in flavors.values():
        product = ((flavor.get("spec") or {}).get("nodeLabels") or {}).get(PRODUCT_LABEL)
        if product is not None and str(product) not in gpu_products:
            chk.add("kueue-flavor-gpu-product", flavor, f"spec.nodeLabels[{PRODUCT_LABEL}]",
                    f"{product!r} is the GPU product of no node shape (known: {', '.join(sorted(gpu_products))})")


def _check_groups(chk: _Checker, obj: Mapping[str, Any], spec: Mapping[str, Any],
                  flavors: Mapping[str, Any], *, in_cohort: bool) -> None:
    for g, group in enumerate(spec.get("resourceGroups") or []):
        covered = [str(r) for r in group.get("coveredResources") or []]
        for f, fq in enumerate(group.get("flavors") or []):
            base = f"spec.resourceGroups[{g}].flavors[{f}]"
            if str(fq.get("name")) not in flavors:
                chk.add("kueue-unknown-flavor", obj, f"{base}.name",
                        f"{fq.get('name')!r} is not a ResourceFlavor of the bundle "
                        f"(known: {', '.join(sorted(flavors)) or 'none'})")
            for r, rq in enumerate(fq.get("resources") or []):
                where = f"{base}.resources[{r}]"
                if str(rq.get("name")) not in covered:
                    chk.add("kueue-uncovered", obj, f"{where}.name",
                            f"{rq.get('name')!r} is not in the group's coveredResources ({', '.join(covered)})")
                _check_quota(chk, obj, where, rq, in_cohort)


def _check_quota(chk: _Checker, obj: Mapping[str, Any], where: str, rq: Mapping[str, Any], in_cohort: bool) -> None:
    values: dict[str, float] = {}
    for fld in ("nominalQuota", "borrowingLimit", "lendingLimit"):
        if fld not in rq:
            continue
        num = quantity(rq[fld])
        if num is None or num < 0:
            chk.add("kueue-limit", obj, f"{where}.{fld}", f"{rq[fld]!r} is not a non-negative quantity")
            continue
        values[fld] = num
        if fld != "nominalQuota" and not in_cohort:
            owner = "cohortName" if obj.get("kind") == "ClusterQueue" else "parentName"
            chk.add("kueue-limit", obj, f"{where}.{fld}",
                    f"set without spec.{owner}: there is nobody to borrow from or lend to (Kueue refuses it)")
    lend, nominal = values.get("lendingLimit"), values.get("nominalQuota", 0.0)
    if lend is not None and obj.get("kind") == "ClusterQueue" and lend > nominal:
        chk.add("kueue-limit", obj, f"{where}.lendingLimit",
                f"{rq['lendingLimit']} is above the nominal quota {rq.get('nominalQuota', 0)}")


def _check_cycles(chk: _Checker, cohorts: Mapping[str, Mapping[str, Any]]) -> None:
    parents = {n: str((c.get("spec") or {}).get("parentName") or "") for n, c in cohorts.items()}
    reported: set[str] = set()
    for start in sorted(parents):
        path = [start]
        cur = parents[start]
        while cur and cur in parents:
            if cur in path:
                cycle = path[path.index(cur):] + [cur]
                if not reported & set(cycle):
                    chk.add("kueue-cohort-cycle", cohorts[cur], "spec.parentName",
                            "cohort parents form a cycle: " + " -> ".join(cycle))
                    reported.update(cycle)
                break
            path.append(cur)
            cur = parents[cur]


def _has_gpu_quota(queues: Iterable[Mapping[str, Any]]) -> bool:
    return any(GPU in (g.get("coveredResources") or [])
               for q in queues for g in (q.get("spec") or {}).get("resourceGroups") or [])
