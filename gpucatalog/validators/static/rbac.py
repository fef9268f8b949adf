"""Policy: RBAC without wildcards unless the component declares, with a reason, why it needs them.

Called by ``validate`` for Roles, ClusterRoles and their bindings. Rule ``rbac-wildcard``: a
``*`` (or a pattern with ``*``) in a rule's verbs, apiGroups, resources or nonResourceURLs, and
a binding to ``cluster-admin`` (the built-in all-wildcard role). Declarations are
``ComponentObjects.rbac_wildcards``: ``"Kind/name"`` -> a non-empty reason.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpucatalog.core import errors
from gpucatalog.validators.static import target

RULE_FIELDS = ("verbs", "apiGroups", "resources", "nonResourceURLs")
ROLE_KINDS = ("Role", "ClusterRole")
BINDING_KINDS = ("RoleBinding", "ClusterRoleBinding")


def _declared(t: target.Target) -> bool:
    return bool(t.component.rbac_wildcards.get(t.ident.short, "").strip())


def check(t: target.Target) -> Iterator[errors.Finding]:
    if t.ident.group != "rbac.authorization.k8s.io" or _declared(t):
        return
    if t.ident.kind in ROLE_KINDS:
        rules = t.obj.get("rules")
        for i, rule in enumerate(rules if isinstance(rules, list) else []):
            if not isinstance(rule, dict):
                continue
            for fld in RULE_FIELDS:
                values = rule.get(fld)
                for j, value in enumerate(values if isinstance(values, list) else []):
                    if isinstance(value, str) and "*" in value:
                        yield t.finding(
                            "rbac-wildcard",
                            ["rules", i, fld, j],
                            f"wildcard {value!r} in {fld}; declare it with a reason or list what is needed",
                        )
    elif t.ident.kind in BINDING_KINDS:
        ref = t.obj.get("roleRef")
        if isinstance(ref, dict) and ref.get("kind") == "ClusterRole" and ref.get("name") == "cluster-admin":
            yield t.finding(
                "rbac-wildcard",
                ["roleRef", "name"],
                "binds cluster-admin (every verb on every resource); declare it with a reason or bind a narrower role",
            )
