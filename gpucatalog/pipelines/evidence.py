"""Certification evidence: an in-toto Statement v1 about one rendered bundle, signed in a DSSE
envelope with Ed25519, written next to its JUnit XML and HTML report.

Called by the ``certify`` orchestration (``write_evidence``) and by ``promote`` (``load`` +
``verify``). The statement's subject is ``<bundle>@<version>`` with the rendered bundle digest, so
evidence proves something about exactly one rendering; the predicate records the cluster (what
was live and what simulated), tool versions and every suite and case with timings.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric import ed25519

from gpucatalog.core import errors, yamlfile
from gpucatalog.pipelines import dsse, junit, keys, report

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://gpu-catalog.dev/certification/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"

# File names inside an evidence folder; ``promote`` accepts the folder or the envelope itself.
ENVELOPE = "evidence.dsse.json"
STATEMENT = "statement.json"
JUNIT = "junit.xml"
REPORT = "report.html"

_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
# An envelope is a few hundred KiB at most (case details included); more is not evidence.
MAX_ENVELOPE_BYTES = 16 << 20


class SuiteLike(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class EvidencePaths:
    envelope: Path
    statement: Path
    junit: Path
    report: Path


def _iso(t: float | str) -> str:
    if isinstance(t, str):
        return t
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _jsonable(value: Any, depth: int = 0) -> Any:
    """``value`` as plain JSON: str keys, lists for tuples and sets, finite floats (NaN and
    infinities become None), anything else as its text. Case details are free-form, and one odd
    value must not stop the statement from being signed."""
    if depth > 50:
        return str(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_jsonable(v, depth + 1) for v in value), key=str)
    return str(value)


def _seconds(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return out if math.isfinite(out) else 0.0


def _case_result(c: Mapping[str, Any]) -> str:
    """A case's result as recorded; anything but passed, failed or skipped counts as failed."""
    result = c.get("result")
    return result if result in ("passed", "failed", "skipped") else "failed"


def _suite_dict(s: SuiteLike | Mapping[str, Any]) -> dict[str, Any]:
    d = dict(s) if isinstance(s, Mapping) else s.to_dict()
    cases = [dict(c) for c in d.get("cases", []) if isinstance(c, Mapping)]
    # Recompute the verdict from the cases: a summary that disagrees with its cases is not trusted.
    return {
        "name": str(d.get("name", "?")),
        "result": suite_verdict([{"result": _case_result(c)} for c in cases]),
        "seconds": _seconds(d.get("seconds", 0.0)),
        "started": _jsonable(d.get("started", 0.0)),
        "cases": [
            {
                "name": str(c.get("name", "?")),
                "result": _case_result(c),
                "reason": str(c.get("reason", "") or ""),
                "seconds": _seconds(c.get("seconds", 0.0)),
                "details": _jsonable(c.get("details", {})),
            }
            for c in cases
        ],
    }


def suite_verdict(cases: Sequence[Mapping[str, Any]]) -> str:
    """passed / failed / incomplete from a suite's cases (a case not run is not a pass)."""
    results = [str(c.get("result")) for c in cases]
    if not results or "failed" in results:
        return "failed"
    return "incomplete" if any(r != "passed" for r in results) else "passed"


def overall_verdict(suites: Sequence[Mapping[str, Any]]) -> str:
    results = [str(s.get("result")) for s in suites]
    if not results or "failed" in results:
        return "failed"
    return "incomplete" if any(r != "passed" for r in results) else "passed"


def digest_hex(digest: str) -> str:
    m = _DIGEST.match(digest)
    if not m:
        raise errors.InputError(f"bad bundle digest {digest!r}", field="digest", expected="sha256:<64 hex>")
    return m.group(1)


PREDICATE_FIELDS = frozenset({"bundle", "version", "profile", "cluster", "tools", "suites", "started", "finished",
                              "result"})


def build_statement(
    *,
    bundle: str,
    version: str,
    profile: str,
    digest: str,
    cluster: Mapping[str, Any],
    tools: Mapping[str, str],
    suites: Sequence[SuiteLike | Mapping[str, Any]],
    started: float | str,
    finished: float | str,
    extra: Mapping[str, Any] | None = None,
    exploratory: bool = False,
) -> dict[str, Any]:
    """The unsigned in-toto Statement v1 for one certification run. ``extra`` adds predicate
    fields (an upgrade run's ``upgradeFrom`` and ``upgrade``); it cannot replace the ones above.
    ``exploratory``: run outside a component's declared Kubernetes range (never promotable; the
    matrix shows it as such)."""
    suite_dicts = [_suite_dict(s) for s in suites]
    overall = overall_verdict(suite_dicts)
    statement: dict[str, Any] = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": f"{bundle}@{version}", "digest": {"sha256": digest_hex(digest)}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "bundle": bundle,
            "version": version,
            "profile": profile,
            "cluster": _jsonable(cluster),
            "tools": _jsonable(tools),
            "suites": suite_dicts,
            "started": _iso(started),
            "finished": _iso(finished),
            "result": overall,
            **{k: _jsonable(v) for k, v in (extra or {}).items() if k not in PREDICATE_FIELDS},
        },
    }
    if exploratory:
        statement["predicate"]["exploratory"] = True
    return statement


