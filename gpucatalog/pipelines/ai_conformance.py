"""The CNCF Kubernetes AI Conformance self-assessment: which requirement each signed, passing
case proves, and an honest "not covered" where none does.

Called by ``catalog conformance-report``. The mapping is data, one file per Kubernetes minor
(``catalog/conformance/ai-v<minor>.yaml``); :func:`validate` rejects one that names a case no
suite runs, a suite the bundle does not declare, or a bundle the catalog does not have. Evidence
counts only when its signature verifies against a trusted key, it is about this bundle version
(and its current rendering), it ran on the mapping's minor and it is not exploratory. A
requirement is Implemented only when every case its proof names passed in such evidence and none
failed in any; ``scope: partial`` caps it at Partially Implemented.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519

from gpucatalog.catalog import model
from gpucatalog.core import errors, yamlfile
from gpucatalog.pipelines import judge
from gpucatalog.validators.conformance import catalogue

LEVELS = ("MUST", "SHOULD")
CATEGORIES = ("accelerators", "networking", "schedulingOrchestration", "observability", "security", "operator")
IMPLEMENTED, PARTIAL, NOT_IMPLEMENTED = "Implemented", "Partially Implemented", "Not Implemented"

_ID = r"^[a-z][a-z0-9_]*$"
_CASE = r"^[a-z_]+/[A-Za-z0-9_.-]+$"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "program", "kubernetes", "requirements"],
    "additionalProperties": False,
    "properties": {
        **yamlfile.header("ConformanceMapping"),
        "program": {"type": "string", "minLength": 1},
        "kubernetes": {"type": "string", "pattern": r"^1\.\d+$"},
        "requirements": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["id", "category", "level", "title"],
            "additionalProperties": False,
            "properties": {
                "id": {"type": "string", "pattern": _ID},
                "category": {"enum": list(CATEGORIES)},
                "level": {"enum": list(LEVELS)},
                "title": {"type": "string", "minLength": 1},
                "proofs": {"type": "object", "additionalProperties": {
                    "type": "object",
                    "required": ["cases"],
                    "additionalProperties": False,
                    "properties": {
                        "cases": {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": _CASE}},
                        "scope": {"enum": ["full", "partial"]},
                        "notes": {"type": "string"},
                    },
                }},
            },
        }},
    },
}


@dataclass(frozen=True)
class Proof:
    cases: tuple[str, ...]
    partial: bool
    notes: str


@dataclass(frozen=True)
class Requirement:
    id: str
    category: str
    level: str
    title: str
    proofs: dict[str, Proof]


@dataclass(frozen=True)
class ConformanceMapping:
    path: Path
    program: str
    kubernetes: str  # the minor, "1.36"
    requirements: tuple[Requirement, ...]


def mapping_path(catalog_root: Path, minor: str) -> Path:
    path = catalog_root / "conformance" / f"ai-v{minor}.yaml"
    if not path.is_file():
        have = sorted(p.stem.removeprefix("ai-v") for p in (catalog_root / "conformance").glob("ai-v*.yaml"))
        raise errors.NotFoundError(f"no AI conformance mapping for Kubernetes {minor}", path=str(path),
                                   field="--kubernetes", expected=", ".join(have) or "a mapping file")
    return path


def load(path: Path) -> ConformanceMapping:
    doc = yamlfile.parse_one(yamlfile.decode(yamlfile.read_bytes(path, what="conformance mapping"), path), path, SCHEMA)
    reqs = []
    for r in doc["requirements"]:
        proofs = {b: Proof(tuple(p["cases"]), p.get("scope") == "partial", " ".join(str(p.get("notes", "")).split()))
                  for b, p in (r.get("proofs") or {}).items()}
        reqs.append(Requirement(r["id"], r["category"], r["level"], " ".join(r["title"].split()), proofs))
    ids = [r.id for r in reqs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise errors.SchemaError(f"requirement(s) listed twice: {', '.join(dupes)}", path=str(path), field="requirements")
    return ConformanceMapping(path, doc["program"], doc["kubernetes"], tuple(reqs))


def validate(m: ConformanceMapping, cat: model.Catalog) -> list[errors.Finding]:
    """Every case a proof names must be one some suite runs, of a suite the bundle declares."""
    findings = []
    for r in m.requirements:
        for bundle, proof in r.proofs.items():
            declared = {s for (name, _v), b in cat.bundles.items() if name == bundle for s in b.suites}
            where = f"{m.path}: {r.id}/proofs/{bundle}"
            if not any(name == bundle for name, _v in cat.bundles):
                findings.append(errors.Finding("unknown-bundle", f"no bundle {bundle!r} in the catalog", obj=where))
                continue
            for case in proof.cases:
                suite = case.partition("/")[0]
                if not catalogue.known(case):
                    findings.append(errors.Finding("unknown-case", f"{case!r} is not a case any suite runs", obj=where))
                elif suite not in declared and suite not in catalogue.PIPELINE_CASES:
                    findings.append(errors.Finding("suite-not-run", f"{bundle} does not declare suite {suite!r} "
                                                   f"(it runs {', '.join(sorted(declared))})", obj=where))
    return findings


@dataclass
class Evidence:
    """One verified evidence file and the result of each of its cases."""

    path: Path
    evidence_digest: str
    signer: str
    kubernetes: str  # 1.36.3
    results: dict[str, str]  # suite/case -> passed | failed | skipped
    reasons: dict[str, str] = field(default_factory=dict)


@dataclass
class Assessment:
    requirement: Requirement
    status: str
    covered: bool
    notes: str
    cases: dict[str, str]  # suite/case -> result seen ("missing" when no evidence ran it)
    evidence: list[Path]


def read_evidence(paths: Sequence[Path], *, bundle: str, version: str, minor: str,
                  trusted: Mapping[str, ed25519.Ed25519PublicKey],
                  fresh_digest: Callable[[str], str], trusted_from: str = "") -> tuple[list[Evidence], list[str]]:
    """The evidence that may back a claim, and why each other file may not (the judge's
    reasons: unsigned or signed by a key not trusted, another bundle or rendering, exploratory,
    another Kubernetes minor)."""
    usable, rejected = [], []
    for p in paths:
        v = judge.judge(p, judge.Claim(bundle, version, trusted, fresh_digest, kubernetes_minor=minor,
                                       trusted_from=trusted_from))
        # a failed case is kept (it shows the claim is not met); any other reason sets the file aside
        why = [f.message for f in v.reasons if f.rule != "failed-suite"]
        if v.statement is None or why:
            rejected.append(f"{p}: " + "; ".join(why or [v.summary()]))
            continue
        usable.append(Evidence(p, v.evidence_digest, v.signer, v.kubernetes, v.results, v.case_reasons))
    return usable, rejected


def assess(m: ConformanceMapping, bundle: str, found: Sequence[Evidence]) -> list[Assessment]:
    out = []
    for r in m.requirements:
        proof = r.proofs.get(bundle)
        if proof is None:
            out.append(Assessment(r, NOT_IMPLEMENTED, False,
                                  f"not covered: no gpu-catalog conformance case of {bundle} proves this requirement",
                                  {}, []))
            continue
        seen: dict[str, str] = {}
        backing: list[Path] = []
        for case in proof.cases:
            results = [(ev, ev.results[case]) for ev in found if case in ev.results]
            if any(res == "failed" for _ev, res in results):
                seen[case] = "failed"
            elif any(res == "passed" for _ev, res in results):
                seen[case] = "passed"
            else:
                seen[case] = results[0][1] if results else "missing"
            backing += [ev.path for ev, res in results if ev.path not in backing]
        failed = [c for c, res in seen.items() if res == "failed"]
        short = [c for c, res in seen.items() if res not in ("passed", "failed")]
        if failed:
            status, notes = NOT_IMPLEMENTED, f"failed: {', '.join(failed)}"
        elif short:
            status, notes = NOT_IMPLEMENTED, f"not shown: no passing evidence for {', '.join(short)}"
        else:
            status, notes = (PARTIAL if proof.partial else IMPLEMENTED), ""
        notes = "; ".join(n for n in (notes, proof.notes) if n)
        out.append(Assessment(r, status, True, notes, seen, backing))
    return out
