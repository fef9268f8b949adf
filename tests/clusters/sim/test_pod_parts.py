"""Unit tests of the sim kubelet's pod parts: CRI log files, probes and their thresholds, the
pod status they drive, and per-pod network namespaces (made and gone; needs root, as the sim
kubelet does). No cluster needed."""

from __future__ import annotations

import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpucatalog.clusters.sim import netns, podlogs, podrun, probes


# -- logs ------------------------------------------------------------------------------------------
def _cri(path: Path) -> list[tuple[str, str, str]]:
    out = []
    for line in path.read_text().splitlines():
        stamp, stream, tag, text = line.split(" ", 3)
        assert stamp.endswith("Z") and "T" in stamp
        out.append((stream, tag, text))
    return out


def test_container_log_turns_raw_output_into_cri_lines_per_instance(tmp_path: Path) -> None:
    raw = tmp_path / "main.log"
    log = podlogs.ContainerLog(raw, tmp_path / "logs" / "main")
    log.start(0)
    raw.write_bytes(b"one\ntw")
    log.pump()
    assert _cri(log.current) == [("stdout", "F", "one")]  # a line without its newline waits
    with open(raw, "ab") as fh:
        fh.write(b"o\nlast words")
    log.pump(final=True)  # the instance exited: its unterminated last line counts too
    assert [t for _, _, t in _cri(log.current)] == ["one", "two", "last words"]
    with open(raw, "ab") as fh:
        fh.write(b"second instance\n")
    log.start(1)  # the raw file keeps every instance; the new CRI file starts at the restart
    with open(raw, "ab") as fh:
        fh.write(b"after restart\n")
    log.pump()
    assert log.previous == tmp_path / "logs" / "main" / "0.log"
    assert [t for _, _, t in _cri(log.current)] == ["after restart"]
    assert [t for _, _, t in _cri(log.previous)][-1] == "second instance"


def test_logs_object_names_current_and_previous_files(tmp_path: Path) -> None:
    a = podlogs.ContainerLog(tmp_path / "a.log", tmp_path / "logs" / "a")
    a.start(0)
    a.start(1)
    b = podlogs.ContainerLog(tmp_path / "b.log", tmp_path / "logs" / "b")
    b.start(0)
    obj = podlogs.logs_object("ns", "p", "uid-1", {"a": a, "b": b})
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    by = {e["containers"][0]: e for e in obj["spec"]["logs"]}
    assert by["a"]["logsFile"].endswith("a/1.log") and by["a"]["previousLogsFile"].endswith("a/0.log")
    assert "previousLogsFile" not in by["b"]


# -- probes ----------------------------------------------------------------------------------------
def _probe(**kw: Any) -> Any:
    base = {"http_get": None, "tcp_socket": None, "var_exec": None, "initial_delay_seconds": None,
            "period_seconds": None, "timeout_seconds": None, "success_threshold": None, "failure_threshold": None}
    return SimpleNamespace(**{**base, **kw})


def _container(**kw: Any) -> Any:
    base = {"name": "main", "ports": [SimpleNamespace(name="web", container_port=8080)],
            "readiness_probe": None, "liveness_probe": None}
    return SimpleNamespace(**{**base, **kw})


def test_probe_specs_resolve_named_ports_and_defaults() -> None:
    http = _probe(http_get=SimpleNamespace(port="web", host=None, path="/ready", scheme=None, http_headers=None),
                  period_seconds=2, failure_threshold=1)
    spec = probes.parse(http, _container())
    assert spec is not None and (spec.kind, spec.port, spec.path, spec.scheme) == ("http", 8080, "/ready", "HTTP")
    assert (spec.period, spec.timeout, spec.success_threshold, spec.failure_threshold) == (2.0, 1.0, 1, 1)
    tcp = probes.parse(_probe(tcp_socket=SimpleNamespace(port="nope", host=None)), _container())
    assert tcp is not None and tcp.port == 0  # an unknown port name: the probe will fail
    assert probes.parse(None, _container()) is None


