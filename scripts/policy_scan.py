"""Kubernetes policy scan of every rendered bundle: checkov over each bundle x profile render,
judged against the reviewed exceptions in policy/scan-exceptions.yaml.

A failed check passes only when an exception names that check and the component (optionally
the resources) with a reason. Exit 0: nothing unexcepted; 1: unexcepted failures, or an
exception that matched nothing (stale: remove it); 2: bad input (checkov missing, an exception
without a reason). Prints the render and scan wall times. Called by ``make scan`` (and so by
``make test`` and CI); checkov lives in its own virtual environment (.venv-scan) because its
dependencies may clash with ours.

    .venv/bin/python scripts/policy_scan.py --checkov .venv-scan/bin/checkov [--keep DIR]
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
EXCEPTIONS = REPO / "policy" / "scan-exceptions.yaml"
# checkov reaches for its vendor's API and for a newer release unless told not to; the scan
# must run offline and give the same answer every time
OFFLINE_ENV = {"CKV_SKIP_PACKAGE_UPDATE_CHECK": "true", "BC_SKIP_MAPPING": "TRUE"}


@dataclass(frozen=True)
class Failure:
    render: str  # "<bundle>@<version>/<profile>"
    component: str
    resource: str  # checkov's "Kind.namespace.name"
    check: str
    name: str

    @property
    def kind_name(self) -> str:
        kind, _, rest = self.resource.partition(".")
        return f"{kind}/{rest.partition('.')[2] or rest}"


@dataclass(frozen=True)
class Exception_:
    check: str
    components: tuple[str, ...]
    resources: tuple[str, ...]  # "Kind/name" globs; empty = every resource of the components
    reason: str

    def covers(self, f: Failure) -> bool:
        return (f.check == self.check and f.component in self.components
                and (not self.resources or any(fnmatch.fnmatchcase(f.kind_name, r) for r in self.resources)))


class InputError(Exception):
    """Bad exceptions file or missing tool (exit 2)."""


def load_exceptions(path: Path) -> list[Exception_]:
    doc = yaml.safe_load(path.read_text()) or {}
    out = []
    for i, e in enumerate(doc.get("exceptions") or []):
        where = f"{path.name}: exceptions[{i}]"
        if not isinstance(e, dict) or not str(e.get("check", "")).startswith("CKV"):
            raise InputError(f"{where}: expected a mapping with check: CKV_…")
        reason = " ".join(str(e.get("reason") or "").split())
        if len(reason) < 20:
            raise InputError(f"{where} ({e['check']}): a reason of at least a sentence is required")
        comps = e.get("components")
        if not isinstance(comps, list) or not comps:
            raise InputError(f"{where} ({e['check']}): components: [name, …] is required")
        out.append(Exception_(str(e["check"]), tuple(map(str, comps)), tuple(map(str, e.get("resources") or [])),
                              reason))
    return out


def failures(report: Any, root: Path) -> tuple[list[Failure], int]:
    """Failed checks of a checkov JSON report (one framework: a dict; several: a list) and the
    number of passed checks."""
    reports = report if isinstance(report, list) else [report]
    out, passed = [], 0
    for rep in reports:
        results = rep.get("results") or {}
        passed += len(results.get("passed_checks") or [])
        for f in results.get("failed_checks") or []:
            rel = Path(f.get("file_abs_path") or f["file_path"]).resolve().relative_to(root.resolve())
            render, component = "/".join(rel.parts[:2]), rel.parts[2]
            out.append(Failure(render, component, str(f["resource"]), str(f["check_id"]), str(f["check_name"])))
    return out, passed


def judge(fails: list[Failure], exceptions: list[Exception_]) -> tuple[list[Failure], list[Exception_]]:
    """(failures no exception covers, exceptions that cover nothing)."""
    used: set[int] = set()
    left = []
    for f in fails:
        hit = [i for i, e in enumerate(exceptions) if e.covers(f)]
        used.update(hit)
        if not hit:
            left.append(f)
    return left, [e for i, e in enumerate(exceptions) if i not in used]


def render_all(out: Path) -> list[str]:
    from gpucatalog.catalog import loader, render

    cat = loader.load_catalog(REPO / "catalog")
    done = []
    for (name, version), bundle in sorted(cat.bundles.items()):
        for profile in sorted(bundle.profiles):
            ref = f"{name}@{version}"
            render.render_bundle(cat, ref, profile, out / ref / profile)
            done.append(f"{ref}/{profile}")
    return done


def drop_repeats(root: Path) -> tuple[int, int]:
    """Keep one copy of each component's manifests: many renders share a component's output
    byte for byte (a release that changes one profile leaves the others as they were), and
    checkov would judge each copy the same. A component folder whose files equal an earlier
    one's of the same name is removed. Returns (component folders, kept)."""
    seen: set[tuple[str, str]] = set()
    total = 0
    for folder in sorted(p for p in root.glob("*/*/*") if p.is_dir()):
        total += 1
        digest = hashlib.sha256()
        for f in sorted(x for x in folder.rglob("*") if x.is_file()):
            digest.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        key = (folder.name, digest.hexdigest())
        if key in seen:
            shutil.rmtree(folder)
        else:
            seen.add(key)
    return total, len(seen)


