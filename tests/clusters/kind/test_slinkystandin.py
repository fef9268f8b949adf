"""The SIMULATED stand-in for Slinky's operator: takes the operator's flags, answers the health
probes its Deployment declares, and leaves at once when told to (a drain's eviction)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_answers_the_probes_and_stops_on_sigterm() -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpucatalog.clusters.kind.slinkystandin", "--zap-log-level=info",
                             f"--health-addr=127.0.0.1:{port}", "--leader-elect=false"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed before it listens: the first probe may race it
        assert line.startswith("SIMULATED slurm-operator stand-in") and "--zap-log-level=info" in line
        deadline = time.monotonic() + 10
        while True:
            try:
                assert _get(f"http://127.0.0.1:{port}/readyz") == 200
                break
            except urllib.error.URLError:
                assert time.monotonic() < deadline, "the stand-in never listened"
                time.sleep(0.05)
        assert _get(f"http://127.0.0.1:{port}/healthz") == 200
        assert _get(f"http://127.0.0.1:{port}/metrics") == 404
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
