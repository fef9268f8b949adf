"""``catalog certify``: stand up (or use) a cluster, install the bundle, run its conformance
suites and write signed evidence, JUnit and an HTML report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpucatalog.cli import common
from gpucatalog.core import errors
from gpucatalog.pipelines import certify, upgrade


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = common.add_subparser(
        sub,
        "certify",
        "certify a bundle on a cluster: render, validate, install, run conformance suites, sign evidence",
        [
            "catalog certify gpu-scheduling --cluster sim --evidence out/evidence",
            "catalog certify gpu-scheduling --cluster sim --suite fault_remediation --json",
            "catalog certify slurm@0.1.0 --cluster kubeconfig=~/.kube/gpu --profile h100-8x --evidence ev",
            "catalog certify gpu-scheduling --cluster sim --image-map kai-images.yaml --evidence out/evidence",
            "catalog certify gpu-scheduling --cluster kubeconfig=~/.kube/gpu --profile h100-8x --inject-faults",
            "catalog certify gpu-queueing@0.2.0 --cluster sim --upgrade-from 0.1.0 --evidence out/upgrade",
            "catalog certify gpu-queueing@0.2.0 --cluster sim --upgrade-from stable --rollback",
            "catalog certify gpu-queueing --cluster sim --kubernetes 1.35 --evidence out/ev-1.35",
            "catalog certify gpu-queueing --cluster sim --kubernetes 1.37 --outside-range --evidence out/ev-1.37",
        ],
    )
    p.add_argument("bundle", metavar="BUNDLE[@VERSION]")
    p.add_argument("--cluster", default="sim", help="sim (default), kind, or kubeconfig=PATH for an existing cluster")
    p.add_argument("--profile", help="bundle profile (default: the provider's name: sim or kind)")
    p.add_argument("--suite", action="append", default=[], help="run only this suite (repeatable)")
    p.add_argument("--evidence", type=Path, help="write signed evidence, junit.xml and report.html here")
    p.add_argument("--signing-key", type=Path, help="Ed25519 private key (default: a local key, made on first use)")
    p.add_argument("--cluster-name", default="certify", help="name of the sim/kind cluster to start (default: certify)")
    p.add_argument("--keep-cluster", action="store_true", help="leave the started cluster running afterwards")
    p.add_argument("--ready-timeout", type=int, default=180,
                   help="seconds to wait for the cluster to be ready, and then for each component's readiness gate "
                        "after its install (default 180)")
    p.add_argument("--install-timeout", type=int, default=300,
                   help="seconds Helm waits for each release it installs or upgrades (default 300)")
    p.add_argument("--image-map", type=Path, metavar="FILE",
                   help="sim only: an image-map overlay mapping images to executables on this host (bring your own "
                        "binaries, e.g. KAI's; see docs/kai.md); default $GPU_CATALOG_IMAGE_MAP")
    p.add_argument("--inject-faults", nargs="?", const="auto", choices=["auto", "pod"], metavar="auto|pod",
                   help="opt in to synthetic faults on a cluster without its own fault injection: a privileged pod "
                        "writes XID lines into a node's kernel log where gpu-health's agent reads them (the evidence "
                        "says so; other fault kinds stay not run). Without it such a cluster's fault cases are not "
                        "run (incomplete). =pod uses the pod injector on the sim too (see docs/fault-injection.md)")
    p.add_argument("--upgrade-from", metavar="VERSION|CHANNEL",
                   help="certify the upgrade to BUNDLE from this older version (or a channel's newest version, its "
                        "entry verified): install it, start work, upgrade with the work running, check nothing was "
                        "lost, then run the suites (docs/upgrades.md)")
    p.add_argument("--rollback", action="store_true",
                   help="with --upgrade-from: after the upgrade, go back to the old version and check again")
    p.add_argument("--kubernetes", metavar="MINOR",
                   help="sim only: the Kubernetes release to certify on (a minor the toolchain lists, e.g. 1.35; "
                        "default: the toolchain's); refused outside a component's declared range")
    p.add_argument("--outside-range", action="store_true",
                   help="probe a Kubernetes release outside a component's declared range; the evidence says the "
                        "result is exploratory (never promotable)")
    p.add_argument("--exploratory", action="store_true",
                   help="with --image-map: also map images the bundle does not declare user-supplied "
                        "(spec.userSuppliedImages); the evidence says the result is exploratory (never promotable)")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cat = common.load(args)
    opts = certify.Options(
        bundle=args.bundle,
        cluster=args.cluster,
        profile=args.profile,
        suites=tuple(args.suite),
        evidence_dir=args.evidence,
        signing_key=args.signing_key,
        cluster_name=args.cluster_name,
        keep_cluster=args.keep_cluster,
        ready_timeout_s=args.ready_timeout,
        install_timeout_s=args.install_timeout,
        image_map=args.image_map,
        inject_faults=args.inject_faults,
        kubernetes=args.kubernetes,
        outside_range=args.outside_range,
        exploratory=args.exploratory,
    )
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if args.upgrade_from is not None and not args.upgrade_from.strip():
        # an empty value (an unset CI variable) must not quietly become a plain certification
        raise errors.InputError("the value is empty", field="--upgrade-from",
                                expected="a version of the bundle or a channel name")
    if args.rollback and not args.upgrade_from:
        raise errors.InputError("--rollback needs --upgrade-from", field="--rollback", expected="--upgrade-from VERSION")
    if args.upgrade_from:
        outcome = upgrade.run(cat, opts, args.upgrade_from, args.rollback, say)
    else:
        outcome = certify.run(cat, opts, say=say)
    if args.json:
        common.print_json(outcome.to_dict())
    else:
        _table(outcome)
    return 0 if outcome.passed else 1


def _table(o: certify.Outcome) -> None:
    # A pipe (CI log) has no width: use a wide one so reasons stay readable.
    console = Console() if Console().is_terminal else Console(width=160)
    t = Table(title=f"{o.rendered.ref} on {o.cluster.get('provider')} ({o.rendered.profile})  {o.rendered.digest[:19]}…")
    for col in ("suite", "case", "result", "seconds", "reason"):
        t.add_column(col)
    for s in o.suites:
        for c in s.cases:
            mark = {"passed": "[green]✔ passed[/]", "skipped": "[yellow]– not run[/]"}.get(c.result, f"[red]✖ {c.result}[/]")
            t.add_row(s.name, c.name, mark, f"{c.seconds:.1f}", c.reason[:160])
    console.print(t)
    verdict = o.result.upper()
    note = " (a required case was not run: incomplete is not passed)" if o.result == "incomplete" else ""
    if o.cluster.get("outsideRange"):
        note += (f" (EXPLORATORY: Kubernetes {o.cluster.get('requestedKubernetes')} is outside the declared range: "
                 f"{'; '.join(o.cluster.get('outsideRange') or [])}; never promotable)")
    if o.cluster.get("undeclaredImages"):
        note += (f" (EXPLORATORY: the image map ran your binaries for images the bundle does not declare "
                 f"user-supplied: {', '.join(o.cluster['undeclaredImages'])}; never promotable)")
    print(f"{verdict} in {o.finished - o.started:.0f}s{note}")
    for note in o.notes:
        print(note)
    if o.paths:
        print(f"evidence: {o.paths.envelope}")
        print(f"report: {o.paths.report}")
