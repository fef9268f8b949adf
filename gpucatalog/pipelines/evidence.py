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

import jsonschema
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


_TEXT: dict[str, Any] = {"type": "string", "maxLength": 4096}
_CASE = {"type": "object", "required": ["name", "result"],
         "properties": {"name": _TEXT, "result": _TEXT, "reason": {"type": "string"}, "seconds": {"type": "number"}}}
_SUITE = {"type": "object", "required": ["name", "cases"],
          "properties": {"name": _TEXT, "ranOn": _TEXT, "seconds": {"type": "number"},
                         "cases": {"type": "array", "items": _CASE}}}
_IMAGES = {"type": "array", "items": {"type": "object", "properties": {
    "image": _TEXT, "executable": _TEXT, "sha256": _TEXT, "version": _TEXT, "live": {"type": "boolean"}}}}
# What every consumer may rely on in a signed statement (the judge reads these fields and no
# others); a statement of another shape is refused with every difference, never half-read.
STATEMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["_type", "subject", "predicateType", "predicate"],
    "properties": {
        "_type": {"const": STATEMENT_TYPE},
        "predicateType": {"const": PREDICATE_TYPE},
        "subject": {"type": "array", "minItems": 1, "maxItems": 1, "items": {
            "type": "object", "required": ["name", "digest"],
            "properties": {"name": _TEXT, "digest": {"type": "object", "required": ["sha256"], "properties": {
                "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}}}}},
        "predicate": {"type": "object", "required": ["bundle", "version", "profile", "suites", "result"],
                      "properties": {
                          "bundle": _TEXT, "version": _TEXT, "profile": _TEXT, "result": _TEXT,
                          "suites": {"type": "array", "items": _SUITE},
                          "exploratory": {"type": "boolean"},
                          "cluster": {"type": "object", "properties": {
                              "kubernetesVersion": _TEXT, "images": _IMAGES,
                              "atEnd": {"type": "object", "properties": {"images": _IMAGES}}}},
                          "upgradeFrom": {"type": "object", "required": ["bundle", "version", "digest"],
                                          "properties": {"bundle": _TEXT, "version": _TEXT, "digest": _TEXT}},
                          "upgrade": {"type": "object", "properties": {"mode": _TEXT}},
                      }},
    },
}
_STATEMENT = jsonschema.Draft202012Validator(STATEMENT_SCHEMA)


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
        **({"ranOn": str(d["ranOn"])} if d.get("ranOn") else {}),
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
    # each suite says which version it ran on: an upgrade run's may have run on another one
    suite_dicts = [{**d, "ranOn": d.get("ranOn") or f"{bundle}@{version}"} for d in map(_suite_dict, suites)]
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
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
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
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise errors.CheckFailed("signed payload is not JSON", [errors.Finding("statement", str(exc))]) from exc
    if not isinstance(st, dict):
        raise errors.CheckFailed("signed payload is not a statement", [errors.Finding("statement", "not an object")])
    for err in sorted(_STATEMENT.iter_errors(st), key=lambda e: list(map(str, e.absolute_path)))[:20]:
        at = "/".join(map(str, err.absolute_path)) or "(top)"
        findings.append(errors.Finding("statement", f"{at}: {err.message[:200]}"))
    if findings:
        raise errors.CheckFailed("evidence statement is malformed", findings)
    return st, signer
