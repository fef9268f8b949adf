"""``catalog install`` / ``catalog uninstall``: install the newest promoted version of a bundle
(or a given one) into a cluster; refuse an uncertified version unless told.

Before anything is applied: the cluster must answer (exit 2 otherwise), and the fresh render must
be what the channel certified for this profile, with evidence that verifies against the
repository's trust file (``pipelines.certified``; exit 1 naming each difference otherwise).
``--allow-uncertified`` is the one way round; each release's description then says so."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpucatalog.catalog import install, render, resolve
from gpucatalog.cli import bundles, common
from gpucatalog.core import errors
from gpucatalog.pipelines import certified, channels, promote


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = common.add_subparser(
        sub,
        "install",
        "install a promoted bundle version into a cluster, in order, waiting for readiness",
        [
            "catalog install gpu-scheduling --channel stable --kubeconfig ~/.kube/config --profile h100-8x",
            "catalog install gpu-scheduling@0.1.0 --allow-uncertified --dry-run --profile sim",
            "catalog install gpu-queueing --channel stable --profile sim --gitops apps --registry oci://registry.internal/gpu",
        ],
    )
    _common_args(p)
    p.add_argument("--channel", default="stable", help="channel to install from (default: stable)")
    p.add_argument("--allow-uncertified", action="store_true",
                   help="install even what the channel did not certify (recorded in each release's description)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--timeout", type=int, default=300, help="seconds to wait for each component (default 300)")
    p.add_argument("--ready-timeout", type=int,
                   help="seconds to wait for each component's readiness gate after its install (default: --timeout)")
    p.add_argument(
        "--no-readiness-gate",
        action="store_true",
        help="do not wait for components' own ready status (e.g. KAI's Config conditions) beyond Helm's wait",
    )
    p.add_argument("--gitops", type=Path, metavar="DIR",
                   help="write the GitOps form (--format) of what would be installed into DIR, after the same "
                   "checks, and apply nothing; DIR follows `catalog render --out`'s rules")
    bundles.add_gitops_args(p, default="argocd")
    p.add_argument("--force", action="store_true",
                   help="with --gitops: replace a previous output even if its files were edited since")
    p.set_defaults(func=cmd_install)

    p = common.add_subparser(
        sub,
        "uninstall",
        "remove a bundle's releases from a cluster, in reverse order",
        ["catalog uninstall gpu-scheduling@0.1.0 --kubeconfig ~/.kube/config --profile sim"],
    )
    _common_args(p)
    p.set_defaults(func=cmd_uninstall)


def _common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", metavar="BUNDLE[@VERSION]")
    p.add_argument("--kubeconfig", type=Path, help="cluster to install into (default: $KUBECONFIG)")
    p.add_argument("--profile", required=True, help="bundle profile matching the cluster")


def _version(args: argparse.Namespace, cat_root: Path) -> str:
    name, version = resolve.split_ref(args.bundle)
    promoted = channels.versions_in(cat_root, args.channel, name)
    if version is None:
        if not promoted:
            raise errors.CheckFailed(
                f"no version of {name} is promoted to {args.channel!r}; name a version and pass --allow-uncertified"
            )
        return f"{name}@{promoted[-1]}"
    if version not in promoted and not args.allow_uncertified:
        raise errors.CheckFailed(
            f"{name}@{version} is not in channel {args.channel!r} (promoted: {', '.join(promoted) or 'none'}); "
            "refusing to install an uncertified version without --allow-uncertified"
        )
    return f"{name}@{version}"


def _vouch(args: argparse.Namespace, cat_root: Path, rb: render.RenderedBundle) -> str:
    """The release description: the channel's certificate, or why this install is uncertified
    (only with --allow-uncertified; otherwise the CheckFailed stops the install)."""
    try:
        cert = certified.verify(cat_root, args.channel, rb.bundle, rb.version, args.profile, rb.digest)
    except errors.CheckFailed as exc:
        if not args.allow_uncertified:
            raise
        reasons = "; ".join([exc.summary, *(f.message for f in exc.findings)])
        print(f"warning: installing UNCERTIFIED {rb.ref} ({args.profile}): {reasons}", file=sys.stderr)
        return (f"gpu-catalog: UNCERTIFIED {rb.ref} profile {args.profile} digest {rb.digest}, installed with "
                f"--allow-uncertified by {promote.default_promoter()}: {reasons}")[:1000]
    print(f"certified: {cert.describe()}", file=sys.stderr)
    return cert.describe()


def _check_gitops_args(args: argparse.Namespace) -> None:
    if args.gitops is None:
        used = [f for f, on in (("--registry", args.registry), ("--force", args.force),
                                ("--format", args.format != "argocd")) if on]
        if used:
            raise errors.InputError(f"{', '.join(used)} only go with --gitops", field=used[0])
    elif args.dry_run or args.format == "helm":
        raise errors.InputError("--gitops writes files and applies nothing: it takes neither --dry-run nor "
                                "--format helm (use `catalog render` for plain manifests)", field="--gitops")


def cmd_install(args: argparse.Namespace) -> int:
    _check_gitops_args(args)
    cat = common.load(args)
    if args.gitops is not None:
        render.check_out_dir(args.gitops, args.force, cat)  # refused before the render and the checks
    # bad cluster: exit 2 first
    kubeconfig = None if args.dry_run or args.gitops is not None else install.target(args.kubeconfig)[0]
    ref = _version(args, cat.root)
    with common.progress(f"rendering {ref}"):
        rb = render.render_bundle(cat, ref, args.profile)
    description = _vouch(args, cat.root, rb)
    if args.gitops is not None:
        files = bundles.write_gitops(cat, rb, args.format, args.registry, args.gitops, args.force)
        for rel in sorted(files):
            print(str(args.gitops / rel))
        print(f"wrote the {args.format} form of {rb.ref} ({rb.digest}) to {args.gitops}; nothing applied")
        return 0
    if args.dry_run:
        print("\n".join(install.plan_lines(rb)))
        print(description)
        return 0
    done = install.install(
        rb,
        kubeconfig,
        timeout_s=args.timeout,
        progress=lambda m: print(m, file=sys.stderr),
        gates=not args.no_readiness_gate,
        ready_timeout_s=args.ready_timeout,
        description=description,
    )
    for d in done:
        print(f"{d.component:18} release {d.release} in {d.namespace}, revision {d.revision} ({d.seconds:.1f}s)")
    print(f"installed {rb.ref} ({rb.digest})")
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    cat = common.load(args)
    kubeconfig = install.target(args.kubeconfig)[0]
    rb = render.render_bundle(cat, args.bundle, args.profile)
    removed = install.uninstall(rb, kubeconfig, progress=lambda m: print(m, file=sys.stderr))
    print(f"uninstalled {rb.ref}: {', '.join(removed) or 'nothing was installed'}")
    return 0