def sign_statement(statement: Mapping[str, Any], key: ed25519.Ed25519PrivateKey) -> dict[str, Any]:
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    return dsse.sign(payload, PAYLOAD_TYPE, key)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_evidence(out_dir: Path, statement: Mapping[str, Any], signing_key_path: Path) -> EvidencePaths:
    """Sign ``statement`` (from :func:`build_statement`) and write ``evidence.dsse.json``,
    ``statement.json``, ``junit.xml`` and ``report.html`` into ``out_dir``. The key is loaded (and
    its permissions checked) before anything is written."""
    key = keys.load_private(signing_key_path)
    statement = _jsonable(statement)
    envelope = sign_statement(statement, key)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = EvidencePaths(out_dir / ENVELOPE, out_dir / STATEMENT, out_dir / JUNIT, out_dir / REPORT)
    _write(paths.statement, json.dumps(statement, indent=2) + "\n")
    # The renderings are conveniences; the signed envelope is the evidence. A rendering that
    # fails on some detail is replaced by a note, never at the cost of the envelope.
    try:
        text = junit.render(statement["predicate"])
    except Exception as exc:  # noqa: BLE001 - any rendering bug must not lose the signed evidence
        text = junit.failure_note(statement["predicate"], f"{type(exc).__name__}: {exc}")
    _write(paths.junit, text)
    try:
        text = report.render(statement)
    except Exception as exc:  # noqa: BLE001 - any rendering bug must not lose the signed evidence
        text = report.failure_note(statement, f"{type(exc).__name__}: {exc}")
    _write(paths.report, text)
    _write(paths.envelope, json.dumps(envelope, indent=2) + "\n")  # last: its presence means complete
    return paths


def envelope_path(path: Path) -> Path:
    return path / ENVELOPE if path.is_dir() else path


def load(path: Path) -> tuple[dict[str, Any], str]:
    """Read an envelope (or an evidence folder); returns it with the sha256 of its bytes."""
    env, digest, _data = read(path)
    return env, digest


def read(path: Path) -> tuple[dict[str, Any], str, bytes]:
    """Like ``load``, also returning the envelope's bytes (``promote`` keeps them)."""
    p = envelope_path(path)
    # A regular file of bounded size: --evidence /dev/zero is bad input, not an endless read.
    data = yamlfile.read_bytes(p, MAX_ENVELOPE_BYTES, what="evidence")
    try:
        env = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise errors.InputError("evidence is not JSON", path=str(p), expected="a DSSE envelope") from exc
    if not isinstance(env, dict):
        raise errors.InputError("evidence is not a JSON object", path=str(p), expected="a DSSE envelope")
    return env, "sha256:" + hashlib.sha256(data).hexdigest(), data


def verify(envelope: Mapping[str, Any], trusted_keys: Mapping[str, ed25519.Ed25519PublicKey]) -> dict[str, Any]:
    """Check the signature against ``trusted_keys`` (keyid -> key) and the statement's shape.

    Returns the statement. Raises CheckFailed with every reason it was rejected.
    """
    return verify_signed(envelope, trusted_keys)[0]


def verify_signed(
    envelope: Mapping[str, Any], trusted_keys: Mapping[str, ed25519.Ed25519PublicKey]
) -> tuple[dict[str, Any], str]:
    """Like ``verify``, also returning the key id of the trusted key that signed."""
    payload, signer = dsse.verify(envelope, trusted_keys, PAYLOAD_TYPE)
    findings: list[errors.Finding] = []
    try:
        st = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise errors.CheckFailed("signed payload is not JSON", [errors.Finding("statement", str(exc))]) from exc
    if not isinstance(st, dict):
        raise errors.CheckFailed("signed payload is not a statement", [errors.Finding("statement", "not an object")])
    if st.get("_type") != STATEMENT_TYPE:
        findings.append(errors.Finding("statement", f"_type is {st.get('_type')!r}, expected {STATEMENT_TYPE}"))
    if st.get("predicateType") != PREDICATE_TYPE:
        findings.append(errors.Finding("statement", f"predicateType is {st.get('predicateType')!r}, expected {PREDICATE_TYPE}"))
    subj = st.get("subject")
    if not (isinstance(subj, list) and len(subj) == 1 and isinstance(subj[0], dict)
            and isinstance(subj[0].get("digest"), dict) and re.fullmatch(r"[0-9a-f]{64}", str(subj[0]["digest"].get("sha256", "")))):
        findings.append(errors.Finding("statement", "subject must be one {name, digest: {sha256}}"))
    pred = st.get("predicate")
    need = ("bundle", "version", "profile", "suites", "result")
    if not isinstance(pred, dict) or any(k not in pred for k in need):
        findings.append(errors.Finding("statement", f"predicate must have {', '.join(need)}"))
    if findings:
        raise errors.CheckFailed("evidence statement is malformed", findings)
    return st, signer
