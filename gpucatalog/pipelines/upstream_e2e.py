"""Kueue's own upstream end-to-end specs, run against the sim with the gpu-queueing bundle's Kueue.

``make upstream-e2e`` (not part of ``make test``): a sim cluster whose first nodes carry the labels
of the worker nodes of Kueue's own e2e kind cluster (``instance-type: on-demand`` / ``spot``, read
from the module's hack/testing/kind-cluster.yaml), the bundle's Kueue alone installed with its
``upstream-e2e`` profile (Kueue configured as its own suite configures it: two managers electing a
leader, the pod, Deployment and StatefulSet integrations, every resource counted), then Kueue's
``test/e2e/singlecluster`` suite built from the pinned module (toolchain group ``kueue-e2e``),
limited to the specs that need only core Kueue (:data:`LABELS`). Its workloads use Kubernetes'
``agnhost`` image, which the sim runs for real (toolchain group ``agnhost``).

The verdict: at least :data:`MIN_PASS_SHARE` of the specs that ran passed, and every failure is a
known difference listed with its cause in ``docs/upstream-e2e.md`` (section "Known differences",
one ``- `spec name`: cause`` line each). A spec that starts failing is never quietly accepted.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
import xml.etree.ElementTree as ET  # Ginkgo's report, written by a binary built here
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from gpucatalog.catalog import install as installer
from gpucatalog.catalog import loader, render
from gpucatalog.clusters.sim import SimCluster
from gpucatalog.core import errors, executor
from gpucatalog.pipelines import logscan
from gpucatalog.toolchain import build

BUNDLE, PROFILE, COMPONENT = "gpu-queueing", "upstream-e2e", "kueue"
# Kueue's labels for the suites that need nothing but Kueue (no JobSet, Kubeflow, Ray, LWS, TAS,
# Prometheus, kueuectl or the visibility API)
LABELS = "feature:job || feature:pod || feature:deployment || feature:statefulset || feature:fairsharing"
MIN_PASS_SHARE = 0.95
SUITE_TIMEOUT = "40m"
KUEUE_MODULE = "sigs.k8s.io/kueue"
KNOWN_HEADING = "## Known differences"
_KNOWN_LINE = re.compile(r"^- `(?P<spec>[^`]+)`: (?P<why>.+)$")


@dataclass(frozen=True)
class SpecResult:
    name: str
    state: str  # passed | failed | skipped (by the spec itself) | filtered (not selected)
    seconds: float
    message: str = ""


def parse_junit(path: Path) -> list[SpecResult]:
    """The specs of Ginkgo's JUnit report; suite set-up nodes ([BeforeSuite] …) are specs too."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise errors.InputError(f"{path}: not a readable JUnit report ({exc})") from exc
    out = []
    for case in root.iter("testcase"):
        name = re.sub(r"\s+", " ", case.get("name", "?")).strip()
        status = case.get("status", "")
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            state, msg = "failed", (failure.get("message") or failure.text or "").strip()
        elif skipped is not None:
            # a spec the label filter left out says only "skipped"; ginkgo.Skip adds its reason
            msg = (skipped.get("message") or "").strip()
            state = "filtered" if msg in ("", "skipped") else "skipped"
        else:
            state, msg = ("passed" if status in ("passed", "") else status), ""
        out.append(SpecResult(name, state, float(case.get("time") or 0.0), msg))
    return out


def known_differences(doc: Path) -> dict[str, str]:
    """spec name -> its cause, from the doc's "Known differences" section."""
    known: dict[str, str] = {}
    inside = False
    for line in doc.read_text().splitlines():
        if line.startswith("## "):
            inside = line.strip() == KNOWN_HEADING
        elif inside and (m := _KNOWN_LINE.match(line.strip())):
            known[m["spec"]] = m["why"]
    return known


