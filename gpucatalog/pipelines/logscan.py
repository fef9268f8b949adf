"""Scan the logs of a bundle's pods for lines its components declared fatal (``declarations.
logPatterns``, e.g. KAI's ``forbidden``: an RBAC denial the narrowed chart caused), and keep
those logs with the evidence.

Called by ``pipelines.certify`` after the suites, before teardown. Logs are read through the
Kubernetes API (``pods/log``, and ``previous`` for a restarted container), so the scan works the
same on every cluster. The result is one ``logs`` suite with a case per component that declares
patterns: failed when a line matches, naming pod, container and line; a log the API cannot
serve is listed, not guessed at.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpucatalog.catalog import render
from gpucatalog.core import kubeapi
from gpucatalog.validators.conformance.kit import base

MAX_MATCHES = 20  # per component, in the evidence
MAX_LINE = 300  # characters of a matching line kept


@dataclass
class _Scan:
    patterns: list[tuple[re.Pattern[str], str]]
    logs_read: int = 0
    matches: list[dict[str, str]] = field(default_factory=list)
    match_count: int = 0
    unreadable: list[str] = field(default_factory=list)

    def feed(self, where: str, text: str) -> None:
        self.logs_read += 1
        for line in text.splitlines():
            for rx, why in self.patterns:
                if rx.search(line):
                    self.match_count += 1
                    if len(self.matches) < MAX_MATCHES:
                        self.matches.append({"log": where, "line": line.strip()[:MAX_LINE], "pattern": rx.pattern,
                                             "why": why})
                    break


def _read(core: Any, ns: str, pod: str, container: str, previous: bool) -> str:
    text: str = core.read_namespaced_pod_log(pod, ns, container=container, previous=previous, _request_timeout=30)
    return text


def _scan_namespace(core: Any, ns: str, scan: _Scan, keep: Path | None) -> None:
    try:
        pods = core.list_namespaced_pod(ns).items
    except ApiException as exc:
        if exc.status != 404:
            scan.unreadable.append(f"pods of {ns}: HTTP {exc.status} {exc.reason}")
        return
    for pod in pods:
        statuses = {cs.name: cs for cs in (pod.status.container_statuses or [])} if pod.status else {}
        for c in list(pod.spec.init_containers or []) + list(pod.spec.containers):
            cs = statuses.get(c.name)
            runs = [False] + ([True] if cs is not None and cs.restart_count else [])
            for previous in runs:
                where = f"{ns}/{pod.metadata.name}/{c.name}" + (" (previous)" if previous else "")
                try:
                    text = _read(core, ns, pod.metadata.name, c.name, previous)
                except ApiException as exc:
                    scan.unreadable.append(f"{where}: HTTP {exc.status} {exc.reason}")
                    continue
                except urllib3.exceptions.HTTPError as exc:
                    scan.unreadable.append(f"{where}: {exc}")
                    continue
                scan.feed(where, text)
                if keep is not None:
                    path = keep / ns / pod.metadata.name / (c.name + (".previous" if previous else "") + ".log")
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)


def scan(rb: render.RenderedBundle, kubeconfig: Path, keep: Path | None = None,
         say: Callable[[str], None] = lambda _m: None) -> base.SuiteResult | None:
    """Scan the pods of every component that declares log patterns (None when none does);
    logs are written under ``keep`` (``<ns>/<pod>/<container>.log``) when given."""
    comps = [c for c in rb.components if c.declarations.log_patterns]
    if not comps:
        return None
    result = base.SuiteResult(name="logs", cases=[])
    core: Any = client.CoreV1Api(kubeapi.client_for(kubeconfig))
    for comp in comps:
        res = base.CaseResult(name=f"{comp.name}-logs", result="passed")
        t0 = time.monotonic()
        scan_ = _Scan([(re.compile(p), why) for p, why in comp.declarations.log_patterns.items()])
        namespaces = list(dict.fromkeys([comp.namespace, *comp.declarations.log_namespaces]))
        say(f"scanning logs of {comp.name} in {', '.join(namespaces)}")
        try:
            for ns in namespaces:
                _scan_namespace(core, ns, scan_, keep)
        except urllib3.exceptions.HTTPError as exc:
            scan_.unreadable.append(f"Kubernetes API unreachable: {exc}")
        res.details = {"namespaces": namespaces, "patterns": dict(comp.declarations.log_patterns),
                       "logs_read": scan_.logs_read, "matches": scan_.matches, "unreadable": scan_.unreadable}
        if scan_.match_count:
            first = scan_.matches[0]
            res.result = "failed"
            res.reason = (f"{scan_.match_count} log line(s) of {comp.name} match a fatal pattern ({first['why']}); "
                          f"first in {first['log']}: {first['line']}")
        res.seconds = time.monotonic() - t0
        result.cases.append(res)
        result.seconds += res.seconds
    return result
