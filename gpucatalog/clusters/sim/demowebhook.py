"""Demo workload of the sim kubelet: a validating admission webhook served from a pod.

Image ``ghcr.io/gpu-catalog/demo-webhook`` in ``data/images.yaml``. Serves HTTPS on
``$POD_IP:--port`` with the certificate of a mounted Secret and denies pods labelled
``sim.gpu-catalog.dev/deny: "true"``. The sim-cluster tests use it to prove that the API server
reaches a webhook through its Service's endpoints (pod IP -> egress proxy -> process).
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

DENY_LABEL = "sim.gpu-catalog.dev/deny"


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # http.server's naming
        body: dict[str, Any] = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        req = body["request"]
        labels = (req.get("object") or {}).get("metadata", {}).get("labels") or {}
        allowed = labels.get(DENY_LABEL) != "true"
        resp: dict[str, Any] = {"uid": req["uid"], "allowed": allowed}
        if not allowed:
            resp["status"] = {"code": 403, "message": "denied by demo-webhook: pod carries the deny label"}
        out = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
        print(f"reviewed {req.get('namespace')}/{req.get('name') or '?'}: allowed={allowed}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="demo-webhook")
    ap.add_argument("--port", type=int, default=8443)
    ap.add_argument("--cert", default="/tls/tls.crt")
    ap.add_argument("--key", default="/tls/tls.key")
    args = ap.parse_args(argv)
    host = os.environ.get("POD_IP", "0.0.0.0")  # a pod listens on its own IP
    server = HTTPServer((host, args.port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(f"demo webhook on https://{host}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
