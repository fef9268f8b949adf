"""The controller asks the Slurm hook, for a quarantined or draining node, whether Slurm still
runs jobs there; the engine then holds the node's pods and its repair until they end."""

from __future__ import annotations

from typing import Any

from gpucatalog.gpuhealth import controller, engine
from gpucatalog.gpuhealth.actuator import from_config
from gpucatalog.gpuhealth.errors import PermanentError, TemporaryError
from gpucatalog.gpuhealth.slurm import NoSlurm


class Hook(NoSlurm):
    def __init__(self, busy: dict[str, bool | Exception]) -> None:
        super().__init__()
        self.answers, self.asked = busy, []  # type: list[str]

    def busy(self, node: str) -> bool:
        self.asked.append(node)
        answer = self.answers[node]
        if isinstance(answer, Exception):
            raise answer
        return answer


class PodsApi:
    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return [{"metadata": {"name": "slurmd-h100-0-0", "namespace": "slurm"}, "status": {"phase": "Running"}}]


def _view(name: str, state: str) -> engine.NodeView:
    return engine.NodeView(name, {engine.STATE_LABEL: state}, {}, True, None)


def _controller(hook: Hook) -> controller.Controller:
    return controller.Controller(PodsApi(), controller.ControllerConfig("gpu-health"),  # type: ignore[arg-type]
                                 from_config(None), slurm=hook, logger=lambda msg, **kv: None)


def test_quarantined_and_draining_nodes_carry_what_slurm_says() -> None:
    hook = Hook({"a": True, "b": False})
    ctl = _controller(hook)
    assert ctl.enrich(_view("a", engine.QUARANTINED)).slurm_busy is True
    drained = ctl.enrich(_view("b", engine.DRAINING))
    assert drained.slurm_busy is False and drained.pods_remaining == 1
    assert ctl.enrich(_view("a", engine.REPAIRING)).slurm_busy is False  # not asked once the drain is over
    assert hook.asked == ["a", "b"]


def test_a_node_slurm_does_not_know_runs_no_slurm_job() -> None:
    ctl = _controller(Hook({"x": PermanentError("Slurm does not know node: Invalid node name specified")}))
    assert ctl.enrich(_view("x", engine.DRAINING)).slurm_busy is False


def test_while_slurm_cannot_be_asked_the_node_waits_and_its_drain_timeout_still_runs() -> None:
    """An unreachable slurmctld neither lets a repair kill jobs nor freezes the node: the engine
    sees it busy, so the drain timeout escalates it if the outage lasts."""
    logged: list[str] = []
    ctl = controller.Controller(PodsApi(), controller.ControllerConfig("gpu-health"),  # type: ignore[arg-type]
                                from_config(None), slurm=Hook({"x": TemporaryError("slurmctld not responding", delay=15)}),
                                logger=lambda msg, **kv: logged.append(msg))
    assert ctl.enrich(_view("x", engine.DRAINING)).slurm_busy is True
    assert logged == ["slurm state unknown; the drain waits"]
