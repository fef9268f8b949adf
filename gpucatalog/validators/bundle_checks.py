"""Static checks of a rendered bundle: Kubernetes and CRD schemas, policy, component-specific
rules (KAI queues, Slurm NodeSets), and ``helm lint`` of the charts written here.

Called by ``catalog validate`` and by certification before anything touches a cluster.
"""

from __future__ import annotations

from pathlib import Path

from gpucatalog.catalog import errors, render, versions
from gpucatalog.validators import static
from gpucatalog.validators.static import kai_rules, types


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
    if lint:
        for c in rb.components:
            chart = Path(c.chart_dir)
            if chart.is_dir():  # charts written here (mirrored archives were linted upstream)
                findings += static.lint_chart(chart, [], kube_version=rb.kube_version, component=c.name)
    return findings
