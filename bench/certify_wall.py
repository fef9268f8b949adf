#!/usr/bin/env python3
"""Benchmark: whole-certification wall time on the sim cluster, per bundle, with the time spent
in each stage (cluster start, install, each suite). Prints one block per bundle.

Run: ``PYTHONPATH=$PWD python3 bench/certify_wall.py [--bundle gpu-scheduling] [--suite NAME ...]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from gpucatalog.catalog import loader
from gpucatalog.pipelines import certify


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bundle", action="append", help="bundle(s) to certify (default: all)")
    ap.add_argument("--suite", action="append", default=[], help="only these suites")
    args = ap.parse_args()
    cat = loader.load_catalog()
    names = args.bundle or sorted({n for (n, _v) in cat.bundles})
    for name in names:
        marks: list[tuple[float, str]] = []
        t0 = time.monotonic()

        def say(msg: str, marks: list[tuple[float, str]] = marks) -> None:
            marks.append((time.monotonic(), msg))

        opts = certify.Options(bundle=name, suites=tuple(args.suite), cluster_name=f"bench-{os.getpid()}")
        out = certify.run(cat, opts, say)
        wall = time.monotonic() - t0
        start = next((t for t, m in marks if m.startswith("installing")), t0) - t0
        print(f"{name}: {'PASSED' if out.passed else 'FAILED'} wall {wall:.1f}s (cluster up + static {start:.1f}s)")
        for s in out.suites:
            print(f"  {s.name:20} {s.result:7} {s.seconds:7.1f}s  {len(s.cases)} cases")
            for c in s.cases:
                if c.result == "failed":
                    print(f"    {c.name}: {c.reason[:300]}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
