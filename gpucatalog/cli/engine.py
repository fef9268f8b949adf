"""``catalog engine``: the Docker engine the kind provider runs on (started for the project when
the machine has none), and the kind node image built from pinned sources."""

from __future__ import annotations

import argparse
import json
import sys

from gpucatalog.clusters.kind import engine, nodeimage

EPILOG = """examples:
  catalog engine up                 # the machine's engine if one answers, else dockerd for gpu-catalog
  catalog engine node-image         # build (or find) the kind node image; prints its reference
  catalog engine status --json
  catalog engine down               # stop the engine gpu-catalog started (its kind clusters with it)
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "engine", help="the Docker engine and node image the kind provider uses",
        description="Start or stop the Docker engine kind runs on (Debian's dockerd with its own data root and "
        "socket, a runtime wrapper only where the machine's capability bounding set needs one), and build the "
        "kind node image from pinned sources (docs/kind.md).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["up", "down", "status", "node-image"])
    p.add_argument("--json", action="store_true", help="status, node-image: machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    def say(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    if args.action == "up":
        print(engine.up(say))
        return 0
    if args.action == "down":
        print("stopped" if engine.down(say) else "gpu-catalog's engine was not running")
        return 0
    if args.action == "node-image":
        engine.up(say)
        ref, lock = nodeimage.ensure(say)
        print(json.dumps(lock, indent=2) if args.json else ref)
        return 0
    st = {"projectEngine": engine.ours_running(), "socket": str(engine.SOCKET),
          "env": engine.env(), "runtimeWrapperNeededFor": sorted(engine.runtime_missing_caps())}
    print(json.dumps(st, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in st.items()))
    return 0
