"""One ``gpu_sharing_dra`` case's namespace and the DRA objects it makes: ResourceClaims,
ResourceClaimTemplates and the pods that use them, with the waits the cases share (a pod
scheduled, a pod left unschedulable and the scheduler's reason) and the cluster's slices.

Called by :mod:`.gpu_sharing_dra` and ``bench/dra_allocation.py``; talks only to the Kubernetes API.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpucatalog.validators.conformance.kit import base, kube_client

RESOURCE = "/apis/resource.k8s.io/v1"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"


def attr_is(name: str, value: str) -> dict[str, Any]:
    """A CEL selector: the driver's attribute ``name`` equals ``value``."""
    return {"cel": {"expression": f'device.attributes["gpu.nvidia.com"].{name} == "{value}"'}}


def shared_request(memory: str, uuid: str | None = None, device_class: str = GPU_CLASS) -> dict[str, Any]:
    req: dict[str, Any] = {"deviceClassName": device_class, "capacity": {"requests": {"memory": memory}}}
    if uuid:
        req["selectors"] = [attr_is("uuid", uuid)]
    return req


def whole_request(uuid: str | None = None) -> dict[str, Any]:
    req: dict[str, Any] = {"deviceClassName": GPU_CLASS}
    if uuid:
        req["selectors"] = [attr_is("uuid", uuid)]
    return req


def partition_request(profile: str, parent_uuid: str | None = None) -> dict[str, Any]:
    sel = [attr_is("profile", profile)] + ([attr_is("parentUUID", parent_uuid)] if parent_uuid else [])
    return {"deviceClassName": MIG_CLASS, "selectors": sel}


