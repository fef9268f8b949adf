"""``gpu-health repair-pod`` (a command actuator hook) against a recording API: the pod it asks
for, and how it reads the outcome (exit 0, a failed repair, a pod that never ends, a pod of the
same name still going), and its command line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpucatalog.gpuhealth import kube, main, repairpod
from gpucatalog.gpuhealth.xidpolicy import Action

TEMPLATE = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"labels": {"app.kubernetes.io/name": "gpu-health"}},
            "spec": {"serviceAccountName": "gpu-health-agent", "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                     "priorityClassName": "system-node-critical",
                     "volumes": [{"name": "host-kmsg", "hostPath": {"path": "/dev/kmsg"}}],
                     "containers": [{"name": "verify", "image": "gpu-health:1", "args": ["verify"],
                                     "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                                     "volumeMounts": [{"name": "host-kmsg", "mountPath": "/host/dev/kmsg", "readOnly": True}],
                                     "resources": {"limits": {"memory": "64Mi"}}}]}}
ARGS = ["repair-pod", "--namespace", "gpu-health", "--node", "gpu-3", "--action", "RESET_GPU", "--timeout", "5",
        "--host-path", "/var/lib/node", "--run-as-user", "0", "--", "/var/lib/node/repair", "now"]


class FakeApi:
    """Serves the template ConfigMap; the pod walks through ``phases`` on each read."""

    def __init__(self, phases: list[dict[str, Any]], conflicts: int = 0) -> None:
        self.phases = phases
        self.conflicts = conflicts  # creates answered 409 (an earlier pod of that name still going)
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []

    def get(self, path: str, query: dict[str, str] | None = None) -> dict[str, Any]:
        if path.endswith("/configmaps/gpu-health-verify"):
            return {"data": {"pod.json": json.dumps(TEMPLATE)}}
        assert path == "/api/v1/namespaces/gpu-health/pods/gpu-health-repair-gpu-3"
        return {"status": self.phases.pop(0) if len(self.phases) > 1 else self.phases[0]}

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.conflicts:
            self.conflicts -= 1
            raise kube.Conflict("409 AlreadyExists")
        self.created.append(body)
        return body

    def delete_pod(self, namespace: str, name: str, grace: int | None = None) -> None:
        self.deleted.append(f"{namespace}/{name}:{grace}")


def exited(code: int, message: str) -> dict[str, Any]:
    return {"phase": "Succeeded" if code == 0 else "Failed",
            "containerStatuses": [{"state": {"terminated": {"exitCode": code, "message": message}}}]}


def make(api: FakeApi, clock: list[float] | None = None, args: list[str] = ARGS) -> repairpod.PodActuator:
    """The actuator ``gpu-health repair-pod ARGS`` builds, on ``api`` and a fake clock."""
    a = main.parser().parse_args(args)
    pod = repairpod.PodActuator(api, a.namespace, a.template_configmap, {a.action: a.argv},  # type: ignore[arg-type]
                                repairpod.pod_config(a), a.timeout)
    t = clock if clock is not None else [0.0]
    pod.clock = lambda: t[0]
    pod.sleep = lambda s: t.__setitem__(0, t[0] + s)
    return pod


def test_repair_pod_runs_the_hook_on_the_node_and_reads_its_exit() -> None:
    api = FakeApi([{"phase": "Pending"}, {"phase": "Running"}, exited(0, "healthy readings restored\n")])
    result, detail = make(api).repair("gpu-3", Action.RESET_GPU, "XID 79")
    assert (result, detail) == ("succeeded", "pod gpu-health-repair-gpu-3 exit 0: healthy readings restored")
    pod = api.created[0]
    spec, c = pod["spec"], pod["spec"]["containers"][0]
    assert spec["nodeName"] == "gpu-3" and spec["restartPolicy"] == "Never"
    assert spec["tolerations"] == [{"operator": "Exists"}]  # a cordoned, tainted node still runs it
    assert (spec["serviceAccountName"], spec["priorityClassName"]) == ("gpu-health-agent", "system-node-critical")
    assert c["image"] == "gpu-health:1" and c["command"] == ["/var/lib/node/repair", "now"]
    assert "args" not in c and c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # only the configured host path, writable; none of the probes' read-only mounts
    assert spec["volumes"] == [{"name": "repair-p0", "hostPath": {"path": "/var/lib/node", "type": "Directory"}}]
    assert c["volumeMounts"] == [{"name": "repair-p0", "mountPath": "/var/lib/node"}]
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "privileged": False, "capabilities": {"drop": ["ALL"]},
                                    "runAsUser": 0, "runAsGroup": 0}
    assert c["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "NODE_NAME", "value": "gpu-3"},
                        {"name": "GPU_HEALTH_ACTION", "value": "RESET_GPU"}, {"name": "GPU_HEALTH_REASON", "value": "XID 79"}]
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "repair"
    # a leftover of the same name is removed first, and the pod is removed after
    assert api.deleted == ["gpu-health/gpu-health-repair-gpu-3:0"] * 2


def test_failed_repair_pod_is_a_failed_repair() -> None:
    api = FakeApi([exited(3, "reset refused: GPU in use")])
    assert make(api).repair("gpu-3", Action.RESET_GPU, "x") == (
        "failed", "pod gpu-health-repair-gpu-3 exit 3: reset refused: GPU in use")


def test_repair_pod_that_never_ends_fails_at_the_timeout_and_is_removed() -> None:
    api = FakeApi([{"phase": "Pending"}])
    clock = [0.0]
    result, detail = make(api, clock).repair("gpu-3", Action.RESET_GPU, "x")
    assert result == "failed" and "did not finish within 5s (phase Pending)" in detail
    assert clock[0] >= 5.0 and len(api.deleted) == 2


def test_no_hook_for_the_action_and_an_earlier_pod_still_terminating() -> None:
    assert make(FakeApi([{}])).repair("gpu-3", Action.REBOOT, "x") == ("failed", "no pod hook configured for REBOOT")
    # the earlier pod goes away after two tries: this repair then runs
    api = FakeApi([exited(0, "ok")], conflicts=2)
    assert make(api).repair("gpu-3", Action.RESET_GPU, "x")[0] == "succeeded" and len(api.created) == 1
    # it never goes away: a failed repair once the timeout is spent, nothing created
    api = FakeApi([{}], conflicts=10**6)
    result, detail = make(api).repair("gpu-3", Action.RESET_GPU, "x")
    assert result == "failed" and "still terminating after 5s" in detail and not api.created


def test_the_hook_prints_the_pods_message_and_exits_with_the_repairs_result(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    apis = [FakeApi([exited(0, "restored")]), FakeApi([exited(4, "refused")])]
    monkeypatch.setattr(repairpod.kube, "load", lambda _kc: None)
    monkeypatch.setattr(repairpod.kube, "Api", lambda _client: apis.pop(0))
    assert main.main(ARGS) == 0
    assert capsys.readouterr().out == "pod gpu-health-repair-gpu-3 exit 0: restored\n"
    assert main.main(ARGS) == 1
    assert capsys.readouterr().out == "pod gpu-health-repair-gpu-3 exit 4: refused\n"


@pytest.mark.parametrize("args", [
    [a if a != "/var/lib/node" else "relative/dir" for a in ARGS],  # a host path must be absolute
    [a for a in ARGS if a not in ("--namespace", "gpu-health")],  # no namespace and no $POD_NAMESPACE
])
def test_bad_hook_arguments_exit_2(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setattr(repairpod.kube, "load", lambda _kc: None)
    monkeypatch.setattr(repairpod.kube, "Api", lambda _client: FakeApi([{}]))
    assert main.main(args) == 2


def test_the_command_actuators_fill_reaches_the_pod_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart's hook as configured: the command actuator fills ``{node}`` and the rest, then
    ``repair-pod`` runs that argv as it is. Literal braces (``{{x}}`` in the config) and a reason
    holding braces reach the pod unchanged; they were formatted a second time, and broke, before."""
    from gpucatalog.gpuhealth import actuator, hostexec

    ran: list[list[str]] = []

    def run(argv: list[str], timeout: float) -> hostexec.Completed:
        ran.append(list(argv))
        return hostexec.Completed(tuple(argv), 0, "", "")

    monkeypatch.setattr(hostexec, "run", run)
    act = actuator.from_config({"kind": "command", "commands": {"RESET_GPU": [
        "gpu-health", "repair-pod", "--namespace", "gpu-health", "--node", "{node}", "--action", "{action}",
        "--reason={reason}", "--", "sh", "-c", "echo {{x}} {node} >&2", "{reason}"]}})
    reason = "XID 79 {pci: 0000:3b:00.0}"
    assert act.repair("gpu-3", Action.RESET_GPU, reason)[0] == "succeeded"
    hook = ran[0][1:]  # what gpu-health's command line receives
    api = FakeApi([exited(0, "ok")])
    assert make(api, args=hook).repair("gpu-3", Action.RESET_GPU, reason)[0] == "succeeded"
    c = api.created[0]["spec"]["containers"][0]
    assert c["command"] == ["sh", "-c", "echo {x} gpu-3 >&2", reason]
    assert {"name": "GPU_HEALTH_REASON", "value": reason} in c["env"]


@pytest.mark.parametrize("part", ["awk '{print $1}'", "{0}", "{node", "{node.x}"])
def test_a_template_that_cannot_be_filled_is_refused_at_start_naming_the_action(part: str) -> None:
    from gpucatalog.gpuhealth import actuator
    from gpucatalog.gpuhealth.errors import ConfigError

    with pytest.raises(ConfigError, match=r"actuator commands\.RESET_GPU: .* literal brace is written twice"):
        actuator.from_config({"kind": "command", "commands": {"RESET_GPU": ["sh", "-c", part]}})
    with pytest.raises(ConfigError, match=r"hardwareRepair\.command"):
        actuator.from_config({"kind": "none", "hardwareRepair": {"command": ["ticket", part]}})
