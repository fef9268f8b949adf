"""Static checks of a rendered bundle: Kubernetes and CRD schemas, policy, component-specific
rules (KAI queues, Kueue queues, Slurm NodeSets), and ``helm lint`` of the charts written here.

Called by ``catalog validate`` and by certification before anything touches a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpucatalog.catalog import render, versions
from gpucatalog.clusters import partitions, shapes
from gpucatalog.core import errors
from gpucatalog.validators import static
from gpucatalog.validators.static import dra_rules, kai_rules, kueue_rules, slurm_rules, types


def component_objects(rb: render.RenderedBundle) -> list[types.ComponentObjects]:
    return [
        types.ComponentObjects(
            name=c.name,
            namespace=c.namespace,
            objects=c.objects,
            privileged=dict(c.declarations.privileged),
            rbac_wildcards=dict(c.declarations.rbac_wildcards),
            pod_security={c.namespace: c.declarations.pod_security},  # type: ignore[dict-item]
        )
        for c in rb.components
    ]


def check_rendered(rb: render.RenderedBundle, *, lint: bool = True) -> list[errors.Finding]:
    """Every finding for ``rb``; an empty list means the bundle is statically valid."""
    findings = list(static.validate_objects(component_objects(rb), rb.kube_version, types.PolicyConfig()))
    for c in rb.components:
        rng = rb.lock_component(c.name).get("kubernetes", "")
        if rng and not versions.satisfies(rb.kube_version, rng):
            findings.append(
                errors.Finding(
                    rule="kubernetes-range",
                    message=f"bundle targets Kubernetes {rb.kube_version}, component supports {rng}",
                    component=c.name,
                )
            )
        findings += kai_rules.check_queues(c.objects, component=c.name)
    findings += _slurm_findings(rb)
    findings += _kueue_findings(rb)
    findings += _dra_findings(rb)
    if lint:
        for c in rb.components:
            chart = Path(c.chart_dir)
            if chart.is_dir():  # charts written here (mirrored archives were linted upstream)
                findings += static.lint_chart(chart, [], kube_version=rb.kube_version, component=c.name)
    return findings


def shape_gpus() -> dict[str, int]:
    """GPU count per node shape of the shape catalogue (read-only; the sim provider owns it)."""
    return {name: s.gpu.count for name, s in shapes.catalogue().items() if s.gpu is not None}


def _is_slinky(obj: Mapping[str, Any], kind: str) -> bool:
    return str(obj.get("apiVersion", "")).startswith(slurm_rules.SLINKY + "/") and obj.get("kind") == kind


def _slurm_findings(rb: render.RenderedBundle) -> list[errors.Finding]:
    """Slinky rules for the components that render a Slurm cluster or the Slinky operator.

    A component rendering a Slinky ``Controller`` is a Slurm cluster (NodeSet gres vs node shape,
    partitions, versions, CRs against the bundle's Slinky CRDs); one rendering Slinky CRDs is the
    operator (its image line)."""
    crds: list[Mapping[str, Any]] = [
        o for c in rb.components for o in c.objects
        if o.get("kind") == "CustomResourceDefinition"
        and str((o.get("spec") or {}).get("group", "")) == slurm_rules.SLINKY
    ]
    out: list[errors.Finding] = []
    for c in rb.components:
        objs: Sequence[Mapping[str, Any]] = c.objects
        if any(_is_slinky(o, "Controller") for o in objs):
            out += slurm_rules.check(objs, shape_gpus(), component=c.name)
            out += slurm_rules.check_crs(crds, objs, component=c.name)
        if any(o in crds for o in objs):
            out += slurm_rules.check_operator(objs, component=c.name)
    return out


def _kueue_findings(rb: render.RenderedBundle) -> list[errors.Finding]:
    """Kueue rules over every component's objects together (a LocalQueue's ClusterQueue and its
    flavors may come from another component), reported under the component that rendered them."""
    products = sorted({s.gpu.product for s in shapes.catalogue().values() if s.gpu is not None})
    shape_name = str(rb.cluster.get("shape") or "")
    shape = shapes.catalogue().get(shape_name)
    shape_product = shape.gpu.product if shape is not None and shape.gpu is not None else None
    everything = [o for c in rb.components for o in c.objects]
    owner = {id(o): c.name for c in rb.components for o in c.objects}
    out = []
    for f in kueue_rules.check(everything, products, shape_product):
        obj = next((o for o in everything if kueue_rules.ref(o) == f.obj), None)
        out.append(errors.Finding(f.rule, f.message, component=owner.get(id(obj), ""), obj=f.obj, field=f.field))
    return out


def _dra_findings(rb: render.RenderedBundle) -> list[errors.Finding]:
    """DRA claim rules over every component's objects together (the DeviceClasses come from the
    driver's component); partition profiles are those the target shape's GPU offers (any
    shape's when the profile names none)."""
    shape = shapes.catalogue().get(str(rb.cluster.get("shape") or ""))
    cat = partitions.catalogue()
    if shape is not None and shape.gpu is not None:
        profiles = {p.name for p in cat.profiles(shape.gpu.product)}
    else:
        profiles = cat.all_names()
    everything = [o for c in rb.components for o in c.objects]
    owner = {dra_rules.ref(o): c.name for c in rb.components for o in c.objects}
    return [errors.Finding(f.rule, f.message, component=owner.get(f.obj, ""), obj=f.obj, field=f.field)
            for f in dra_rules.check(everything, profiles)]