def test_thresholds_decide_the_verdict() -> None:
    st = probes.State(probes.Spec("tcp", success_threshold=2, failure_threshold=3), started=0.0)
    st.fold(True, "")
    assert not st.ok  # one success of two needed
    st.fold(True, "")
    assert st.ok
    st.fold(False, "")
    st.fold(False, "")
    assert st.ok  # two failures of three tolerated
    st.fold(False, "refused")
    assert not st.ok and st.last == "refused"


def test_liveness_holds_until_it_fails_failure_threshold_times() -> None:
    live = _probe(tcp_socket=SimpleNamespace(port=1, host=None), failure_threshold=2)
    cp = probes.ContainerProbes.of(_container(liveness_probe=live), now=0.0)
    assert cp.ready and cp.liveness is not None and cp.liveness.ok and not cp.liveness_failed
    cp.liveness.fold(False, "refused")
    assert not cp.liveness_failed
    cp.liveness.fold(False, "refused")
    assert cp.liveness_failed == "Liveness probe failed: refused"


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/ok" else 503)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        return None


def test_http_and_tcp_probes_see_what_a_server_answers() -> None:
    server = HTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        assert probes.run_once(probes.Spec("http", port, path="/ok"), "127.0.0.1", None, 0) == (True, "HTTP 200")
        assert probes.run_once(probes.Spec("http", port, path="/no"), "127.0.0.1", None, 0) == (False, "HTTP 503")
        assert probes.run_once(probes.Spec("tcp", port), "127.0.0.1", None, 0)[0]
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert not probes.run_once(probes.Spec("tcp", closed), "127.0.0.1", None, 0)[0]


def test_readiness_drives_the_ready_condition(tmp_path: Path) -> None:
    ready = _probe(tcp_socket=SimpleNamespace(port=1, host=None))
    cont = podrun.Container("main", "img", [], rec=None, state="running")
    cont.probes = probes.ContainerProbes.of(_container(readiness_probe=ready), now=0.0)
    run = podrun.PodRun("u", "ns", "p", "n", "100.64.0.9", tmp_path, "Always", containers=[cont])
    st = podrun.status(run)
    assert st["phase"] == "Running" and st["conditions"][-1] == {"type": "Ready", "status": "False"}
    assert st["containerStatuses"][0]["ready"] is False and st["containerStatuses"][0]["started"] is True
    before = podrun.digest(st)
    assert cont.probes.readiness is not None
    cont.probes.readiness.fold(True, "connected")
    st = podrun.status(run)
    assert st["conditions"][-1]["status"] == "True" and podrun.digest(st) != before


# -- network namespaces ----------------------------------------------------------------------------
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def _holders(ino: int) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and os.stat(d / "ns" / "net").st_ino == ino:
                out.append(d.name)
        except OSError:
            continue
    return out


@needs_root
def test_a_pod_namespace_has_its_own_loopback_and_ip_and_goes_with_its_holder(tmp_path: Path) -> None:
    pod_dir = tmp_path / "pod"
    pod_dir.mkdir()
    net, pause = netns.create(pod_dir, "100.64.0.7", tmp_path)
    try:
        ino = os.stat(net.path).st_ino
        assert ino != os.stat("/proc/self/ns/net").st_ino
        assert netns.lookup(tmp_path, "100.64.0.7") == net and netns.all_entries(tmp_path) == [net]
        # a port bound inside is free on the host and vice versa: its own ports
        inner = netns.socket_in(net)
        inner.bind(("100.64.0.7", 8080))
        inner.listen()
        probe = netns.socket_in(net)
        probe.settimeout(2)
        probe.connect(("100.64.0.7", 8080))
        probe.close()
        inner.close()
    finally:
        netns.remove(net, pause, tmp_path)
    assert netns.lookup(tmp_path, "100.64.0.7") is None
    assert _holders(ino) == []  # no process holds the namespace: it is gone
