"""Liveness and readiness: the probe rules, the HTTP endpoints on loopback, the agent and
controller loops feeding them, and the real ``gpu-health agent`` process answering its probes."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client as k8s_client

from gpucatalog.gpuhealth import agent, controller, health, kube, probes
from gpucatalog.gpuhealth.actuator import from_config
from gpucatalog.gpuhealth.errors import ConfigError
from gpucatalog.gpuhealth.findings import Expectations

from .conftest import SimNode


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unreachable_api() -> kube.Api:
    cfg = k8s_client.Configuration()
    cfg.host = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    return kube.Api(k8s_client.ApiClient(cfg), timeout=2)


def test_rules_grace_then_stale_then_recovered() -> None:
    clock = Clock()
    h = health.Health(60, clock)
    assert h.live() == (True, "ok")  # a fresh process gets one stale period for its first iteration
    assert h.ready()[0] is False and "has reached the API server yet" in h.ready()[1]
    clock.now += 61
    assert h.live()[0] is False and "no loop iteration finished" in h.live()[1]
    h.beat(False, "GET /api/v1/nodes/gpu-0: API server unreachable")
    assert h.live() == (True, "ok")  # an API outage keeps the process alive ...
    assert h.ready()[0] is False and "unreachable" in h.ready()[1]  # ... and not ready
    h.beat(True)
    assert h.ready() == (True, "ok")
    clock.now += 61
    assert h.live()[0] is False and "61s ago" in h.live()[1]
    assert h.ready()[0] is False


@pytest.mark.parametrize(("text", "want"), [("127.0.0.1:8081", ("127.0.0.1", 8081)),
                                            ("[::1]:8081", ("::1", 8081)),
                                            ("fd00::5:8081", ("fd00::5", 8081))])
def test_addresses(text: str, want: tuple[str, int]) -> None:
    assert health.parse_addr(text) == want


@pytest.mark.parametrize("bad", ["8081", "host:", ":8081", "h:99999", "h:x"])
def test_bad_addresses_are_config_errors(bad: str) -> None:
    with pytest.raises(ConfigError, match="HOST:PORT"):
        health.parse_addr(bad)


def test_endpoints_answer_over_http() -> None:
    clock = Clock()
    h = health.Health(30, clock)
    server = health.serve(h, "127.0.0.1:0")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert get(base + "/healthz") == (200, "ok")
        assert get(base + "/readyz")[0] == 503
        h.beat(True)
        assert get(base + "/readyz") == (200, "ok")
        clock.now += 31
        code, text = get(base + "/healthz")
        assert code == 503 and "limit 30s" in text
        assert get(base + "/metrics")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


def test_a_taken_port_is_a_config_error() -> None:
    server = health.serve(health.Health(30), "127.0.0.1:0")
    try:
        with pytest.raises(ConfigError, match="cannot listen"):
            health.serve(health.Health(30), f"127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


def _run_until_beats(target: threading.Thread, probe: health.Health, stop: threading.Event) -> None:
    target.start()
    deadline = time.monotonic() + 20
    while probe.iterations < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    target.join(10)


def test_agent_loop_beats_alive_but_not_ready_without_the_api(sim_node: SimNode) -> None:
    cfg = probes.ProbeConfig.under_host_root(sim_node.root, Expectations(), nvidia_smi=(str(sim_node.smi),))
    ag = agent.Agent(unreachable_api(), "gpu-0", cfg)
    probe, stop = health.Health(60), threading.Event()
    _run_until_beats(threading.Thread(target=ag.run, args=(stop, 0.05, probe)), probe, stop)
    assert probe.iterations >= 2
    assert probe.live() == (True, "ok")
    assert probe.ready()[0] is False and "unreachable" in probe.ready()[1]


def test_controller_loop_beats_alive_but_not_ready_without_the_api() -> None:
    ctl = controller.Controller(unreachable_api(), controller.ControllerConfig("gpu-health", interval_s=0.05),
                                from_config(None), logger=lambda *a, **k: None)
    probe, stop = health.Health(60), threading.Event()
    _run_until_beats(threading.Thread(target=ctl.run, args=(stop, probe)), probe, stop)
    assert probe.iterations >= 2 and probe.live()[0] is True and probe.ready()[0] is False


def test_the_real_agent_process_serves_its_probes(sim_node: SimNode, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{free_port()}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpucatalog.gpuhealth.main", "--kubeconfig", str(kubeconfig), "agent",
         "--node", "gpu-0", "--host-root", str(sim_node.root), "--nvidia-smi", str(sim_node.smi),
         "--interval", "0.2", f"--health-addr=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                live = get(base + "/healthz")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        assert live == (200, "ok")
        code, text = get(base + "/readyz")
        assert code == 503 and "API server" in text
    finally:
        proc.terminate()
        proc.wait(10)
        assert proc.stderr is not None
        proc.stderr.close()
