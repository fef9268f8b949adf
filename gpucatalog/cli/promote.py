"""``catalog promote BUNDLE@VERSION --to CHANNEL --evidence PATH...``: the promotion gate.

Renders the bundle version afresh (so evidence for an edited bundle no longer matches), then
hands everything to ``gpucatalog.pipelines.promote``, which judges by the catalog folder's own
policy and trust file. ``--policy``/``--trust-file`` exist only with ``--dry-run`` (what would
this policy or these keys say?), which writes nothing.
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Callable
from pathlib import Path

from gpucatalog.catalog import loader
from gpucatalog.core import errors
from gpucatalog.pipelines import evidence, policy, promote, trust


def catalog_dir(args: argparse.Namespace) -> Path:
    """--catalog-dir > $CATALOG_DIR > the repository's catalog/."""
    given = getattr(args, "catalog_dir", None)
    return Path(given).expanduser() if given else loader.default_root()


def split_ref(ref: str, *, need_version: bool = True) -> tuple[str, str]:
    name, _, version = ref.partition("@")
    if not name or (need_version and not version):
        raise errors.InputError(f"bad bundle reference {ref!r}", field="BUNDLE@VERSION", expected="e.g. gpu-scheduling@0.1.0")
    return name, version


def fresh_render(cat_dir: Path, bundle: str, version: str) -> tuple[Callable[[str], str], tuple[str, ...]]:
    """(profile -> digest of a fresh render, the suites the bundle declares)."""
    from gpucatalog.catalog import loader, render

    cat = loader.load_catalog(cat_dir)
    b = cat.bundles.get((bundle, version))
    if b is None:
        raise errors.NotFoundError(f"bundle {bundle}@{version} is not in the catalog", path=str(cat_dir))
    cache: dict[str, str] = {}

    def digest(profile: str) -> str:
        if profile not in cache:
            cache[profile] = str(render.render_bundle(cat, f"{bundle}@{version}", profile).digest)
        return cache[profile]

    return digest, tuple(b.suites)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "promote",
        help="promote a certified bundle version into a channel",
        description="Append BUNDLE@VERSION to a channel only if its signed evidence is trusted for that "
        "channel, matches a fresh render, passed every suite and profile the channel's policy "
        "requires, and the version is already in the policy's source channel. Otherwise exit 1 "
        "listing every unmet requirement; the channel file is left byte-identical. The policy and the "
        "trust file are always the catalog folder's own (CATALOG_DIR/channels/policy.yaml, "
        "CATALOG_DIR/trust.yaml); the entry records the digest of both.",
        epilog="examples:\n"
        "  catalog promote gpu-scheduling@0.1.0 --to candidate --evidence out/evidence\n"
        "  catalog promote gpu-scheduling@0.1.0 --to stable --evidence out/evidence out/evidence-kind/evidence.dsse.json\n"
        "  catalog promote gpu-scheduling --to candidate --evidence out/evidence   # version from the evidence\n"
        "  catalog promote gpu-scheduling@0.1.0 --to stable --evidence ev --dry-run --policy new-policy.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("ref", metavar="BUNDLE[@VERSION]", help="without a version: the version the evidence names")
    p.add_argument("--to", required=True, dest="channel", metavar="CHANNEL", help="target channel, e.g. candidate, stable")
    p.add_argument("--evidence", nargs="+", type=Path, required=True, metavar="PATH",
                   help="evidence folders (from certify) or evidence.dsse.json files, one per required profile")
    p.add_argument("--dry-run", action="store_true", help="check everything, print the entry, write nothing")
    p.add_argument("--trust-file", type=Path, help="only with --dry-run: judge by this trust file instead of CATALOG_DIR/trust.yaml")
    p.add_argument("--policy", type=Path, help="only with --dry-run: judge by this policy instead of CATALOG_DIR/channels/policy.yaml")
    p.add_argument("--promoted-by", help="recorded in the channel (default: $CATALOG_PROMOTED_BY or user@host)")
    p.set_defaults(func=run)


def version_from_evidence(bundle: str, paths: list[Path]) -> str:
    """For ``promote BUNDLE`` without a version: the version the evidence names (all must agree).

    Read before verification only to pick what to check; the gate then verifies it like any other.
    """
    found = set()
    for p in paths:
        env, _ = evidence.load(p)
        try:
            st = json.loads(base64.b64decode(env.get("payload", ""), validate=True))
            found.add(str(st["predicate"]["version"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise errors.InputError("cannot read the version from evidence", path=str(p),
                                    expected="a DSSE envelope from `catalog certify`") from exc
    if len(found) != 1:
        raise errors.InputError(f"evidence names versions {sorted(found)} of {bundle}", field="BUNDLE@VERSION",
                                expected="give the version explicitly")
    return found.pop()


def run(args: argparse.Namespace) -> int:
    bundle, version = split_ref(args.ref, need_version=False)
    if not version:
        version = version_from_evidence(bundle, args.evidence)
    cat = catalog_dir(args)
    if (args.policy or args.trust_file) and not args.dry_run:
        raise errors.InputError(
            "--policy and --trust-file are allowed only with --dry-run: a promotion is judged by the catalog's "
            f"own {cat / promote.POLICY} and {cat / promote.TRUST}", field="--policy/--trust-file")
    pol = policy.load(args.policy) if args.policy else promote.repository_root(cat).policy
    pol.channel(args.channel)  # unknown channel: exit 2 before rendering anything
    tf = trust.load(args.trust_file) if args.trust_file else None
    fresh, suites = fresh_render(cat, bundle, version)
    entry = promote.promote(bundle, version, args.channel, args.evidence, fresh, catalog_dir=cat,
                            bundle_suites=suites, promoted_by=args.promoted_by, dry_run=args.dry_run,
                            policy_file=pol if args.policy else None, trust_file=tf)
    if args.dry_run:
        print(f"dry run: {bundle}@{version} would be promoted to {args.channel} (nothing written):")
        print(json.dumps(entry, indent=2))
        return 0
    print(f"promoted {bundle}@{version} to {args.channel}: digest {entry['digest']}, "
          f"evidence {entry['evidenceDigest']}, by {entry['promotedBy']} at {entry['promotedAt']}")
    return 0
