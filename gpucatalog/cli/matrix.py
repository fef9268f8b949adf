"""``catalog matrix``: certify bundles across Kubernetes releases and write the compatibility
matrix (matrix.md, matrix.json, matrix.html), each cell linking to its signed evidence."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpucatalog.cli import common
from gpucatalog.core import errors
from gpucatalog.pipelines import matrix, matrix_files
from gpucatalog.toolchain import releases

# Statuses that leave the matrix short of what it claims; outside-range is a declared fact.
NOT_OK = ("failed", "incomplete", "not-run", "unverified")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    listed = ",".join(releases.minor(r) for r in releases.supported())
    p = common.add_subparser(
        sub,
        "matrix",
        "certify bundles on each listed Kubernetes release and write the compatibility matrix",
        [
            f"catalog matrix gpu-queueing slurm --kubernetes {listed}",
            "catalog matrix slurm@0.1.0 --kubernetes 1.36 --out out/matrix",
            "catalog matrix gpu-queueing --kubernetes 1.37 --outside-range   # probe beyond the declared range",
            "catalog matrix gpu-queueing slurm --no-run --json                # rebuild from the evidence present",
            "catalog matrix gpu-scheduling@0.1.0 --image-map kai-images.yaml  # KAI cells with your own binaries",
        ],
    )
    p.add_argument("bundles", nargs="+", metavar="BUNDLE[@VERSION]")
    p.add_argument("--kubernetes", default=listed, metavar="MINOR[,MINOR…]",
                   help=f"Kubernetes releases, comma-separated (default: every listed one, {listed})")
    p.add_argument("--out", type=Path, default=Path("out/matrix"),
                   help="matrix folder: matrix.md/.json/.html and cells/<bundle>/<version>/<minor>/ evidence "
                        "(default out/matrix); evidence already there for the same digest and release is reused")
    p.add_argument("--profile", default="sim", help="bundle profile to certify (default sim)")
    p.add_argument("--signing-key", type=Path, help="Ed25519 private key (default: the local key)")
    p.add_argument("--outside-range", action="store_true",
                   help="also run cells outside a component's declared range (exploratory probes)")
    p.add_argument("--image-map", type=Path, metavar="FILE",
                   help="sim only: an image-map overlay used by every cell (bring your own binaries, e.g. KAI's; "
                        "see docs/kai.md); default $GPU_CATALOG_IMAGE_MAP")
    p.add_argument("--rerun", action="store_true", help="run every cell again, even one with valid evidence")
    p.add_argument("--no-run", action="store_true", help="run nothing: rebuild the matrix from the evidence present")
    p.add_argument("--json", action="store_true", help="print the matrix document as JSON on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cat = common.load(args)
    if args.rerun and args.no_run:
        raise errors.InputError("--rerun and --no-run contradict each other", field="--rerun/--no-run")
    opts = matrix.Options(
        bundles=list(args.bundles), kubernetes=releases.resolve_list(args.kubernetes), out_dir=args.out,
        profile=args.profile, signing_key=args.signing_key, outside_range=args.outside_range,
        rerun=args.rerun, run=not args.no_run, image_map=args.image_map,
    )
    cells = matrix.run(cat, opts, say=lambda m: print(m, file=sys.stderr, flush=True))
    if args.json:
        common.print_json(matrix_files.document(opts.bundles, opts.kubernetes, cells))
    else:
        print((args.out / matrix_files.MARKDOWN).read_text())
    counts = matrix_files.summary(cells)
    print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; matrix in {args.out}", file=sys.stderr)
    return 1 if any(c.status in NOT_OK for c in cells) else 0
