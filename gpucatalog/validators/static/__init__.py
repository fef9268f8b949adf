"""Static validation of a rendered bundle: schemas (built-in and the bundle's CRDs), policy, lint.

Public API (used by ``catalog validate`` after rendering)::

    validate_objects(components: list[ComponentObjects], kube_version: str,
                     policy: PolicyConfig) -> list[errors.Finding]
    lint_chart(chart_dir, values_files, *, kube_version=None) -> list[errors.Finding]
    findings_to_json(findings) -> str        # a JSON list of {rule, component, object, field, message}
    findings_from_json(text) -> list[errors.Finding]

``ComponentObjects`` (one per component: name, release namespace, the rendered objects as plain
dicts, and its declarations: ``privileged`` "Kind/name" -> why, ``rbac_wildcards`` "Kind/name"
-> why, ``pod_security`` namespace -> privileged|baseline|restricted) and
``PolicyConfig`` are in ``types``. ``kube_version`` is ``1.36``, ``v1.36`` or ``v1.36.3``.

``validate_objects`` returns every finding, in the order of ``components``, then sorted by
object, field and rule; an empty list means the bundle passed. Each ``Finding`` names ``component``, ``obj``
(``Kind/namespace/name``, ``Kind/name`` when cluster-scoped), ``field`` (a JSON path such as
``spec.template.spec.containers[0].image``) and ``rule``:

=========================  ====================================================================
rule                       meaning
=========================  ====================================================================
k8s-schema                 violates the Kubernetes OpenAPI schema of its kind (unknown field,
                           wrong type, missing required field, duplicate list-map key …)
crd-schema                 a custom resource violates the schema of the bundle's CRD
unknown-kind               neither built in (for that Kubernetes version) nor a bundle CRD
crd-version                the CRD defines that version but does not serve it
object-identity            apiVersion, kind or metadata.name missing
duplicate-object           the same object is rendered twice in the bundle
image-untagged / -latest   an image not pinned by tag or digest / pinned to ``latest``
resource-requests          a container requests no cpu / memory
rbac-wildcard              ``*`` in a Role/ClusterRole rule, or a cluster-admin binding, undeclared
privileged-undeclared      privileged / hostPath / hostNetwork / hostPID / hostIPC undeclared
privileged-unjustified     declared with an empty reason
pod-security/<check>       breaks the namespace's Pod Security Standards level
helm-lint                  an error or warning of ``helm lint`` (``lint_chart``)
=========================  ====================================================================

Bad declarations (an unknown Pod Security level, a malformed version) raise ``InputError``.
The Kubernetes schemas are converted once per version and cached under
``~/.cache/gpu-catalog/schemas/``; see ``openapi``.
"""

from gpucatalog.validators.static.lint import lint_chart
from gpucatalog.validators.static.report import findings_from_json, findings_to_json
from gpucatalog.validators.static.types import ComponentObjects, PolicyConfig
from gpucatalog.validators.static.validate import validate_objects

__all__ = [
    "ComponentObjects",
    "PolicyConfig",
    "findings_from_json",
    "findings_to_json",
    "lint_chart",
    "validate_objects",
]
