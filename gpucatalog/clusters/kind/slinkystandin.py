"""SIMULATED stand-in for Slinky's slurm-operator on kind (``python3 -m gpucatalog.clusters.kind.slinkystandin``).

The operator cannot be built here (the Go module proxy refuses every version, docs/slurm.md), and
the kind provider does its work instead: it starts the Slurm pods from the bundle's Controller and
NodeSet CRs (:mod:`.slurm`). The operator's Deployment still installs with the bundle; its pod
runs this, which takes the operator's flags, answers its health probes (``--health-addr``:
``/healthz`` and ``/readyz``) and reconciles nothing. The evidence lists its image as SIMULATED.
"""

from __future__ import annotations

import argparse
import http.server
import signal
import sys
from collections.abc import Sequence

NOTICE = ("SIMULATED slurm-operator stand-in: reconciles nothing; the kind provider starts the Slurm pods "
          "from the Controller and NodeSet CRs")


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path in ("/healthz", "/readyz")
        body = b"ok\n" if ok else b"not found\n"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return  # probes every few seconds: not worth a line each


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="slurm-operator (stand-in)", description=NOTICE)
    ap.add_argument("--health-addr", default=":8081")
    a, ignored = ap.parse_known_args(argv)  # the operator's other flags (log level, leader election)
    host, _, port = a.health_addr.rpartition(":")
    print(NOTICE + (f"; flags taken and ignored: {' '.join(ignored)}" if ignored else ""), flush=True)
    # the pod's own network namespace; the kubelet probes it on the pod's address
    server = http.server.HTTPServer((host or "0.0.0.0", int(port)), _Health)

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(0)

    # PID 1 of a container gets no default action for SIGTERM: without a handler a drain's
    # eviction waits out the whole grace period (30 s) before the pod goes
    signal.signal(signal.SIGTERM, stop)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
