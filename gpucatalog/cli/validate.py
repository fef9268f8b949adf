"""``catalog validate``: render a bundle and run every static check on it (exit 1 on findings)."""

from __future__ import annotations

import argparse

from gpucatalog.catalog import render
from gpucatalog.cli import common
from gpucatalog.core import errors
from gpucatalog.validators import bundle_checks, static


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = common.add_subparser(
        sub,
        "validate",
        "render a bundle and check it: Kubernetes and CRD schemas, policy, component rules, helm lint",
        ["catalog validate gpu-scheduling --profile sim", "catalog validate slurm@0.1.0 --profile kind --json"],
    )
    p.add_argument("bundle", metavar="BUNDLE[@VERSION]")
    p.add_argument("--profile", required=True, help="target cluster profile, e.g. sim or kind")
    p.add_argument("--json", action="store_true", help="print findings as a JSON list")
    p.add_argument("--no-lint", action="store_true", help="skip helm lint of the charts written here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cat = common.load(args)
    with common.progress(f"validating {args.bundle} for profile {args.profile}"):
        rb = render.render_bundle(cat, args.bundle, args.profile)
        findings = bundle_checks.check_rendered(rb, lint=not args.no_lint)
    if args.json:
        print(static.findings_to_json(findings))
        return 1 if findings else 0
    if findings:
        raise errors.CheckFailed(f"{rb.ref} ({args.profile}): {len(findings)} finding(s)", findings)
    n = sum(len(c.objects) for c in rb.components)
    print(f"{rb.ref} ({args.profile}): {n} objects in {len(rb.components)} components, no findings")
    return 0
