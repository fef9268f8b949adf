"""Policy: host access (privileged containers, hostPath, hostNetwork, hostPID, hostIPC) only in
workloads whose component declares why.

Called by ``validate`` for each workload. The declaration is ``ComponentObjects.privileged``:
``"Kind/name"`` -> justification. Rules: ``privileged-undeclared`` (one finding per field that
grants host access) and ``privileged-unjustified`` (declared with an empty justification).
Whether the namespace's Pod Security level admits it is ``podsecurity``'s concern.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpucatalog.core import errors
from gpucatalog.validators.static import objects, target

HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")


def host_access(tpl: objects.PodTemplate) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(field path, what) for every field of a pod template that grants host access."""
    for key in HOST_NAMESPACES:
        if tpl.spec.get(key) is True:
            yield (*tpl.spec_path, key), f"{key} is true"
    for i, vol in enumerate(objects.sequence(tpl.spec, "volumes")):
        if isinstance(vol, dict) and isinstance(vol.get("hostPath"), dict):
            where = vol["hostPath"].get("path", "?")
            yield (*tpl.spec_path, "volumes", i, "hostPath"), f"hostPath volume {where!r}"
    for path, container in objects.containers(tpl):
        sc = container.get("securityContext")
        if isinstance(sc, dict) and sc.get("privileged") is True:
            yield (
                (*path, "securityContext", "privileged"),
                f"container {container.get('name', '?')!r} is privileged",
            )


def check(t: target.Target) -> Iterator[errors.Finding]:
    tpl = objects.pod_template(t.obj)
    if tpl is None:
        return
    grants = list(host_access(tpl))
    if not grants:
        return
    reason = t.component.privileged.get(t.ident.short)
    if reason is None:
        for path, what in grants:
            yield t.finding(
                "privileged-undeclared",
                path,
                f"{what}, but component {t.component.name!r} does not declare why {t.ident.short} needs host access",
            )
    elif not reason.strip():
        yield t.finding(
            "privileged-unjustified", [], f"host access of {t.ident.short} is declared without a reason"
        )
