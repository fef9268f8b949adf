#!/usr/bin/env python3
"""Benchmark: wall time of a compatibility-matrix run, per cell (toolchain build, certification,
or reuse of cached evidence) and in total. Prints one line per cell and a total; run it twice on
the same --out to see what the cache saves.

Run: ``PYTHONPATH=$PWD python3 bench/matrix_wall.py --bundle slurm --kubernetes 1.36 --out /tmp/matrix``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from gpucatalog.catalog import loader
from gpucatalog.pipelines import matrix
from gpucatalog.toolchain import build, releases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bundle", action="append", required=True, help="bundle(s) (repeatable)")
    ap.add_argument("--kubernetes", default=",".join(releases.minor(r) for r in releases.supported()))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    wanted = releases.resolve_list(args.kubernetes)
    cold = [r for r in wanted if build.cached("kube-apiserver", r) is None]
    t0 = time.monotonic()
    cells = matrix.run(loader.load_catalog(), matrix.Options(bundles=args.bundle, kubernetes=wanted, out_dir=args.out),
                       say=lambda m: print(f"  [{time.monotonic() - t0:7.1f}s] {m}", file=sys.stderr))
    total = time.monotonic() - t0
    print(f"control planes built in this run: {', '.join(cold) or 'none (all cached)'}")
    for c in cells:
        how = "cached" if c.cached else f"{c.seconds:.1f}s"
        print(f"{c.bundle:24} {c.kubernetes:9} {c.status:14} {how:>9}  {c.detail[:80]}")
    print(f"total wall: {total:.1f}s for {len(cells)} cells ({sum(c.cached for c in cells)} cached)")


if __name__ == "__main__":
    main()
