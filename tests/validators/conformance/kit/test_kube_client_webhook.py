"""A create that an admission webhook refuses only because it is not ready for it is tried again
until the webhook accepts it: its cache has not yet seen the namespace made just before (Kueue's
pod webhook, from gpu-queueing 0.4.0 on: CI saw it deny a fault_remediation pod), or its pods are
being replaced and the API server cannot reach it (the main job saw that while a drain moved
Kueue's manager). Every other refusal fails at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpucatalog.validators.conformance.kit import base, kube_client

SEEN_IN_CI = ('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"admission webhook '
              '\\"mpod.kb.io\\" denied the request: Namespace \\"fault-remediation-305b8b\\" not found",'
              '"reason":"NotFound","details":{"name":"fault-remediation-305b8b","kind":"Namespace"},"code":404}')

# What the main job's gpu_sharing_dra suite got while Kueue's only manager was being replaced
WEBHOOK_DOWN = ('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Internal error '
                'occurred: failed calling webhook \\"mpod.kb.io\\": failed to call webhook: Post \\"https://'
                'kueue-webhook-service.kueue-system.svc:443/mutate--v1-pod?timeout=10s\\": no endpoints available '
                'for service \\"kueue-webhook-service\\"","reason":"InternalError","code":500}')


def test_only_a_webhooks_missing_namespace_is_recognised() -> None:
    assert kube_client.webhook_missed_namespace(404, SEEN_IN_CI)
    assert not kube_client.webhook_missed_namespace(403, SEEN_IN_CI)
    assert not kube_client.webhook_missed_namespace(404, '{"message":"namespaces \\"x\\" not found"}')  # the API server's own
    assert not kube_client.webhook_missed_namespace(
        400, '{"message":"admission webhook \\"vpod.kb.io\\" denied the request: bad queue"}')


def test_an_unreachable_webhook_is_recognised_and_nothing_else() -> None:
    assert kube_client.webhook_unreachable(500, WEBHOOK_DOWN)
    assert kube_client.webhook_unreachable(500, WEBHOOK_DOWN.replace("no endpoints available for service",
                                                                     "dial tcp 10.0.0.1:443: connect: connection refused"))
    assert not kube_client.webhook_unreachable(502, WEBHOOK_DOWN)
    assert not kube_client.webhook_unreachable(500, '{"message":"etcdserver: request timed out"}')
    assert not kube_client.webhook_unreachable(  # reached, and it answered: a refusal on the merits
        500, '{"message":"failed calling webhook \\"mpod.kb.io\\": the server rejected our request"}')


def _kube(tmp_path: Path) -> kube_client.Kube:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                   "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                   "current-context: x\n")
    return kube_client.Kube(cfg)


@pytest.mark.parametrize(("status", "body"), [(404, SEEN_IN_CI), (500, WEBHOOK_DOWN)])
def test_call_tries_again_until_the_webhook_accepts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    status: int, body: str) -> None:
    monkeypatch.setattr(kube_client, "WEBHOOK_RETRY_S", 0.0)
    answers: list[Any] = [ApiException(status=status, reason="x"), ApiException(status=status, reason="x"), "made"]
    for a in answers[:2]:
        a.body = body

    def create() -> Any:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    assert _kube(tmp_path).call("create pod", create) == "made" and not answers


class _Answer:
    def __init__(self, status: int, body: str) -> None:
        self.status, self.body = status, body

    def read(self) -> bytes:
        return self.body.encode()


def test_request_posts_again_until_the_webhook_is_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_client, "WEBHOOK_RETRY_S", 0.0)
    kube = _kube(tmp_path)
    answers = [_Answer(500, WEBHOOK_DOWN), _Answer(500, WEBHOOK_DOWN), _Answer(201, '{"kind": "Pod"}')]
    monkeypatch.setattr(kube.api, "call_api", lambda *a, **kw: answers.pop(0))
    assert kube.request("POST", "/api/v1/namespaces/x/pods", {"kind": "Pod"}) == {"kind": "Pod"} and not answers


def test_a_webhook_that_stays_away_fails_the_call_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_client, "WEBHOOK_RETRY_S", 0.0)
    monkeypatch.setattr(kube_client, "WEBHOOK_WAIT_S", 0.0)
    kube = _kube(tmp_path)
    monkeypatch.setattr(kube.api, "call_api", lambda *a, **kw: _Answer(500, WEBHOOK_DOWN))
    with pytest.raises(base.CaseFailed, match="HTTP 500.*no endpoints available"):
        kube.request("POST", "/api/v1/namespaces/x/pods", {"kind": "Pod"})


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
