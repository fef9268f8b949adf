"""``catalog publish`` and ``catalog mirror``: bundles to and between OCI registries."""

from __future__ import annotations

import argparse
import sys

from gpucatalog.cli import promote as promote_cli
from gpucatalog.pipelines import certified, mirror, publish
from gpucatalog.toolchain import build


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "publish",
        help="push a bundle's charts and lock to an OCI registry",
        description="Render BUNDLE@VERSION for a profile, push each component chart (helm package + helm "
        "push) and the bundle lock as an OCI artifact (PATH/bundles/BUNDLE:VERSION_PROFILE) that "
        "indexes the charts by digest.",
        epilog="examples:\n  catalog publish gpu-scheduling@0.1.0 --registry oci://127.0.0.1:5000/catalog\n"
        "  catalog publish slurm@0.1.0 --profile kind --registry oci://registry.internal:5000/gpu",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("ref", metavar="BUNDLE@VERSION")
    p.add_argument("--registry", required=True, metavar="oci://HOST/PATH")
    p.add_argument("--profile", default="sim", help="profile whose lock is published (default: sim)")
    p.add_argument("--plain-http", action="store_true", default=None,
                   help="talk HTTP to a non-loopback registry (loopback always uses HTTP)")
    p.set_defaults(func=run_publish)

    m = sub.add_parser(
        "mirror",
        help="copy a published bundle into another (private) registry, verifying digests",
        description="Copy the charts and lock artifact of a published bundle from one OCI registry to "
        "another for air-gapped installs. Only a certified bundle travels: the published lock's digest "
        "must be the one CHANNEL certified (its evidence verified against the catalog's trust file). "
        "Every manifest and blob is checked against the digests recorded at publish time before "
        "anything is pushed; a mismatch exits 1 and pushes nothing.",
        epilog="examples:\n  catalog mirror gpu-scheduling@0.1.0 --from oci://127.0.0.1:5000/catalog "
        "--to oci://127.0.0.1:5001/private\n"
        "  catalog mirror slurm@0.1.0 --channel candidate --from oci://127.0.0.1:5000/catalog "
        "--to oci://127.0.0.1:5001/private",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    m.add_argument("ref", metavar="BUNDLE@VERSION")
    m.add_argument("--from", required=True, dest="source", metavar="oci://HOST/PATH")
    m.add_argument("--to", required=True, dest="target", metavar="oci://HOST/PATH")
    m.add_argument("--profile", default="sim", help="profile of the published lock (default: sim)")
    m.add_argument("--channel", default="stable",
                   help="the channel whose certified digest the published lock must carry (default: stable)")
    m.add_argument("--plain-http", action="store_true", default=None)
    m.set_defaults(func=run_mirror)


def run_publish(args: argparse.Namespace) -> int:
    from gpucatalog.catalog import loader, render

    bundle, version = promote_cli.split_ref(args.ref)
    cat = loader.load_catalog(promote_cli.catalog_dir(args))
    rendered = render.render_bundle(cat, f"{bundle}@{version}", args.profile)
    helm = build.ensure("helm", progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    out = publish.publish(rendered, args.registry, helm, plain_http=args.plain_http)
    _print(out)
    return 0


def run_mirror(args: argparse.Namespace) -> int:
    bundle, version = promote_cli.split_ref(args.ref)
    certified_digest = certified.channel_digest(promote_cli.catalog_dir(args), args.channel, bundle, version,
                                                args.profile)
    out = mirror.mirror(bundle, version, args.profile, args.source, args.target, certified_digest,
                        plain_http=args.plain_http)
    _print(out)
    return 0


def _print(out: publish.Published) -> None:
    host = out.registry.removeprefix("oci://").split("/")[0]
    for c in out.charts:
        print(f"chart  {host}/{c.repository}:{c.version}@{c.manifestDigest}")
    print(f"bundle {host}/{out.bundle_repository}:{out.tag}@{out.manifest_digest}")
