"""Demo workload of the sim kubelet: a small HTTP server whose health a test can steer.

Image ``ghcr.io/gpu-catalog/demo-probe`` in ``data/images.yaml``. Used by the sim-kubelet tests of
per-pod networks, probes and logs, and by ``bench/sim_pods.py``. It

* prints ``demo-probe start pid=<pid> port=<port> <message>`` (a log line to look for), then one
  line per request;
* listens on ``0.0.0.0:--port`` after ``--listen-after`` seconds (a tcpSocket probe target; every
  pod may use the same port, each in its own network namespace);
* answers ``GET /ready`` 200 once ``--ready-after`` seconds have passed (503 before), and creates
  ``--ready-file`` then (an exec probe target: ``cat`` it);
* answers ``GET /healthz`` 200 until a ``GET /fail``, 500 afterwards (a liveness probe target: the
  failure lives in memory, so a restarted container is healthy again);
* answers ``GET /whoami`` with ``pid port``, and exits with ``--exit-after`` seconds' code 3.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class State:
    def __init__(self, ready_after: float, port: int) -> None:
        self.started = time.monotonic()
        self.ready_after = ready_after
        self.port = port
        self.failed = False


def handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/ready":
                ok = time.monotonic() - state.started >= state.ready_after
                self._answer(200 if ok else 503, "ready" if ok else "not ready")
            elif self.path == "/healthz":
                self._answer(500 if state.failed else 200, "failing" if state.failed else "ok")
            elif self.path == "/fail":
                state.failed = True
                self._answer(200, "healthz fails from now on")
            elif self.path == "/whoami":
                self._answer(200, f"{os.getpid()} {state.port}")
            else:
                self._answer(404, "unknown path")

        def _answer(self, code: int, text: str) -> None:
            body = (text + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            print(f"request {format % args}", flush=True)

    return Handler


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="demo-probe")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--listen-after", type=float, default=0.0, help="seconds before the port is bound")
    ap.add_argument("--ready-after", type=float, default=0.0, help="seconds before /ready answers 200")
    ap.add_argument("--ready-file", type=Path, help="created once ready")
    ap.add_argument("--exit-after", type=float, default=0.0, help="exit with code 3 after this many seconds")
    ap.add_argument("--message", default="")
    args = ap.parse_args(argv)
    state = State(args.ready_after, args.port)
    print(f"demo-probe start pid={os.getpid()} port={args.port} {args.message}".rstrip(), flush=True)
    if args.exit_after:
        threading.Timer(args.exit_after, lambda: os._exit(3)).start()
    if args.ready_file is not None:
        def mark_ready() -> None:
            args.ready_file.write_text("ready\n")
            print(f"wrote {args.ready_file}", flush=True)

        threading.Timer(args.ready_after, mark_ready).start()
    time.sleep(args.listen_after)
    server = ThreadingHTTPServer(("0.0.0.0", args.port), handler(state))
    print(f"listening on :{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