@dataclass(frozen=True)
class Verdict:
    ran: list[SpecResult]
    failed: list[SpecResult]
    unexplained: list[SpecResult]
    share: float
    log_findings: tuple[str, ...] = ()  # fatal lines in Kueue's logs (an RBAC denial)

    @property
    def ok(self) -> bool:
        return bool(self.ran) and self.share >= MIN_PASS_SHARE and not self.unexplained and not self.log_findings


def judge(specs: list[SpecResult], known: dict[str, str]) -> Verdict:
    """The share counts the specs ([It] nodes) that ran; a failed suite node ([BeforeSuite] …) is
    never a known difference."""
    ran = [s for s in specs if s.state in ("passed", "failed") and s.name.startswith("[It]")]
    failed = [s for s in ran if s.state == "failed"]
    share = (len(ran) - len(failed)) / len(ran) if ran else 0.0
    setup = [s for s in specs if s.state == "failed" and not s.name.startswith("[It]")]
    return Verdict(ran, failed, setup + [s for s in failed if s.name not in known], share)


def report(specs: list[SpecResult], known: dict[str, str], verdict: Verdict) -> str:
    """The Markdown table of one run (docs/upstream-e2e.md carries the last one)."""
    lines = [f"{len(verdict.ran) - len(verdict.failed)} of {len(verdict.ran)} specs passed "
             f"({verdict.share:.1%}); {sum(s.state == 'skipped' for s in specs)} skipped by the spec itself.", "",
             *([f"Kueue's log: {f}" for f in verdict.log_findings]
               or ["Kueue's logs: no line matches its declared fatal patterns (an RBAC denial)."]), "",
             "| spec | result | s |", "|---|---|---|"]
    for s in specs:
        if s.name.startswith("[It]") and s.state in ("passed", "failed", "skipped"):
            note = f" (known: {known[s.name]})" if s.state == "failed" and s.name in known else ""
            lines.append(f"| {s.name.replace('|', '/')} | {s.state}{note} | {s.seconds:.1f} |")
    return "\n".join(lines) + "\n"


def worker_labels(module_dir: Path) -> list[dict[str, str]]:
    """The labels of each worker node of Kueue's e2e kind cluster, in order."""
    path = module_dir / "hack" / "testing" / "kind-cluster.yaml"
    doc = yaml.safe_load(path.read_text())
    return [dict(n.get("labels") or {}) for n in doc.get("nodes", []) if n.get("role") == "worker"]


def label_nodes(cluster: SimCluster, labels: list[dict[str, str]]) -> list[str]:
    """Put ``labels[i]`` on the i-th node (by name); the names labelled."""
    core: Any = client.CoreV1Api(cluster.api_client())
    names = sorted(n.metadata.name for n in core.list_node().items)
    if len(names) < len(labels):
        raise errors.InputError(f"the cluster has {len(names)} nodes; Kueue's e2e cluster has {len(labels)} workers")
    for name, lab in zip(names, labels, strict=False):
        core.patch_node(name, {"metadata": {"labels": lab}})
    return names[: len(labels)]


