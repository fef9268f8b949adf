"""The one judge of certification evidence: does this evidence file prove this claim about
``bundle@version``, and if not, every reason why.

Every consumer of evidence asks here and reads nothing of a statement on its own: ``promote``
(the gate), ``certified`` (``install`` and ``--upgrade-from`` checking a channel's entry),
``matrix`` (a cell's colour), ``ai_conformance`` (what may back a conformance claim) and
``mirror`` (what a channel certified). Each states what it needs in a :class:`Claim`; the
:class:`Verdict` lists every unmet part of it as findings, so one report names them all.

Checked, all of it:

- the envelope is signed by a key the claim trusts, and the statement is well formed (typed:
  anyone can write an unsigned envelope, and a signed one may come from an older or buggy tool);
- the subject is ``bundle@version`` and its digest is the one the claim expects for the
  evidence's profile (a fresh render, or what a channel recorded);
- the profile and Kubernetes minor are the ones asked for, when asked;
- each required suite ran *on bundle@version* with every case passed (an upgrade run with
  ``--rollback`` ends on the old version: its suites prove the old version, never the new one),
  and no other suite failed;
- nothing exploratory, unless the claim allows it (the matrix shows such cells);
- binaries the user supplied (the image map) are allowed, forbidden or required by the claim.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519

from gpucatalog.core import errors
from gpucatalog.pipelines import evidence

USER_SUPPLIED = ("allow", "forbid", "require")


@dataclass(frozen=True)
class Claim:
    """What a consumer needs one piece of evidence to prove."""

    bundle: str
    version: str
    keys: Mapping[str, ed25519.Ed25519PublicKey]  # keyid -> key the consumer trusts for this claim
    # the digest the subject must carry, per profile (a fresh render, or a channel's record)
    digest: Callable[[str], str]
    profile: str | None = None  # only this profile proves the claim
    suites: tuple[str, ...] = ()  # each must have run on bundle@version with every case passed
    kubernetes_minor: str | None = None  # "1.36": the cluster must have reported this minor
    allow_exploratory: bool = False
    user_supplied: str = "allow"  # allow | forbid | require binaries the user supplied
    signer_name: Callable[[str], str] = str  # keyid -> the name to record (the trust file's)
    trusted_from: str = ""  # where the keys come from, for messages ("catalog/trust.yaml, channel stable")

    @property
    def ref(self) -> str:
        return f"{self.bundle}@{self.version}"


@dataclass
class Verdict:
    """The judgement of one evidence file; ``ok`` when ``reasons`` is empty."""

    path: str
    reasons: list[errors.Finding] = field(default_factory=list)
    statement: dict[str, Any] | None = None
    signer: str = ""  # the signer's name (the trust file's), or its keyid
    profile: str = ""
    digest: str = ""  # the subject's digest, sha256:<hex>
    evidence_digest: str = ""  # sha256 of the envelope's bytes
    envelope: bytes = b""
    kubernetes: str = ""  # the release the cluster reported ("1.36.3"), "" when none
    upgrade_from: dict[str, Any] | None = None
    rollback: bool = False
    exploratory: bool = False
    user_supplied: list[dict[str, Any]] = field(default_factory=list)  # {image, executable, sha256, version}
    # suite/case -> result, for the suites that ran on bundle@version only
    results: dict[str, str] = field(default_factory=dict)
    case_reasons: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.reasons

    @property
    def predicate(self) -> dict[str, Any]:
        return self.statement["predicate"] if self.statement else {}

    def add(self, rule: str, message: str) -> None:
        self.reasons.append(errors.Finding(rule, message, obj=self.path))

    def summary(self) -> str:
        return "; ".join(f.message for f in self.reasons)


def kubernetes_of(pred: Mapping[str, Any]) -> str:
    """The release the evidence's cluster reported (``1.35.4``), or ""."""
    cluster = pred.get("cluster")
    raw = str(cluster.get("kubernetesVersion", "")) if isinstance(cluster, Mapping) else ""
    return raw.lstrip("v").split("-")[0].split("+")[0]


def minor_of(release: str) -> str:
    return ".".join(release.split(".")[:2])


def ran_on(pred: Mapping[str, Any], suite: Mapping[str, Any]) -> str:
    """``bundle@version`` a suite ran on. Evidence written before suites recorded it: the
    subject, except after a rollback, which ends on the version upgraded from."""
    if isinstance(suite.get("ranOn"), str):
        return str(suite["ranOn"])
    up, mode = pred.get("upgradeFrom"), (pred.get("upgrade") or {}).get("mode")
    if mode == "rollback" and isinstance(up, Mapping):
        return f"{up.get('bundle')}@{up.get('version')}"
    return f"{pred.get('bundle')}@{pred.get('version')}"


