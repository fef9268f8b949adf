"""The promotion gate: append ``bundle@version`` to a channel only with signed, trusted evidence
that exactly its current rendering passed everything the channel's policy requires.

Called by ``catalog promote``. Checks, all of them, before refusing with every unmet requirement
(CheckFailed, exit 1, channel file untouched):

- each evidence envelope is signed by a key the trust file allows for this channel;
- its subject is this ``bundle@version`` (no replay of another bundle's evidence) and its digest
  equals a fresh render for the evidence's profile (no edits after certification);
- every profile the policy requires has evidence, and in it every required suite passed, and no
  suite failed;
- the version is in the policy's source channel with the same digests (stable only takes what
  went through candidate) and not already in the target channel.

The fresh render is passed in as ``fresh_digest(profile) -> "sha256:<hex>"`` so this module needs
no catalog and unit tests need no Helm.
"""

from __future__ import annotations

import datetime as dt
import getpass
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucatalog.core import errors
from gpucatalog.pipelines import channels, evidence, policy, trust


@dataclass(frozen=True)
class Checked:
    """One evidence file that passed every check."""

    path: Path
    profile: str
    digest: str
    evidence_digest: str
    signer: str


def default_promoter() -> str:
    """Who promotes: $CATALOG_PROMOTED_BY (CI sets it to the actor and run) or user@host."""
    return os.environ.get("CATALOG_PROMOTED_BY") or f"{getpass.getuser()}@{socket.gethostname()}"


def _suite_findings(where: str, pred: dict[str, Any], required: list[str]) -> list[errors.Finding]:
    out: list[errors.Finding] = []
    suites = {s.get("name"): s for s in pred.get("suites", []) if isinstance(s, dict)}

    def passed(s: dict[str, Any]) -> bool:
        cases = s.get("cases") or []
        return s.get("result") == "passed" and bool(cases) and all(c.get("result") != "failed" for c in cases)

    for name in required:
        s = suites.get(name)
        if s is None:
            out.append(errors.Finding("required-suite", f"required suite {name!r} was not run", obj=where))
        elif not passed(s):
            failed = [c.get("name", "?") for c in s.get("cases", []) if c.get("result") == "failed"]
            out.append(errors.Finding("required-suite", f"required suite {name!r} failed"
                                      + (f" (cases: {', '.join(failed)})" if failed else ""), obj=where))
    for other, s in suites.items():
        if other not in required and not passed(s):
            out.append(errors.Finding("failed-suite", f"suite {other!r} failed in this run", obj=where))
    return out


def check_evidence(
    path: Path,
    *,
    bundle: str,
    version: str,
    channel: str,
    trusted: trust.TrustFile,
    fresh_digest: Callable[[str], str],
    required_suites: list[str],
) -> tuple[Checked | None, list[errors.Finding]]:
    """Verify one evidence file; returns it (when valid) and the findings against it."""
    where = str(path)
    env, ev_digest = evidence.load(path)
    keys = trusted.for_channel(channel)
    try:
        statement, signer = evidence.verify_signed(env, keys)
    except errors.CheckFailed as exc:
        return None, [errors.Finding(f.rule, f.message, obj=where) for f in exc.findings] or [
            errors.Finding("signature", exc.summary, obj=where)]
    findings: list[errors.Finding] = []
    pred = statement["predicate"]
    subject = statement["subject"][0]
    ref = f"{bundle}@{version}"
    if subject.get("name") != ref or pred.get("bundle") != bundle or pred.get("version") != version:
        findings.append(errors.Finding(
            "subject", f"evidence is for {subject.get('name')!r}, not {ref!r}", obj=where))
        return None, findings  # nothing else about another bundle's evidence is meaningful
    profile = str(pred["profile"])
    digest = "sha256:" + subject["digest"]["sha256"]
    fresh = fresh_digest(profile)
    if digest != fresh:
        findings.append(errors.Finding(
            "digest", f"evidence is for rendered digest {digest}, but {ref} now renders (profile {profile}) "
            f"to {fresh}: the bundle changed after certification", obj=where))
    findings += _suite_findings(where, pred, required_suites)
    if findings:
        return None, findings
    return Checked(path, profile, digest, ev_digest, trusted.name_of(signer)), []