def scan(checkov: Path, root: Path) -> Any:
    from gpucatalog.core import executor

    if not checkov.is_file():
        raise InputError(f"{checkov}: checkov is not installed there; run `make scan` (it creates .venv-scan)")
    res = executor.run([checkov, "-d", root, "--framework", "kubernetes", "--skip-download",
                        "--compact", "-o", "json"], env=OFFLINE_ENV, check=False)
    if res.returncode not in (0, 1):
        raise InputError(f"checkov exited {res.returncode}: {res.stderr.strip()[-500:]}")
    return json.loads(res.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkov", type=Path, default=REPO / ".venv-scan" / "bin" / "checkov")
    ap.add_argument("--exceptions", type=Path, default=EXCEPTIONS)
    ap.add_argument("--keep", type=Path, help="render into this folder and keep it (default: a temporary one)")
    a = ap.parse_args(argv)
    try:
        exceptions = load_exceptions(a.exceptions)
        with tempfile.TemporaryDirectory(prefix="policy-scan-") as tmp:
            root = a.keep or Path(tmp)
            t0 = time.monotonic()
            renders = render_all(root)
            folders, kept = drop_repeats(root)
            t1 = time.monotonic()
            report = scan(a.checkov, root)
            t2 = time.monotonic()
            fails, passed = failures(report, root)
    except InputError as exc:
        print(f"policy scan: {exc}", file=sys.stderr)
        return 2
    left, stale = judge(fails, exceptions)
    by_check = Counter(f.check for f in fails)
    print(f"policy scan (checkov): {len(renders)} renders ({', '.join(renders)}); {kept} of their {folders} "
          "component manifests scanned, the others identical to one of those (a failure names the first render)")
    print(f"  checks passed {passed}, failed {len(fails)} ({len(fails) - len(left)} under a reviewed exception "
          f"in {a.exceptions.relative_to(REPO) if a.exceptions.is_relative_to(REPO) else a.exceptions}), "
          f"unexcepted {len(left)}")
    print(f"  failed checks by id: {dict(sorted(by_check.items()))}")
    print(f"  wall time: render {t1 - t0:.1f} s, checkov {t2 - t1:.1f} s")
    for f in sorted(set(left), key=lambda f: (f.check, f.component, f.resource)):
        print(f"  UNEXCEPTED {f.check} {f.component} {f.resource} ({f.render}): {f.name}")
    for e in stale:
        print(f"  STALE exception {e.check} for {', '.join(e.components)}: it matches no failure any more; remove it")
    return 1 if left or stale else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
