"""Benchmark: static validation of N rendered objects, cold (schemas converted from the
Kubernetes OpenAPI spec), from the disk cache (a fresh process's first call), and warm.

    PYTHONPATH=$PWD python3 bench/validate_objects.py [N] [--runs R]

The objects are a realistic mix: Deployments and DaemonSets with full pod templates, Services,
ConfigMaps, ServiceAccounts, ClusterRoles and bindings, a Queue CRD and Queues. Prints seconds
(median of R runs for the warm case) and objects per second.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from gpucatalog.validators.static import (
    ComponentObjects,
    PolicyConfig,
    openapi,
    schema_check,
    validate_objects,
)

KUBE = "1.36"


def deployment(i: int, kind: str = "Deployment") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": f"w{i}"}},
        "template": {
            "metadata": {"labels": {"app": f"w{i}"}, "annotations": {"checksum/config": "abc"}},
            "spec": {
                "serviceAccountName": f"w{i}",
                "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "nvidia.com/gpu.present",
                                            "operator": "In",
                                            "values": ["true"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
                "containers": [
                    {
                        "name": "app",
                        "image": f"registry.example/team/app{i}:1.{i}.0",
                        "args": ["--leader-elect", f"--port={8000 + i}"],
                        "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "ports": [{"name": "http", "containerPort": 8000 + i}],
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "128Mi"},
                            "limits": {"memory": "512Mi"},
                        },
                        "livenessProbe": {
                            "httpGet": {"path": "/healthz", "port": "http"},
                            "periodSeconds": 10,
                        },
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8000 + i}},
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
                    }
                ],
                "volumes": [{"name": "config", "configMap": {"name": f"w{i}"}}],
            },
        },
    }
    if kind == "Deployment":
        spec["replicas"] = 2
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": f"w{i}", "labels": {"app": f"w{i}"}},
        "spec": spec,
    }


QUEUE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "queues.scheduling.run.ai"},
    "spec": {
        "group": "scheduling.run.ai",
        "names": {"kind": "Queue", "plural": "queues"},
        "scope": "Cluster",
        "versions": [
            {
                "name": "v2",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "parentQueue": {"type": "string"},
                                    "resources": {
                                        "type": "object",
                                        "properties": {
                                            r: {
                                                "type": "object",
                                                "properties": {
                                                    "quota": {"type": "number"},
                                                    "limit": {"type": "number"},
                                                },
                                            }
                                            for r in ("gpu", "cpu", "memory")
                                        },
                                    },
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def bundle(n: int) -> list[ComponentObjects]:
    """``n`` objects in the mix described in the module docstring."""
    objs: list[dict[str, Any]] = [copy.deepcopy(QUEUE_CRD)]
    i = 0
    while len(objs) < n:
        objs += [
            deployment(i, "DaemonSet" if i % 4 == 3 else "Deployment"),
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": f"w{i}"},
                "spec": {"selector": {"app": f"w{i}"}, "ports": [{"port": 80, "targetPort": "http"}]},
            },
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"w{i}"},
                "data": {"config.yaml": "a: 1\n"},
            },
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": f"w{i}"}},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": f"w{i}"},
                "rules": [
                    {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}
                ],
            },
            {
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": {"name": f"q{i}"},
                "spec": {"parentQueue": "root", "resources": {"gpu": {"quota": 2, "limit": 4}}},
            },
        ]
        i += 1
    return [ComponentObjects("bench", "bench", objs[:n])]


def clear_memos() -> None:
    openapi._load_resolved.cache_clear()
    schema_check._builtin_validator.cache_clear()


def timed(components: list[ComponentObjects]) -> tuple[float, int]:
    start = time.perf_counter()
    findings = validate_objects(components, KUBE, PolicyConfig())
    return time.perf_counter() - start, len(findings)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=100, help="objects to validate (default 100)")
    ap.add_argument("--runs", type=int, default=9, help="warm runs, median reported (default 9)")
    args = ap.parse_args()
    components = bundle(args.n)

    real_cache = os.environ.get("GPU_CATALOG_CACHE")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GPU_CATALOG_CACHE"] = tmp  # empty cache: convert from the OpenAPI spec
        clear_memos()
        cold, found = timed(components)
    if real_cache is None:
        os.environ.pop("GPU_CATALOG_CACHE")
    else:
        os.environ["GPU_CATALOG_CACHE"] = real_cache
    if found:
        sys.exit(f"the benchmark bundle should be clean, got {found} findings")

    timed(components)  # make sure the real cache exists
    clear_memos()
    disk, _ = timed(components)
    warm = statistics.median(timed(components)[0] for _ in range(args.runs))

    print(f"validate_objects, {args.n} objects, Kubernetes {openapi.resolve_version(KUBE)}")
    print(f"  cold (convert OpenAPI spec + validate):   {cold:7.3f} s")
    print(f"  first call, schemas from disk cache:      {disk:7.3f} s")
    print(f"  warm (median of {args.runs}):                   {warm:7.3f} s   {args.n / warm:8.0f} objects/s")
    print(f"  cold / warm: {cold / warm:5.1f}x   disk / warm: {disk / warm:5.1f}x")


if __name__ == "__main__":
    main()
