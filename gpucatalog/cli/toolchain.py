"""``catalog toolchain``: build (or check) the pinned upstream tools."""

from __future__ import annotations

import argparse
import json
import sys

from gpucatalog.clusters.kind import engine, nodeimage
from gpucatalog.toolchain import build, releases
from gpucatalog.validators.static import openapi


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "toolchain",
        help="build and cache the pinned upstream tools",
        description="Build every pinned tool (helm, kubectl, kube-apiserver, etcd, kwok …) from its "
        "release through the Go module proxy, cached by version.",
        epilog="examples:\n  catalog toolchain ensure\n  catalog toolchain ensure --kubernetes 1.35\n"
        "  catalog toolchain ensure --tool agnhost\n  catalog toolchain ensure --tool kind-node\n"
        "  catalog toolchain list --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=["ensure", "list"], help="ensure: build what is missing; list: show pins")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--kubernetes", metavar="MINOR[,MINOR…]",
                   help="ensure: build only the control plane of these Kubernetes releases (e.g. 1.34,1.35; "
                        "listed: " + ", ".join(releases.minor(r) for r in releases.supported()) + ")")
    p.add_argument("--tool", action="append", metavar="NAME",
                   help="ensure: build only this tool's group, one built on first use included (agnhost, kind); "
                        "kind-node: the kind node image from pinned sources (docs/kind.md); repeatable")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        rows = {t: {"version": v, "cached": str(build.cached(t) or "")} for t, v in build.versions().items()}
        # the other Kubernetes releases the sim can run, built or not
        for r in releases.supported():
            if r != releases.default():
                rows.update({f"{t}@{r}": {"version": r, "cached": str(build.cached(t, r) or "")}
                             for t in build.group_of("kube-apiserver").tools})
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for t, row in rows.items():
                print(f"{t:26} {row['version']:10} {row['cached'] or '(not built)'}")
        return 0
    def say(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    if args.tool:
        if "kind-node" in args.tool:  # the node image is built from tools, not a tool itself
            engine.up(say)
            print(f"{'kind-node':26} {nodeimage.ensure(say)[0]}")
        paths = {t: build.ensure(t, say) for t in args.tool if t != "kind-node"}  # unknown: NotFoundError, exit 2
        for t, p in paths.items():
            print(f"{t:26} {p}")
        return 0
    if args.kubernetes:
        kube_tools = build.group_of("kube-apiserver").tools
        paths = {f"{t} {r}": build.ensure(t, say, version=r)
                 for r in releases.resolve_list(args.kubernetes) for t in kube_tools}
    else:
        paths = build.ensure_all(progress=say)
    # the API schemas every static check validates against, converted once from the pinned
    # release's OpenAPI spec (the unit tests read them from the cache and build nothing)
    for release in releases.resolve_list(args.kubernetes) if args.kubernetes else [releases.default()]:
        openapi.load(release)
        say(f"kubernetes {release} API schemas ready")
    for t, p in paths.items():
        print(f"{t:26} {p}")
    return 0
