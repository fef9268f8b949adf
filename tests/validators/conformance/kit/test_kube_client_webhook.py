"""A create that an admission webhook refuses only because its cache has not yet seen the
namespace made just before (Kueue's pod webhook, from gpu-queueing 0.4.0 on: CI saw it deny a
fault_remediation pod) is tried again until the webhook accepts it; every other refusal is not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpucatalog.validators.conformance.kit import base, kube_client

SEEN_IN_CI = ('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"admission webhook '
              '\\"mpod.kb.io\\" denied the request: Namespace \\"fault-remediation-305b8b\\" not found",'
              '"reason":"NotFound","details":{"name":"fault-remediation-305b8b","kind":"Namespace"},"code":404}')


def test_only_a_webhooks_missing_namespace_is_recognised() -> None:
    assert kube_client.webhook_missed_namespace(404, SEEN_IN_CI)
    assert not kube_client.webhook_missed_namespace(403, SEEN_IN_CI)
    assert not kube_client.webhook_missed_namespace(404, '{"message":"namespaces \\"x\\" not found"}')  # the API server's own
    assert not kube_client.webhook_missed_namespace(
        400, '{"message":"admission webhook \\"vpod.kb.io\\" denied the request: bad queue"}')


def _kube(tmp_path: Path) -> kube_client.Kube:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                   "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                   "current-context: x\n")
    return kube_client.Kube(cfg)


def test_call_tries_again_until_the_webhook_accepts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_client, "WEBHOOK_RETRY_S", 0.0)
    answers: list[Any] = [ApiException(status=404, reason="Not Found"), ApiException(status=404, reason="Not Found"), "made"]
    for a in answers[:2]:
        a.body = SEEN_IN_CI

    def create() -> Any:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    assert _kube(tmp_path).call("create pod", create) == "made" and not answers


def test_any_other_refusal_fails_at_once(tmp_path: Path) -> None:
    calls = []

    def create() -> Any:
        calls.append(1)
        exc = ApiException(status=400, reason="Bad Request")
        exc.body = '{"message":"admission webhook \\"vpod.kb.io\\" denied the request: bad queue"}'
        raise exc

    with pytest.raises(base.CaseFailed, match="create pod: HTTP 400"):
        _kube(tmp_path).call("create pod", create)
    assert calls == [1]