def claim_spec(exactly: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


class Space:
    def __init__(self, kube: kube_client.Kube, ns: str, ctx: base.SuiteContext) -> None:
        self.kube, self.ns, self.ctx = kube, ns, ctx

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.kube.request("POST", path, body)

    def claim(self, name: str, exactly: dict[str, Any]) -> dict[str, Any]:
        return self._post(f"{RESOURCE}/namespaces/{self.ns}/resourceclaims",
                          {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": {"name": name}, "spec": claim_spec(exactly)})

    def template(self, name: str, exactly: dict[str, Any]) -> dict[str, Any]:
        return self._post(f"{RESOURCE}/namespaces/{self.ns}/resourceclaimtemplates",
                          {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                           "metadata": {"name": name}, "spec": {"spec": claim_spec(exactly)}})

    def pod(self, name: str, *, claim: str | None = None, template: str | None = None,
            node: str | None = None) -> dict[str, Any]:
        ref = {"name": "gpu", **({"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template})}
        spec: dict[str, Any] = {
            "containers": [{"name": "work", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [ref],
            # tolerate every node taint (a cordon included): only the devices decide
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
        }
        if node:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        return self._post(f"/api/v1/namespaces/{self.ns}/pods",
                          {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})

    def delete_pod(self, name: str) -> None:
        self.kube.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{name}", {"gracePeriodSeconds": 0},
                          ok404=True)

    def get_pod(self, name: str) -> dict[str, Any]:
        return self.kube.request("GET", f"/api/v1/namespaces/{self.ns}/pods/{name}")

    def claims(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.kube.request("GET", f"{RESOURCE}/namespaces/{self.ns}/resourceclaims")["items"]
        return items

    def pod_claim(self, pod: str) -> dict[str, Any]:
        """The claim a pod uses (its own, or the one made from its template)."""
        p = self.get_pod(pod)
        for st in (p.get("status") or {}).get("resourceClaimStatuses") or []:
            if st.get("resourceClaimName"):
                return self.kube.request("GET", f"{RESOURCE}/namespaces/{self.ns}/resourceclaims/{st['resourceClaimName']}")
        for ref in p["spec"].get("resourceClaims") or []:
            if ref.get("resourceClaimName"):
                return self.kube.request("GET", f"{RESOURCE}/namespaces/{self.ns}/resourceclaims/{ref['resourceClaimName']}")
        return {}

    def wait_scheduled(self, pod: str, timeout: float = 30) -> str:
        """The node ``pod`` was scheduled to (its claims allocated), waiting up to ``timeout`` s."""
        node: str = base.wait_for(f"pod {self.ns}/{pod} scheduled with its claim allocated",
                                  lambda: self.get_pod(pod)["spec"].get("nodeName"), self.ctx.scaled(timeout), 0.1)
        return node

    def wait_some_scheduled(self, pods: list[str], count: int, timeout: float = 30) -> list[str]:
        """The first ``count`` of ``pods`` scheduled (which ones is the scheduler's choice when they
        ask alike), waiting up to ``timeout`` s."""
        def placed() -> list[str] | None:
            done = [p for p in pods if self.get_pod(p)["spec"].get("nodeName")]
            return done[:count] if len(done) >= count else None

        found: list[str] = base.wait_for(f"{count} of pods {', '.join(pods)} in {self.ns} scheduled with their claims "
                                         "allocated", placed, self.ctx.scaled(timeout), 0.1)
        return found

    def unschedulable(self, pod: str) -> str:
        """The scheduler's message for a pod it could not place ('' while it has none)."""
        p = self.get_pod(pod)
        if p["spec"].get("nodeName"):
            raise base.CaseFailed(f"pod {pod} was scheduled to {p['spec']['nodeName']}; it must stay pending")
        for c in (p.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                return str(c.get("message") or c.get("reason") or "")
        return ""

    def stays_pending(self, pod: str, share: float = 1.0) -> str:
        """Check ``pod`` gets the scheduler's reason and stays unscheduled for ``share`` of the
        suite's ``settle_seconds`` (default 5; kube-scheduler retries an unschedulable pod on the
        next cluster event, so a few seconds show it stays); returns the reason."""
        msg: str = base.wait_for(f"the scheduler's reason for pod {pod}", lambda: self.unschedulable(pod),
                                 self.ctx.scaled(30), 0.2)
        seconds = share * float(self.ctx.params.get("settle_seconds", 5))
        base.holds(f"pod {pod} pending", lambda: self.unschedulable(pod) is not None, seconds)
        return self.unschedulable(pod) or msg


def slices(kube: kube_client.Kube) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.request("GET", f"{RESOURCE}/resourceslices")["items"]
    return items


@contextmanager
def space(kube: kube_client.Kube, ctx: base.SuiteContext, suite: str) -> Iterator[Space]:
    """A fresh namespace for one case, deleted afterwards.

    What the next case needs is every share this one held free again: its pods and claims are
    deleted and waited for (a second or two). The namespace itself waits out the namespace
    controller's fixed 5 s grace period before its content is even looked at, so it is left to
    go while the next case runs; :func:`await_namespaces_gone` waits for them all once, at the
    suite's end."""
    ns = f"{ctx.namespace_prefix}-dra-{secrets.token_hex(3)}"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns, "labels": {base.SUITE_LABEL: suite}}})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not kube.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default",
                                                            ok404=True):
        time.sleep(0.2)
    try:
        yield Space(kube, ns, ctx)
    finally:
        # pods first: a claim a pod still reserves is only released once that pod is gone
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods",
                     {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}, ok404=True)
        kube.request("DELETE", f"{RESOURCE}/namespaces/{ns}/resourceclaims", ok404=True)
        kube.request("DELETE", f"/api/v1/namespaces/{ns}", ok404=True)

        def freed() -> bool:
            return not (kube.request("GET", f"/api/v1/namespaces/{ns}/pods", ok404=True).get("items")
                        or kube.request("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims", ok404=True).get("items"))

        base.wait_for(f"the pods and claims of namespace {ns} deleted", freed, ctx.scaled(90), 0.2)


def await_namespaces_gone(kube: kube_client.Kube, ctx: base.SuiteContext, suite: str,
                          result: base.SuiteResult) -> None:
    """Wait for every namespace the suite's cases made to be gone; one still there after the
    wait fails the last case that ran, naming it (the suite leaves nothing behind)."""
    selector = {"labelSelector": f"{base.SUITE_LABEL}={suite}"}

    def left() -> list[str]:
        items = kube.request("GET", "/api/v1/namespaces", query=selector)["items"]
        return [n["metadata"]["name"] for n in items if n["metadata"]["name"].startswith(f"{ctx.namespace_prefix}-dra-")]

    try:
        base.wait_for(f"the namespaces of {suite}'s cases deleted", lambda: not left(), ctx.scaled(90), 0.5)
    except base.WaitTimeout as exc:
        ran = [c for c in result.cases if c.result != "skipped"]
        if ran:
            ran[-1].result = "failed"
            ran[-1].reason = "; ".join(r for r in (ran[-1].reason, f"after the suite: {exc} ({', '.join(left())})") if r)
