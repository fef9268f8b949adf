"""Policy: every container requests the resources the scheduler needs to place it.

Called by ``validate`` for each workload. Rule ``resource-requests``. Init containers count
(they run alone on the node's share too); ephemeral debug containers cannot set resources. A
limit without a request counts, since Kubernetes copies the limit into the request.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpucatalog.core import errors
from gpucatalog.validators.static import objects, target, types


def check(t: target.Target, policy: types.PolicyConfig) -> Iterator[errors.Finding]:
    tpl = objects.pod_template(t.obj)
    if tpl is None or not policy.required_requests:
        return
    for path, container in objects.containers(tpl):
        if "ephemeralContainers" in path:
            continue
        res = objects.mapping(container, "resources")
        requests = objects.mapping(res, "requests")
        limits = objects.mapping(res, "limits")
        missing = [r for r in policy.required_requests if r not in requests and r not in limits]
        if missing:
            name = container.get("name", "?")
            yield t.finding(
                "resource-requests",
                [*path, "resources", "requests"],
                f"container {name!r} requests no {' or '.join(missing)}",
            )
