"""``catalog toolchain``: build (or check) the pinned upstream tools."""

from __future__ import annotations

import argparse
import json
import sys

from gpucatalog.toolchain import build


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "toolchain",
        help="build and cache the pinned upstream tools",
        description="Build every pinned tool (helm, kubectl, kube-apiserver, etcd, kwok …) from its "
        "release through the Go module proxy, cached by version.",
        epilog="examples:\n  catalog toolchain ensure\n  catalog toolchain list --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=["ensure", "list"], help="ensure: build what is missing; list: show pins")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        rows = {t: {"version": v, "cached": str(build.cached(t) or "")} for t, v in build.versions().items()}
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for t, r in rows.items():
                print(f"{t:26} {r['version']:10} {r['cached'] or '(not built)'}")
        return 0
    paths = build.ensure_all(progress=lambda m: print(m, file=sys.stderr))
    for t, p in paths.items():
        print(f"{t:26} {p}")
    return 0
