"""``catalog list / show / render / diff``: look at bundles and what they render to."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any

from gpucatalog.catalog import gitops, model, render, resolve
from gpucatalog.cli import common
from gpucatalog.core import errors
from gpucatalog.pipelines import channel_status
from gpucatalog.validators.static import gitops_crds, upgrade_rules


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = common.add_subparser(
        sub, "list", "list bundles and their versions, or with --channels where each is promoted "
        "(exit 1 when a promoted version no longer verifies)",
        ["catalog list", "catalog list --json", "catalog list --channels", "catalog list --channels --json"])
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--channels", action="store_true",
                   help="per bundle version: the channels holding it, profiles and Kubernetes releases certified, "
                   "when, signed by whom, and whether its evidence and today's render still match")
    p.set_defaults(func=cmd_list)

    p = common.add_subparser(
        sub, "show", "show a bundle's components, profiles and suites", ["catalog show gpu-scheduling@0.1.0"]
    )
    p.add_argument("bundle", metavar="BUNDLE[@VERSION]")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_show)

    p = common.add_subparser(
        sub,
        "render",
        "render a bundle's manifests and bundle.lock.json",
        ["catalog render gpu-scheduling --profile sim --out /tmp/render", "catalog render slurm@0.1.0 --profile kind --out r --force",
         "catalog render gpu-queueing@0.2.0 --profile sim --format argocd --registry oci://registry.internal/gpu --out apps",
         "catalog render gpu-queueing@0.2.0 --profile sim --format flux --registry oci://registry.internal/gpu --out flux"],
    )
    p.add_argument("bundle", metavar="BUNDLE[@VERSION]")
    p.add_argument("--profile", required=True, help="target cluster profile, e.g. sim or kind")
    p.add_argument("--out", required=True, type=Path,
                   help="output folder: new, empty, or a previous render (which is replaced); any other folder is refused")
    p.add_argument("--force", action="store_true",
                   help="replace a previous render even if its files were edited since (never a folder render did not write)")
    p.add_argument("--json", action="store_true", help="print the lock as JSON")
    add_gitops_args(p, default="helm")
    p.set_defaults(func=cmd_render)

    p = common.add_subparser(
        sub,
        "diff",
        "show the rendered difference between two bundle versions and what the upgrade could hurt "
        "(exit 1 when Kubernetes or the catalog would refuse the upgrade)",
        ["catalog diff gpu-scheduling@0.1.0 gpu-scheduling@0.2.0 --profile sim",
         "catalog diff gpu-queueing@0.1.0 gpu-queueing@0.2.0 --risks-only"],
    )
    p.add_argument("a", metavar="BUNDLE@A")
    p.add_argument("b", metavar="BUNDLE@B")
    p.add_argument("--profile", default="sim", help="profile to render both with (default: sim)")
    p.add_argument("--risks-only", action="store_true", help="print only the upgrade's risks, not the manifest diff")
    p.set_defaults(func=cmd_diff)


def cmd_list(args: argparse.Namespace) -> int:
    cat = common.load(args)
    if args.channels:
        return _print_channels(channel_status.holdings(cat), args.json, "no bundle version is promoted to any channel")
    names = sorted({n for (n, _v) in cat.bundles})
    rows = [
        {
            "name": n,
            "versions": cat.bundle_versions(n),
            "description": cat.bundles[(n, cat.bundle_versions(n)[-1])].description,
        }
        for n in names
    ]
    if args.json:
        common.print_json(rows)
    else:
        for r in rows:
            print(f"{r['name']:20} {', '.join(r['versions']):20} {r['description']}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    cat = common.load(args)
    b = resolve.find_bundle(cat, args.bundle)
    ordered = resolve.order(b)
    data: dict[str, Any] = {
        "name": b.name,
        "version": b.version,
        "description": b.description,
        "kubernetesVersion": b.kube_version,
        "components": [
            {
                "name": c.name,
                "version": c.version,
                "namespace": c.namespace,
                "release": c.release,
                "dependsOn": list(c.depends_on),
                "images": [i.ref for i in cat.versions[(c.name, c.version)].images]
                if (c.name, c.version) in cat.versions
                else [],
            }
            for c in ordered
        ],
        "profiles": sorted(b.profiles),
        "suites": list(b.suites),
        # profiles that certify other suites than the bundle's (e.g. a large cluster's scale suite)
        "profileSuites": {name: list(p.suites) for name, p in sorted(b.profiles.items()) if p.suites},
    }
    held = channel_status.holdings(cat, b.name, b.version)
    data["channels"] = [h.to_json() for h in held]
    if args.json:
        common.print_json(data)
        return 0
    print(f"{b.ref}  {b.description}\nKubernetes {b.kube_version}; profiles: {', '.join(data['profiles'])}")
    print(f"suites: {', '.join(b.suites) or '(none)'}")
    for name, suites in data["profileSuites"].items():
        print(f"  profile {name} certifies: {', '.join(suites)} (catalog certify {b.ref} --profile {name})")
    print("install order:")
    for i, c in enumerate(data["components"], 1):
        print(f"  {i}. {c['name']}@{c['version']} -> namespace {c['namespace']}")
        for img in c["images"]:
            print(f"       image {img}")
    print("channels:")
    for line in channel_status.lines(held) or [f"{b.ref} is not promoted to any channel"]:
        print(f"  {line}")
    return 0


def _print_channels(held: list[channel_status.Holding], as_json: bool, none: str) -> int:
    if as_json:
        common.print_json([h.to_json() for h in held])
    else:
        print("\n".join(channel_status.lines(held)) or none)
    return 0 if all(h.ok for h in held) else 1


def add_gitops_args(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--format", choices=gitops.FORMATS, default=default,
                   help=f"helm: one manifests folder per component; argocd: an Application per component "
                   f"(sync waves); flux: OCIRepository + HelmRelease per component (dependsOn); helmfile: one "
                   f"helmfile.yaml (needs). Default: {default}")
    p.add_argument("--registry", metavar="oci://HOST/PATH",
                   help="where `catalog publish` pushed the bundle's charts; needed by argocd/flux/helmfile "
                   "for any chart of this repository (every chart is then taken from there)")


def write_gitops(cat: model.Catalog, rb: render.RenderedBundle, fmt: str, registry: str | None, out: Path,
                 force: bool) -> dict[str, str]:
    """Write the ``fmt`` form of ``rb`` into ``out`` (render's --out rules), checked against the
    pinned CRDs of its tool first: exit 1 naming each finding, and nothing written."""
    render.check_out_dir(out, force, cat)
    files = gitops.generate(cat, rb, fmt, registry)
    findings = gitops_crds.check(fmt, gitops.objects(files), rb.kube_version)
    if findings:
        raise errors.CheckFailed(f"the {fmt} form of {rb.ref} does not match its CRDs; nothing written", findings)
    render.write_files(rb, out, files, fmt)
    return files


def cmd_render(args: argparse.Namespace) -> int:
    cat = common.load(args)
    if args.format == "helm" and args.registry:
        raise errors.InputError("--registry is for --format argocd, flux or helmfile", field="--registry")
    with common.progress(f"rendering {args.bundle} for profile {args.profile}"):
        if args.format == "helm":
            rb = render.render_bundle(cat, args.bundle, args.profile, args.out, force=args.force)
        else:
            render.check_out_dir(args.out, args.force, cat)  # refused before the render's minutes
            rb = render.render_bundle(cat, args.bundle, args.profile)
            files = write_gitops(cat, rb, args.format, args.registry, args.out, args.force)
    if args.json:
        common.print_json(rb.lock)
    elif args.format == "helm":
        for c in rb.components:
            print(f"{c.name:18} {c.version:10} {len(c.objects):4} objects  {args.out / c.name / render.MANIFESTS}")
        print(f"digest {rb.digest}")
        print(str(args.out / render.LOCK_FILE))
    else:
        for rel in sorted(files):
            print(str(args.out / rel))
        print(f"digest {rb.digest}")
        print(str(args.out / render.LOCK_FILE))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    cat = common.load(args)
    with common.progress(f"rendering {args.a} and {args.b}"):
        ra = render.render_bundle(cat, args.a, args.profile)
        rb = render.render_bundle(cat, args.b, args.profile)
    names = [c.name for c in ra.components] + [c.name for c in rb.components if c.name not in {x.name for x in ra.components}]
    texts_a = {c.name: c.manifest_text for c in ra.components}
    texts_b = {c.name: c.manifest_text for c in rb.components}
    changed = False
    for n in names if not args.risks_only else []:
        diff = list(
            difflib.unified_diff(
                texts_a.get(n, "").splitlines(keepends=True),
                texts_b.get(n, "").splitlines(keepends=True),
                fromfile=f"{ra.ref}/{n}",
                tofile=f"{rb.ref}/{n}",
            )
        )
        if diff:
            changed = True
            sys.stdout.writelines(diff)
    if not changed and not args.risks_only:
        print(f"no rendered difference between {ra.ref} and {rb.ref} ({args.profile})")
    return _risks(ra, rb)


def _risks(ra: render.RenderedBundle, rb: render.RenderedBundle) -> int:
    """The upgrade's risks from A to B, worst first; 1 when the upgrade would be refused."""
    refused = upgrade_rules.refusals(ra, rb) + upgrade_rules.immutable(ra, rb)
    risky = upgrade_rules.risks(ra, rb)
    print(f"\nupgrade {ra.ref} -> {rb.ref}: {len(refused)} refusing, {len(risky)} to review")
    for f in refused:
        print(f"  REFUSED {f}")
    for f in risky:
        print(f"  RISK    {f}")
    return 1 if refused else 0
