"""Demo workload of the sim kubelet: list the pods of its namespace through its ServiceAccount.

Image ``ghcr.io/gpu-catalog/podlister`` in ``data/images.yaml``. Uses in-cluster configuration
(the projected ServiceAccount token) when present, else ``$KUBECONFIG``. Prints
``listed N pods in NS`` (after the files of any ``--cat PATH``) every ``--interval`` seconds; on 403 prints ``forbidden: …`` and exits 3,
so a missing Role shows as a crash-looping pod. ``--version`` prints gpu-catalog's version (how
the image-map overlay tests ask a mapped executable). Used by the sim-kubelet RBAC tests.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import time
from pathlib import Path
from typing import Any

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="podlister")
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--once", action="store_true")
    ap.add_argument("--cat", action="append", default=[], metavar="PATH",
                    help="print a file first (shows what a hostPath volume holds inside the pod)")
    ap.add_argument("--version", action="store_true",
                    help="print the version (gpu-catalog's) and exit; an image-map overlay asks it this way")
    args = ap.parse_args(argv)
    if args.version:
        print(f"podlister {importlib.metadata.version('gpu-catalog')}")
        return 0
    from kubernetes import client, config
    for path in args.cat:
        try:
            print(f"--- {path}\n{Path(path).read_text()}", flush=True)
        except OSError as exc:
            print(f"--- {path}: {exc}", flush=True)
    cfg: Any = config  # the loaders are untyped in the kubernetes package
    if (SA_DIR / "token").is_file():
        cfg.load_incluster_config()
        namespace = (SA_DIR / "namespace").read_text().strip()
    else:
        cfg.load_kube_config()
        namespace = os.environ.get("POD_NAMESPACE", "default")
    core: Any = client.CoreV1Api()
    while True:
        try:
            pods = core.list_namespaced_pod(namespace).items
        except client.ApiException as exc:
            if exc.status == 403:
                print(f"forbidden: {exc.reason}: {exc.body}", flush=True)
                return 3
            raise
        print(f"listed {len(pods)} pods in {namespace}", flush=True)
        if args.once:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
