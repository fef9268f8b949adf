"""Inputs of the static validators: one component's rendered objects and declarations, and policy.

Built by the caller (``catalog validate`` through the render step) from a rendered bundle and
the component versions' catalog entries; read by every check in this package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

PodSecurityLevel = Literal["privileged", "baseline", "restricted"]

# Ordered from least to most strict; the effective level of a namespace is the strictest one
# anybody asked for (a declaration or the Namespace object's enforce label).
LEVELS: tuple[PodSecurityLevel, ...] = ("privileged", "baseline", "restricted")


@dataclass(frozen=True)
class ComponentObjects:
    """One component of a rendered bundle, as the static validators see it.

    ``objects`` are plain dicts as ``helm template`` printed them (CRDs of a chart's ``crds/``
    folder included). ``namespace`` is the release namespace: namespaced objects without
    ``metadata.namespace`` land there.

    Declarations (from the component version's catalog entry):

    - ``privileged``: ``"Kind/name"`` -> why that workload needs privileged mode, hostPath,
      hostNetwork, hostPID or hostIPC;
    - ``rbac_wildcards``: ``"Kind/name"`` -> why that Role/ClusterRole needs ``*`` (or why that
      RoleBinding/ClusterRoleBinding binds ``cluster-admin``);
    - ``pod_security``: namespace -> Pod Security Standards level its pods must meet.
    """

    name: str
    namespace: str
    objects: list[dict[str, Any]]
    privileged: dict[str, str] = field(default_factory=dict)
    rbac_wildcards: dict[str, str] = field(default_factory=dict)
    pod_security: dict[str, PodSecurityLevel] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyConfig:
    """Knobs of the policy checks; the defaults are what ``catalog validate`` enforces."""

    # Resources every container (init containers included) must request. A limit counts as a
    # request, because Kubernetes copies a limit into a missing request.
    required_requests: tuple[str, ...] = ("cpu", "memory")
    # Level for a namespace no component declares and no rendered Namespace labels.
    default_pod_security: PodSecurityLevel = "baseline"
    # Rule ids to skip entirely, e.g. {"resource-requests"}; "pod-security" skips all its checks.
    disabled_rules: frozenset[str] = frozenset()
    # "group/version/Kind" (core group: "v1/Kind") that the target cluster provides although
    # the bundle does not install their CRDs; their objects are not schema-checked.
    external_kinds: frozenset[str] = frozenset()
