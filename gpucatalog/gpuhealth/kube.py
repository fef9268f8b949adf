"""Thin Kubernetes I/O for the agent and the controller, on the official ``kubernetes`` client.

Configuration: ``load_incluster_config()`` inside a pod (``KUBERNETES_SERVICE_HOST`` set), else
the kubeconfig (``--kubeconfig`` or ``KUBECONFIG``). Requests go through the client's
``ApiClient`` (its auth, TLS and retries) with plain-dict bodies, so the I/O stays a handful of
REST calls. HTTP failures become the controller's retry policy: 404 -> :class:`NotFound`
(a :class:`PermanentError`), 403/400/422 -> PermanentError, 409/429/5xx and unreachable ->
:class:`TemporaryError`. Called by agent, controller, leader election and the verify command.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from gpucatalog.gpuhealth.errors import ConfigError, PermanentError, TemporaryError

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


class NotFound(PermanentError):
    """The object does not exist (e.g. a node deleted mid-drain)."""


class Conflict(TemporaryError):
    """409: someone changed the object; re-read and decide again."""


def load(kubeconfig: str | None = None) -> k8s_client.ApiClient:
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
            k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
            return k8s_client.ApiClient()
        cfg = k8s_client.Configuration()
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig or os.environ.get("KUBECONFIG"), client_configuration=cfg
        )
        return k8s_client.ApiClient(cfg)
    except (k8s_config.ConfigException, OSError, ValueError) as exc:
        raise ConfigError(f"cannot load Kubernetes configuration: {exc}") from exc


class Api:
    """Minimal REST access with dict bodies."""

    def __init__(self, api_client: k8s_client.ApiClient, timeout: float = 15.0) -> None:
        self.client = api_client
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        url_path = path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            params = self.client.param_serialize(
                method=method, resource_path=url_path, header_params=headers, body=body,
                auth_settings=["BearerToken"],
            )
            resp = self.client.call_api(*params, _request_timeout=self.timeout)
            raw = resp.read()  # type: ignore[no-untyped-call]
        except ApiException as exc:
            raise TemporaryError(f"{method} {path}: {exc.reason}", delay=5) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TemporaryError(f"{method} {path}: API server unreachable ({exc})", delay=5) from exc
        status = int(resp.status)
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw or "")
        if 200 <= status < 300:
            return json.loads(text) if text.strip() else {}
        msg = f"{method} {path}: HTTP {status}: {_message(text)}"
        if status == 404:
            raise NotFound(msg)
        if status == 409:
            raise Conflict(msg, delay=0.5)
        if status == 429 or status >= 500:
            raise TemporaryError(msg, delay=5)
        raise PermanentError(msg)

    # --- typed conveniences -------------------------------------------------------------
    def get(self, path: str, query: dict[str, str] | None = None) -> dict[str, Any]:
        return self.request("GET", path, query=query)

    def items(self, path: str, query: dict[str, str] | None = None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        q = dict(query or {})
        q.setdefault("limit", "500")
        while True:
            page = self.get(path, q)
            out.extend(page.get("items") or [])
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return out
            q["continue"] = cont

    def patch_node(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", f"/api/v1/nodes/{name}", body, content_type=MERGE)

    def patch_node_conditions(self, name: str, conditions: list[dict[str, Any]]) -> dict[str, Any]:
        # strategic merge on status.conditions merges by "type": other writers' conditions survive
        return self.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": {"conditions": conditions}},
                            content_type=STRATEGIC)

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return self.items("/api/v1/pods", {"fieldSelector": f"spec.nodeName={node}"})

    def evict(self, namespace: str, name: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace}}
        self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body)

    def delete_pod(self, namespace: str, name: str, grace: int | None = None) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace is not None:
            body["gracePeriodSeconds"] = grace  # type: ignore[assignment]
        try:
            self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)
        except NotFound:
            return

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body)

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PUT", path, body)

    def create_event(
        self, namespace: str, node: str, ev_type: str, reason: str, message: str, component: str,
        name: str | None = None, now_iso: str = "",
    ) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"namespace": namespace, **({"name": name} if name else {"generateName": f"{node}."})},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
            "type": ev_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": component, "host": node},
            "reportingComponent": component,
            "firstTimestamp": now_iso or None,
            "lastTimestamp": now_iso or None,
            "count": 1,
        }
        try:
            self.create(f"/api/v1/namespaces/{namespace}/events", body)
        except Conflict:
            return  # same deterministic name: already reported


def _message(text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text[:300]
    return str(doc.get("message", text))[:300] if isinstance(doc, dict) else text[:300]