def promote(
    bundle: str,
    version: str,
    channel: str,
    evidence_paths: Sequence[Path],
    fresh_digest: Callable[[str], str],
    *,
    channels_dir: Path,
    policy_file: policy.Policy,
    trust_file: trust.TrustFile,
    bundle_suites: tuple[str, ...] = (),
    promoted_by: str | None = None,
) -> dict[str, Any]:
    """Promote or raise: CheckFailed (exit 1) listing every unmet requirement; InputError (exit 2)
    for an unknown channel, unreadable evidence or a damaged channel file. Returns the entry."""
    pol = policy_file.channel(channel)
    # Load both channel files first: a damaged one is bad input (exit 2), reported before anything.
    channels.load(channels_dir, channel)
    if pol.source_channel:
        channels.load(channels_dir, pol.source_channel)
    if not evidence_paths:
        raise errors.InputError("no evidence given", field="--evidence", expected="at least one evidence file or folder")

    findings: list[errors.Finding] = []
    if not trust_file.for_channel(channel):
        findings.append(errors.Finding("trust", f"the trust file {trust_file.path} allows no key to sign for {channel!r}",
                                       obj=f"{bundle}@{version}"))
    required = pol.suites_for(bundle, bundle_suites)
    by_profile: dict[str, Checked] = {}
    for p in evidence_paths:
        ok, f = check_evidence(p, bundle=bundle, version=version, channel=channel, trusted=trust_file,
                               fresh_digest=fresh_digest, required_suites=required)
        findings += f
        if ok is not None:
            by_profile.setdefault(ok.profile, ok)
    for prof in pol.required_profiles:
        if prof not in by_profile:
            findings.append(errors.Finding("required-profile", f"no passing evidence for required profile {prof!r}",
                                           obj=f"{bundle}@{version}"))
    ref = f"{bundle}@{version}"

    def make_entry(target: channels.Channel) -> dict[str, Any]:
        # Runs under the channel lock, so these reads see every promotion that finished before us.
        late = list(findings)
        if target.find(bundle, version) is not None:
            late.append(errors.Finding("channel", f"{ref} is already in {channel!r}", obj=str(target.path)))
        if pol.source_channel:
            src = channels.load(channels_dir, pol.source_channel)
            entry = src.find(bundle, version)
            if entry is None:
                late.append(errors.Finding("source-channel", f"{ref} is not in {pol.source_channel!r}; "
                                           f"{channel!r} only accepts what was promoted there first", obj=str(src.path)))
            else:
                for item in entry.get("evidence", []) or [{"profile": "", "digest": entry["digest"]}]:
                    prof = item["profile"]
                    if prof in by_profile and by_profile[prof].digest != item["digest"]:
                        late.append(errors.Finding(
                            "source-channel", f"{ref} was promoted to {pol.source_channel!r} with digest "
                            f"{item['digest']} for profile {prof!r}, not {by_profile[prof].digest}", obj=str(src.path)))
        if late:
            raise errors.CheckFailed(f"{ref} cannot be promoted to {channel!r}: {len(late)} unmet requirement(s)", late)
        ordered = [by_profile[p] for p in pol.required_profiles] + [
            c for p, c in sorted(by_profile.items()) if p not in pol.required_profiles]
        first = ordered[0]
        return {
            "bundle": bundle,
            "version": version,
            "digest": first.digest,
            "promotedAt": dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "promotedBy": promoted_by or default_promoter(),
            "evidenceDigest": first.evidence_digest,
            "evidence": [{"profile": c.profile, "digest": c.digest, "evidenceDigest": c.evidence_digest,
                          "signer": c.signer} for c in ordered],
        }

    return channels.append(channels_dir, channel, make_entry)
