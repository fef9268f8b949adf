"""Which fault injector certify hands the suites, and what the evidence says about it: the
provider's own (sim), the pod injector only when opted into (``--inject-faults``, or ``=pod`` to
force it on the sim), or none (fault cases then not run). No cluster needed: the providers are
asked by protocol and the pod injector's template comes from the chart helm really renders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpucatalog.cli import main
from gpucatalog.clusters import provider
from gpucatalog.core import errors
from gpucatalog.pipelines import fault_injection


def _kubeconfig(tmp_path: Path) -> Path:
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n")
    return kc


def _bundle(objects: list[dict[str, Any]]) -> Any:
    return SimpleNamespace(bundle="b", components=[SimpleNamespace(objects=objects)])


@pytest.fixture(scope="module")
def gpu_health(render_chart: Callable[..., list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return render_chart("gpu-health")


def _choose(prov: Any, mode: str | None, objects: list[dict[str, Any]], kc: Path,
            kind: str = "kubeconfig") -> fault_injection.Choice:
    return fault_injection.choose(prov, mode, fault_injection.check(_bundle(objects), prov, mode), kc, kind)


def test_a_cluster_without_injection_gets_none_unless_opted_in(tmp_path: Path, gpu_health: list[dict[str, Any]]) -> None:
    kc = _kubeconfig(tmp_path)
    prov = provider.get("kubeconfig", kubeconfig=kc)
    none = _choose(prov, None, gpu_health, kc)
    assert none.mode == "none" and none.params == {}
    info: dict[str, Any] = {}
    none.record(info)
    assert info == {"faultInjection": "none", "faultInjectionNote": fault_injection.NOTES["none"]}
    pod = _choose(prov, "auto", gpu_health, kc)
    assert pod.mode == "pod" and pod.injector is not None
    assert pod.params == {"inject_fault": pod.injector.inject_fault, "clear_fault": pod.injector.clear_fault}
    pod.record(info)
    assert info["faultInjection"] == "pod" and "synthetic faults" in info["faultInjectionNote"]
    pod.finish(info, print)  # nothing ran: an empty record, and nothing to remove
    assert info["faultInjectionPods"] == []


def test_the_sim_keeps_its_own_injector_unless_the_pod_is_forced(tmp_path: Path, gpu_health: list[dict[str, Any]]) -> None:
    kc = _kubeconfig(tmp_path)
    sim = provider.get("sim", "choice")
    for mode in (None, "auto"):
        own = _choose(sim, mode, gpu_health, kc, "sim")
        assert own.mode == "sim" and own.params["inject_fault"] == sim.inject_fault  # type: ignore[attr-defined]
    assert _choose(sim, "pod", gpu_health, kc, "sim").mode == "pod"


def test_kind_keeps_its_own_injector_and_the_evidence_names_kind(tmp_path: Path, gpu_health: list[dict[str, Any]]) -> None:
    kc = _kubeconfig(tmp_path)
    kind = provider.get("kind", "choice")
    own = _choose(kind, None, gpu_health, kc, "kind")
    assert own.mode == "kind" and own.params["clear_fault"] == kind.clear_fault  # type: ignore[attr-defined]
    info: dict[str, Any] = {}
    own.record(info)
    assert "kind provider wrote the readings" in info["faultInjectionNote"]
    assert _choose(kind, "pod", gpu_health, kc, "kind").mode == "pod"


def test_a_pod_injector_without_gpu_health_or_a_bad_mode_is_bad_input(tmp_path: Path,
                                                                       gpu_health: list[dict[str, Any]]) -> None:
    kc = provider.get("kubeconfig", kubeconfig=_kubeconfig(tmp_path))
    with pytest.raises(errors.InputError, match="bundle b installs no gpu-health agent DaemonSet") as exc:
        fault_injection.check(_bundle([]), kc, "auto")
    assert exc.value.field == "--inject-faults"
    assert fault_injection.check(_bundle([]), kc, None) is None  # not asked for: nothing needed
    assert fault_injection.check(_bundle([]), provider.get("sim", "choice"), "auto") is None
    with pytest.raises(errors.InputError, match="unknown fault injection 'always'"):
        fault_injection.check(_bundle(gpu_health), kc, "always")


def test_the_flag_takes_auto_or_pod(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certify", "gpu-scheduling", "--inject-faults=always"]) == 2
    assert "--inject-faults" in capsys.readouterr().err
