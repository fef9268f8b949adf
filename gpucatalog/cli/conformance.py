"""``catalog conformance-report``: the CNCF Kubernetes AI Conformance self-assessment of a bundle,
generated from its signed evidence (PRODUCT.yaml, self-assessment.md, junit.xml, logs/, signed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpucatalog.catalog import render, resolve
from gpucatalog.cli import common
from gpucatalog.core import errors
from gpucatalog.pipelines import ai_conformance, ai_conformance_files, keys, trust
from gpucatalog.toolchain import releases


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = common.add_subparser(
        sub,
        "conformance-report",
        "write a CNCF AI conformance self-assessment of a bundle from its signed evidence",
        [
            "catalog conformance-report gpu-queueing@0.1.0 --evidence out/ev --out out/ai-conformance",
            "catalog conformance-report slurm@0.1.0 --evidence out/matrix/cells/slurm/0.1.0/1.36 --kubernetes 1.36",
            "catalog conformance-report gpu-queueing --validate   # only check the mapping against the suites",
        ],
    )
    p.add_argument("bundle", metavar="BUNDLE[@VERSION]")
    p.add_argument("--evidence", type=Path, action="append", default=[], metavar="DIR",
                   help="an evidence folder or envelope of this bundle version (repeatable)")
    p.add_argument("--kubernetes", metavar="MINOR",
                   help="the program's requirements for this minor (default: the bundle's kubernetesVersion)")
    p.add_argument("--out", type=Path, default=Path("out/ai-conformance"),
                   help="folder for PRODUCT.yaml, self-assessment.md, junit.xml, logs/ and the signed "
                        "assessment.dsse.json (default out/ai-conformance)")
    p.add_argument("--profile", default="sim", help="profile whose rendering the report is about (default sim)")
    p.add_argument("--signing-key", type=Path,
                   help="Ed25519 private key that signs the report (default: the local key); evidence is "
                        "used only when a key of CATALOG_DIR/trust.yaml signed it")
    p.add_argument("--validate", action="store_true", help="only validate the mapping (exit 2 naming bad cases)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cat = common.load(args)
    b = resolve.find_bundle(cat, args.bundle)
    minor = releases.minor(args.kubernetes) if args.kubernetes else releases.minor(b.kube_version)
    m = ai_conformance.load(ai_conformance.mapping_path(cat.root, minor))
    findings = ai_conformance.validate(m, cat)
    if findings:
        raise errors.SchemaError(f"{len(findings)} problem(s) in the mapping: "
                                 + "; ".join(f"{f.obj}: {f.message}" for f in findings), path=str(m.path))
    if args.validate:
        print(f"{m.path}: {len(m.requirements)} requirements, every case exists", file=sys.stderr)
        return 0
    if not args.evidence:
        raise errors.InputError("no evidence given", field="--evidence", expected="at least one evidence folder")
    key = args.signing_key or keys.local_key(lambda msg: print(msg, file=sys.stderr))
    digests: dict[str, str] = {}

    def fresh(profile: str) -> str:
        if profile not in digests:
            digests[profile] = render.render_bundle(cat, b.ref, profile).digest
        return digests[profile]

    # Evidence backs a claim only when a key of the repository's trust file signed it; the key
    # given here signs the report, it vouches for nothing it reads.
    trust_path = cat.root / "trust.yaml"
    trusted = {k.keyid: k.public_key for k in trust.load(trust_path).keys} if trust_path.is_file() else {}
    found, rejected = ai_conformance.read_evidence(
        args.evidence, bundle=b.name, version=b.version, minor=m.kubernetes, trusted=trusted, fresh_digest=fresh,
        trusted_from=f"{trust_path}; add the signer with `catalog keys trust`")
    for r in rejected:
        print(f"not used: {r}", file=sys.stderr)
    results = ai_conformance.assess(m, b.name, found)
    env = ai_conformance_files.write(args.out, m, bundle=b.name, version=b.version, digest=fresh(args.profile),
                                     results=results, found=found, rejected=rejected, signing_key=key)
    print((args.out / ai_conformance_files.MARKDOWN).read_text())
    print(f"signed: {env}", file=sys.stderr)
    return 1 if any(a.covered and a.status == ai_conformance.NOT_IMPLEMENTED for a in results) else 0