def run(out: Path, cluster_name: str, keep: bool, focus: str | None, doc: Path) -> Verdict:
    say, out = _say, out.resolve()
    say("building Kueue's e2e suite and agnhost (first run only)")
    suite = build.ensure("kueue-e2e", say)
    build.ensure("agnhost", say)
    version = build.group_of("kueue-e2e").version
    module = build.module_dir(KUEUE_MODULE, version)
    cat = loader.load_catalog(Path(__file__).resolve().parents[2] / "catalog")
    rb = render.render_bundle(cat, BUNDLE, PROFILE)
    kueue = [c for c in rb.components if c.name == COMPONENT]
    cluster = SimCluster(cluster_name)
    nodes, shape = int(rb.cluster["nodes"]), str(rb.cluster["shape"])  # the profile's cluster
    workers = worker_labels(module)
    out.mkdir(parents=True, exist_ok=True)
    try:
        say(f"sim cluster {cluster_name}: {nodes} x {shape}")
        cluster.up(nodes, shape)
        for name, lab in zip(label_nodes(cluster, workers), workers, strict=True):
            say(f"node {name}: labels {lab} (as Kueue's e2e kind cluster)")
        say(f"installing {rb.bundle}@{rb.version}'s {COMPONENT} alone ({PROFILE} profile)")
        installer.install(dataclasses.replace(rb, components=kueue), cluster.kubeconfig(), timeout_s=600,
                          progress=say, gates=True)
        junit = out / "junit.xml"
        for stale in (junit, out / "suite.log", out / "report.md"):  # never an earlier run's
            stale.unlink(missing_ok=True)
        argv = [str(suite), f"--ginkgo.label-filter={LABELS}", f"--ginkgo.junit-report={junit}",
                f"--ginkgo.timeout={SUITE_TIMEOUT}", "--ginkgo.no-color", "--ginkgo.v"]
        if focus:
            argv.append(f"--ginkgo.focus={focus}")
        # PROJECT_DIR: where the suite finds its own files (the agnhost image it pins); it takes
        # the folder above the path given
        env = {"KUBECONFIG": str(cluster.kubeconfig()), "KUEUE_NAMESPACE": kueue[0].namespace,
               "PROJECT_DIR": f"{module}/", "ARTIFACTS": str(out)}
        say(f"running Kueue {version}'s specs labelled {LABELS} (log: {out / 'suite.log'})")
        start = time.monotonic()
        proc = executor.spawn(argv, log_path=out / "suite.log", cwd=out, env=env)
        proc.wait()
        say(f"suite ended with exit code {proc.returncode} after {time.monotonic() - start:.0f} s")
        if not junit.is_file():
            raise errors.ToolError(argv, proc.returncode or 1, f"no JUnit report; see {out / 'suite.log'}")
        # the chart's RBAC, proven by the run: Kueue's logs hold no denial (its declared patterns)
        logs = logscan.scan(dataclasses.replace(rb, components=kueue), cluster.kubeconfig(), out / "logs", say)
        findings = tuple(c.reason for c in (logs.cases if logs else []) if c.result != "passed")
    finally:
        if not keep:
            cluster.down()
    specs = parse_junit(junit)
    known = known_differences(doc)
    verdict = dataclasses.replace(judge(specs, known), log_findings=findings)
    (out / "report.md").write_text(report(specs, known, verdict))
    return verdict


def _say(msg: str) -> None:
    print(f"upstream-e2e: {msg}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="upstream-e2e", description=__doc__.split("\n\n")[0],
        epilog="example: make upstream-e2e   (or: python -m gpucatalog.pipelines.upstream_e2e --keep-cluster)")
    ap.add_argument("--out", type=Path, default=Path("build/upstream-e2e"), help="report folder (default build/upstream-e2e)")
    ap.add_argument("--cluster-name", default="upstream-e2e", help="sim cluster name (default upstream-e2e)")
    ap.add_argument("--keep-cluster", action="store_true", help="leave the cluster running afterwards")
    ap.add_argument("--focus", help="only specs whose name matches this regular expression (Ginkgo's --focus)")
    ap.add_argument("--doc", type=Path, default=Path("docs/upstream-e2e.md"), help="where the known differences are listed")
    args = ap.parse_args(argv)
    try:
        v = run(args.out, args.cluster_name, args.keep_cluster, args.focus, args.doc)
    except errors.CatalogError as exc:
        print(f"upstream-e2e: {exc}", file=sys.stderr)
        return exc.exit_code
    print((args.out / "report.md").read_text())
    for finding in v.log_findings:
        print(f"upstream-e2e: Kueue's log: {finding}", file=sys.stderr)
    for s in v.unexplained:
        print(f"upstream-e2e: FAILED and not a known difference: {s.name}: {s.message[:300]}", file=sys.stderr)
    if not v.ok:
        print(f"upstream-e2e: {v.share:.1%} passed (needs {MIN_PASS_SHARE:.0%}, every failure explained)", file=sys.stderr)
    return 0 if v.ok else 1


if __name__ == "__main__":
    sys.exit(main())
