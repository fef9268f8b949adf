#!/usr/bin/env python3
"""Benchmark: render and validate time for each bundle of the catalog (median of N runs).

Prints one line per bundle and profile. Run: ``python3 bench/render_validate.py [--runs 5]``.
The first run of a process also pays for schema loading; it is reported separately as "cold".
"""

from __future__ import annotations

import argparse
import statistics
import time

from gpucatalog.catalog import loader, render
from gpucatalog.validators import bundle_checks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--profile", default="sim")
    args = ap.parse_args()
    cat = loader.load_catalog()
    print(f"{'bundle':22} {'objects':>7} {'render cold':>12} {'render med':>11} {'validate cold':>14} {'validate med':>13}")
    for name in sorted({n for (n, _v) in cat.bundles}):
        ref = f"{name}@{cat.bundle_versions(name)[-1]}"
        r_times, v_times = [], []
        rb = None
        for _ in range(args.runs):
            t0 = time.perf_counter()
            rb = render.render_bundle(cat, ref, args.profile)
            r_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            bundle_checks.check_rendered(rb, lint=False)
            v_times.append(time.perf_counter() - t0)
        assert rb is not None
        n_obj = sum(len(c.objects) for c in rb.components)
        print(
            f"{ref:22} {n_obj:7d} {r_times[0]:11.3f}s {statistics.median(r_times[1:] or r_times):10.3f}s "
            f"{v_times[0]:13.3f}s {statistics.median(v_times[1:] or v_times):12.3f}s"
        )


if __name__ == "__main__":
    main()
