"""The controller records the breaker before it acts on the breaker's decision: whoever sees a
node quarantined or refused finds the breaker that decided it, and a lost save quarantines
nothing the breaker does not know about (a fresh-clone CI run once read CLOSED between the
refusal annotation and the save)."""

from __future__ import annotations

from typing import Any

from gpucatalog.gpuhealth import controller, kube
from gpucatalog.gpuhealth.actuator import from_config

CM = "/api/v1/namespaces/gpu-health/configmaps/gpu-health-breaker"


def faulty(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {}, "annotations": {}, "resourceVersion": "1"},
            "spec": {}, "status": {"conditions": [
                {"type": "GpuXidError", "status": "True", "message": "action=REBOOT; XID 79 on GPU 0",
                 "lastTransitionTime": "2026-12-02T10:00:00Z"}]}}


class RecordingApi:
    """Only the calls one pass over healthy-but-faulty nodes makes, in the order made."""

    def __init__(self, nodes: list[dict[str, Any]], conflict: bool = False) -> None:
        self.nodes, self.conflict = nodes, conflict
        self.calls: list[str] = []

    def items(self, path: str, query: dict[str, str] | None = None) -> list[dict[str, Any]]:
        return self.nodes

    def get(self, path: str) -> dict[str, Any]:
        assert path == CM
        return {"metadata": {"name": "gpu-health-breaker", "resourceVersion": "5"}, "data": {"status": "CLOSED"}}

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"save {body['data']['status']}")
        if self.conflict:
            raise kube.Conflict("409 someone changed the breaker", delay=0.5)
        return body

    def patch_node(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"patch {name}")
        return body

    def create_event(self, *args: object, **kwargs: object) -> None:
        self.calls.append("event")


def run_pass(api: RecordingApi) -> list[str]:
    ctl = controller.Controller(api, controller.ControllerConfig("gpu-health", breaker_share=0.25),  # type: ignore[arg-type]
                                from_config(None), logger=lambda msg, **kv: api.calls.append(msg))
    ctl.reconcile_once(now=1_800_000_000.0)
    return api.calls


def test_breaker_is_saved_before_any_node_is_quarantined_or_refused() -> None:
    calls = run_pass(RecordingApi([faulty(f"gpu-{i}") for i in range(4)]))
    assert calls[0] == "save TRIPPED", calls  # one of four may go (25 %), the second trips it
    assert [c for c in calls if c.startswith("patch")] == ["patch gpu-0", "patch gpu-1", "patch gpu-2", "patch gpu-3"]


def test_a_lost_breaker_save_quarantines_and_refuses_nothing() -> None:
    calls = run_pass(RecordingApi([faulty(f"gpu-{i}") for i in range(4)], conflict=True))
    assert calls[0] == "save TRIPPED"
    assert not [c for c in calls if c.startswith("patch") or c == "event"], calls
    assert any("breaker not saved" in c for c in calls)
