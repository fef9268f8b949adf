"""The Kubernetes client every Kubernetes conformance suite uses, built from the suite's
kubeconfig only: the typed APIs (for the KAI suites) and plain-JSON requests (for
``fault_remediation``, which reads Nodes as dicts and merge-patches them), with API errors turned
into ``CaseFailed`` messages that name the call and quote the API server.

Called by the KAI suite modules (``kai.suite``, ``kai.preflight``, ``kai.workspace``,
``kai.pods``, ``gpu_inventory``), by ``remediation.env`` and by ``accelerator_metrics`` (a pod's
endpoint read through the API server's proxy).
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpucatalog.core import kubeapi
from gpucatalog.validators.conformance.kit import base

T = TypeVar("T")

REQUEST_TIMEOUT_S = 30
# How long a create refused by an admission webhook that is not ready for it is tried again:
# its cache has not yet seen the namespace made just before (Kueue's pod webhook: "Namespace \"x\"
# not found"), or its pods are being replaced (a drain of their node) and its Service has no
# endpoints yet. The call waits for the webhook to accept, the event the caller needs; a refusal
# on the merits fails at once.
WEBHOOK_WAIT_S = 90.0
WEBHOOK_RETRY_S = 0.2


def webhook_missed_namespace(status: int, body: str) -> bool:
    """A 404 from an admission webhook that looked the object's namespace up in its own cache."""
    return status == 404 and "admission webhook" in body and "Namespace" in body and "not found" in body


def webhook_unreachable(status: int, body: str) -> bool:
    """A 500 from the API server that could not reach a webhook's pods (none ready behind its
    Service, or none listening yet)."""
    return status == 500 and "failed calling webhook" in body and (
        "no endpoints available" in body or "connection refused" in body)


def _again_for_webhook(status: int, body: str, deadline: float) -> bool:
    """Whether a refused call is tried again (after a short pause): a webhook was not ready for
    it and the deadline is not reached."""
    if (webhook_missed_namespace(status, body) or webhook_unreachable(status, body)) and time.monotonic() < deadline:
        time.sleep(WEBHOOK_RETRY_S)
        return True
    return False


class Kube:
    """Typed-enough access to the APIs the suites use; every API error becomes ``CaseFailed``."""

    def __init__(self, kubeconfig: str | os.PathLike[str]) -> None:
        # Typed as Any: the client's generated models are loosely typed (Optional everywhere),
        # and the suites read them defensively anyway.
        self.api: Any = kubeapi.client_for(kubeconfig)
        self.core: Any = client.CoreV1Api(self.api)
        self.apps: Any = client.AppsV1Api(self.api)
        self.batch: Any = client.BatchV1Api(self.api)
        self.custom: Any = client.CustomObjectsApi(self.api)
        self.scheduling: Any = client.SchedulingV1Api(self.api)

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        deadline = time.monotonic() + WEBHOOK_WAIT_S
        while True:
            try:
                return fn(*args, **kwargs)
            except ApiException as exc:
                if _again_for_webhook(int(exc.status or 0), str(exc.body or ""), deadline):
                    continue
                raise base.CaseFailed(f"{what}: {http_error(exc)}") from exc
            except urllib3.exceptions.HTTPError as exc:
                raise base.CaseFailed(f"{what}: Kubernetes API unreachable ({exc})") from exc

    def exists(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        try:
            fn(*args, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise base.CaseFailed(f"{what}: {http_error(exc)}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise base.CaseFailed(f"{what}: Kubernetes API unreachable ({exc})") from exc
        return True

    def request(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None,
                content_type: str = "application/json", ok404: bool = False,
                accept: str = "application/json") -> dict[str, Any]:
        """One API request as plain JSON (``{}`` for an empty body, or for 404 with ``ok404``);
        any other non-2xx status becomes ``CaseFailed`` quoting the server's answer. ``accept``
        may ask for another JSON form (e.g. a list of object metadata only)."""
        url = path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        params = self.api.param_serialize(method=method, resource_path=url, header_params=headers,
                                          body=body, auth_settings=["BearerToken"])
        # Unlike ``call``, a transport error (urllib3) is not turned into CaseFailed here: this is
        # how fault_remediation has always behaved, and changing it is a behaviour change of its own.
        deadline = time.monotonic() + WEBHOOK_WAIT_S
        while True:
            resp = self.api.call_api(*params, _request_timeout=REQUEST_TIMEOUT_S)
            raw = resp.read()
            status = int(resp.status)
            text = raw.decode() if isinstance(raw, bytes) else str(raw or "")
            if not (method == "POST" and _again_for_webhook(status, text, deadline)):
                break
        if status == 404 and ok404:
            return {}
        if not 200 <= status < 300:
            raise base.CaseFailed(f"{method} {path}: HTTP {status}: {text[:300]}")
        found: dict[str, Any] = json.loads(text) if text.strip() else {}
        return found

    def get_text(self, path: str) -> tuple[int, str]:
        """``GET path`` as text (a pod's or service's proxied endpoint): the status and the body,
        whatever the status; a transport error becomes ``CaseFailed`` naming the path."""
        params = self.api.param_serialize(method="GET", resource_path=path, header_params={"Accept": "*/*"},
                                          auth_settings=["BearerToken"])
        try:
            resp = self.api.call_api(*params, _request_timeout=REQUEST_TIMEOUT_S)
        except urllib3.exceptions.HTTPError as exc:
            raise base.CaseFailed(f"GET {path}: Kubernetes API unreachable ({exc})") from exc
        raw = resp.read()
        return int(resp.status), raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw or "")

    def close(self) -> None:
        self.api.close()


def http_error(exc: ApiException) -> str:
    """``HTTP <status> <the API server's message>``, as every suite names a refused call."""
    return f"HTTP {exc.status} {api_message(exc)}"


def api_message(exc: ApiException) -> str:
    """The API server's own message (e.g. an admission webhook's refusal), else the reason."""
    body = exc.body
    if isinstance(body, bytes | str) and body:
        try:
            return str(json.loads(body).get("message") or exc.reason)
        except ValueError:
            return str(body)[:300]
    return str(exc.reason)


def default_service_account(kube: Kube, ns: str) -> None:
    """Pods are refused until the namespace's ``default`` ServiceAccount exists; the
    controller-manager makes it within moments, and where none runs the suite makes it."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if kube.exists("read ServiceAccount default", kube.core.read_namespaced_service_account, "default", ns):
            return
        time.sleep(0.2)
    try:
        kube.core.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    except ApiException as exc:
        if exc.status != 409:
            raise base.CaseFailed(f"create ServiceAccount {ns}/default: {http_error(exc)}") from exc