def suite_problem(suite: Mapping[str, Any]) -> str:
    """Why one suite does not count as passed ("" when it does). Recomputed from its cases, never
    from the signed summary: evidence written before "incomplete" existed called a suite with
    unrun cases passed."""
    name = suite.get("name")
    cases = list(suite.get("cases") or [])
    failed = [str(c.get("name", "?")) for c in cases if c.get("result") == "failed"]
    not_run = [str(c.get("name", "?")) for c in cases if c.get("result") not in ("passed", "failed")]
    if not cases:
        return f"suite {name!r} ran no case"
    if failed:
        return f"suite {name!r} failed (cases: {', '.join(failed)})"
    if not_run:
        return f"suite {name!r} is incomplete: case(s) not run: {', '.join(not_run)}"
    return ""


def _suites(v: Verdict, claim: Claim) -> None:
    pred = v.predicate
    on_subject: dict[str, Mapping[str, Any]] = {}
    for s in pred["suites"]:
        where = ran_on(pred, s)
        if where == claim.ref:
            on_subject.setdefault(s["name"], s)
            for c in s["cases"]:
                key = f"{s['name']}/{c['name']}"
                v.results[key] = c["result"]
                v.case_reasons[key] = str(c.get("reason") or "")
        elif suite_problem(s):
            v.add("failed-suite", suite_problem(s) + f" in this run (on {where})")
    for name in claim.suites:
        s = on_subject.get(name)
        if s is None:
            elsewhere = sorted({ran_on(pred, x) for x in pred["suites"] if x["name"] == name})
            v.add("required-suite", f"required suite {name!r} " + (
                f"ran on {', '.join(elsewhere)}, not on {claim.ref}" if elsewhere else "was not run"))
        elif suite_problem(s):
            v.add("required-suite", "required " + suite_problem(s))
    for name, s in on_subject.items():
        if name not in claim.suites and suite_problem(s):
            v.add("failed-suite", suite_problem(s) + " in this run")


def _user_supplied(v: Verdict, claim: Claim) -> None:
    cluster = v.predicate.get("cluster") or {}
    for where in (cluster, cluster.get("atEnd") or {}):
        for m in where.get("images") or []:
            if m.get("live") and m not in v.user_supplied:
                v.user_supplied.append({k: m.get(k) for k in ("image", "executable", "sha256", "version")})
    if claim.user_supplied == "forbid" and v.user_supplied:
        v.add("user-supplied", "ran binaries a user supplied through an image map ("
              + ", ".join(f"{m['image']} -> {m['executable']}" for m in v.user_supplied)
              + "); this claim accepts only images the catalog pins")
    if claim.user_supplied == "require" and not v.user_supplied:
        v.add("user-supplied", "ran no user-supplied binary; this claim requires the user's own (image map)")


def judge(path: Path, claim: Claim) -> Verdict:
    """The verdict on the evidence at ``path`` (a folder from certify, or its envelope) for
    ``claim``. An unreadable file is bad input (InputError, exit 2); anything else wrong with it
    is a reason in the verdict."""
    env, ev_digest, data = evidence.read(path)
    v = Verdict(str(path), evidence_digest=ev_digest, envelope=data)
    try:
        statement, keyid = evidence.verify_signed(env, claim.keys)
    except errors.CheckFailed as exc:
        src = f" (checked against {claim.trusted_from})" if claim.trusted_from else ""
        for f in exc.findings or [errors.Finding("signature", "")]:
            v.add(f.rule, f"{exc.summary}" + (f": {f.message}" if f.message else "") + src)
        return v
    v.statement, v.signer = statement, claim.signer_name(keyid)
    pred, subject = statement["predicate"], statement["subject"][0]
    v.profile, v.digest = pred["profile"], "sha256:" + subject["digest"]["sha256"]
    v.kubernetes = kubernetes_of(pred)
    v.upgrade_from = dict(pred["upgradeFrom"]) if isinstance(pred.get("upgradeFrom"), dict) else None
    v.rollback = (pred.get("upgrade") or {}).get("mode") == "rollback"
    v.exploratory = bool(pred.get("exploratory"))
    if subject["name"] != claim.ref or pred["bundle"] != claim.bundle or pred["version"] != claim.version:
        v.add("subject", f"evidence is for {subject['name']!r}, not {claim.ref!r}")
        return v  # nothing else about another bundle's evidence is meaningful
    if claim.profile is not None and v.profile != claim.profile:
        v.add("profile", f"evidence is for profile {v.profile!r}, not {claim.profile!r}")
    expected = claim.digest(v.profile)
    if v.digest != expected:
        v.add("digest", f"evidence is for rendered digest {v.digest}, but {claim.ref} (profile {v.profile}) is "
              f"{expected}: the bundle, its suites or their parameters changed after certification")
    if v.exploratory and not claim.allow_exploratory:
        v.add("exploratory", "evidence is exploratory (run with --outside-range, outside a component's declared "
              "Kubernetes range, or with binaries the bundle does not let a user supply): it shows what happens "
              "there, it certifies nothing")
    if claim.kubernetes_minor is not None and minor_of(v.kubernetes) != claim.kubernetes_minor:
        v.add("kubernetes", f"ran on Kubernetes {v.kubernetes or 'unknown'}, not {claim.kubernetes_minor}")
    _suites(v, claim)
    _user_supplied(v, claim)
    return v
